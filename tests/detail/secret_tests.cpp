#include <algorithm>
#include <set>

#include <doctest/doctest.h>

#include <tlaunch/detail/secret.hpp>

TEST_SUITE("secret") {
  TEST_CASE("random_secret gives 32 fresh bytes each time") {
    std::set<std::array<std::uint8_t, 32>> seen;
    for (int i = 0; i < 16; ++i) seen.insert(tlaunch::detail::random_secret());
    CHECK(seen.size() == 16);
    // Not stuck at zero: 16 x 32 zero bytes from a working kernel RNG is impossible in practice.
    bool any_nonzero = false;
    for (auto& s : seen)
      any_nonzero = any_nonzero || std::any_of(s.begin(), s.end(), [](auto b) { return b != 0; });
    CHECK(any_nonzero);
  }

  TEST_CASE("to_hex writes two lowercase digits a byte") {
    std::vector<std::uint8_t> b{0x00, 0x01, 0x7f, 0x80, 0xab, 0xff};
    CHECK(tlaunch::detail::to_hex(b) == "00017f80abff");
    CHECK(tlaunch::detail::to_hex(std::span<const std::uint8_t>{}).empty());
  }

  TEST_CASE("from_hex reads either case and round-trips a secret") {
    auto got = tlaunch::detail::from_hex("00017F80abFF");
    REQUIRE(got);
    CHECK(*got == std::vector<std::uint8_t>{0x00, 0x01, 0x7f, 0x80, 0xab, 0xff});
    auto s = tlaunch::detail::random_secret();
    auto back = tlaunch::detail::from_hex(tlaunch::detail::to_hex(s));
    REQUIRE(back);
    CHECK(std::equal(back->begin(), back->end(), s.begin(), s.end()));
    auto empty = tlaunch::detail::from_hex("");
    REQUIRE(empty);
    CHECK(empty->empty());
  }

  TEST_CASE("from_hex refuses odd lengths and non-hex characters") {
    using tlaunch::detail::from_hex;
    CHECK_FALSE(from_hex("abc"));
    CHECK_FALSE(from_hex("zz"));
    CHECK_FALSE(from_hex("0g"));
    CHECK_FALSE(from_hex("g0"));
    CHECK_FALSE(from_hex("00 "));
    CHECK_FALSE(from_hex(" 000"));
    CHECK_FALSE(from_hex("0x00"));
    CHECK_FALSE(from_hex("ab\n"));
    CHECK_FALSE(from_hex(std::string_view("a\0", 2)));
  }
}
