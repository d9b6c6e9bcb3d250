#include <elf.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <tlaunch/detail/build_id.hpp>

namespace {

bool is_hex(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string self_path() {
  char buf[4096] = {};
  REQUIRE(::readlink("/proc/self/exe", buf, sizeof buf - 1) > 0);
  return buf;
}

// The first line of a shell command's output, "" if none.
std::string first_line(const std::string& cmd) {
  std::FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  char line[512] = {};
  bool got = std::fgets(line, sizeof line, p) != nullptr;
  ::pclose(p);
  std::string s = got ? line : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// A temporary file removed at scope exit.
struct temp_file {
  std::string path;
  explicit temp_file(const std::vector<unsigned char>& bytes) {
    char name[] = "/tmp/tlaunch_build_id_XXXXXX";
    int fd = ::mkstemp(name);
    REQUIRE(fd >= 0);
    ::close(fd);
    path = name;
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
  ~temp_file() { ::unlink(path.c_str()); }
};

template <class T>
void put(std::vector<unsigned char>& f, std::size_t at, const T& v) {
  if (f.size() < at + sizeof v) f.resize(at + sizeof v);
  std::memcpy(f.data() + at, &v, sizeof v);
}

// One ELF note: name "GNU", padded to `align`.
std::vector<unsigned char> note(std::uint32_t type, std::vector<unsigned char> desc,
                                std::size_t align) {
  // Sized, then written (gcc 12 at -O2 misreads an insert after the header as
  // writing out of bounds).
  auto padded = [align](std::size_t k) { return (k + align - 1) / align * align; };
  std::uint32_t namesz = 4, descsz = static_cast<std::uint32_t>(desc.size());
  const std::size_t desc_at = padded(16);
  std::vector<unsigned char> n(padded(desc_at + desc.size()), 0);
  std::memcpy(n.data(), &namesz, 4);
  std::memcpy(n.data() + 4, &descsz, 4);
  std::memcpy(n.data() + 8, &type, 4);
  std::memcpy(n.data() + 12, "GNU", 4);
  if (!desc.empty()) std::memcpy(n.data() + desc_at, desc.data(), desc.size());
  return n;
}

Elf64_Ehdr elf_header() {
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_EXEC;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_ehsize = sizeof(Elf64_Ehdr);
  return eh;
}

// A minimal ELF file whose notes sit in one PT_NOTE segment (or, with
// as_section, only in one SHT_NOTE section).
std::vector<unsigned char> elf_with_notes(const std::vector<unsigned char>& notes,
                                          std::size_t align, bool as_section) {
  std::vector<unsigned char> f;
  auto eh = elf_header();
  const std::size_t table = sizeof(Elf64_Ehdr), data = 256;
  if (as_section) {
    eh.e_shoff = table;
    eh.e_shentsize = sizeof(Elf64_Shdr);
    eh.e_shnum = 2;  // a null section, then the note
    Elf64_Shdr sh{};
    put(f, table, sh);
    sh.sh_type = SHT_NOTE;
    sh.sh_offset = data;
    sh.sh_size = notes.size();
    sh.sh_addralign = align;
    put(f, table + sizeof sh, sh);
  } else {
    eh.e_phoff = table;
    eh.e_phentsize = sizeof(Elf64_Phdr);
    eh.e_phnum = 1;
    Elf64_Phdr ph{};
    ph.p_type = PT_NOTE;
    ph.p_offset = data;
    ph.p_filesz = ph.p_memsz = notes.size();
    ph.p_align = align;
    put(f, table, ph);
  }
  put(f, 0, eh);
  f.resize(data);
  f.insert(f.end(), notes.begin(), notes.end());
  return f;
}

const std::vector<unsigned char> id_bytes = {0xde, 0xad, 0xbe, 0xef, 0x01, 0x23, 0x45, 0x67};

}  // namespace

TEST_SUITE("build_id") {
  TEST_CASE("self_build_id is this binary's GNU build-id note, the one readelf shows") {
    const std::string& id = tlaunch::detail::self_build_id();
    CHECK(id == tlaunch::detail::file_build_id("/proc/self/exe"));
    CHECK(id == tlaunch::detail::file_build_id(self_path()));
    CHECK(&id == &tlaunch::detail::self_build_id());  // computed once
    // The tests link with -Wl,--build-id, whose default is a 160-bit SHA-1.
    CHECK(id.size() == 40);
    CHECK(is_hex(id));
    if (first_line("command -v readelf").empty()) {
      MESSAGE("readelf not installed: the comparison with readelf -n is skipped");
      return;
    }
    std::string line = first_line("readelf -n '" + self_path() + "' | grep 'Build ID:'");
    REQUIRE(!line.empty());
    CHECK(line.substr(line.rfind(' ') + 1) == id);
  }

  TEST_CASE("another binary has another id") {
    std::string ls = first_line("command -v ls");
    REQUIRE(!ls.empty());
    auto other = tlaunch::detail::file_build_id(ls);
    CHECK(!other.empty());
    CHECK(other != tlaunch::detail::self_build_id());
  }

  TEST_CASE(
      "the build id is found in a PT_NOTE segment, after other notes, with 4- or 8-byte padding") {
    for (std::size_t align : {4u, 8u}) {
      CAPTURE(align);
      // An odd-sized note first, so a wrong padding rule misses the build id.
      auto notes = note(NT_GNU_ABI_TAG, {1, 2, 3, 4, 5}, align);
      auto id = note(NT_GNU_BUILD_ID, id_bytes, align);
      notes.insert(notes.end(), id.begin(), id.end());
      temp_file f(elf_with_notes(notes, align, false));
      CHECK(tlaunch::detail::file_build_id(f.path) == "deadbeef01234567");
    }
  }

  TEST_CASE("without program headers the build id is found in the section headers") {
    temp_file f(elf_with_notes(note(NT_GNU_BUILD_ID, id_bytes, 4), 4, true));
    CHECK(tlaunch::detail::file_build_id(f.path) == "deadbeef01234567");
  }

  TEST_CASE("an ELF file without a build id is named by the SHA-256 of its bytes") {
    auto bytes = elf_with_notes(note(NT_GNU_ABI_TAG, {0, 0, 0, 0}, 4), 4, false);
    temp_file f(bytes);
    auto id = tlaunch::detail::file_build_id(f.path);
    CHECK(id == "sha256-" + tlaunch::detail::to_hex(tlaunch::detail::sha256(bytes)));
    // Two such binaries that differ in one byte never share an id.
    bytes.back() ^= 1;
    temp_file g(bytes);
    CHECK(tlaunch::detail::file_build_id(g.path) != id);
    if (!first_line("command -v sha256sum").empty())
      CHECK(id == "sha256-" + first_line("sha256sum '" + f.path + "' | cut -d' ' -f1"));
  }

  TEST_CASE("files that are not 64-bit little-endian ELF are refused, naming the file") {
    temp_file text(std::vector<unsigned char>{'h', 'e', 'l', 'l', 'o', '\n'});
    CHECK_THROWS_WITH(
        tlaunch::detail::file_build_id(text.path),
        doctest::Contains((text.path + " is not a 64-bit ELF binary: no ELF magic").c_str()));

    auto eh = elf_header();
    eh.e_ident[EI_CLASS] = ELFCLASS32;
    std::vector<unsigned char> b32;
    put(b32, 0, eh);
    temp_file f32(b32);
    CHECK_THROWS_WITH(tlaunch::detail::file_build_id(f32.path), doctest::Contains("32-bit"));

    eh = elf_header();
    eh.e_ident[EI_DATA] = ELFDATA2MSB;
    std::vector<unsigned char> be;
    put(be, 0, eh);
    temp_file fbe(be);
    CHECK_THROWS_WITH(tlaunch::detail::file_build_id(fbe.path), doctest::Contains("big-endian"));

    temp_file cut(std::vector<unsigned char>{0x7f, 'E', 'L', 'F', ELFCLASS64, ELFDATA2LSB});
    CHECK_THROWS_WITH(tlaunch::detail::file_build_id(cut.path), doctest::Contains("truncated"));

    CHECK_THROWS_WITH(tlaunch::detail::file_build_id("/nonexistent/app"),
                      doctest::Contains("cannot read binary /nonexistent/app: No such file"));
  }

  TEST_CASE("corrupt note sizes neither crash nor invent an id") {
    auto n = note(NT_GNU_BUILD_ID, id_bytes, 4);
    std::uint32_t huge = 0xfffffff0u;
    std::memcpy(n.data() + 4, &huge, 4);  // descsz far past the end
    CHECK(tlaunch::detail::build_id_from_notes(n.data(), n.size()).empty());
    n = note(NT_GNU_BUILD_ID, id_bytes, 4);
    CHECK(tlaunch::detail::build_id_from_notes(n.data(), n.size() - 1).empty());
    CHECK(tlaunch::detail::build_id_from_notes(n.data(), n.size()) == "deadbeef01234567");
  }
}
