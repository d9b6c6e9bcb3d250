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
// tlaunch::remote_error. tlaunch::batched and tlaunch::batch_options are defined by
// the rpc layer (rpc/method.hpp), the queue that forms batches in rpc/batcher.hpp.
#pragma once

#include "rpc/method.hpp"
