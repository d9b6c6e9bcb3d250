// Services: plain classes that list the methods they expose.
//
//   struct Counter {
//     asio::awaitable<std::int64_t> add(std::int64_t k);
//     std::int64_t get() const;
//     using rpc = tlaunch::methods<&Counter::add, &Counter::get>;
//   };
//
// The method list (tlaunch::methods) and the compile-time traits that calls and dispatch
// read from it: signatures, wire ids, exposure and serializability checks. A header of the
// vocabulary layer (docs/ARCHITECTURE.md), below the rpc layer that reads it.
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
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <tuple>
#include <type_traits>

#include <asio/awaitable.hpp>

#include "batched.hpp"
#include "detail/hash.hpp"
#include "detail/type_name.hpp"
#include "wire/codec.hpp"

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

// ---- Entries of a methods<...> list: a member function pointer or a batched<...> ----
template <class T>
struct batched_entry : std::false_type {};
template <auto M, batch_options O>
struct batched_entry<batched_method<M, O>> : std::true_type {};
// decltype of a class-type template parameter is const.
template <class T>
struct batched_entry<const T> : batched_entry<T> {};

// The member function pointer of a list entry.
template <auto E>
constexpr auto entry_method() {
  if constexpr (batched_entry<decltype(E)>::value)
    return decltype(E)::method;
  else
    return E;
}
template <auto E>
inline constexpr auto entry_method_v = entry_method<E>();

// The batch a batched method takes: std::vector<T> or std::span<T> (by value or
// reference), where T is the one argument of a call or std::tuple<A...> of its arguments.
template <class P>
struct batch_parameter {
  static constexpr bool ok = false;
  using element = void;
};
template <class E, class A>
struct batch_parameter<std::vector<E, A>> {
  static constexpr bool ok = true, is_span = false;
  using element = E;
};
template <class E, std::size_t N>
struct batch_parameter<std::span<E, N>> {
  static constexpr bool ok = !std::is_volatile_v<E>, is_span = true;
  using element = std::remove_cv_t<E>;
};
template <class E>
struct request_arguments {
  using type = std::tuple<E>;
};
template <class... A>
struct request_arguments<std::tuple<A...>> {
  using type = std::tuple<A...>;
};
template <class V>
struct batch_results {
  static constexpr bool ok = false;
  using type = void;
};
template <class R, class A>
struct batch_results<std::vector<R, A>> {
  static constexpr bool ok = !std::is_same_v<R, bool>;  // vector<bool> has no R&& elements
  using type = R;
};

// Whether M has the shape of a batched method: one batch parameter, a std::vector of
// results. Such a method listed as batched is called one request at a time, even when its
// signature is refused below (so a call site sees the per-request types, and the one error
// is tlaunch's).
template <class V>
struct is_std_vector : std::false_type {};
template <class R, class A>
struct is_std_vector<std::vector<R, A>> : std::true_type {};
template <auto M>
inline constexpr bool batch_shape_ok = [] {
  using mt = method_traits<decltype(M)>;
  if constexpr (mt::arity != 1)
    return false;
  else
    return batch_parameter<std::tuple_element_t<0, typename mt::args>>::ok &&
           is_std_vector<typename mt::result>::value;
}();

// Whether M can be batched: that shape, and results that can be moved out one by one
// (not std::vector<bool>).
template <auto M>
inline constexpr bool batch_signature_ok = [] {
  if constexpr (!batch_shape_ok<M>)
    return false;
  else
    return batch_results<typename method_traits<decltype(M)>::result>::ok;
}();

// A batched method seen from one call: the arguments and result of one request.
template <auto M>
struct batch_traits {
  using mt = method_traits<decltype(M)>;
  using service = typename mt::service;
  using parameter = batch_parameter<std::tuple_element_t<0, typename mt::args>>;
  using element = typename parameter::element;
  using args = typename request_arguments<element>::type;
  using result = typename batch_results<typename mt::result>::type;
  static constexpr bool is_coroutine = mt::is_coroutine;  // of the batch method
  static constexpr std::size_t arity = std::tuple_size_v<args>;
};

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

// ---- Compile errors that name the culprit in the error line itself ----
//
// A static_assert message is a literal, so each check is split in two: a pure predicate
// (`..._ok`), which callers test with `if constexpr` so that nothing else is instantiated
// once a check fails, and a report (`report_...`), a function template instantiated once
// per culprit whether one call site or several reach it. The report's error line names the
// method and the argument: g++ prints the template arguments of a deleted function it is
// asked to use ("use of deleted function '... argument_type_cannot_be_serialized() [with
// auto Method = &Store::put; long unsigned int Argument = 1; Type = Blob]'", and its note
// shows the declaration's line, which carries the advice); clang prints a failed
// static_assert's condition ("static_assert failed due to requirement
// 'tlaunch::detail::argument_type_is_serializable<&Store::put, 1, Blob>'", then the
// message). The same function template serves both: deleted for g++, a static_assert for
// clang. Argument positions count from 1.
template <auto Method, std::size_t Argument, class Type>
inline constexpr bool argument_type_is_serializable = is_serializable_v<Type>;
template <auto Method, class Type>
inline constexpr bool result_type_is_serializable = is_serializable_v<Type>;
#if defined(__clang__)
template <auto Method, std::size_t Argument, class Type>
void argument_type_cannot_be_serialized() {
  static_assert(argument_type_is_serializable<Method, Argument, Type>,
                "tlaunch: an argument type of this exposed method cannot be serialized by cereal "
                "(give it a serialize() function or use a serializable type)");
}
template <auto Method, class Type>
void result_type_cannot_be_serialized() {
  static_assert(result_type_is_serializable<Method, Type>,
                "tlaunch: the result type of this exposed method cannot be serialized by cereal "
                "(give it a serialize() function or use a serializable type)");
}
#else
template <auto Method, std::size_t Argument, class Type>
void argument_type_cannot_be_serialized() = delete;  // tlaunch: give it a serialize() function or use a serializable type
template <auto Method, class Type>
void result_type_cannot_be_serialized() = delete;  // tlaunch: give it a serialize() function or use a serializable type
#endif

// The position (from 1) of the first argument cereal cannot serialize; 0 when none.
template <class Tuple>
struct first_unserializable;
template <class... A>
struct first_unserializable<std::tuple<A...>> {
  static constexpr std::size_t value = [] {
    constexpr bool ok[] = {is_serializable_v<A>..., true};
    for (std::size_t i = 0; i < sizeof...(A); ++i)
      if (!ok[i]) return i + 1;
    return std::size_t{0};
  }();
};

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
  static constexpr bool value = (same_value<entry_method_v<Ms>, M>() || ...);
  static constexpr bool batched =
      ((batched_entry<decltype(Ms)>::value && same_value<entry_method_v<Ms>, M>()) || ...);
};

template <class S, auto M>
inline constexpr bool is_exposed_v = list_contains<typename rpc_list<S>::type, M>::value;

// Whether M is listed as batched<M, ...> in its service's methods<...>.
template <auto M>
inline constexpr bool is_batched_v =
    list_contains<typename rpc_list<typename method_traits<decltype(M)>::service>::type,
                  M>::batched &&
    batch_shape_ok<M>;

// What a caller of M sends and receives: M's own signature, or one request of a
// batched method.
template <auto M>
struct plain_call_traits : method_traits<decltype(M)> {
  static constexpr bool is_batched = false;
};
template <auto M>
struct batched_call_traits : batch_traits<M> {
  static constexpr bool is_batched = true;
};
template <auto M>
using call_traits =
    std::conditional_t<is_batched_v<M>, batched_call_traits<M>, plain_call_traits<M>>;

// Whether every argument and the result of exposed method M can be serialized.
template <auto M>
inline constexpr bool method_serializable_ok =
    all_serializable_v<typename call_traits<M>::args> &&
    is_serializable_v<typename call_traits<M>::result>;

template <auto M>
void report_method_serializable() {
  using traits = call_traits<M>;
  constexpr std::size_t bad = first_unserializable<typename traits::args>::value;
  if constexpr (bad != 0) {
    argument_type_cannot_be_serialized<M, bad, std::tuple_element_t<bad - 1, typename traits::args>>();
  } else if constexpr (!is_serializable_v<typename traits::result>) {
    result_type_cannot_be_serialized<M, typename traits::result>();
  }
}

// Wire id of a method: hash of "Service::method" and its signature.
template <auto M>
inline constexpr std::uint64_t method_id_v =
    fnv1a(type_name<decltype(M)>(), fnv1a("|", fnv1a(member_name<M>())));
template <auto M>
constexpr std::uint64_t method_id() {
  return method_id_v<M>;
}

// Whether a handle<S> may call M: M is S's and listed in S::rpc.
template <class S, auto M>
inline constexpr bool exposure_ok =
    std::is_same_v<typename method_traits<decltype(M)>::service, S> && is_exposed_v<S, M>;

template <class Service, auto Method>
inline constexpr bool method_belongs_to_the_service =
    std::is_same_v<typename method_traits<decltype(Method)>::service, Service>;
template <class Service, auto Method>
inline constexpr bool method_is_in_the_rpc_list = is_exposed_v<Service, Method>;
#if defined(__clang__)
template <class Service, auto Method>
void method_of_another_service() {
  static_assert(method_belongs_to_the_service<Service, Method>,
                "tlaunch: this method belongs to another service than the handle's");
}
template <class Service, auto Method>
void method_not_exposed() {
  static_assert(method_is_in_the_rpc_list<Service, Method>,
                "tlaunch: this method is not exposed: add it to the service's "
                "`using rpc = tlaunch::methods<...>;` list");
}
#else
template <class Service, auto Method>
void method_of_another_service() = delete;  // tlaunch: call it through a handle of its own service
template <class Service, auto Method>
void method_not_exposed() = delete;  // tlaunch: add it to the service's `using rpc = tlaunch::methods<...>;` list
#endif

template <class S, auto M>
void report_exposure() {
  if constexpr (!method_belongs_to_the_service<S, M>)
    method_of_another_service<S, M>();
  else
    method_not_exposed<S, M>();
}

template <class List>
struct unique_method_ids;
template <auto... Ms>
struct unique_method_ids<methods<Ms...>> {
  static constexpr bool value = [] {
    constexpr std::uint64_t ids[] = {method_id<entry_method_v<Ms>>()..., 0};
    for (std::size_t i = 0; i < sizeof...(Ms); ++i)
      for (std::size_t j = i + 1; j < sizeof...(Ms); ++j)
        if (ids[i] == ids[j]) return false;
    return true;
  }();
};

// A batched<M> whose M cannot take a batch. The error line names the method.
template <auto Method>
inline constexpr bool batched_method_takes_a_vector_and_returns_a_vector =
    batch_signature_ok<Method>;
#if defined(__clang__)
template <auto Method>
void batched_method_has_the_wrong_signature() {
  static_assert(batched_method_takes_a_vector_and_returns_a_vector<Method>,
                "tlaunch: a batched method takes one std::vector<T> or std::span<T> of requests "
                "and returns a std::vector<R> (or an asio::awaitable of one), one result per "
                "request");
}
#else
template <auto Method>
void batched_method_has_the_wrong_signature() = delete;  // tlaunch: a batched method takes one std::vector<T> or std::span<T> of requests and returns a std::vector<R> (or asio::awaitable of one)
#endif

template <auto E>
constexpr bool entry_ok() {
  if constexpr (batched_entry<decltype(E)>::value)
    return batch_signature_ok<entry_method_v<E>> && decltype(E)::options.max_batch > 0 &&
           decltype(E)::options.max_wait.ns >= 0;
  else
    return true;
}
template <auto E>
inline constexpr bool entry_signature_ok = entry_ok<E>();

template <auto E>
void report_entry() {
  if constexpr (batched_entry<decltype(E)>::value && !batch_signature_ok<entry_method_v<E>>) {
    batched_method_has_the_wrong_signature<entry_method_v<E>>();
  } else if constexpr (!entry_signature_ok<E>) {
    static_assert(entry_signature_ok<E>,
                  "tlaunch: batch_options needs max_batch > 0 and a max_wait not negative");
  } else {
    report_method_serializable<entry_method_v<E>>();
  }
}

// Whether service S can be served: distinct methods, each serializable.
template <class S>
inline constexpr bool service_ok = [] {
  using list = typename rpc_list<S>::type;
  return unique_method_ids<list>::value && [&]<auto... Ms>(methods<Ms...>*) {
    return ((entry_signature_ok<Ms> && method_serializable_ok<entry_method_v<Ms>>) && ... && true);
  }(static_cast<list*>(nullptr));
}();

// Reports the first reason service_ok<S> is false.
template <class S>
void report_service() {
  using list = typename rpc_list<S>::type;
  if constexpr (!unique_method_ids<list>::value) {
    static_assert(unique_method_ids<list>::value,
                  "tlaunch: a method is listed twice in the service's tlaunch::methods<...>");
  } else {
    // Each method that fails is reported (once, however many sites reach it).
    [&]<auto... Ms>(methods<Ms...>*) { (report_entry<Ms>(), ...); }(
        static_cast<list*>(nullptr));
  }
}

template <class S>
constexpr bool check_service() {
  if constexpr (!service_ok<S>) report_service<S>();
  return service_ok<S>;
}

}  // namespace detail
}  // namespace tlaunch
