// The cold paths of a call and of a served call that depend on neither the method nor the
// completion handler: deadlines, cancellation, a local call racing its timeout, a call
// waiting for a restart. call.hpp and dispatch.hpp are templates on the method and handler;
// what they hand to an asio timer, slot or strand here is not, so asio's completion
// machinery for it is instantiated once (with TLAUNCH_SEPARATE_COMPILATION: compiled once,
// in the library) instead of once per method in every translation unit.
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
#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include "batch.hpp"
#include "call_table.hpp"
#include "connection.hpp"
#include "errors.hpp"
#include "instance.hpp"
#include "runtime.hpp"

// Declared here, defined below: inline, or compiled once by impl/src.hpp.
#if defined(TLAUNCH_SEPARATE_COMPILATION)
#define TLAUNCH_RPC_CALL_PATHS_DECL
#else
#define TLAUNCH_RPC_CALL_PATHS_DECL inline
#endif

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
TLAUNCH_RPC_CALL_PATHS_DECL asio::any_io_executor any_executor_of(const strand_type& s);
// The same for the io_context's own executor (a call's fallback for completing its handler).
TLAUNCH_RPC_CALL_PATHS_DECL asio::any_io_executor any_executor_of(asio::io_context& io);

// A remote call waiting in a connection's call table, as its deadline and its cancellation
// see it (call.hpp's remote_call is the rest).
class remote_call_base : public pending_call {
 public:
  explicit remote_call_base(call_target t) : target_(t) {}
  // Completes the call with `e` (it has left the call table).
  virtual void fail(std::exception_ptr e) = 0;
  const call_target& target() const { return target_; }

  std::shared_ptr<asio::steady_timer> timer;
  std::mutex timer_mu;  // orders the timer's async_wait and cancel across threads

 protected:
  call_target target_;
};

// When `timer` expires, takes call `id` from `conn`'s table, if its reply has not come, and
// fails it with tlaunch::timeout. Called with the call's timer_mu held.
TLAUNCH_RPC_CALL_PATHS_DECL void arm_remote_deadline(connection& conn, std::uint64_t id,
                                                     const std::shared_ptr<asio::steady_timer>& timer);

// When `slot` is emitted, takes call `id` from `conn`'s table and fails it with
// tlaunch::cancelled.
template <class Slot>
void cancel_remote_on(Slot& slot, connection& conn, std::uint64_t id) {
  slot.assign([weak = conn.weak_from_this(), id](asio::cancellation_type) {
    if (auto c = weak.lock())
      if (auto pc = c->abandon_call(id)) {
        auto* pt = static_cast<remote_call_base*>(pc.get());
        pt->fail(tlaunch::detail::make_error<tlaunch::cancelled>(pt->target().site()));
      }
  });
}
TLAUNCH_RPC_CALL_PATHS_DECL void cancel_remote_on(asio::cancellation_slot slot, connection& conn,
                                                  std::uint64_t id);

// A call to an instance of this process that a timeout or a cancellation may end first
// (call.hpp's local_race holds the handler).
class local_race_base : public std::enable_shared_from_this<local_race_base> {
 public:
  local_race_base(call_target t, strand_type s) : target(t), strand(std::move(s)) {}
  virtual ~local_race_base() = default;
  // Completes the call with `e` unless it has completed; true if this call did.
  virtual bool fail(std::exception_ptr e) = 0;
  // Completes with e and cancels a coroutine method still running. A call
  // waiting in a batch leaves it first, on the strand: once the caller sees the
  // error, its call no longer counts toward any batch.
  TLAUNCH_RPC_CALL_PATHS_DECL void abort(std::exception_ptr e);

  call_target target;
  strand_type strand;
  asio::cancellation_signal signal;  // emitted on the strand only
  std::shared_ptr<asio::steady_timer> timer;
  bool leaves_batch = false;  // the call is of a batched method
};

// Aborts `race` with tlaunch::timeout when its timer expires.
TLAUNCH_RPC_CALL_PATHS_DECL void arm_local_deadline(const std::shared_ptr<local_race_base>& race);

// Aborts `race` with tlaunch::cancelled when `slot` is emitted.
template <class Slot>
void cancel_local_on(Slot& slot, const std::shared_ptr<local_race_base>& race) {
  slot.assign([weak = std::weak_ptr<local_race_base>(race)](asio::cancellation_type) {
    if (auto r = weak.lock()) r->abort(tlaunch::detail::make_error<tlaunch::cancelled>(r->target.site()));
  });
}
TLAUNCH_RPC_CALL_PATHS_DECL void cancel_local_on(asio::cancellation_slot slot,
                                                 const std::shared_ptr<local_race_base>& race);

// A call waiting for its target to come back from a restart (call.hpp's parked_call).
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
TLAUNCH_RPC_CALL_PATHS_DECL void arm_park_deadline(asio::io_context& io,
                                                   std::chrono::milliseconds timeout,
                                                   std::shared_ptr<parked_call_base> p);

// A call to instance `flat`, which is being restarted (rpc::runtime::park_call), waits for
// its new address, then resumes with what is left of its deadline (`timeout`, 0: none);
// the deadline ends the wait with tlaunch::timeout, the process's stop with unavailable,
// and when the instance is back already or the process stops, it fails with unavailable
// and `why`. Its cancellation slot is not watched while it waits.
TLAUNCH_RPC_CALL_PATHS_DECL void park_call(rpc::runtime& rt, std::uint32_t flat,
                                           std::chrono::milliseconds timeout,
                                           std::shared_ptr<parked_call_base> p,
                                           const std::string& why);

// A coroutine method served to a remote caller: its cancel signal (fired by a cancel frame
// or by the caller's deadline) and, when the call has a deadline, its timer.
struct served_run {
  std::shared_ptr<connection> conn;
  std::uint64_t id;
  std::shared_ptr<asio::cancellation_signal> sig;
  std::shared_ptr<asio::steady_timer> deadline;

  // The run ended: no longer cancellable. Returns whether the caller's deadline has
  // passed: a method that fails then (most often because the deadline cancelled it)
  // replies deadline_exceeded, which the caller reports as tlaunch::timeout, the same as
  // when its own timer fires first.
  TLAUNCH_RPC_CALL_PATHS_DECL bool finished() const;
};

// Registers call `h.call_id` of `c` as running (a cancel frame emits its signal on
// `inst`'s strand) and arms its deadline (h.aux milliseconds, when not 0).
TLAUNCH_RPC_CALL_PATHS_DECL served_run start_served_run(instance& inst, connection& c,
                                                        const wire::frame_header& h);

}  // namespace tlaunch::rpc

// The definitions: inline in every translation unit, or, with TLAUNCH_SEPARATE_COMPILATION,
// compiled once where tlaunch/impl/src.hpp is included.
#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LIBRARY)

namespace tlaunch::rpc {

TLAUNCH_RPC_CALL_PATHS_DECL asio::any_io_executor any_executor_of(const strand_type& s) {
  return s;
}

TLAUNCH_RPC_CALL_PATHS_DECL asio::any_io_executor any_executor_of(asio::io_context& io) {
  return io.get_executor();
}

TLAUNCH_RPC_CALL_PATHS_DECL void arm_remote_deadline(connection& conn, std::uint64_t id,
                                                     const std::shared_ptr<asio::steady_timer>& timer) {
  timer->async_wait([weak = conn.weak_from_this(), id, timer](std::error_code ec) {
    if (ec) return;
    if (auto c = weak.lock())
      if (auto pc = c->abandon_call(id)) {
        auto* pt = static_cast<remote_call_base*>(pc.get());
        pt->fail(tlaunch::detail::make_error<tlaunch::timeout>(pt->target().site()));
      }
  });
}

TLAUNCH_RPC_CALL_PATHS_DECL void cancel_remote_on(asio::cancellation_slot slot, connection& conn,
                                                  std::uint64_t id) {
  cancel_remote_on<asio::cancellation_slot>(slot, conn, id);
}

TLAUNCH_RPC_CALL_PATHS_DECL void local_race_base::abort(std::exception_ptr e) {
  if (leaves_batch) {
    asio::post(strand, [self = shared_from_this(), e = std::move(e)]() mutable {
      self->signal.emit(asio::cancellation_type::terminal);
      self->fail(std::move(e));
    });
    return;
  }
  if (!fail(std::move(e))) return;
  asio::post(strand,
             [self = shared_from_this()] { self->signal.emit(asio::cancellation_type::terminal); });
}

TLAUNCH_RPC_CALL_PATHS_DECL void arm_local_deadline(const std::shared_ptr<local_race_base>& race) {
  race->timer->async_wait(
      [weak = std::weak_ptr<local_race_base>(race), t = race->timer](std::error_code ec) {
        if (ec) return;
        if (auto r = weak.lock()) r->abort(tlaunch::detail::make_error<tlaunch::timeout>(r->target.site()));
      });
}

TLAUNCH_RPC_CALL_PATHS_DECL void cancel_local_on(asio::cancellation_slot slot,
                                                 const std::shared_ptr<local_race_base>& race) {
  cancel_local_on<asio::cancellation_slot>(slot, race);
}

TLAUNCH_RPC_CALL_PATHS_DECL void arm_park_deadline(asio::io_context& io,
                                                   std::chrono::milliseconds timeout,
                                                   std::shared_ptr<parked_call_base> p) {
  // Never cancelled (the resume may run on another thread); keeps p until it fires.
  auto timer = std::make_shared<asio::steady_timer>(io, timeout);
  timer->async_wait([p = std::move(p), timer](std::error_code) {
    if (!p->done.exchange(true)) p->fail(tlaunch::detail::make_error<tlaunch::timeout>(p->target.site()));
  });
}

TLAUNCH_RPC_CALL_PATHS_DECL void park_call(rpc::runtime& rt, std::uint32_t flat,
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

TLAUNCH_RPC_CALL_PATHS_DECL bool served_run::finished() const {
  conn->unregister_running(id);
  if (!deadline) return false;
  deadline->cancel();
  return deadline->expiry() <= asio::steady_timer::clock_type::now();
}

TLAUNCH_RPC_CALL_PATHS_DECL served_run start_served_run(instance& inst, connection& c,
                                                        const wire::frame_header& h) {
  served_run run{c.shared_from_this(), h.call_id, std::make_shared<asio::cancellation_signal>(),
                 nullptr};
  run.conn->register_running(run.id, [sig = run.sig, strand = inst.strand] {
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

}  // namespace tlaunch::rpc

#else
// impl/src.hpp checks that it came first (its definitions would be missing otherwise).
#define TLAUNCH_RPC_CALL_PATHS_DECLARED_ONLY
#endif
#undef TLAUNCH_RPC_CALL_PATHS_DECL
