// User code that loads with plain cereal archives is unaffected by tlaunch: a
// translation unit that includes tlaunch and one that does not (in
// plain_cereal_without_tlaunch.cpp) load the same archives with the same
// code and get cereal's own results, also while tlaunch is reading a payload.
#include <doctest/doctest.h>

#include <cereal/archives/binary.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstdint>
#include <cstring>
#include <exception>
#include <sstream>
#include <string>
#include <tlaunch/tlaunch.hpp>
#include <vector>

namespace with_tlaunch {
#include "plain_cereal_loads.inc"
}  // namespace with_tlaunch

namespace without_tlaunch {
std::string vector_of(const std::string& archive);
std::string string_of(const std::string& archive);
}  // namespace without_tlaunch

namespace {

// An archive that holds a size field and then `tail` bytes.
std::string claim(std::uint64_t n, std::string tail) {
  std::string p(8, '\0');
  std::memcpy(p.data(), &n, 8);
  return p + tail;
}

template <class T>
std::string plain_archive_of(const T& v) {
  std::ostringstream os;
  {
    cereal::BinaryOutputArchive ar(os);
    ar(v);
  }
  return os.str();
}

// A user type whose load reads an embedded plain cereal archive while
// tlaunch's own archive is reading the payload around it.
struct embedded {
  std::string archive;
  std::string with, without;  // what each translation unit made of it
  template <class Archive>
  void save(Archive& ar) const {
    ar(archive);
  }
  template <class Archive>
  void load(Archive& ar) {
    ar(archive);
    with = with_tlaunch::vector_outcome(archive);
    without = without_tlaunch::vector_of(archive);
  }
};

}  // namespace

TEST_SUITE("plain_cereal") {
  TEST_CASE("both translation units load vectors and strings as cereal does") {
    std::int64_t three[] = {1, -2, 3};
    std::string cases[] = {
        plain_archive_of(std::vector<std::int64_t>{}),
        plain_archive_of(std::vector<std::int64_t>{1, -2, 3}),
        claim(3, std::string(reinterpret_cast<const char*>(three), 16)),  // one number short
        claim(1000, std::string(8, '\1')),
        claim(2, ""),
    };
    std::string expected[] = {
        "ok:",
        "ok: 1 -2 3",
        "error: Failed to read 24 bytes from input stream! Read 16",
        "error: Failed to read 8000 bytes from input stream! Read 8",
        "error: Failed to read 16 bytes from input stream! Read 0",
    };
    for (std::size_t i = 0; i < std::size(cases); ++i) {
      CAPTURE(i);
      CHECK(with_tlaunch::vector_outcome(cases[i]) == expected[i]);
      CHECK(without_tlaunch::vector_of(cases[i]) == expected[i]);
    }
    std::string strings[] = {plain_archive_of(std::string()), plain_archive_of(std::string("ab")),
                             claim(5, "abc")};
    std::string expected_strings[] = {"ok: ", "ok: ab",
                                      "error: Failed to read 5 bytes from input stream! Read 3"};
    for (std::size_t i = 0; i < std::size(strings); ++i) {
      CAPTURE(i);
      CHECK(with_tlaunch::string_outcome(strings[i]) == expected_strings[i]);
      CHECK(without_tlaunch::string_of(strings[i]) == expected_strings[i]);
    }
    // tlaunch's own archive refuses the claims instead, before allocating.
    std::vector<std::int64_t> v;
    CHECK_THROWS_WITH(tlaunch::wire::deserialize_from(std::span<const char>(cases[3]), v),
                      "a vector claims 1000 elements, but only 8 bytes of the payload are left");
  }

  TEST_CASE("plain cereal inside a type that tlaunch is loading is still plain cereal") {
    // The outer payload ends right after the embedded archive, so a check of
    // the outer payload's bytes left (0) would refuse the inner vector.
    embedded e{plain_archive_of(std::vector<std::int64_t>{4, 5}), {}, {}};
    tlaunch::wire::frame_buffer f;
    tlaunch::wire::serialize_into(f, e);
    embedded back;
    tlaunch::wire::deserialize_from(f.bytes().subspan(tlaunch::wire::header_size), back);
    CHECK(back.with == "ok: 4 5");
    CHECK(back.without == "ok: 4 5");
  }
}
