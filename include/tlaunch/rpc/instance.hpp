// A node instance hosted by this process: the object, its strand, and the
// table that serves its exposed methods from call frames.
#pragma once

#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <asio/strand.hpp>
#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../wire/frame.hpp"
#include "connection_api.hpp"
#include "metrics.hpp"
#include "read_batch.hpp"

namespace tlaunch::rpc {

struct instance;
using strand_type = asio::strand<asio::io_context::executor_type>;

// Serves one call frame of the method whose ops (rpc/method_ops.hpp) it is given:
// deserializes the arguments on the reader's thread, runs the method on the instance's
// strand, sends the reply on the connection, counting its end into the call's counts.
using invoker = void (*)(const void* ops, instance&, connection&, const wire::frame_header&,
                         std::span<const char> payload, const served_call& call);

struct dispatch_entry {
  std::uint64_t id;
  invoker serve;
  std::string_view name;  // "Counter::add"
  const void* ops;        // the method's rpc::method_ops, as serve reads them
};

// The calls waiting for one batched method of an instance (rpc/batched_methods.hpp).
struct batch_queue_base {
  virtual ~batch_queue_base() = default;
};

// How a node type with state (tlaunch/state.hpp) writes and reads it (cereal's binary
// archive over the stream): made once per type, kept by rpc/snapshots.hpp's store.
struct state_ops {
  void (*save)(void* object, std::ostream& out);
  void (*load)(void* object, std::istream& in, std::uint32_t version);
  std::uint32_t version = 0;  // the type's state_version
  bool versioned = false;     // it declares one: it reads other builds' snapshots up to it
};

struct instance {
  instance(asio::io_context& io, std::string_view node, std::uint32_t rep, std::uint32_t reps,
           std::uint32_t flat)
      : node_name(node), replica(rep), replicas(reps), flat_id(flat), strand(asio::make_strand(io)) {}

  std::string_view node_name;
  std::uint32_t replica = 0, replicas = 1, flat_id = 0;
  strand_type strand;
  std::shared_ptr<void> object;  // the service, type-erased
  std::span<const dispatch_entry> methods;
  // Each method's counts as this process serves it (rpc/metrics.hpp), in the order of
  // `methods` (runtime::serve_methods sets both).
  std::vector<served_stats*> served;
  std::string_view type_name;
  // The node's tlaunch::context, owned here and typed by the public layer above.
  std::shared_ptr<void> run_context;
  // The node's run() body, if it has one.
  std::function<void(instance&)> start_run;
  asio::cancellation_signal run_cancel;  // used on the strand only
  std::atomic<bool> run_active{false};
  // The queues of its batched methods, by method id: made on first use, touched on
  // the strand only. Destroyed before the io_context (the runtime owns both).
  std::vector<std::pair<std::uint64_t, std::unique_ptr<batch_queue_base>>> batch_queues;
  // Its process's counts (rpc/metrics.hpp): its batched methods' batches go there.
  metrics_registry* metrics = nullptr;
  // Its state, when its type has one (null: none); set before it serves.
  const state_ops* state = nullptr;
  // Which start of this instance this process is (0 at launch, then 1, 2, ... for each
  // restart) and whether it loaded a snapshot (a restart's, or --resume's).
  std::uint32_t incarnation = 0;
  bool resumed = false;
  // A resize removed this instance and it served what it had (runtime::retire): calls
  // that still arrive are answered with tlaunch::removed.
  std::atomic<bool> retired{false};

  std::string id() const { return std::string(node_name) + "/" + std::to_string(replica); }
  const dispatch_entry* find(std::uint64_t method) const {
    for (const auto& e : methods)
      if (e.id == method) return &e;
    return nullptr;
  }
};

// Sends an error reply for a call.
TLAUNCH_DECL void reply_error(connection& c, std::uint64_t call_id, wire::error_code code,
                              const std::string& message);
// The same for a call served to a method, counted as its end (a remote_error, a timeout or
// a bad_call by the code).
TLAUNCH_DECL void reply_error(connection& c, const served_call& call, wire::error_code code,
                              const std::string& message);

}  // namespace tlaunch::rpc

// Compiled once in the library (tlaunch/impl/src/rpc.hpp) with TLAUNCH_SEPARATE_COMPILATION.
#if TLAUNCH_HEADER_DEFINITIONS
namespace tlaunch::rpc {

TLAUNCH_DECL void reply_error(connection& c, std::uint64_t call_id, wire::error_code code,
                              const std::string& message) {
  wire::frame_buffer f;
  wire::encode_error(f, code, message);
  f.seal({.type = wire::kind::error_reply, .call_id = call_id});
  rpc::send(c, std::move(f));
}

TLAUNCH_DECL void reply_error(connection& c, const served_call& call, wire::error_code code,
                              const std::string& message) {
  wire::frame_buffer f;
  wire::encode_error(f, code, message);
  f.seal({.type = wire::kind::error_reply, .call_id = call.id});
  deferred_writes::count_served_end(call,
                   code == wire::error_code::remote_exception    ? call_outcome::remote_error
                   : code == wire::error_code::deadline_exceeded ? call_outcome::timeout
                                                                 : call_outcome::bad_call,
                   f.bytes().size());
  rpc::send(c, std::move(f));
}

}  // namespace tlaunch::rpc
#endif
