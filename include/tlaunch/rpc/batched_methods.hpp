// Batched methods, serving side. The calls of every caller, local and remote,
// wait in one queue per instance and method, on the instance's strand: each is
// its arguments and how it completes, nothing more (no thread, no coroutine).
// The batch runs when it holds max_batch calls, or max_wait after its first
// call; the method runs once for all of them and each call gets its own result,
// or the batch's error.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/steady_timer.hpp>

#include "../wire/frame.hpp"
#include "call_paths.hpp"
#include "instance.hpp"
#include "metrics.hpp"
#include "../service.hpp"

namespace tlaunch::rpc {

namespace detail {

inline std::string exception_message(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

// The options of batched<M, O> in M's service's list.
template <class List, auto M>
struct listed_batch_options;
template <auto... Es, auto M>
struct listed_batch_options<methods<Es...>, M> {
  template <auto E>
  static constexpr bool matches() {
    if constexpr (tlaunch::detail::batched_entry<decltype(E)>::value)
      return tlaunch::detail::same_value<decltype(E)::method, M>();
    else
      return false;
  }
  template <auto E>
  static constexpr batch_options options() {
    if constexpr (tlaunch::detail::batched_entry<decltype(E)>::value)
      return decltype(E)::options;
    else
      return {};
  }
  static constexpr batch_options value = [] {
    batch_options o{};
    (void)((matches<Es>() ? (o = options<Es>(), true) : false) || ...);
    return o;
  }();
};
template <auto M>
inline constexpr batch_options batch_options_of = listed_batch_options<
    typename tlaunch::detail::rpc_list<typename tlaunch::detail::batch_traits<M>::service>::type,
    M>::value;

// Calls M with the batch: moved into a std::vector parameter, viewed by a span.
template <auto M, class S, class E>
decltype(auto) invoke_batch(S& obj, std::vector<E>& batch) {
  if constexpr (tlaunch::detail::batch_traits<M>::parameter::is_span)
    return (obj.*M)(std::span<E>(batch));
  else if constexpr (std::is_invocable_v<decltype(M), S&, std::vector<E>&&>)
    return (obj.*M)(std::move(batch));
  else
    return (obj.*M)(batch);
}

// A coroutine batch method, with the batch and the object kept alive until it ends; its
// results go to *out (spawn_coroutine's `done` owns them).
template <auto M, class S, class E, class R>
asio::awaitable<void> run_batch_coroutine(std::shared_ptr<void> keep, std::vector<E> batch,
                                          std::vector<R>* out) {
  *out = co_await invoke_batch<M>(*static_cast<S*>(keep.get()), batch);
}

}  // namespace detail

// How one waiting call ends: its result, or an error as a wire error code and a
// message (a local caller sees the same tlaunch error a remote one does).
template <class R>
struct batch_completion {
  virtual ~batch_completion() = default;
  virtual void succeed(R&& r) = 0;
  virtual void fail(wire::error_code code, const std::string& message) = 0;
};

// Names a waiting call, so that its cancellation can find it; unique in the process.
inline std::uint64_t next_batch_key() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// The calls waiting for batched method M of one instance. On the strand only.
template <auto M>
class batch_queue final : public batch_queue_base {
 public:
  using traits = tlaunch::detail::batch_traits<M>;
  using service = typename traits::service;
  using args_type = typename traits::args;
  using element = typename traits::element;
  using result = typename traits::result;
  using completion = std::unique_ptr<batch_completion<result>>;
  using clock = std::chrono::steady_clock;
  static constexpr batch_options options = detail::batch_options_of<M>;

  explicit batch_queue(instance& inst) : inst_(inst), timer_(inst.strand) {
    waiting_.reserve(options.max_batch);
    // The batches and their calls, as the instance's metrics: the mean batch size is their
    // ratio (docs/guide/observing.md).
    if (inst.metrics) {
      const std::string name(tlaunch::detail::member_name<M>());
      batches_ = &inst.metrics->user(inst.id(), name + " batches", true);
      batched_calls_ = &inst.metrics->user(inst.id(), name + " batched calls", true);
    }
  }
  // Destroyed with its instance, after the io threads are joined: a wait still
  // queued in the io_context is dropped without running.
  ~batch_queue() override = default;

  void add(args_type args, completion done, std::uint64_t key,
           clock::time_point deadline = clock::time_point::max()) {
    waiting_.push_back({std::move(args), std::move(done), key, deadline});
    if (waiting_.size() >= options.max_batch)
      run();
    else if (waiting_.size() == 1)
      arm();
  }

  // Takes a waiting call out of the batch, uncompleted: its caller gave up on it
  // (deadline, cancellation) and completes it itself. A call whose batch already
  // runs is left to finish.
  void remove(std::uint64_t key) {
    auto it = std::find_if(waiting_.begin(), waiting_.end(),
                           [key](const waiting_call& w) { return w.key == key; });
    if (it == waiting_.end()) return;
    waiting_.erase(it);
    if (waiting_.empty()) disarm();
  }

  std::size_t waiting() const { return waiting_.size(); }

 private:
  struct waiting_call {
    args_type args;
    completion done;
    std::uint64_t key;
    clock::time_point deadline;
  };

  void arm() {
    ++generation_;
    timer_.expires_after(options.max_wait.duration());
    timer_.async_wait([this, g = generation_](std::error_code ec) {
      if (!ec && g == generation_) run();
    });
  }
  void disarm() {
    ++generation_;  // a wait already queued to run finds the generation changed
    timer_.cancel();
  }

  void run() {
    disarm();
    std::vector<waiting_call> calls;
    calls.swap(waiting_);
    waiting_.reserve(options.max_batch);
    // A call whose deadline passed while it waited leaves the batch.
    const auto now = clock::now();
    std::erase_if(calls, [now](waiting_call& w) {
      if (w.deadline > now) return false;
      w.done->fail(wire::error_code::deadline_exceeded, "deadline exceeded waiting for a batch");
      return true;
    });
    if (calls.empty()) return;
    if (batches_) {
      batches_->add(1);
      batched_calls_->add(static_cast<double>(calls.size()));
    }
    std::vector<element> batch;
    batch.reserve(calls.size());
    for (auto& w : calls) {
      if constexpr (std::is_same_v<element, args_type>)
        batch.push_back(std::move(w.args));
      else
        batch.push_back(std::move(std::get<0>(w.args)));
    }
    if constexpr (!traits::is_coroutine) {
      std::vector<result> results;
      try {
        results = detail::invoke_batch<M>(*static_cast<service*>(inst_.object.get()), batch);
      } catch (...) {
        fail_all(calls, detail::exception_message(std::current_exception()));
        return;
      }
      deliver(calls, results);
    } else {
      auto end = std::make_unique<batch_end>(std::move(calls));
      auto body = detail::run_batch_coroutine<M, service, element, result>(
          inst_.object, std::move(batch), &end->results);
      spawn_coroutine(any_executor_of(inst_.strand), std::move(body), {}, std::move(end));
    }
  }

  // The end of a coroutine batch method's run (spawn_coroutine).
  struct batch_end final : spawned {
    explicit batch_end(std::vector<waiting_call> c) : calls(std::move(c)) {}
    void complete(std::exception_ptr e) override {
      if (e)
        fail_all(calls, detail::exception_message(e));
      else
        deliver(calls, results);
    }
    std::vector<waiting_call> calls;
    std::vector<result> results;
  };

  static void fail_all(std::vector<waiting_call>& calls, const std::string& why) {
    for (auto& w : calls) w.done->fail(wire::error_code::remote_exception, why);
  }
  static void deliver(std::vector<waiting_call>& calls, std::vector<result>& results) {
    if (results.size() != calls.size()) {
      std::string why(tlaunch::detail::member_name<M>());
      why += " returned " + std::to_string(results.size()) + " results for a batch of " +
             std::to_string(calls.size()) + " calls (one result per call is required)";
      fail_all(calls, why);
      return;
    }
    for (std::size_t i = 0; i < calls.size(); ++i) calls[i].done->succeed(std::move(results[i]));
  }

  instance& inst_;
  asio::steady_timer timer_;
  user_metric* batches_ = nullptr;
  user_metric* batched_calls_ = nullptr;
  std::uint64_t generation_ = 0;
  std::vector<waiting_call> waiting_;
};

// The queue of batched method M on inst, made on first use. On the strand only.
template <auto M>
batch_queue<M>& queue_of(instance& inst) {
  constexpr std::uint64_t id = tlaunch::detail::method_id<M>();
  for (auto& [k, q] : inst.batch_queues)
    if (k == id) return static_cast<batch_queue<M>&>(*q);
  inst.batch_queues.emplace_back(id, std::make_unique<batch_queue<M>>(inst));
  return static_cast<batch_queue<M>&>(*inst.batch_queues.back().second);
}

}  // namespace tlaunch::rpc
