// A string usable as a template argument: node names are types, not values.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace tlaunch::detail {

template <std::size_t N>
struct fixed_string {
  char value[N]{};
  constexpr fixed_string(const char (&s)[N]) { std::copy_n(s, N, value); }
  constexpr std::string_view view() const { return {value, N - 1}; }
  constexpr operator std::string_view() const { return view(); }
  template <std::size_t M>
  constexpr bool operator==(const fixed_string<M>& o) const {
    return view() == o.view();
  }
};

}  // namespace tlaunch::detail
