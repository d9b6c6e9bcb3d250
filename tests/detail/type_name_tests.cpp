#include <string_view>

#include <doctest/doctest.h>

#include <tlaunch/detail/type_name.hpp>

using tlaunch::detail::member_name;
using tlaunch::detail::member_name_v;
using tlaunch::detail::short_member_name;
using tlaunch::detail::type_name;

namespace shop {
struct counter {
  int add(int n) { return n; }
  void reset() {}
  template <class T>
  struct box {};
};
}  // namespace shop

// Method ids hash these names, so both compilers must give the same ones.
static_assert(member_name<&shop::counter::add>() == "shop::counter::add");
static_assert(member_name_v<&shop::counter::reset> == "shop::counter::reset");
static_assert(short_member_name<&shop::counter::add>() == "add");

TEST_SUITE("type_name") {
  TEST_CASE("type names are the qualified names the compiler prints") {
    CHECK(type_name<int>() == "int");
    CHECK(type_name<shop::counter>() == "shop::counter");
    // g++ spells the argument "long int", clang "long": only the template's name is shared.
    CHECK(type_name<shop::counter::box<long>>().starts_with("shop::counter::box<long"));
  }

  TEST_CASE("member names drop the '&' and keep the class") {
    CHECK(member_name<&shop::counter::add>() == "shop::counter::add");
    CHECK(member_name<&shop::counter::reset>() == "shop::counter::reset");
    CHECK(short_member_name<&shop::counter::reset>() == "reset");
  }

  TEST_CASE("the text between ' = ' and ';' or ']' is taken, or all of it without ' = '") {
    using tlaunch::detail::between_eq_and_end;
    CHECK(between_eq_and_end("f() [with T = a::b; U = c]") == "a::b");
    CHECK(between_eq_and_end("f() [T = a::b]") == "a::b");
    CHECK(between_eq_and_end("no equals") == "no equals");
  }
}
