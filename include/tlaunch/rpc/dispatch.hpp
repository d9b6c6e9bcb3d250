// Server side of a call: a static table per service type, one entry per
// exposed method, each deserializing, invoking on the strand, replying. The serving
// code is per result and argument types (rpc/method_ops.hpp); the entry carries the method.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <tuple>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include "../wire/codec.hpp"
#include "read_batch.hpp"
#include "batched_methods.hpp"
#include "call_paths.hpp"
#include "instance.hpp"
#include "../service.hpp"
#include "method_ops.hpp"

namespace tlaunch::rpc {

namespace detail {

// A coroutine method failed; past the caller's deadline that is a timeout.
inline void reply_failure(connection& c, const served_call& call, std::exception_ptr e,
                          bool deadline_passed) {
  if (deadline_passed)
    reply_error(c, call, wire::error_code::deadline_exceeded,
                "deadline exceeded: " + exception_message(e));
  else
    reply_error(c, call, wire::error_code::remote_exception, exception_message(e));
}

// The method's result, counted as the call's end; on the instance's strand.
template <class R>
void send_result(connection& c, const served_call& call, const R* r) {
  const wire::frame_header h{.type = wire::kind::reply, .call_id = call.id};
  if constexpr (std::is_void_v<R>) {
    auto f = wire::make_small_frame();
    deferred_writes::count_served_end(call, call_outcome::reply, f.span().size());
    rpc::send_reply(c, f.span(), h);
  } else if constexpr (wire::small_frame_values<R>) {
    auto f = wire::make_small_frame(*r);
    deferred_writes::count_served_end(call, call_outcome::reply, f.span().size());
    rpc::send_reply(c, f.span(), h);
  } else {
    wire::frame_buffer f;
    wire::serialize_into(f, *r);
    f.seal(h);
    deferred_writes::count_served_end(call, call_outcome::reply, f.bytes().size());
    rpc::send(c, std::move(f));
  }
}

// Reads a call's arguments into args; when they do not deserialize, replies
// bad_arguments naming the method (the call's end, a bad_call) and returns false.
template <class Args>
bool decode_arguments(connection& c, const wire::frame_header& h, std::span<const char> payload,
                      Args& args, std::string_view method, const served_call& call) {
  try {
    std::apply(
        [&](auto&... a) {
          wire::deserialize_from(wire::received_payload{payload, h.payload_owner}, a...);
        },
        args);
    return true;
  } catch (const std::exception& e) {
    reply_error(c, call, wire::error_code::bad_arguments,
                std::string("arguments of ") + std::string(method) +
                    " did not deserialize: " + e.what());
    return false;
  }
}

// The end of a served coroutine method (spawn_coroutine): the reply, or the error.
template <class R>
struct served_end final : spawned {
  explicit served_end(served_run r) : run(std::move(r)) {}
  void complete(std::exception_ptr e) override {
    bool expired = run.finished();
    if (e)
      reply_failure(*run.conn, run.call, e, expired);
    else if constexpr (std::is_void_v<R>)
      send_result<void>(*run.conn, run.call, nullptr);
    else
      send_result<R>(*run.conn, run.call, &result);
  }
  served_run run;
  result_holder<R> result{};
};

// A remote call of a batched method, waiting in its batch: the reply goes out on
// the connection it came from.
template <class R>
struct remote_batch_completion final : batch_completion<R> {
  remote_batch_completion(std::shared_ptr<connection> c, const served_call& sc)
      : conn(std::move(c)), call(sc) {}
  void succeed(R&& r) override {
    rpc::unregister_running(*conn, call.id);
    send_result<R>(*conn, call, &r);
  }
  void fail(wire::error_code code, const std::string& message) override {
    rpc::unregister_running(*conn, call.id);
    reply_error(*conn, call, code, message);
  }
  std::shared_ptr<connection> conn;
  served_call call;
};

}  // namespace detail

// Serves one call frame of the method whose ops are `ops` (of type Ops, a method_ops):
// written once per result and argument types, whatever the method.
template <class Ops>
void serve(const void* ops, instance& inst, connection& c, const wire::frame_header& h,
           std::span<const char> payload, const served_call& call) {
  using R = typename Ops::result;
  using Args = typename Ops::args;
  const Ops& m = *static_cast<const Ops*>(ops);
  Args args;
  if (!detail::decode_arguments(c, h, payload, args, m.name, call)) return;
  const std::uint64_t id = h.call_id;
  if constexpr (Ops::kind == method_kind::plain) {
    // A raw pointer: instances outlive every handler (the runtime joins its
    // threads before it destroys them).
    auto run = [invoke = m.invoke, obj = inst.object.get(), call,
                args = std::move(args)](connection& conn) mutable {
      try {
        result_holder<R> r{};
        invoke(obj, args, r);
        if constexpr (std::is_void_v<R>)
          detail::send_result<void>(conn, call, nullptr);
        else
          detail::send_result<R>(conn, call, &r);
      } catch (...) {
        reply_error(conn, call, wire::error_code::remote_exception,
                    detail::exception_message(std::current_exception()));
      }
    };
    // Joining a batch that keeps the connection alive, the job needs no
    // reference of its own: two atomic operations fewer per call.
    if (batch_collector::keeps(&c))
      post_batched(inst.strand, [run = std::move(run), conn = &c]() mutable { run(*conn); });
    else
      post_batched(inst.strand,
                   [run = std::move(run), conn = rpc::shared_of(c)]() mutable { run(*conn); });
  } else if constexpr (Ops::kind == method_kind::coroutine) {
    // A coroutine method can be cancelled: by the caller's cancel frame, or when
    // the caller's deadline (h.aux, in ms) passes (call_paths.hpp, served_run).
    auto end = std::make_unique<detail::served_end<R>>(start_served_run(inst, c, h, call));
    auto body = run_method_coroutine<R, Args>(inst.object, m.invoke_coroutine, std::move(args),
                                              &end->result);
    // Started in order with the plain calls of the same read, on the strand.
    post_batched(inst.strand,
                 [strand = inst.strand, body = std::move(body), end = std::move(end)]() mutable {
                   auto slot = end->run.sig->slot();
                   auto ex = executor_for(strand, end->run);
                   spawn_coroutine(ex, std::move(body), slot, std::move(end));
                 });
  } else {
    // A batched method: the arguments join its queue on the strand. A cancel frame takes
    // the call out of the queue; a deadline (h.aux, in ms) that passes before its batch
    // runs leaves it out of the batch.
    const std::uint64_t key = next_batch_key();
    auto deadline = std::chrono::steady_clock::time_point::max();
    if (h.aux > 0) deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(h.aux);
    std::shared_ptr<connection> conn = rpc::shared_of(c);
    instance* target = &inst;
    rpc::register_running(*conn, id, [target, key, remove = m.batch_remove] {
      post_batched(target->strand, [target, key, remove] { remove(*target, key); });
    });
    post_batched(inst.strand, [target, args = std::move(args), conn = std::move(conn), call, key,
                               deadline, add = m.batch_add]() mutable {
      add(*target, std::move(args),
          std::make_unique<detail::remote_batch_completion<R>>(std::move(conn), call), key,
          deadline);
    });
  }
}

// The table of a service: one entry per listed method, served by the function its ops'
// type selects (shared by every method of the same signature).
template <auto... Ms>
struct served_entries {
  static constexpr dispatch_entry entries[sizeof...(Ms) + 1] = {
      {ops_of<tlaunch::detail::entry_method_v<Ms>>.id,
       &serve<std::remove_cvref_t<decltype(ops_of<tlaunch::detail::entry_method_v<Ms>>)>>,
       ops_of<tlaunch::detail::entry_method_v<Ms>>.name,
       &ops_of<tlaunch::detail::entry_method_v<Ms>>}...,
      {0, nullptr, {}, nullptr}};
};

template <class S, class List = typename tlaunch::detail::rpc_list<S>::type>
struct dispatch_table;
template <class S, auto... Ms>
struct dispatch_table<S, methods<Ms...>> {
  // A service that breaks a rule is reported once (check_service), and nothing of its
  // serving code is instantiated after that.
  static constexpr bool ok = tlaunch::detail::check_service<S>();
  static std::span<const dispatch_entry> get() {
    if constexpr (ok)
      return {served_entries<Ms...>::entries, sizeof...(Ms)};
    else
      return {};
  }
};

}  // namespace tlaunch::rpc
