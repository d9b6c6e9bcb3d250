// The paths of a call and of a served call that depend on neither the method nor its types:
// where a call goes (a local instance, a connection, the wait for a restart), deadlines,
// cancellation, a local call racing its timeout. call.hpp and dispatch.hpp hold only what
// depends on the result and argument types (encoding, decoding, invoking) and hand the rest
// to these, which are instantiated once (with TLAUNCH_SEPARATE_COMPILATION: compiled once,
// in the library) instead of once per signature in every translation unit.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include "read_batch.hpp"
#include "call_table.hpp"
#include "connection_api.hpp"
#include "../error.hpp"
#include "instance.hpp"
#include "runtime.hpp"
#include "trace.hpp"


namespace tlaunch::rpc {

// Who a call went to, for error messages; strings are built only on error.
struct call_target {
  const rpc::runtime* rt;
  std::uint32_t flat;
  std::string_view method;
  call_site site() const {
    return {rt ? rt->instance_id(flat) : std::string("?"), std::string(method)};
  }
};

// `s` as the executor of a coroutine spawned on it (asio::co_spawn converts its executor to
// the awaitable's any_io_executor at once): the conversion, which instantiates all of
// any_io_executor's property machinery for the strand type, compiled once.
TLAUNCH_DECL asio::any_io_executor any_executor_of(const strand_type& s);
// The same for the io_context's own executor (a call's fallback for completing its handler).
TLAUNCH_DECL asio::any_io_executor any_executor_of(asio::io_context& io);

// How a coroutine that spawn_coroutine started ends: complete() runs once, with the
// coroutine's exception or none (a result it has, the coroutine stored itself: see
// run_method_coroutine).
struct spawned {
  virtual ~spawned() = default;
  virtual void complete(std::exception_ptr e) = 0;
};

// co_spawns `body` on `ex`, bound to `cancel` (a slot not connected: not cancellable), and
// then calls done->complete. The one co_spawn of a coroutine method's run (local or served,
// batched too) and of a node's run(): compiled once, instead of once per result type in
// every file that serves or calls a coroutine method.
TLAUNCH_DECL void spawn_coroutine(const asio::any_io_executor& ex, asio::awaitable<void> body,
                                  asio::cancellation_slot cancel, std::unique_ptr<spawned> done);

// Starts instance i's run() body, `body`, on its strand, cancellable through i.run_cancel;
// at its end, i.run_active is false again and rt.run_finished(i, its exception) runs.
TLAUNCH_DECL void spawn_run(runtime& rt, instance& i, asio::awaitable<void> body);

// The batch groups of the two executors calls are posted to, instantiated once in the
// library (their submit posts to Asio).
#if defined(TLAUNCH_SEPARATE_COMPILATION) && !defined(TLAUNCH_BUILDING_LIBRARY)
extern template class detail::batch_group_for<strand_type>;
extern template class detail::batch_group_for<asio::any_io_executor>;
#endif

// How a method runs: a plain function, a coroutine, or batched (tlaunch::batched).
enum class method_kind { plain, coroutine, batched };

// One call of a method by a caller in this process, as the call path's shared code sees it:
// where it goes, its deadline, its kind, and a few typed hooks (call.hpp's typed_call_op
// holds the arguments and the caller's handler). start_call_op, compiled once, decides the
// rest: a local call or a remote one, the restart wait, deadlines and cancellation. The op
// is also the remote call's pending_call. Its first outcome completes it (claim()); any
// later one (a reply after the deadline fired, a cancellation after the reply) is dropped.
class call_op : public pending_call, public std::enable_shared_from_this<call_op> {
 public:
  call_op(rpc::runtime& r, std::uint32_t f, instance* d, std::chrono::milliseconds t,
          std::uint64_t method_id, std::string_view name, method_kind k)
      : target{&r, f, name}, rt(r), flat(f), direct(d), timeout(t), method(method_id), kind(k) {
    method_name = name;
  }

  // ---- Typed hooks (call.hpp)
  // Serializes the arguments into a call frame with header h and starts it on conn, this
  // op waiting for its reply; the call's id, or 0 when it failed at once (and completed).
  virtual std::uint64_t send(connection& conn, const wire::frame_header& h) = 0;
  // Runs the method on inst's strand (right here when at_once and the strand is idle; a
  // coroutine or batched method bound to `cancel`); its outcome completes this op.
  virtual void run_local(instance& inst, asio::cancellation_slot cancel, bool at_once) = 0;
  // The caller's cancellation slot (its handler's); read before the op completes.
  virtual asio::cancellation_slot caller_slot() = 0;
  // Completes the caller with error e; called once, after claim().
  virtual void deliver_error(std::exception_ptr e) = 0;

  // ---- Shared
  // True for the first outcome only.
  bool claim() { return !claimed_.exchange(true, std::memory_order_acq_rel); }
  // Completes the call with e unless it has completed; true if this did.
  TLAUNCH_DECL bool fail(std::exception_ptr e);
  TLAUNCH_DECL void fail_unavailable(const std::string& why) override;
  TLAUNCH_DECL void fail_stopping(const std::string& why) override;
  // Stops the deadline timer, if any (the first step of every completion).
  TLAUNCH_DECL void stop_timer();
  // A local call ends early (deadline, cancellation): completes with e and cancels a
  // coroutine method still running. A call waiting in a batch leaves it first, on the
  // strand: once the caller sees the error, its call no longer counts toward any batch.
  TLAUNCH_DECL void abort_local(std::exception_ptr e);

  call_target target;
  rpc::runtime& rt;
  std::uint32_t flat;
  instance* direct;
  std::chrono::milliseconds timeout;  // 0: no deadline
  std::uint64_t method;
  method_kind kind;
  std::shared_ptr<asio::steady_timer> timer;  // the deadline, when there is one
  std::mutex timer_mu;  // orders the timer's async_wait and cancel across threads
  instance* local = nullptr;          // a local call that may end early: its instance
  asio::cancellation_signal signal;   // ... and what cancels its method (on the strand)

 private:
  std::atomic<bool> claimed_{false};
};

// Starts the call: on an instance of this process (a direct call on its strand), or over
// the connection to its target, or, while the target is being restarted, after it is back.
TLAUNCH_DECL void start_call_op(std::shared_ptr<call_op> op);

// A call waiting for its target to come back from a restart (park_call).
struct parked_call_base {
  explicit parked_call_base(call_target t) : target(t) {}
  virtual ~parked_call_base() = default;
  // Completes the call with `e`; called once, by whoever set `done` first.
  virtual void fail(std::exception_ptr e) = 0;
  // Starts the call again, with what is left of its deadline (0: none); called once,
  // instead of fail, by whoever set `done` first.
  virtual void resume(std::chrono::milliseconds timeout_left) = 0;
  call_target target;
  std::atomic<bool> done{false};  // the first of resume and deadline completes it
};

// Fails `p` with tlaunch::timeout after `timeout`, unless it was completed before.
TLAUNCH_DECL void arm_park_deadline(asio::io_context& io,
                                                   std::chrono::milliseconds timeout,
                                                   std::shared_ptr<parked_call_base> p);

// A call to instance `flat`, which is being restarted (rpc::runtime::park_call), waits for
// its new address, then resumes with what is left of its deadline (`timeout`, 0: none);
// the deadline ends the wait with tlaunch::timeout, the process's stop with unavailable,
// and when the instance is back already or the process stops, it fails with unavailable
// and `why`. Its cancellation slot is not watched while it waits.
TLAUNCH_DECL void park_call(rpc::runtime& rt, std::uint32_t flat,
                                           std::chrono::milliseconds timeout,
                                           std::shared_ptr<parked_call_base> p,
                                           const std::string& why);

// A coroutine method served to a remote caller: its cancel signal (fired by a cancel frame
// or by the caller's deadline) and, when the call has a deadline, its timer.
struct served_run {
  std::shared_ptr<connection> conn;
  served_call call;
  std::shared_ptr<asio::cancellation_signal> sig;
  std::shared_ptr<asio::steady_timer> deadline;
  // With --trace, the call's served span (rpc/trace.hpp; trace_id 0: not in a trace).
  trace_context trace;

  // The run ended: no longer cancellable. Returns whether the caller's deadline has
  // passed: a method that fails then (most often because the deadline cancelled it)
  // replies deadline_exceeded, which the caller reports as tlaunch::timeout, the same as
  // when its own timer fires first.
  TLAUNCH_DECL bool finished() const;
};

// Registers call `h.call_id` of `c` as running (a cancel frame emits its signal on
// `inst`'s strand) and arms its deadline (h.aux milliseconds, when not 0).
TLAUNCH_DECL served_run start_served_run(instance& inst, connection& c,
                                         const wire::frame_header& h, const served_call& call);

// The executor a served coroutine method runs on: the instance's strand, and, with
// --trace, one that makes the call's span (or, when it is not in a trace, the mark that a
// served call runs) the current one (rpc::current_trace) around every step of the
// coroutine, so the calls it makes belong to its trace, or to none.
TLAUNCH_DECL asio::any_io_executor executor_for(const strand_type& s, const served_run& run);

}  // namespace tlaunch::rpc

// The definitions: inline in every translation unit, or, with TLAUNCH_SEPARATE_COMPILATION,
// compiled once where tlaunch/impl/src.hpp is included.
#if TLAUNCH_HEADER_DEFINITIONS

#include <asio/bind_cancellation_slot.hpp>
#include <asio/co_spawn.hpp>

namespace tlaunch::rpc {

#if defined(TLAUNCH_BUILDING_LIBRARY)
template class detail::batch_group_for<strand_type>;
template class detail::batch_group_for<asio::any_io_executor>;
#endif

namespace detail {

// The executor of a traced coroutine: its strand's (held as any_io_executor), with
// current_trace set to the span around each function it runs. Every resumption of the
// coroutine is one: the completion of what it awaited is dispatched to its executor.
class traced_executor {
 public:
  traced_executor(asio::any_io_executor inner, trace_context ctx) noexcept
      : inner_(std::move(inner)), ctx_(ctx) {}
  asio::execution_context& query(asio::execution::context_t) const noexcept {
    return asio::query(inner_, asio::execution::context_as<asio::execution_context&>);
  }
  traced_executor require(asio::execution::blocking_t::never_t p) const {
    return {asio::require(inner_, p), ctx_};
  }
  template <class P>
    requires requires(const asio::any_io_executor& e, const P& q) { asio::prefer(e, q); }
  traced_executor prefer(const P& p) const {
    return {asio::prefer(inner_, p), ctx_};
  }
  template <class F>
  void execute(F&& f) const {
    inner_.execute([ctx = ctx_, f = std::forward<F>(f)]() mutable {
      trace_scope scope(ctx);
      std::move(f)();
    });
  }
  friend bool operator==(const traced_executor& a, const traced_executor& b) noexcept {
    return a.inner_ == b.inner_ && a.ctx_ == b.ctx_;
  }
  friend bool operator!=(const traced_executor& a, const traced_executor& b) noexcept {
    return !(a == b);
  }

 private:
  asio::any_io_executor inner_;
  trace_context ctx_;
};


// spawn_coroutine's completion handler: one type for every coroutine it starts.
struct spawned_completion {
  std::unique_ptr<spawned> done;
  void operator()(std::exception_ptr e) { done->complete(std::move(e)); }
};

// The end of a node's run() body (spawn_run).
struct run_end final : spawned {
  run_end(runtime& r, instance& in) : rt(&r), i(&in) {}
  void complete(std::exception_ptr e) override {
    i->run_active = false;
    if (rt->run_finished) rt->run_finished(*i, e);
  }
  runtime* rt;
  instance* i;
};

}  // namespace detail

TLAUNCH_DECL void spawn_coroutine(const asio::any_io_executor& ex, asio::awaitable<void> body,
                                  asio::cancellation_slot cancel, std::unique_ptr<spawned> done) {
  asio::co_spawn(ex, std::move(body),
                 asio::bind_cancellation_slot(cancel, detail::spawned_completion{std::move(done)}));
}

TLAUNCH_DECL void spawn_run(runtime& rt, instance& i, asio::awaitable<void> body) {
  i.run_active = true;
  // With --trace, run() runs under its instance's mark, as a served coroutine runs under its
  // call's: the traces its calls start name it, and a step of it that another coroutine's
  // step resumes at once on the strand does not take that one's trace.
  asio::any_io_executor ex = any_executor_of(i.strand);
  if (rt.traces()) [[unlikely]]
    ex = detail::traced_executor(std::move(ex), {0, 0, i.flat_id, false});
  // Started on the node's strand, where stop_instances emits run_cancel: co_spawn reads the
  // slot's state as it starts the coroutine, and a stop emitted from another thread at that
  // moment would throw operation_aborted out of co_spawn into this caller. A program already
  // stopping when the run starts cancels it at once (the stop's own emit found no run).
  asio::post(i.strand, [&rt, &i, ex = std::move(ex), body = std::move(body)]() mutable {
    spawn_coroutine(ex, std::move(body), i.run_cancel.slot(),
                    std::make_unique<detail::run_end>(rt, i));
    if (rt.stop_requested()) i.run_cancel.emit(asio::cancellation_type::terminal);
  });
}

TLAUNCH_DECL asio::any_io_executor any_executor_of(const strand_type& s) {
  return s;
}

TLAUNCH_DECL asio::any_io_executor any_executor_of(asio::io_context& io) {
  return io.get_executor();
}

TLAUNCH_DECL bool call_op::fail(std::exception_ptr e) {
  if (!claim()) return false;
  stop_timer();
  deliver_error(std::move(e));
  return true;
}

TLAUNCH_DECL void call_op::fail_unavailable(const std::string& why) {
  fail(tlaunch::detail::make_error<unavailable>(target.site(), why));
}

TLAUNCH_DECL void call_op::fail_stopping(const std::string& why) {
  fail(tlaunch::detail::make_error<stopping>(target.site(), why));
}

TLAUNCH_DECL void call_op::stop_timer() {
  if (!timer) return;
  // Under the lock: the start may still be arming it on another thread.
  std::lock_guard lk(timer_mu);
  timer->cancel();
}

TLAUNCH_DECL void call_op::abort_local(std::exception_ptr e) {
  if (kind == method_kind::batched) {
    asio::post(local->strand, [self = shared_from_this(), e = std::move(e)]() mutable {
      self->signal.emit(asio::cancellation_type::terminal);
      self->fail(std::move(e));
    });
    return;
  }
  if (!fail(std::move(e))) return;
  asio::post(local->strand,
             [self = shared_from_this()] { self->signal.emit(asio::cancellation_type::terminal); });
}

namespace detail {

// A local call ends early with Error (tlaunch::timeout, tlaunch::cancelled), if it is
// still there.
template <class Error>
void abort_local_with(const std::weak_ptr<call_op>& weak) {
  if (auto r = weak.lock()) r->abort_local(tlaunch::detail::make_error<Error>(r->target.site()));
}

// A remote call leaves its connection's table and fails with Error, unless its reply came.
template <class Error>
void abandon_remote_with(const std::weak_ptr<connection>& weak, std::uint64_t id) {
  if (auto cn = weak.lock())
    if (auto pc = cn->abandon_call(id)) {
      auto* o = static_cast<call_op*>(pc.get());
      o->fail(tlaunch::detail::make_error<Error>(o->target.site()));
    }
}

// The op as a call waiting for a restart (park_call).
struct parked_op final : parked_call_base {
  explicit parked_op(std::shared_ptr<call_op> o) : parked_call_base(o->target), op(std::move(o)) {}
  void fail(std::exception_ptr e) override { op->fail(std::move(e)); }
  void resume(std::chrono::milliseconds timeout_left) override {
    op->timeout = timeout_left;
    start_call_op(std::move(op));
  }
  std::shared_ptr<call_op> op;
};

}  // namespace detail

TLAUNCH_DECL void start_call_op(std::shared_ptr<call_op> op) {
  call_op& c = *op;
  if (instance* inst = c.direct ? c.direct : c.rt.local(c.flat)) {
    // Same process: straight onto the target's strand, no serialization.
    asio::cancellation_slot slot = c.caller_slot();
    // On the process's only io thread, a plain method without a deadline runs at once
    // when its strand is idle (it cannot be interrupted, and nothing else could run
    // meanwhile), so there is nothing to race.
    bool at_once =
        c.kind == method_kind::plain && c.timeout.count() == 0 && c.rt.on_only_io_thread();
    if (at_once || (c.timeout.count() == 0 && !slot.is_connected())) {
      c.run_local(*inst, {}, at_once);
      return;
    }
    // A deadline or a cancellation slot: the first of reply, timer and cancellation
    // completes the call; a coroutine method is also cancelled.
    c.local = inst;
    if (c.timeout.count() > 0) {
      c.timer = std::make_shared<asio::steady_timer>(any_executor_of(c.rt.io), c.timeout);
      c.timer->async_wait([weak = std::weak_ptr<call_op>(op), t = c.timer](std::error_code ec) {
        if (!ec) detail::abort_local_with<tlaunch::timeout>(weak);
      });
    }
    c.run_local(*inst, c.signal.slot(), false);
    if (slot.is_connected())
      slot.assign([weak = std::weak_ptr<call_op>(op)](asio::cancellation_type) {
        detail::abort_local_with<tlaunch::cancelled>(weak);
      });
    return;
  }

  std::string why;
  std::shared_ptr<connection> held;
  connection* conn = c.rt.connection_for(c.flat, why, held);
  if (!conn && c.rt.removed(c.flat)) {
    c.fail(tlaunch::detail::make_error<removed>(c.target.site(), why));
    return;
  }
  if (!conn && c.rt.restarting(c.flat)) {
    park_call(c.rt, c.flat, c.timeout, std::make_shared<detail::parked_op>(std::move(op)), why);
    return;
  }
  if (!conn) {
    c.fail(tlaunch::detail::make_error<unavailable>(c.target.site(), why));
    return;
  }
  const wire::frame_header h{.type = wire::kind::call,
                             .target = c.flat,
                             .aux = static_cast<std::uint32_t>(c.timeout.count()),
                             .method = c.method};
  asio::cancellation_slot slot = c.caller_slot();
  if (c.timeout.count() > 0)
    c.timer = std::make_shared<asio::steady_timer>(any_executor_of(c.rt.io), c.timeout);
  const std::uint64_t id = c.send(*conn, h);
  if (id == 0) return;  // already failed
  if (c.timer) {
    // Under the lock: the reply may already be stopping the timer on the reader's thread.
    std::lock_guard lk(c.timer_mu);
    c.timer->async_wait([weak = conn->weak_from_this(), id, t = c.timer](std::error_code ec) {
      if (!ec) detail::abandon_remote_with<tlaunch::timeout>(weak, id);
    });
  }
  if (slot.is_connected())
    slot.assign([weak = conn->weak_from_this(), id](asio::cancellation_type) {
      detail::abandon_remote_with<tlaunch::cancelled>(weak, id);
    });
}

TLAUNCH_DECL void arm_park_deadline(asio::io_context& io,
                                                   std::chrono::milliseconds timeout,
                                                   std::shared_ptr<parked_call_base> p) {
  // Never cancelled (the resume may run on another thread); keeps p until it fires.
  auto timer = std::make_shared<asio::steady_timer>(io, timeout);
  timer->async_wait([p = std::move(p), timer](std::error_code) {
    if (!p->done.exchange(true)) p->fail(tlaunch::detail::make_error<tlaunch::timeout>(p->target.site()));
  });
}

TLAUNCH_DECL void park_call(rpc::runtime& rt, std::uint32_t flat,
                                           std::chrono::milliseconds timeout,
                                           std::shared_ptr<parked_call_base> p,
                                           const std::string& why) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool parked_now = rt.park_call(flat, [timeout, deadline, p](bool back) {
    if (p->done.exchange(true)) return;
    if (!back) {
      p->fail(tlaunch::detail::make_error<unavailable>(
          p->target.site(), "the process stopped while the instance was being restarted"));
      return;
    }
    std::chrono::milliseconds left{0};
    if (timeout.count() > 0) {
      left = std::chrono::ceil<std::chrono::milliseconds>(deadline -
                                                          std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        p->fail(tlaunch::detail::make_error<tlaunch::timeout>(p->target.site()));
        return;
      }
    }
    p->resume(left);
  });
  if (!parked_now) {  // back already, or stopping: no second wait
    if (!p->done.exchange(true))
      p->fail(tlaunch::detail::make_error<unavailable>(p->target.site(), why));
    return;
  }
  if (timeout.count() > 0) arm_park_deadline(rt.io, timeout, std::move(p));
}

TLAUNCH_DECL bool served_run::finished() const {
  conn->unregister_running(call.id);
  if (!deadline) return false;
  deadline->cancel();
  return deadline->expiry() <= asio::steady_timer::clock_type::now();
}

TLAUNCH_DECL served_run start_served_run(instance& inst, connection& c,
                                         const wire::frame_header& h, const served_call& call) {
  // A traced call is served under its span (runtime::on_call).
  served_run run{c.shared_from_this(), call, std::make_shared<asio::cancellation_signal>(),
                 nullptr, current_trace};
  run.conn->register_running(h.call_id, [sig = run.sig, strand = inst.strand] {
    post_batched(strand, [sig] { sig->emit(asio::cancellation_type::terminal); });
  });
  if (h.aux > 0) {
    run.deadline =
        std::make_shared<asio::steady_timer>(inst.strand, std::chrono::milliseconds(h.aux));
    run.deadline->async_wait([sig = run.sig, deadline = run.deadline](std::error_code ec) {
      if (!ec) sig->emit(asio::cancellation_type::terminal);
    });
  }
  return run;
}


TLAUNCH_DECL asio::any_io_executor executor_for(const strand_type& s, const served_run& run) {
  if (!run.trace.served) [[likely]]  // without --trace
    return any_executor_of(s);
  return detail::traced_executor(any_executor_of(s), run.trace);
}

}  // namespace tlaunch::rpc

#endif
