// Frames on the wire: a fixed 32-byte little-endian header, then the payload.
// This layer knows nothing of sockets; docs/PROTOCOL.md is its specification.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace tlaunch::wire {

inline constexpr std::uint16_t protocol_version = 1;
inline constexpr std::size_t header_size = 32;
inline constexpr std::uint32_t default_max_frame = 256u << 20;  // payload bytes

enum class kind : std::uint8_t {
  hello = 1,        // connector -> acceptor, then acceptor -> connector
  auth = 2,         // connector -> acceptor: proof of the launch secret
  refuse = 3,       // either side, then close: payload is a reason string
  call = 4,         // target = instance, method = method id, payload = args
  reply = 5,        // call_id = the call's id, payload = result
  error_reply = 6,  // call_id = the call's id, payload = error code + message
  cancel = 7,       // call_id = a call the caller no longer waits for
  ping = 8,         // heartbeat (--heartbeat): empty, sent every interval once ready
  // Either side, once ready: the sender's process is stopping because the program is
  // (empty). Calls that then fail because this connection closes fail as tlaunch::stopping.
  stopping = 9,
  // Either side, once ready: uint64 the membership epoch (a resize's directory) this
  // process now calls by; no call it starts later goes to a replica removed before it.
  fence = 10,
  // Control frames between a node process and its coordinator.
  reg = 16,           // node -> coordinator: flat instance id, listen address, pid
  directory = 17,     // coordinator -> node: every instance's address by flat id; start
  stop = 18,          // coordinator -> node: stop now (uint8: 1 the program stops, 0 only this process)
  node_done = 19,     // node -> coordinator: run() returned (empty)
  node_failed = 20,   // node -> coordinator: run() threw (message, fault)
  stop_request = 21,  // node -> coordinator: ctx.stop_program() (empty)
  metrics_request = 22,  // coordinator -> node: send a metrics sample (empty)
  metrics = 23,          // node -> coordinator: its process's sample (rpc::metrics_sample)
  clock_probe = 24,      // coordinator -> node (--trace): int64 the coordinator's clock
  clock_reply = 25,      // node -> coordinator: the probe's int64, then the node's clock
  trace_spans = 26,      // node -> coordinator (--trace): its spans (rpc::trace_batch)
  resize_request = 27,   // node -> coordinator: uint64 request id, node name, uint32 count
  resize_reply = 28,     // coordinator -> node: uint64 request id, error ("" when done)
  membership_ack = 29,   // node -> coordinator: uint64 the directory's epoch, applied
};

constexpr bool is_known_kind(std::uint8_t k) {
  return (k >= 1 && k <= 10) || (k >= 16 && k <= 29);
}

// Header flags. On a call: the payload ends with a 16-byte trace context (rpc/trace.hpp).
inline constexpr std::uint8_t flag_traced = 1;

// Error codes carried by error_reply.
enum class error_code : std::uint8_t {
  remote_exception = 1,  // the method threw
  no_such_method = 2,
  no_such_node = 3,
  bad_arguments = 4,      // payload did not deserialize
  stopping = 5,           // reserved: the node is stopping (not sent)
  deadline_exceeded = 6,  // the caller's deadline passed while the method ran
  removed = 7,            // a resize removed the target instance
};

struct frame_header {
  std::uint32_t size = 0;  // payload bytes after the header
  kind type = kind::call;
  std::uint8_t flags = 0;
  std::uint16_t reserved = 0;
  std::uint32_t target = 0;  // instance id (calls)
  std::uint32_t aux = 0;     // deadline in ms for calls (0 = none), else 0
  std::uint64_t call_id = 0;
  std::uint64_t method = 0;
  // Not on the wire: set by the reader when the payload sits in a buffer of its
  // own that views may keep (large tlaunch::bytes); valid while the frame is handled.
  const std::shared_ptr<const void>* payload_owner = nullptr;
};

namespace detail {
// Little-endian fields: a plain load or store where the machine is little-endian.
template <class T>
inline void put_le(unsigned char* p, T v) {
  if constexpr (std::endian::native != std::endian::little)
    for (std::size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
  else
    std::memcpy(p, &v, sizeof v);
}
template <class T>
inline T get_le(const unsigned char* p) {
  T v = 0;
  if constexpr (std::endian::native != std::endian::little)
    for (std::size_t i = sizeof(T); i-- > 0;) v = static_cast<T>((v << 8) | p[i]);
  else
    std::memcpy(&v, p, sizeof v);
  return v;
}
inline void put16(unsigned char* p, std::uint16_t v) { put_le(p, v); }
inline void put32(unsigned char* p, std::uint32_t v) { put_le(p, v); }
inline void put64(unsigned char* p, std::uint64_t v) { put_le(p, v); }
inline std::uint16_t get16(const unsigned char* p) { return get_le<std::uint16_t>(p); }
inline std::uint32_t get32(const unsigned char* p) { return get_le<std::uint32_t>(p); }
inline std::uint64_t get64(const unsigned char* p) { return get_le<std::uint64_t>(p); }
}  // namespace detail

inline void encode_header(const frame_header& h, void* out) {
  auto* p = static_cast<unsigned char*>(out);
  detail::put32(p, h.size);
  p[4] = static_cast<unsigned char>(h.type);
  p[5] = h.flags;
  detail::put16(p + 6, h.reserved);
  detail::put32(p + 8, h.target);
  detail::put32(p + 12, h.aux);
  detail::put64(p + 16, h.call_id);
  detail::put64(p + 24, h.method);
}

// Sets the call id of an encoded header in place.
inline void store_call_id(void* header, std::uint64_t call_id) {
  detail::put64(static_cast<unsigned char*>(header) + 16, call_id);
}

// Why a header was rejected; empty when it is fine.
struct header_check {
  frame_header header;
  std::string problem;
};

// The fields of a header, unchecked.
inline frame_header load_header(const void* in) {
  auto* p = static_cast<const unsigned char*>(in);
  frame_header h;
  h.size = detail::get32(p);
  h.type = static_cast<kind>(p[4]);
  h.flags = p[5];
  h.reserved = detail::get16(p + 6);
  h.target = detail::get32(p + 8);
  h.aux = detail::get32(p + 12);
  h.call_id = detail::get64(p + 16);
  h.method = detail::get64(p + 24);
  return h;
}

// Why a loaded header is rejected; empty when it is fine. The check itself is
// cheap (header_ok); the string is built only for a bad header.
inline bool header_ok(const frame_header& h, std::uint32_t max_frame) {
  return is_known_kind(static_cast<std::uint8_t>(h.type)) && h.size <= max_frame && h.reserved == 0;
}
inline std::string header_problem(const frame_header& h, std::uint32_t max_frame) {
  auto k = static_cast<unsigned>(h.type);
  if (!is_known_kind(static_cast<std::uint8_t>(k))) return "unknown frame kind " + std::to_string(k);
  if (h.size > max_frame)
    return "frame of " + std::to_string(h.size) + " bytes exceeds the maximum of " +
           std::to_string(max_frame);
  if (h.reserved != 0) return "reserved header bits set";
  return {};
}

inline header_check decode_header(const void* in, std::uint32_t max_frame) {
  header_check r{load_header(in), {}};
  if (!header_ok(r.header, max_frame)) r.problem = header_problem(r.header, max_frame);
  return r;
}

}  // namespace tlaunch::wire
