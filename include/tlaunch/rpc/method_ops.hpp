// What the call path needs of one exposed method, as data and plain function pointers: its
// wire id, its name, its kind, and how to run it on an object. Everything else a call does
// (the local and remote paths, deadlines, cancellation, restarts, the served side) is
// written once per result and argument *types* (call.hpp, dispatch.hpp) and reads the
// method from here, so two methods of the same signature share all of it and a method costs
// its program only these few small functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include <asio/awaitable.hpp>

#include "batched_methods.hpp"
#include "call_paths.hpp"  // method_kind
#include "instance.hpp"
#include "../service.hpp"

namespace tlaunch::rpc {

// A result as a value: std::monostate for void.
template <class R>
using result_holder = std::conditional_t<std::is_void_v<R>, std::monostate, R>;

// Method ops of a call whose (per request) result is R and whose decayed argument tuple is
// Args: invoke for a plain method, invoke_coroutine for a coroutine, batch_add and
// batch_remove for a batched one; the others are null. The kind is part of the type, so
// the call path compiles only the branch a method takes.
template <class R, class Args, method_kind K>
struct method_ops {
  using result = R;
  using args = Args;
  static constexpr method_kind kind = K;
  std::uint64_t id;
  std::string_view name;  // "Counter::add"
  // A plain method: runs it on *obj with the arguments (moved from) and stores its result.
  void (*invoke)(void* obj, Args& args, result_holder<R>& out);
  // A coroutine method: its awaitable (the arguments must outlive it).
  asio::awaitable<R> (*invoke_coroutine)(void* obj, Args& args);
  // A batched method: one call joins, or leaves, the method's queue on the instance (on
  // its strand only).
  void (*batch_add)(instance& inst, Args&& args, std::unique_ptr<batch_completion<R>> done,
                    std::uint64_t key, std::chrono::steady_clock::time_point deadline);
  void (*batch_remove)(instance& inst, std::uint64_t key);
};

namespace detail {

template <auto M, class S, class R, class Args>
void invoke_plain(void* obj, Args& args, result_holder<R>& out) {
  S& s = *static_cast<S*>(obj);
  if constexpr (std::is_void_v<R>)
    std::apply([&](auto&... a) { (s.*M)(std::move(a)...); }, args);
  else
    out = std::apply([&](auto&... a) -> R { return (s.*M)(std::move(a)...); }, args);
}

template <auto M, class S, class R, class Args>
asio::awaitable<R> invoke_coroutine_of(void* obj, Args& args) {
  S& s = *static_cast<S*>(obj);
  return std::apply([&](auto&... a) { return (s.*M)(std::move(a)...); }, args);
}

template <auto M, class R, class Args>
void batch_add_of(instance& inst, Args&& args, std::unique_ptr<batch_completion<R>> done,
               std::uint64_t key, std::chrono::steady_clock::time_point deadline) {
  queue_of<M>(inst).add(std::move(args), std::move(done), key, deadline);
}

template <auto M>
void batch_remove_of(instance& inst, std::uint64_t key) {
  queue_of<M>(inst).remove(key);
}

template <auto M>
consteval auto make_method_ops() {
  using traits = tlaunch::detail::call_traits<M>;
  using R = typename traits::result;
  using Args = typename traits::args;
  using S = typename traits::service;
  constexpr method_kind kind = traits::is_batched     ? method_kind::batched
                               : traits::is_coroutine ? method_kind::coroutine
                                                      : method_kind::plain;
  method_ops<R, Args, kind> ops{tlaunch::detail::method_id<M>(), tlaunch::detail::member_name<M>(),
                                nullptr, nullptr, nullptr, nullptr};
  if constexpr (traits::is_batched) {
    ops.batch_add = &batch_add_of<M, R, Args>;
    ops.batch_remove = &batch_remove_of<M>;
  } else if constexpr (traits::is_coroutine) {
    ops.invoke_coroutine = &invoke_coroutine_of<M, S, R, Args>;
  } else {
    ops.invoke = &invoke_plain<M, S, R, Args>;
  }
  return ops;
}

}  // namespace detail

// A coroutine method run for a call: the object and the arguments are kept alive until it
// ends, and its result goes to *out (owned by what completes the call: spawn_coroutine's
// `done`). One coroutine per result and argument types, whatever the method; an
// awaitable<void> whatever the result, so that one co_spawn (spawn_coroutine) starts all.
template <class R, class Args>
asio::awaitable<void> run_method_coroutine(std::shared_ptr<void> keep,
                                           asio::awaitable<R> (*invoke)(void*, Args&), Args args,
                                           result_holder<R>* out) {
  if constexpr (std::is_void_v<R>) {
    (void)out;
    co_await invoke(keep.get(), args);
  } else {
    *out = co_await invoke(keep.get(), args);
  }
}

// The ops of method M (a member function pointer listed in its service's methods<...>).
template <auto M>
inline constexpr auto ops_of = detail::make_method_ops<M>();

}  // namespace tlaunch::rpc
