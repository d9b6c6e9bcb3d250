// Batched methods: many callers, one method call per batch (inference servers).
//
//   struct Model {
//     // One result per request, in the order of the requests.
//     std::vector<float> infer(std::vector<std::vector<float>> inputs);
//     using rpc = tlaunch::methods<tlaunch::batched<
//         &Model::infer, tlaunch::batch_options{.max_batch = 64, .max_wait = 2ms}>>;
//   };
//   float y = co_await model.call<&Model::infer>(x);   // one request, one result
//
// The batch parameter is a std::vector<T> or std::span<T> (T is the call's one
// argument, or std::tuple<A...> of its arguments); the result a std::vector<R> or
// asio::awaitable<std::vector<R>>, one R per request. A batch runs once it holds
// max_batch calls or max_wait after its first call. If the method throws, or returns
// the wrong number of results, every call of the batch fails with
// tlaunch::remote_error. The methods list checks the signatures (service.hpp); the queue
// that forms batches is rpc/batched_methods.hpp. A header of the vocabulary layer.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace tlaunch {

// How long the first call of a batch may wait for others: any std::chrono duration,
// kept as nanoseconds so that batch_options can be a template argument.
struct batch_wait {
  std::int64_t ns = 1'000'000;
  constexpr batch_wait() = default;
  template <class Rep, class Period>
  constexpr batch_wait(std::chrono::duration<Rep, Period> d)  // NOLINT: implicit on purpose
      : ns(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()) {}
  constexpr std::chrono::nanoseconds duration() const { return std::chrono::nanoseconds(ns); }
};

// When a batch runs: as soon as it holds max_batch calls, or max_wait after its first call.
struct batch_options {
  std::size_t max_batch = 64;
  batch_wait max_wait = std::chrono::milliseconds(1);
};

// A batched method in a methods<...> list (above):
//   tlaunch::batched<&Model::infer, tlaunch::batch_options{.max_batch = 64, .max_wait = 2ms}>
template <auto M, batch_options O>
struct batched_method {
  static constexpr auto method = M;
  static constexpr batch_options options = O;
};
template <auto M, batch_options O = batch_options{}>
inline constexpr batched_method<M, O> batched{};

}  // namespace tlaunch
