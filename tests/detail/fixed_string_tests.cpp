#include <string_view>
#include <type_traits>

#include <doctest/doctest.h>

#include <tlaunch/detail/fixed_string.hpp>

using tlaunch::detail::fixed_string;

namespace {

template <fixed_string Name>
struct named {
  static constexpr std::string_view name = Name;
};

}  // namespace

// Node names are template arguments: equal names are one type, others are not.
static_assert(std::is_same_v<named<"worker">, named<"worker">>);
static_assert(!std::is_same_v<named<"worker">, named<"server">>);
static_assert(named<"ps">::name == "ps");

TEST_SUITE("fixed_string") {
  TEST_CASE("the view holds the characters without the terminating NUL") {
    constexpr fixed_string s("worker");
    static_assert(sizeof(s.value) == 7);
    CHECK(s.view() == "worker");
    CHECK(s.view().size() == 6);
    std::string_view v = s;
    CHECK(v == "worker");
    constexpr fixed_string empty("");
    CHECK(empty.view().empty());
  }

  TEST_CASE("strings of different lengths compare by their characters") {
    constexpr fixed_string a("ps"), b("ps"), d("pt");
    constexpr fixed_string c("psx");
    static_assert(a == b);
    CHECK(a == b);
    CHECK_FALSE(a == c);
    CHECK_FALSE(c == a);
    CHECK_FALSE(a == d);
  }
}
