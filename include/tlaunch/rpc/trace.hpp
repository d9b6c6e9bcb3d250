// Call traces (--trace): a process records a span for each call it makes and each call it
// serves that belongs to a sampled trace. A call starts a trace when it is made outside any
// traced call, with the probability given by --trace-sample; a call made while a traced
// call is served (by the coroutine that serves it) belongs to that call's trace, whatever
// the fraction. The trace travels in the call frame: a flag in the header and a 16-byte
// trailer after the arguments (docs/PROTOCOL.md); nothing is added to a call that is not
// traced. The spans wait in the process's recorder (bounded: the excess is counted and
// dropped) until the node process sends them to the launcher (wire::kind::trace_spans),
// which writes them as Chrome trace events (launch/observe/trace_file.hpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "metrics.hpp"

namespace tlaunch::rpc {

// The span a call is made in: its trace and its own id (0: none). On the wire, the trailer
// of a traced call frame: the trace id, then the caller's span id, little-endian.
struct trace_context {
  std::uint64_t trace_id = 0;
  std::uint64_t span_id = 0;
  // The instance whose served call this is (a served span), or ~0: none known.
  std::uint32_t instance = ~std::uint32_t{0};
  // Set while a served call runs, traced or not: a call it makes belongs to its caller's
  // sampling decision (a trace that was not sampled is not started again downstream).
  bool served = false;
  explicit operator bool() const { return trace_id != 0; }
  friend bool operator==(const trace_context&, const trace_context&) = default;
};
inline constexpr std::size_t trace_trailer_size = 16;

// The call being served on this thread, while its coroutine runs, with --trace (set by the
// executor a coroutine method runs on then: call_paths.hpp, executor_for).
inline thread_local trace_context current_trace{};

// Sets current_trace for a scope, and puts the previous one back.
class trace_scope {
 public:
  explicit trace_scope(const trace_context& c) : saved_(current_trace) { current_trace = c; }
  ~trace_scope() { current_trace = saved_; }
  trace_scope(const trace_scope&) = delete;
  trace_scope& operator=(const trace_scope&) = delete;

 private:
  trace_context saved_;
};

// Wall-clock nanoseconds since the epoch: the spans' timestamps (the launcher corrects each
// process's by the clock offset it measured when the process registered).
inline std::int64_t trace_wall_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A finished span, as sent to the launcher.
struct trace_span {
  enum kind_t : std::uint8_t { client = 0, server = 1 };
  std::uint64_t trace_id = 0, span_id = 0, parent_id = 0;  // parent 0: a root
  std::int64_t start_ns = 0;     // trace_wall_now() at its start
  std::int64_t duration_ns = 0;  // steady clock
  // client: the instance called, and the one calling (~0: the process's run(), or unknown);
  // server: the instance serving, and ~0.
  std::uint32_t instance = 0, from = ~std::uint32_t{0};
  std::string name;  // "Service::method"
  std::uint64_t bytes_out = 0, bytes_in = 0;  // on the wire, headers included
  std::uint8_t kind = client;
  std::uint8_t outcome = 0;  // call_outcome (server: reply or remote_error)

  template <class Archive>
  void serialize(Archive& a) {
    a(trace_id, span_id, parent_id, start_ns, duration_ns, instance, from, name, bytes_out,
      bytes_in, kind, outcome);
  }
};

// What a node process sends the launcher: its spans since the last batch, and how many it
// dropped because the recorder was full.
struct trace_batch {
  std::vector<trace_span> spans;
  std::uint64_t dropped = 0;
  template <class Archive>
  void serialize(Archive& a) {
    a(spans, dropped);
  }
};

// A call this process made, in a trace: kept with the call (pending_call::trace) until it
// ends.
struct client_span {
  class trace_recorder* recorder = nullptr;
  trace_context ctx;             // the call's own span
  std::uint64_t parent_id = 0;   // the span it was made in (0: a root)
  std::uint32_t from = ~std::uint32_t{0};
  std::uint32_t target = 0;
  std::string_view name;         // the method's name (static storage)
  std::int64_t start_wall = 0, start_steady = 0;
  std::uint64_t bytes_out = 0;
};

// A served call in a trace, from its frame to its reply (connection::served_spans_).
struct served_span {
  std::uint64_t call_id = 0;
  trace_context ctx;  // its own span, with the instance serving it
  std::uint64_t parent_id = 0;
  std::string_view name;
  std::int64_t start_wall = 0, start_steady = 0;
  std::uint64_t bytes_in = 0;
};

// A process's spans, waiting to be sent. Thread-safe; only traced calls touch it.
class trace_recorder {
 public:
  // fraction: the probability that a call made outside any trace starts one (0 to 1).
  explicit trace_recorder(double fraction, std::size_t capacity = 1u << 16)
      : capacity_(capacity) {
    if (fraction >= 1.0)
      threshold_ = ~std::uint64_t{0};
    else if (fraction > 0.0)
      threshold_ = static_cast<std::uint64_t>(fraction * 18446744073709551616.0);
  }

  // A call to instance `target`'s method made now from this thread, of `bytes` on the
  // wire: its span when it belongs to a trace (the current one, or a new one sampled at
  // the recorder's fraction); null when it is not traced.
  std::unique_ptr<client_span> begin_call(std::uint32_t target, std::string_view name) {
    const trace_context& cur = current_trace;
    std::uint64_t trace_id = cur.trace_id, parent = cur.span_id;
    if (!cur) {
      if (threshold_ == 0 || cur.served) return nullptr;
      if (threshold_ != ~std::uint64_t{0} && random_id() >= threshold_) return nullptr;
      trace_id = random_id();
      parent = 0;
    }
    auto s = std::make_unique<client_span>();
    s->recorder = this;
    s->ctx = {trace_id, random_id(), cur.instance, false};
    s->parent_id = parent;
    s->from = cur.instance;
    s->target = target;
    s->name = name;
    s->start_wall = trace_wall_now();
    s->start_steady = metrics_now();
    return s;
  }

  // The end of a call begun with begin_call.
  void end_call(const client_span& s, call_outcome o, std::int64_t now_steady,
                std::uint64_t bytes_in) {
    record(finish(s.ctx, s.parent_id, s.start_wall, now_steady - s.start_steady, s.target, s.from,
                  s.name, s.bytes_out, bytes_in, trace_span::client, o));
  }

  // A served call's span, from its frame (`caller`: the trace and the caller's span).
  served_span begin_served(std::uint64_t call_id, const trace_context& caller,
                           std::uint32_t instance, std::string_view name,
                           std::uint64_t bytes_in) {
    served_span s;
    s.call_id = call_id;
    s.ctx = {caller.trace_id, random_id(), instance, true};
    s.parent_id = caller.span_id;
    s.name = name;
    s.start_wall = trace_wall_now();
    s.start_steady = metrics_now();
    s.bytes_in = bytes_in;
    return s;
  }

  // Its end: the reply (or error reply) of `bytes_out` was queued.
  void end_served(const served_span& s, call_outcome o, std::uint64_t bytes_out) {
    trace_span t = finish(s.ctx, s.parent_id, s.start_wall, metrics_now() - s.start_steady,
                          s.ctx.instance, ~std::uint32_t{0}, s.name, bytes_out, s.bytes_in,
                          trace_span::server, o);
    record(std::move(t));
  }

  // A span of the trace and span ids of `ctx`, ended now.
  static trace_span finish(const trace_context& ctx, std::uint64_t parent, std::int64_t start_wall,
                           std::int64_t took, std::uint32_t instance, std::uint32_t from,
                           std::string_view name, std::uint64_t bytes_out, std::uint64_t bytes_in,
                           std::uint8_t kind, call_outcome o) {
    trace_span t;
    t.trace_id = ctx.trace_id;
    t.span_id = ctx.span_id;
    t.parent_id = parent;
    t.start_ns = start_wall;
    t.duration_ns = std::max<std::int64_t>(0, took);
    t.instance = instance;
    t.from = from;
    t.name = std::string(name);
    t.bytes_out = bytes_out;
    t.bytes_in = bytes_in;
    t.kind = kind;
    t.outcome = static_cast<std::uint8_t>(o);
    return t;
  }

  void record(trace_span&& t) {
    std::lock_guard lk(mu_);
    if (spans_.size() >= capacity_) {
      ++dropped_;
      return;
    }
    spans_.push_back(std::move(t));
  }

  // Everything recorded since the last take.
  trace_batch take() {
    trace_batch b;
    std::lock_guard lk(mu_);
    b.spans.swap(spans_);
    b.dropped = std::exchange(dropped_, 0);
    return b;
  }

  bool empty() const {
    std::lock_guard lk(mu_);
    return spans_.empty() && dropped_ == 0;
  }

  // A random, non-zero 64-bit id (per thread: no lock).
  static std::uint64_t random_id() {
    thread_local std::uint64_t state = [] {
      std::random_device rd;
      return (std::uint64_t{rd()} << 32) ^ rd() ^
             static_cast<std::uint64_t>(trace_wall_now());
    }();
    // splitmix64
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z ? z : 1;
  }

 private:
  std::uint64_t threshold_ = 0;  // a root is sampled when random_id() < threshold_
  std::size_t capacity_;
  mutable std::mutex mu_;
  std::vector<trace_span> spans_;
  std::uint64_t dropped_ = 0;
};

// A traced call's trailer, and back.
inline void encode_trace_trailer(char* out, const trace_context& c) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(c.trace_id >> (8 * i));
  for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<char>(c.span_id >> (8 * i));
}
inline trace_context decode_trace_trailer(const char* in) {
  trace_context c;
  for (int i = 8; i-- > 0;) c.trace_id = (c.trace_id << 8) | static_cast<unsigned char>(in[i]);
  for (int i = 8; i-- > 0;)
    c.span_id = (c.span_id << 8) | static_cast<unsigned char>(in[8 + i]);
  return c;
}

}  // namespace tlaunch::rpc
