#include <cstdint>
#include <string>
#include <string_view>

#include <doctest/doctest.h>

#include <tlaunch/detail/hash.hpp>

using tlaunch::detail::fnv1a;

// Method ids on the wire are these hashes: a change here breaks every peer
// built before it, so the values are pinned to the published FNV-1a vectors.
static_assert(fnv1a("") == 0xcbf29ce484222325ull);
static_assert(fnv1a("a") == 0xaf63dc4c8601ec8cull);
static_assert(fnv1a("foobar") == 0x85944171f73967e8ull);

TEST_SUITE("hash") {
  TEST_CASE("64-bit FNV-1a at run time matches the published vectors") {
    std::string s = "foo";
    CHECK(fnv1a(s) == 0xdcb27518fed9d577ull);
    s += "bar";
    CHECK(fnv1a(s) == 0x85944171f73967e8ull);
  }

  TEST_CASE("bytes above 0x7f hash as unsigned bytes, whatever char's signedness") {
    CHECK(fnv1a("\xff") == 0xaf64724c8602eb6eull);
    CHECK(fnv1a(std::string_view("\x80"
                                 "abc")) == 0x2c2f36aa16629871ull);
  }

  TEST_CASE("hashing continues from a given state") {
    CHECK(fnv1a("bar", fnv1a("foo")) == fnv1a("foobar"));
    CHECK(fnv1a(std::string_view("a\0b", 3)) != fnv1a("ab"));  // NUL bytes count
  }
}
