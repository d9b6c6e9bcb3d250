// Compile-time names of types and member functions, taken from the compiler's
// pretty function signature, so method ids need no registration macro.
#pragma once

#include <string_view>

namespace tlaunch::detail {

template <class T>
constexpr std::string_view raw_type_signature() {
  return __PRETTY_FUNCTION__;
}
template <auto V>
constexpr std::string_view raw_value_signature() {
  return __PRETTY_FUNCTION__;
}

// "[with T = Foo; ...]" on gcc, "[T = Foo]" on clang.
constexpr std::string_view between_eq_and_end(std::string_view s) {
  auto eq = s.find(" = ");
  if (eq == std::string_view::npos) return s;
  s.remove_prefix(eq + 3);
  auto end = s.find_first_of(";]");
  return s.substr(0, end);
}

template <class T>
constexpr std::string_view type_name() {
  return between_eq_and_end(raw_type_signature<T>());
}

// "Counter::add" for &Counter::add (the leading '&' and any "(...)" cast removed).
template <auto M>
constexpr std::string_view member_name() {
  std::string_view s = between_eq_and_end(raw_value_signature<M>());
  auto amp = s.rfind('&');
  if (amp != std::string_view::npos) s.remove_prefix(amp + 1);
  return s;
}

// The same, as a constant: computed by the compiler, never per call.
template <auto M>
inline constexpr std::string_view member_name_v = member_name<M>();

// "add" for &Counter::add.
template <auto M>
constexpr std::string_view short_member_name() {
  std::string_view s = member_name<M>();
  auto colon = s.rfind("::");
  if (colon != std::string_view::npos) s.remove_prefix(colon + 2);
  return s;
}

}  // namespace tlaunch::detail
