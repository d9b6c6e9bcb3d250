// Client side of a call, per argument and result types: encode the arguments, decode the
// reply, run the method on a local instance's strand, and complete a handler with
// void(std::exception_ptr[, R]). Where the call goes, deadlines, cancellation and the wait
// for a restart are call_paths.hpp's start_call_op, compiled once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <tuple>

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/dispatch.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include "../detail/small_pool.hpp"
#include "../wire/codec.hpp"
#include "read_batch.hpp"
#include "call_paths.hpp"
#include "dispatch.hpp"
#include "../call_options.hpp"
#include "../error.hpp"
#include "../service.hpp"
#include "method_ops.hpp"
#include "runtime.hpp"

namespace tlaunch {

namespace rpc {

// The outcome a reply or error_reply frame carries.
template <class R>
std::pair<std::exception_ptr, result_holder<R>> decode_reply(const call_target& target,
                                                             const wire::frame_header& h,
                                                             std::span<const char> payload) {
  result_holder<R> r{};
  if (h.type == wire::kind::reply) {
    // A plain number or nothing, as make_small_frame wrote it: read in place.
    if constexpr (std::is_void_v<R>) {
      if (payload.empty()) return {nullptr, r};
    } else if constexpr (wire::small_frame_values<R>) {
      if (payload.size() == sizeof(R)) {
        std::memcpy(&r, payload.data(), sizeof(R));
        return {nullptr, r};
      }
    }
    try {
      if constexpr (std::is_void_v<R>)
        wire::deserialize_from(payload);
      else
        wire::deserialize_from(wire::received_payload{payload, h.payload_owner}, r);
    } catch (const std::exception& e) {
      return {tlaunch::detail::make_error<unavailable>(target.site(),
                                                       std::string("malformed reply: ") + e.what()),
              {}};
    }
    return {nullptr, std::move(r)};
  }
  auto [code, msg] = wire::decode_error(payload);
  if (code == wire::error_code::remote_exception)
    return {tlaunch::detail::make_error<remote_error>(target.site(), msg), {}};
  // The callee noticed the deadline before the caller's own timer did.
  if (code == wire::error_code::deadline_exceeded)
    return {tlaunch::detail::make_error<timeout>(target.site()), {}};
  if (code == wire::error_code::removed)
    return {tlaunch::detail::make_error<removed>(target.site(), msg), {}};
  return {tlaunch::detail::make_error<unavailable>(target.site(), msg), {}};
}

}  // namespace rpc

namespace detail {

// The completion signature of a call of result type R.
template <class R>
struct completion_signature_of {
  using type = void(std::exception_ptr, R);
};
template <>
struct completion_signature_of<void> {
  using type = void(std::exception_ptr);
};
template <class R>
using completion_signature = typename completion_signature_of<R>::type;

template <class R>
struct future_state;

// The async_wait()er of a future: its completion handler, type-erased.
template <class R>
struct future_waiter {
  virtual ~future_waiter() = default;
  // Posts the handler to its executor with the result, which it takes along:
  // the state may be gone by the time the handler runs.
  virtual void fire(std::exception_ptr e, rpc::result_holder<R>&& v) = 0;
};

// What a tlaunch::future shares with its call. For a remote call without a
// deadline it is also the connection's pending call, so a call started with
// handle::async costs one allocation and its reply is stored where it is read.
//
// Lock-free: the result is written before `state` gains `done` (release) and
// read after it is seen (acquire). A waiter is installed before `state` gains
// `waiting`, so whichever of set() and async_wait() comes second fires it.
// No enable_shared_from_this: its weak count would cost two more atomic
// operations per call, and the waiter takes the result along instead.
template <class R>
struct future_state final : rpc::pending_call {
  static constexpr int waiting = 1;  // an async_wait() waiter is installed
  static constexpr int blocked = 2;  // a get() sleeps on `state`
  static constexpr int done = 4;     // error/value are set

  std::atomic<int> state{0};
  std::exception_ptr error;
  rpc::result_holder<R> value{};
  std::unique_ptr<future_waiter<R>> waiter;  // set at most once
  rpc::call_target target{};                 // for errors, when it is the pending call

  bool ready() const { return (state.load(std::memory_order_acquire) & done) != 0; }

  // Called once, when the call completes.
  void set(std::exception_ptr e, rpc::result_holder<R>&& v) {
    error = std::move(e);
    value = std::move(v);
    int prev = state.exchange(done, std::memory_order_acq_rel);
    if (prev & blocked) state.notify_all();
    // The waiter is the result's only reader (one per future).
    if (prev & waiting)
      std::exchange(waiter, nullptr)->fire(std::exchange(error, nullptr), std::move(value));
  }

  // Installs the waiter, or fires it at once when the result is there.
  void wait_with(std::unique_ptr<future_waiter<R>> w) {
    int seen = state.load(std::memory_order_acquire);
    if (seen & waiting) throw std::logic_error("tlaunch::future awaited twice");
    if (!(seen & done)) {
      waiter = std::move(w);
      if (state.compare_exchange_strong(seen, seen | waiting, std::memory_order_acq_rel,
                                        std::memory_order_acquire))
        return;  // set() fires it
      w = std::move(waiter);  // set() came first (seen now has done)
    }
    w->fire(std::exchange(error, nullptr), std::move(value));
  }

  // Blocks the calling thread until set().
  void block() {
    int seen = state.load(std::memory_order_acquire);
    while (!(seen & done)) {
      if (!(seen & blocked)) {
        if (!state.compare_exchange_weak(seen, seen | blocked, std::memory_order_acq_rel,
                                         std::memory_order_acquire))
          continue;
        seen |= blocked;
      }
      state.wait(seen, std::memory_order_acquire);
      seen = state.load(std::memory_order_acquire);
    }
  }

  void complete(const wire::frame_header& h, std::span<const char> payload) override {
    auto [e, r] = rpc::decode_reply<R>(target, h, payload);
    set(std::move(e), std::move(r));
  }
  void fail_unavailable(const std::string& why) override {
    set(make_error<unavailable>(target.site(), why), {});
  }
  void fail_stopping(const std::string& why) override {
    set(make_error<stopping>(target.site(), why), {});
  }
};

template <class R, class Handler>
struct future_waiter_for final : future_waiter<R> {
  explicit future_waiter_for(Handler&& h) : handler(std::move(h)) {}
  void fire(std::exception_ptr e, rpc::result_holder<R>&& v) override {
    auto ex = asio::get_associated_executor(handler);
    auto job = [e = std::move(e), v = std::move(v), h = std::move(handler)]() mutable {
      if constexpr (std::is_void_v<R>)
        std::move(h)(std::move(e));
      else
        std::move(h)(std::move(e), std::move(v));
    };
    if constexpr (std::is_same_v<decltype(ex), asio::any_io_executor>)
      rpc::post_batched_any<rpc::strand_type>(ex, std::move(job));
    else
      rpc::post_batched(ex, std::move(job));
  }
  Handler handler;
};

// Completion handler that fills a future's state. It runs wherever the call
// completes (the state is thread-safe); only the waiter is posted.
template <class R>
struct future_handler {
  std::shared_ptr<future_state<R>> s;
  void operator()(std::exception_ptr e) requires std::is_void_v<R> { s->set(std::move(e), {}); }
  template <class V>
  void operator()(std::exception_ptr e, V&& v) requires(!std::is_void_v<R>) {
    s->set(std::move(e), std::forward<V>(v));
  }
};

}  // namespace detail

namespace rpc {

// Handlers that are called where the call completes instead of being posted.
template <class Handler>
inline constexpr bool completes_inline = false;
template <class R>
inline constexpr bool completes_inline<tlaunch::detail::future_handler<R>> = true;

// Invokes the handler on its own executor (the awaiting coroutine's strand).
template <class R, class Handler>
void complete_on_executor(Handler&& h, const asio::any_io_executor& fallback, std::exception_ptr e,
                          result_holder<R>&& r) {
  if constexpr (completes_inline<std::decay_t<Handler>>) {
    (void)fallback;
    if constexpr (std::is_void_v<R>)
      std::forward<Handler>(h)(std::move(e));
    else
      std::forward<Handler>(h)(std::move(e), std::move(r));
    return;
  } else {
    auto ex = asio::get_associated_executor(h, fallback);
    // The exception_ptr is moved all the way: its last release then happens where
    // the result is consumed, ordered by the handler's own synchronization.
    auto job = [h = std::forward<Handler>(h), e = std::move(e), r = std::move(r)]() mutable {
      asio::get_associated_cancellation_slot(h).clear();
      if constexpr (std::is_void_v<R>)
        std::move(h)(std::move(e));
      else
        std::move(h)(std::move(e), std::move(r));
    };
    if constexpr (std::is_same_v<decltype(ex), asio::any_io_executor>)
      post_batched_any<strand_type>(ex, std::move(job));
    else
      post_batched(ex, std::move(job));
  }
}

// A local call of a batched method, waiting in its batch.
template <class R, class Done>
struct local_batch_completion final : batch_completion<R> {
  local_batch_completion(Done&& d, call_target t) : done(std::move(d)), target(t) {}
  void succeed(R&& r) override { done(nullptr, std::move(r)); }
  void fail(wire::error_code code, const std::string& message) override {
    if (code == wire::error_code::deadline_exceeded)
      done(tlaunch::detail::make_error<timeout>(target.site()), {});
    else
      done(tlaunch::detail::make_error<remote_error>(target.site(), message), {});
  }
  Done done;
  call_target target;
};

// The end of a local call of a coroutine method (spawn_coroutine, the one co_spawn of every
// coroutine run): done(error, result), the method's error as remote_error.
template <class R, class Done>
struct local_end final : spawned {
  local_end(Done&& d, call_target t) : done(std::move(d)), target(t) {}
  void complete(std::exception_ptr e) override {
    if (e)
      e = tlaunch::detail::make_error<remote_error>(target.site(), detail::exception_message(e));
    done(std::move(e), std::move(result));
  }
  Done done;
  call_target target;
  result_holder<R> result{};
};

// Runs method m on the instance's strand and gives done(exception_ptr, result) the
// outcome; a coroutine method is bound to `cancel`. With at_once, a plain method whose
// strand is idle runs right here (asio::dispatch), as the strand.
template <class R, class Args, method_kind K, class Done>
void run_local(const method_ops<R, Args, K>& m, instance& inst, call_target target,
               std::type_identity_t<Args>&& args, Done&& done,
               asio::cancellation_slot cancel = {}, bool at_once = false) {
  if constexpr (K == method_kind::batched) {
    (void)at_once;
    // Joins the method's queue on the strand; cancellation (emitted on the strand, see
    // call_op::abort_local, which then completes the call) takes it out again.
    asio::post(inst.strand, [m = &m, inst = &inst, target, args = std::move(args),
                             done = std::forward<Done>(done), cancel]() mutable {
      const std::uint64_t key = next_batch_key();
      if (cancel.is_connected())
        cancel.assign([m, inst, key](asio::cancellation_type) { m->batch_remove(*inst, key); });
      m->batch_add(
          *inst, std::move(args),
          std::make_unique<local_batch_completion<R, std::decay_t<Done>>>(std::move(done), target),
          key, std::chrono::steady_clock::time_point::max());
    });
  } else if constexpr (K == method_kind::plain) {
    (void)cancel;  // a plain method cannot be interrupted
    auto job = [m = &m, obj = inst.object.get(), target, args = std::move(args),
                done = std::forward<Done>(done)]() mutable {
      std::exception_ptr e;
      result_holder<R> r{};
      try {
        m->invoke(obj, args, r);
      } catch (...) {
        e = tlaunch::detail::make_error<remote_error>(
            target.site(), detail::exception_message(std::current_exception()));
      }
      done(std::move(e), std::move(r));
    };
    if (at_once)
      asio::dispatch(inst.strand, std::move(job));
    else
      asio::post(inst.strand, std::move(job));
  } else {
    (void)at_once;
    auto end = std::make_unique<local_end<R, std::decay_t<Done>>>(std::forward<Done>(done), target);
    auto body = run_method_coroutine<R, Args>(inst.object, m.invoke_coroutine, std::move(args),
                                              &end->result);
    spawn_coroutine(any_executor_of(inst.strand), std::move(body), cancel, std::move(end));
  }
}

// Whether an argument tuple goes out as a frame built on the stack.
template <class Tuple>
inline constexpr bool small_args = false;
template <class... T>
inline constexpr bool small_args<std::tuple<T...>> = wire::small_frame_values<T...>;

// That frame, for a tuple of plain numbers.
template <class... T>
auto small_frame_of(const std::tuple<T...>& args) {
  return std::apply([](const auto&... a) { return wire::make_small_frame(a...); }, args);
}

// Any other argument tuple, serialized into a frame buffer.
template <class Args>
wire::frame_buffer serialized_frame_of(const Args& args) {
  wire::frame_buffer f(64);
  std::apply([&](const auto&... a) { wire::serialize_into(f, a...); }, args);
  return f;
}

// A call's op (call_paths.hpp) as its result type sees it: a reply is decoded into R.
template <class R>
class call_op_of : public call_op {
 public:
  using call_op::call_op;
  // Completes the caller with the outcome, unless the call has completed.
  virtual void finish(std::exception_ptr e, result_holder<R>&& r) = 0;
  void complete(const wire::frame_header& h, std::span<const char> payload) override {
    auto [e, r] = decode_reply<R>(target, h, payload);
    finish(std::move(e), std::move(r));
  }
};

// The part of a call's op that holds the caller's handler: per result and handler types.
template <class R, class Handler>
class call_op_for : public call_op_of<R> {
 public:
  using call_op_of<R>::call_op_of;
  void finish(std::exception_ptr e, result_holder<R>&& r) final {
    if (!this->claim()) return;
    this->stop_timer();
    deliver(std::move(e), std::move(r));
  }
  void deliver_error(std::exception_ptr e) final { deliver(std::move(e), {}); }
  asio::cancellation_slot caller_slot() final {
    return asio::get_associated_cancellation_slot(*handler);
  }
  // Set before the call starts.
  std::optional<Handler> handler;

 private:
  void deliver(std::exception_ptr e, result_holder<R>&& r) {
    complete_on_executor<R>(std::move(*handler), any_executor_of(this->rt.io), std::move(e),
                            std::move(r));
  }
};

// The typed op of a call of method m: its arguments, how they are sent, how the method
// runs locally. Per signature and handler type.
template <class R, class Args, method_kind K, class Handler>
class typed_call_op final : public call_op_for<R, Handler> {
 public:
  typed_call_op(rpc::runtime& rt, std::uint32_t flat, instance* direct,
                std::chrono::milliseconds timeout, const method_ops<R, Args, K>& m, Args&& args)
      : call_op_for<R, Handler>(rt, flat, direct, timeout, m.id, m.name, K),
        m_(m),
        args_(std::move(args)) {}

  std::uint64_t send(connection& conn, const wire::frame_header& h) override {
    std::shared_ptr<pending_call> self = this->shared_from_this();
    // Plain numbers are written into a frame on the stack; anything else is serialized
    // into a frame buffer.
    if constexpr (small_args<Args>) {
      auto f = small_frame_of(args_);
      return rpc::start_call(conn, f.span(), h, std::move(self));
    } else {
      return rpc::start_call(conn, serialized_frame_of(args_), h, std::move(self));
    }
  }
  void run_local(instance& inst, asio::cancellation_slot cancel, bool at_once) override {
    rpc::run_local(
        m_, inst, this->target, std::move(args_),
        [self = std::static_pointer_cast<call_op_of<R>>(this->shared_from_this())](
            std::exception_ptr e, result_holder<R>&& r) { self->finish(std::move(e), std::move(r)); },
        cancel, at_once);
  }

 private:
  const method_ops<R, Args, K>& m_;
  Args args_;
};

// The handler use_awaitable gives a call of result type R.
template <class R>
using awaitable_handler_of =
    typename asio::async_result<asio::use_awaitable_t<>,
                                tlaunch::detail::completion_signature<R>>::handler_type;

// The initiation of an awaited call: per result type, whatever the method.
template <class R>
struct start_awaited {
  template <class Handler>
  void operator()(Handler&& h, std::shared_ptr<call_op_for<R, awaitable_handler_of<R>>> op) const {
    op->handler.emplace(std::forward<Handler>(h));
    start_call_op(std::move(op));
  }
};

// A call of m as an awaitable: the initiation's own, not a coroutine around it (one frame
// per call), and instantiated per result type.
template <class R, class Args, method_kind K>
asio::awaitable<R> awaited_call(rpc::runtime& rt, std::uint32_t flat, instance* direct,
                                std::chrono::milliseconds timeout, const method_ops<R, Args, K>& m,
                                Args&& args) {
  using op_t = typed_call_op<R, Args, K, awaitable_handler_of<R>>;
  std::shared_ptr<call_op_for<R, awaitable_handler_of<R>>> op = std::allocate_shared<op_t>(
      tlaunch::detail::pool_allocator<op_t>{}, rt, flat, direct, timeout, m, std::move(args));
  return asio::async_initiate<const asio::use_awaitable_t<>,
                              tlaunch::detail::completion_signature<R>>(
      start_awaited<R>{}, asio::use_awaitable, std::move(op));
}

// Starts a call of m whose outcome fills the future state s. Remote and without a
// deadline, s itself waits for the reply (one allocation per call), and plain numbers
// may join the batch of other calls; anything else goes the way of every call.
template <class R, class Args, method_kind K>
void start_future_call(rpc::runtime& rt, std::uint32_t flat, instance* direct,
                       std::chrono::milliseconds timeout, const method_ops<R, Args, K>& m,
                       Args&& args, std::shared_ptr<tlaunch::detail::future_state<R>> s) {
  if (timeout.count() == 0 && !direct && !rt.local(flat)) {
    std::string why;
    std::shared_ptr<connection> held;
    if (connection* conn = rt.connection_for(flat, why, held)) {
      s->target = call_target{&rt, flat, m.name};
      s->method_name = m.name;
      const wire::frame_header h{.type = wire::kind::call, .target = flat, .method = m.id};
      if constexpr (small_args<Args>) {
        // Nothing needs its id: it may join the batch's other calls.
        auto f = small_frame_of(args);
        rpc::start_call_batched(*conn, f.span(), h, std::move(s));
      } else {
        rpc::start_call(*conn, serialized_frame_of(args), h, std::move(s));
      }
      return;
    }
  }
  using handler_t = tlaunch::detail::future_handler<R>;
  using op_t = typed_call_op<R, Args, K, handler_t>;
  auto op = std::allocate_shared<op_t>(tlaunch::detail::pool_allocator<op_t>{}, rt, flat, direct,
                                       timeout, m, std::move(args));
  op->handler.emplace(handler_t{std::move(s)});
  start_call_op(std::move(op));
}

}  // namespace rpc
}  // namespace tlaunch
