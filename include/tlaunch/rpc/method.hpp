// The method list of a service (tlaunch::methods) and the compile-time traits
// that calls and dispatch read from it: signatures, wire ids, exposure and
// serializability checks. Users include it through tlaunch/service.hpp.
#pragma once

#include <cereal/archives/binary.hpp>
#include <cereal/types/array.hpp>
#include <cereal/types/chrono.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/optional.hpp>
#include <cereal/types/set.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/tuple.hpp>
#include <cereal/types/unordered_map.hpp>
#include <cereal/types/unordered_set.hpp>
#include <cereal/types/variant.hpp>
#include <cereal/types/vector.hpp>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>

#include <asio/awaitable.hpp>

#include "../detail/hash.hpp"
#include "../detail/type_name.hpp"
#include "../wire/codec.hpp"

namespace tlaunch {

// The list of methods a service exposes to remote callers.
template <auto... Ms>
struct methods {};

namespace detail {

template <class T>
struct awaitable_value {
  using type = T;
  static constexpr bool is_coroutine = false;
};
template <class T, class E>
struct awaitable_value<asio::awaitable<T, E>> {
  using type = T;
  static constexpr bool is_coroutine = true;
};

template <class F>
struct method_traits;

#define TLAUNCH_METHOD_TRAITS(CV)                                               \
  template <class C, class R, class... A>                                       \
  struct method_traits<R (C::*)(A...) CV> {                                     \
    using service = C;                                                          \
    using raw_result = R;                                                       \
    using result = typename awaitable_value<R>::type;                           \
    static constexpr bool is_coroutine = awaitable_value<R>::is_coroutine;      \
    using args = std::tuple<std::remove_cvref_t<A>...>;                         \
    static constexpr std::size_t arity = sizeof...(A);                          \
  };
TLAUNCH_METHOD_TRAITS()
TLAUNCH_METHOD_TRAITS(const)
TLAUNCH_METHOD_TRAITS(noexcept)
TLAUNCH_METHOD_TRAITS(const noexcept)
TLAUNCH_METHOD_TRAITS(&)
TLAUNCH_METHOD_TRAITS(const&)
#undef TLAUNCH_METHOD_TRAITS

template <class T>
inline constexpr bool is_serializable_v =
    std::is_void_v<T> ||
    (cereal::traits::is_output_serializable<T, wire::output_archive>::value &&
     cereal::traits::is_input_serializable<T, wire::input_archive>::value);

template <class Tuple>
struct all_serializable;
template <class... A>
struct all_serializable<std::tuple<A...>> : std::bool_constant<(is_serializable_v<A> && ...)> {};
// A variable template, so g++ prints the argument types when the check fails.
template <class Tuple>
inline constexpr bool all_serializable_v = all_serializable<Tuple>::value;

// Checked once per exposed method; the failing instantiation names the method.
template <auto M>
struct exposed_method_check {
  using traits = method_traits<decltype(M)>;
  static_assert(all_serializable_v<typename traits::args>,
                "tlaunch: an argument type of this exposed method cannot be serialized by cereal "
                "(give it a serialize() function or use a serializable type)");
  static_assert(is_serializable_v<typename traits::result>,
                "tlaunch: the result type of this exposed method cannot be serialized by cereal "
                "(give it a serialize() function or use a serializable type)");
  static constexpr bool ok = true;
};

// Wire id of a method: hash of "Service::method" and its signature.
template <auto M>
inline constexpr std::uint64_t method_id_v =
    fnv1a(type_name<decltype(M)>(), fnv1a("|", fnv1a(member_name<M>())));
template <auto M>
constexpr std::uint64_t method_id() {
  return method_id_v<M>;
}

template <class S, class = void>
struct rpc_list {
  using type = methods<>;
};
template <class S>
struct rpc_list<S, std::void_t<typename S::rpc>> {
  using type = typename S::rpc;
};

// Member function pointers of one type are told apart by name: GCC 12 with
// -fsanitize=undefined does not evaluate == on two of them at compile time.
template <auto A, auto B>
constexpr bool same_value() {
  if constexpr (!std::is_same_v<decltype(A), decltype(B)>)
    return false;
  else if constexpr (std::is_member_function_pointer_v<decltype(A)>)
    return member_name<A>() == member_name<B>();
  else
    return A == B;
}

template <class List, auto M>
struct list_contains;
template <auto... Ms, auto M>
struct list_contains<methods<Ms...>, M> {
  static constexpr bool value = (same_value<Ms, M>() || ...);
};

template <class S, auto M>
inline constexpr bool is_exposed_v = list_contains<typename rpc_list<S>::type, M>::value;

// Fails with a message when M is not in S::rpc; the instantiation names S and M.
template <class S, auto M>
struct exposure_check {
  static_assert(std::is_same_v<typename method_traits<decltype(M)>::service, S>,
                "tlaunch: this method belongs to another service than the handle's");
  static_assert(is_exposed_v<S, M>,
                "tlaunch: this method is not exposed: add it to the service's "
                "`using rpc = tlaunch::methods<...>;` list");
  static constexpr bool ok = exposed_method_check<M>::ok;
};

template <class List>
struct unique_method_ids;
template <auto... Ms>
struct unique_method_ids<methods<Ms...>> {
  static constexpr bool value = [] {
    constexpr std::uint64_t ids[] = {method_id<Ms>()..., 0};
    for (std::size_t i = 0; i < sizeof...(Ms); ++i)
      for (std::size_t j = i + 1; j < sizeof...(Ms); ++j)
        if (ids[i] == ids[j]) return false;
    return true;
  }();
};

template <class S>
constexpr bool check_service() {
  using list = typename rpc_list<S>::type;
  static_assert(unique_method_ids<list>::value,
                "tlaunch: a method is listed twice in the service's tlaunch::methods<...>");
  return [&]<auto... Ms>(methods<Ms...>*) {
    return ((exposure_check<S, Ms>::ok) && ... && true);
  }(static_cast<list*>(nullptr));
}

}  // namespace detail
}  // namespace tlaunch
