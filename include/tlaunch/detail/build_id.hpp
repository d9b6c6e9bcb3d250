// The GNU build id of a binary: how two processes know they run the same code,
// and the key of the binary cache on SSH hosts.
#pragma once

#include <elf.h>
#include <link.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "secret.hpp"
#include "sha256.hpp"

namespace tlaunch::detail {

// Finds NT_GNU_BUILD_ID in a PT_NOTE segment's bytes; "" if absent.
inline std::string build_id_from_notes(const unsigned char* p, std::size_t n) {
  std::size_t at = 0;
  while (at + 12 <= n) {
    std::uint32_t namesz, descsz, type;
    std::memcpy(&namesz, p + at, 4);
    std::memcpy(&descsz, p + at + 4, 4);
    std::memcpy(&type, p + at + 8, 4);
    std::size_t name_at = at + 12, desc_at = name_at + ((namesz + 3) & ~3u);
    std::size_t next = desc_at + ((descsz + 3) & ~3u);
    if (next > n) break;
    if (type == NT_GNU_BUILD_ID && namesz == 4 && std::memcmp(p + name_at, "GNU", 4) == 0)
      return to_hex({p + desc_at, descsz});
    at = next;
  }
  return {};
}

inline std::string hash_file_id(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  sha256_hasher h;
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    auto got = static_cast<std::size_t>(in.gcount());
    h.update({reinterpret_cast<const std::uint8_t*>(buf.data()), got});
  }
  auto d = h.finish();
  return "sha256-" + to_hex(d);
}

// Build id of the binary at `path` (64-bit ELF); a SHA-256 of its bytes
// ("sha256-...") when it has no build-id note.
inline std::string file_build_id(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<unsigned char> f((std::istreambuf_iterator<char>(in)), {});
  if (f.size() < sizeof(Elf64_Ehdr) || std::memcmp(f.data(), ELFMAG, SELFMAG) != 0 ||
      f[EI_CLASS] != ELFCLASS64)
    throw std::runtime_error(path + " is not a 64-bit ELF binary");
  Elf64_Ehdr eh;
  std::memcpy(&eh, f.data(), sizeof eh);
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    std::size_t off = eh.e_phoff + std::size_t{i} * eh.e_phentsize;
    if (off + sizeof(Elf64_Phdr) > f.size()) break;
    Elf64_Phdr ph;
    std::memcpy(&ph, f.data() + off, sizeof ph);
    if (ph.p_type != PT_NOTE || ph.p_offset + ph.p_filesz > f.size()) continue;
    auto id = build_id_from_notes(f.data() + ph.p_offset, ph.p_filesz);
    if (!id.empty()) return id;
  }
  return hash_file_id(path);
}

// Build id of the running executable, computed once.
inline const std::string& self_build_id() {
  static const std::string id = [] {
    std::string found;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* out) -> int {
          auto& s = *static_cast<std::string*>(out);
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const auto& ph = info->dlpi_phdr[i];
            if (ph.p_type != PT_NOTE) continue;
            s = build_id_from_notes(
                reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr), ph.p_memsz);
            if (!s.empty()) break;
          }
          return 1;  // the first object is the main program
        },
        &found);
    return found.empty() ? hash_file_id("/proc/self/exe") : found;
  }();
  return id;
}

}  // namespace tlaunch::detail
