// --trace=FILE: the spans of the program's processes (rpc/trace.hpp) written as Chrome
// trace events (JSON array format: Perfetto and chrome://tracing open it, and a file cut
// short by a killed launcher still opens). Each span is a complete event ("ph":"X") on the
// track of its process (pid) and instance (tid), with the call's ids, peers, bytes and
// outcome in "args"; a call and the span that served it are tied by a flow arrow ("s" at
// the call, "f" at the served span). Timestamps are microseconds since the launch began,
// on the launcher's clock: each process's spans are moved by the clock offset measured
// when it registered.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "../../error.hpp"
#include "../../rpc/metrics.hpp"
#include "../../rpc/trace.hpp"
#include "json.hpp"

namespace tlaunch::launch::observe {

// The measured offset of a process's clock from the launcher's: node clock - launcher
// clock, from a probe's send time t0, the node's reading, and the reply's arrival t1
// (nanoseconds). Within half the round trip of the best probe the two clocks cannot be
// told apart: the correction is the smallest one the measurement allows (0 when the
// offset is under half the round trip, as on one host).
struct clock_estimate {
  std::int64_t offset_ns = 0;  // measured, at the best probe
  std::int64_t rtt_ns = -1;    // its round trip; < 0: no probe yet
  int probes = 0;
  void add(std::int64_t t0, std::int64_t node, std::int64_t t1) {
    ++probes;
    const std::int64_t rtt = t1 - t0;
    if (rtt < 0 || (rtt_ns >= 0 && rtt >= rtt_ns)) return;
    rtt_ns = rtt;
    offset_ns = node - (t0 + rtt / 2);
  }
  std::int64_t correction_ns() const {
    if (rtt_ns < 0) return 0;
    const std::int64_t slack = rtt_ns / 2;
    if (offset_ns > slack) return offset_ns - slack;
    if (offset_ns < -slack) return offset_ns + slack;
    return 0;
  }
};

inline const char* outcome_name(std::uint8_t o) {
  static constexpr const char* names[] = {"reply",     "remote_error", "timeout",
                                          "bad_call",  "abandoned",    "unavailable"};
  return o < rpc::call_outcomes ? names[o] : "unknown";
}

class trace_file {
 public:
  // Opens (truncates) the file; throws launch_error naming it when it cannot.
  trace_file(const std::string& path, std::int64_t epoch_ns) : path_(path), epoch_ns_(epoch_ns) {
    f_ = std::fopen(path.c_str(), "w");
    if (!f_)
      throw tlaunch::launch_error("--trace=" + path + ": cannot write the file: " +
                                  std::string(std::strerror(errno)));
    std::fputs("[\n", f_);
  }
  ~trace_file() { close(); }
  trace_file(const trace_file&) = delete;
  trace_file& operator=(const trace_file&) = delete;

  // A process's spans: `pid` its track, `tid_of` an instance's track, `name_of` an
  // instance's id ("node/0"), `correction_ns` its clock's offset from the launcher's.
  void write(const rpc::trace_batch& b, std::uint32_t pid, std::int64_t correction_ns,
             const std::function<std::uint32_t(std::uint32_t)>& tid_of,
             const std::function<std::string(std::uint32_t)>& name_of,
             const std::string& process) {
    dropped_ += b.dropped;
    for (const auto& s : b.spans) {
      const double ts = static_cast<double>(s.start_ns - correction_ns - epoch_ns_) / 1000.0;
      const double dur = static_cast<double>(s.duration_ns) / 1000.0;
      const bool client = s.kind == rpc::trace_span::client;
      const std::uint32_t tid = client ? tid_of(s.from) : tid_of(s.instance);
      const std::string caller = client ? (s.from == ~std::uint32_t{0} ? process : name_of(s.from))
                                        : std::string();
      std::string args = fmt::format(
          "\"trace\":\"{:016x}\",\"span\":\"{:016x}\",\"parent\":\"{:016x}\",", s.trace_id,
          s.span_id, s.parent_id);
      if (client)
        args += fmt::format("\"caller\":{},\"callee\":{},", json_string(caller),
                            json_string(name_of(s.instance)));
      else
        args += fmt::format("\"callee\":{},", json_string(name_of(s.instance)));
      args += fmt::format("\"bytes_out\":{},\"bytes_in\":{},\"outcome\":\"{}\"", s.bytes_out,
                          s.bytes_in, outcome_name(s.outcome));
      line(fmt::format(
          "{{\"name\":{},\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{:.3f},\"dur\":{:.3f},\"pid\":{},"
          "\"tid\":{},\"args\":{{{}}}}}",
          json_string(s.name), client ? "call" : "served", ts, dur, pid, tid, args));
      // The arrow from a call to the span that served it.
      if (client)
        line(fmt::format("{{\"name\":\"call\",\"cat\":\"flow\",\"ph\":\"s\",\"id\":\"{:016x}\","
                         "\"ts\":{:.3f},\"pid\":{},\"tid\":{}}}",
                         s.span_id, ts, pid, tid));
      else if (s.parent_id != 0)
        line(fmt::format("{{\"name\":\"call\",\"cat\":\"flow\",\"ph\":\"f\",\"bp\":\"e\","
                         "\"id\":\"{:016x}\",\"ts\":{:.3f},\"pid\":{},\"tid\":{}}}",
                         s.parent_id, ts, pid, tid));
      ++spans_;
    }
    std::fflush(f_);
  }

  // The names of a process's and an instance's tracks, and the clock offset applied.
  void name_process(std::uint32_t pid, const std::string& name, const clock_estimate& clock) {
    line(fmt::format("{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":{}}}}}",
                     pid, json_string(name)));
    line(fmt::format(
        "{{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"labels\":{}}}}}", pid,
        json_string(fmt::format("clock offset {} us (measured {} us, round trip {} us)",
                                static_cast<double>(clock.correction_ns()) / 1000.0,
                                static_cast<double>(clock.offset_ns) / 1000.0,
                                static_cast<double>(clock.rtt_ns) / 1000.0))));
  }
  void name_thread(std::uint32_t pid, std::uint32_t tid, const std::string& name) {
    line(fmt::format(
        "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":{}}}}}",
        pid, tid, json_string(name)));
  }

  // Ends the array; the file is complete JSON.
  void close() {
    if (!f_) return;
    std::fputs("\n]\n", f_);
    std::fclose(f_);
    f_ = nullptr;
  }

  const std::string& path() const { return path_; }
  std::uint64_t spans() const { return spans_; }
  std::uint64_t dropped() const { return dropped_; }

 private:
  void line(const std::string& s) {
    if (!f_) return;
    if (!first_) std::fputs(",\n", f_);
    first_ = false;
    std::fwrite(s.data(), 1, s.size(), f_);
  }

  std::string path_;
  std::int64_t epoch_ns_;
  std::FILE* f_ = nullptr;
  bool first_ = true;
  std::uint64_t spans_ = 0, dropped_ = 0;
};

}  // namespace tlaunch::launch::observe
