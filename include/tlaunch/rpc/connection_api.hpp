// What a call and a served call need of a connection (rpc/connection.hpp), without its
// definition: the class's name, the owner's interface (connection_sink), and the few
// operations the typed call path uses, as functions compiled with the connection. A
// program's files include this; only the library's (or, header-only, the runtime's
// definitions) parse the connection itself, with its socket, TLS and buffers.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "../detail/config.hpp"
#include "../wire/codec.hpp"
#include "../wire/frame.hpp"
#include "call_table.hpp"

namespace tlaunch::rpc {

class connection;
struct connection_config;
// rpc/tls.hpp (--tls), included with the connection's definitions.
class tls_context;
class tls_channel;

// What a launch tells every connection of every process (--max-frame,
// --handshake-timeout, --max-unauthenticated, --heartbeat, --liveness, --tls): filled once
// from the launch's options (launch/plan.hpp) and made into a process's connection_config
// by make_connection_config (rpc/runtime.hpp), in a node process and in the launcher
// alike. connection_config says what each field does.
struct connection_settings {
  std::uint32_t max_frame = wire::default_max_frame;
  std::chrono::milliseconds handshake_timeout{5000};
  std::uint32_t max_unauthenticated = 256;
  std::chrono::milliseconds heartbeat{0};
  std::chrono::milliseconds liveness{1000};
  bool tls = false;
  // --trace: the fraction of calls made outside a trace that start one (rpc/trace.hpp);
  // below 0: this process records no spans.
  double trace_sample = -1;
};

// The owner of the connections (the runtime or the coordinator).
class connection_sink {
 public:
  virtual ~connection_sink() = default;
  // A call frame arrived (reader thread); payload is only valid during the call.
  // c is alive at least until the read's batch has run (batch_collector::keeps).
  virtual void on_call(connection& c, const wire::frame_header& h,
                       std::span<const char> payload) = 0;
  // A control frame (coordinator protocol) arrived.
  virtual void on_control(const std::shared_ptr<connection>& c, const wire::frame_header& h,
                          std::span<const char> payload) = 0;
  // The hello exchange completed; peer_listen is the address the peer serves on.
  virtual void on_ready(const std::shared_ptr<connection>&) {}
  virtual void on_closed(const std::shared_ptr<connection>& c, const std::string& reason) = 0;
  virtual void on_cancel(const std::shared_ptr<connection>&, std::uint64_t /*call_id*/) {}
  virtual void log(const std::string& message) = 0;
};

// The connection's members of the same names (rpc/connection.hpp says what each does).
TLAUNCH_DECL std::uint64_t start_call(connection& c, std::span<char> frame, wire::frame_header h,
                                      std::shared_ptr<pending_call> p);
TLAUNCH_DECL std::uint64_t start_call(connection& c, wire::frame_buffer&& f, wire::frame_header h,
                                      std::shared_ptr<pending_call> p);
TLAUNCH_DECL void start_call_batched(connection& c, std::span<char> frame, wire::frame_header h,
                                     std::shared_ptr<pending_call> p);
TLAUNCH_DECL void send(connection& c, wire::frame_buffer&& f);
TLAUNCH_DECL void send_reply(connection& c, std::span<char> frame, wire::frame_header h);
TLAUNCH_DECL void register_running(connection& c, std::uint64_t call_id,
                                   std::function<void()> cancel);
TLAUNCH_DECL void unregister_running(connection& c, std::uint64_t call_id);
// c.shared_from_this().
TLAUNCH_DECL std::shared_ptr<connection> shared_of(connection& c);

}  // namespace tlaunch::rpc

// Header-only, or in the library: the definitions, with the connection's.
#if TLAUNCH_HEADER_DEFINITIONS
#include "connection.hpp"
#endif
