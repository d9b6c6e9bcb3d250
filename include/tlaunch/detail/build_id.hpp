// The GNU build id of a binary: how two processes know they run the same code,
// and the key of the binary cache on SSH hosts.
#pragma once

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "crypto.hpp"
#include "secret.hpp"

namespace tlaunch::detail {

// Finds NT_GNU_BUILD_ID in the bytes of a note segment or section; "" if absent.
// `align` is the segment's alignment: notes in an 8-aligned PT_NOTE (such as
// .note.gnu.property) are padded to 8 bytes, all others to 4.
inline std::string build_id_from_notes(const unsigned char* p, std::size_t n,
                                       std::size_t align = 4) {
  const std::size_t pad = align == 8 ? 7 : 3;
  std::size_t at = 0;
  while (at + 12 <= n) {
    std::uint32_t namesz, descsz, type;
    std::memcpy(&namesz, p + at, 4);
    std::memcpy(&descsz, p + at + 4, 4);
    std::memcpy(&type, p + at + 8, 4);
    // Offsets are padded from the note's start (the 12-byte header counts).
    std::size_t name_at = at + 12;
    std::size_t desc_at = at + ((12 + std::size_t{namesz} + pad) & ~pad);
    std::size_t next = at + ((desc_at - at + std::size_t{descsz} + pad) & ~pad);
    if (desc_at > n || next > n || desc_at + descsz > n) break;
    if (type == NT_GNU_BUILD_ID && namesz == 4 && std::memcmp(p + name_at, "GNU", 4) == 0)
      return to_hex({p + desc_at, descsz});
    at = next;
  }
  return {};
}

// Owns a read-only descriptor of a binary on disk.
class elf_file {
 public:
  explicit elf_file(const std::string& path) : path_(path) {
    do fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    while (fd_ < 0 && errno == EINTR);
    if (fd_ < 0)
      throw std::runtime_error("cannot read binary " + path + ": " + std::strerror(errno));
  }
  ~elf_file() { ::close(fd_); }
  elf_file(const elf_file&) = delete;
  elf_file& operator=(const elf_file&) = delete;

  // Bytes [off, off + n); fewer at the end of the file.
  std::vector<unsigned char> read(std::uint64_t off, std::size_t n) const {
    std::vector<unsigned char> buf(n);
    std::size_t got = 0;
    while (got < n) {
      ssize_t r = ::pread(fd_, buf.data() + got, n - got, static_cast<off_t>(off + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0)
        throw std::runtime_error("cannot read binary " + path_ + ": " + std::strerror(errno));
      if (r == 0) break;
      got += static_cast<std::size_t>(r);
    }
    buf.resize(got);
    return buf;
  }
  int fd() const { return fd_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// "sha256-<hex>" of the file's bytes: the id of a binary linked without --build-id.
inline std::string hash_file_id(const std::string& path) {
  elf_file f(path);
  sha256_hasher h;
  std::vector<unsigned char> buf(1 << 16);
  for (;;) {
    ssize_t n = ::read(f.fd(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error("cannot read binary " + path + ": " + std::strerror(errno));
    if (n == 0) break;
    h.update({buf.data(), static_cast<std::size_t>(n)});
  }
  return "sha256-" + to_hex(h.finish());
}

// Build id of the binary at `path` (a 64-bit little-endian ELF file): the hex of
// its NT_GNU_BUILD_ID note, looked up in the program headers and then in the
// section headers; "sha256-<hex of the file>" when it has no such note.
inline std::string file_build_id(const std::string& path) {
  elf_file f(path);
  auto not_elf = [&](const char* why) {
    return std::runtime_error(path + " is not a 64-bit ELF binary: " + why +
                              " (tlaunch reads 64-bit little-endian ELF files only)");
  };
  auto head = f.read(0, sizeof(Elf64_Ehdr));
  if (head.size() < SELFMAG || std::memcmp(head.data(), ELFMAG, SELFMAG) != 0)
    throw not_elf("no ELF magic");
  if (head.size() < sizeof(Elf64_Ehdr)) throw not_elf("truncated ELF header");
  if (head[EI_CLASS] != ELFCLASS64) throw not_elf("it is a 32-bit ELF file");
  if (head[EI_DATA] != ELFDATA2LSB) throw not_elf("it is big-endian");
  Elf64_Ehdr eh;
  std::memcpy(&eh, head.data(), sizeof eh);

  // A note larger than this is not a build id, and a corrupt size must not allocate gigabytes.
  constexpr std::uint64_t max_notes = 1 << 20;
  auto scan = [&](std::uint64_t off, std::uint64_t size, std::uint64_t align) -> std::string {
    if (size == 0 || size > max_notes) return {};
    auto notes = f.read(off, static_cast<std::size_t>(size));
    return build_id_from_notes(notes.data(), notes.size(), static_cast<std::size_t>(align));
  };

  if (eh.e_phoff != 0 && eh.e_phentsize >= sizeof(Elf64_Phdr)) {
    auto table = f.read(eh.e_phoff, std::size_t{eh.e_phnum} * eh.e_phentsize);
    for (std::size_t i = 0; (i + 1) * eh.e_phentsize <= table.size(); ++i) {
      Elf64_Phdr ph;
      std::memcpy(&ph, table.data() + i * eh.e_phentsize, sizeof ph);
      if (ph.p_type != PT_NOTE) continue;
      if (auto id = scan(ph.p_offset, ph.p_filesz, ph.p_align); !id.empty()) return id;
    }
  }
  if (eh.e_shoff != 0 && eh.e_shentsize >= sizeof(Elf64_Shdr)) {
    auto table = f.read(eh.e_shoff, std::size_t{eh.e_shnum} * eh.e_shentsize);
    for (std::size_t i = 0; (i + 1) * eh.e_shentsize <= table.size(); ++i) {
      Elf64_Shdr sh;
      std::memcpy(&sh, table.data() + i * eh.e_shentsize, sizeof sh);
      if (sh.sh_type != SHT_NOTE) continue;
      if (auto id = scan(sh.sh_offset, sh.sh_size, sh.sh_addralign); !id.empty()) return id;
    }
  }
  return hash_file_id(path);
}

// Build id of the running executable, computed once: read from the loaded note
// segments of the main program (no file access), with the same fallback as
// file_build_id, so self_build_id() == file_build_id("/proc/self/exe").
inline const std::string& self_build_id() {
  static const std::string id = [] {
    std::string found;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* out) -> int {
          // The first object is the main program (dlpi_name ""); stop after it either way.
          if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') return 1;
          auto& s = *static_cast<std::string*>(out);
          for (int i = 0; i < info->dlpi_phnum && s.empty(); ++i) {
            const auto& ph = info->dlpi_phdr[i];
            if (ph.p_type != PT_NOTE) continue;
            s = build_id_from_notes(
                reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr), ph.p_memsz,
                ph.p_align);
          }
          return 1;
        },
        &found);
    return found.empty() ? hash_file_id("/proc/self/exe") : found;
  }();
  return id;
}

}  // namespace tlaunch::detail
