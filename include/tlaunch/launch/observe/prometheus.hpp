// The node processes' metrics samples (rpc/metrics.hpp) in Prometheus's text exposition
// format (version 0.0.4), labelled by process, node, replica, host, peer and method.
// Written here rather than through a client library: the launcher only renders samples
// that the processes send it, and the format is a page of text (docs/guide/observing.md).
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "../../rpc/metrics.hpp"

namespace tlaunch::launch::observe {

// What the launcher knows of one node process, and its last sample (null before the first).
struct process_metrics {
  std::string process;  // "worker/0", a group's "learner/0+replay/0"
  std::string host;     // "" for the launcher's machine
  std::uint32_t restarts = 0;
  bool up = false;  // registered, its connection open
  const rpc::metrics_sample* sample = nullptr;
};

// A label value with \, " and newline escaped.
inline std::string label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// A metric name made of [a-zA-Z0-9_:] (anything else becomes '_'; never starts with a digit).
inline std::string metric_name(std::string_view v) {
  std::string out;
  for (char c : v) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == ':';
    out += ok ? c : '_';
  }
  if (out.empty() || (out[0] >= '0' && out[0] <= '9')) out.insert(0, "_");
  return out;
}

// A number as the format writes it.
inline std::string sample_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

class exposition {
 public:
  // Adds one sample line to metric `name` of `type` (its HELP and TYPE lines come first,
  // once); labels are "k=\"v\",..." already escaped. A line that would make the page
  // invalid is left out (false): a series already given, or a family of another type (two
  // of a node's own metrics whose names differ only where metric_name() replaced a
  // character, or a gauge named like a counter): Prometheus would refuse the whole page.
  bool add(const std::string& name, std::string_view type, std::string_view help,
           const std::string& labels, std::string_view value, std::string_view suffix = "") {
    auto& family = families_[name];
    if (family.type.empty()) {
      family.type = std::string(type);
      family.text = fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    } else if (family.type != type) {
      return false;
    }
    if (!family.series.insert(std::string(suffix) + "{" + labels + "}").second) return false;
    auto& m = family.text;
    m += name;
    m += suffix;
    if (!labels.empty()) m += "{" + labels + "}";
    m += " ";
    m += value;
    m += "\n";
    return true;
  }
  std::string text() const {
    std::string out;
    for (const auto& [name, family] : families_) out += family.text;
    return out;
  }

 private:
  struct family {
    std::string type, text;
    std::set<std::string> series;
  };
  std::map<std::string, family> families_;
};

// "worker/3" -> {"worker", "3"}; a group's process names its first instance.
inline std::pair<std::string, std::string> node_and_replica(std::string_view instance) {
  instance = instance.substr(0, instance.find('+'));
  auto slash = instance.rfind('/');
  if (slash == std::string_view::npos) return {std::string(instance), ""};
  return {std::string(instance.substr(0, slash)), std::string(instance.substr(slash + 1))};
}

// A histogram of rpc/metrics.hpp's latency buckets (counts per bucket, not cumulative; the
// last one above every bound) and their sum in nanoseconds, in seconds.
inline void add_latency_histogram(exposition& e, const std::string& name, std::string_view help,
                                  const std::string& labels,
                                  const std::vector<std::uint64_t>& buckets, std::uint64_t sum_ns) {
  std::uint64_t cumulative = 0;
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    cumulative += buckets[k];
    const bool last = k + 1 == buckets.size();
    const std::string le =
        last ? "+Inf" : sample_value(static_cast<double>(std::uint64_t{1} << k) * 1e-6);
    e.add(name, "histogram", help, fmt::format("{},le=\"{}\"", labels, le),
          std::to_string(cumulative), "_bucket");
  }
  e.add(name, "histogram", "", labels, sample_value(static_cast<double>(sum_ns) * 1e-9), "_sum");
  e.add(name, "histogram", "", labels, std::to_string(cumulative), "_count");
}

inline std::string render_prometheus(const std::vector<process_metrics>& processes,
                                     std::size_t instances) {
  exposition e;
  e.add("tlaunch_launcher_instances", "gauge", "Node instances in the program.", "",
        std::to_string(instances));
  for (const auto& p : processes) {
    const auto [pnode, preplica] = node_and_replica(p.process);
    const std::string proc = fmt::format("process=\"{}\",node=\"{}\",replica=\"{}\",host=\"{}\"",
                                         label_value(p.process), label_value(pnode),
                                         label_value(preplica), label_value(p.host));
    e.add("tlaunch_process_up", "gauge",
          "1 while the node process is registered with the launcher.", proc, p.up ? "1" : "0");
    e.add("tlaunch_process_restarts_total", "counter", "Restarts of the node process.", proc,
          std::to_string(p.restarts));
    if (!p.sample) continue;
    const auto& s = *p.sample;
    e.add("tlaunch_process_cpu_seconds_total", "counter",
          "CPU time of the node process (user and system).", proc, sample_value(s.cpu_seconds));
    e.add("tlaunch_process_resident_memory_bytes", "gauge", "Resident memory of the node process.",
          proc, std::to_string(s.rss_bytes));
    e.add("tlaunch_process_connections", "gauge", "Open connections of the node process.", proc,
          std::to_string(s.connections));
    e.add("tlaunch_process_unsent_bytes", "gauge",
          "Bytes queued on the node process's connections and not yet written.", proc,
          std::to_string(s.unsent_bytes));
    static constexpr std::string_view outcome_names[] = {"", "remote_error", "timeout",
                                                         "bad_call", "abandoned", "unavailable"};
    for (const auto& c : s.calls) {
      const std::string edge = fmt::format("{},peer=\"{}\",method=\"{}\"", proc,
                                           label_value(c.callee), label_value(c.method));
      e.add("tlaunch_calls_total", "counter", "Calls made, by caller process, callee and method.",
            edge, std::to_string(c.calls));
      for (std::size_t k = 1; k < c.ended.size() && k < rpc::call_outcomes; ++k)
        e.add("tlaunch_call_errors_total", "counter",
              "Calls that ended without a result, by kind.",
              fmt::format("{},kind=\"{}\"", edge, outcome_names[k]), std::to_string(c.ended[k]));
      e.add("tlaunch_calls_in_flight", "gauge", "Calls made and not ended.", edge,
            std::to_string(c.in_flight()));
      e.add("tlaunch_call_sent_bytes_total", "counter", "Bytes of call frames sent.", edge,
            std::to_string(c.bytes_out));
      e.add("tlaunch_call_received_bytes_total", "counter", "Bytes of reply frames received.",
            edge, std::to_string(c.bytes_in));
      add_latency_histogram(e, "tlaunch_call_duration_seconds",
                            "Time from a call's send to its reply, at the caller.", edge,
                            c.latency, c.latency_ns);
    }
    for (const auto& v : s.served) {
      const auto [node, replica] = node_and_replica(v.instance);
      const std::string labels =
          fmt::format("process=\"{}\",node=\"{}\",replica=\"{}\",host=\"{}\",method=\"{}\"",
                      label_value(p.process), label_value(node), label_value(replica),
                      label_value(p.host), label_value(v.method));
      e.add("tlaunch_served_calls_total", "counter", "Calls served, by instance and method.",
            labels, std::to_string(v.calls));
      for (std::size_t k = 1; k < v.ended.size() && k < rpc::call_outcomes; ++k)
        e.add("tlaunch_served_errors_total", "counter",
              "Served calls answered with an error, by kind.",
              fmt::format("{},kind=\"{}\"", labels, outcome_names[k]),
              std::to_string(v.ended[k]));
      e.add("tlaunch_served_in_flight", "gauge", "Calls arrived and not answered.", labels,
            std::to_string(v.in_flight()));
      e.add("tlaunch_served_received_bytes_total", "counter", "Bytes of call frames served.",
            labels, std::to_string(v.bytes_in));
      e.add("tlaunch_served_sent_bytes_total", "counter", "Bytes of the replies to served calls.",
            labels, std::to_string(v.bytes_out));
      add_latency_histogram(e, "tlaunch_served_duration_seconds",
                            "Time from a call's arrival to its reply, at the serving process.",
                            labels, v.duration, v.duration_ns);
    }
    for (const auto& u : s.user) {
      const auto [node, replica] = node_and_replica(u.instance);
      std::string name = "tlaunch_user_" + metric_name(u.name);
      if (u.counter && !name.ends_with("_total")) name += "_total";
      e.add(name, u.counter ? "counter" : "gauge", "A node's own metric (context::metrics).",
            fmt::format("process=\"{}\",node=\"{}\",replica=\"{}\",host=\"{}\"",
                        label_value(p.process), label_value(node), label_value(replica),
                        label_value(p.host)),
            sample_value(u.value));
    }
    for (const auto& h : s.histograms) {
      const auto [node, replica] = node_and_replica(h.instance);
      const std::string name = "tlaunch_user_" + metric_name(h.name);
      const std::string labels =
          fmt::format("process=\"{}\",node=\"{}\",replica=\"{}\",host=\"{}\"",
                      label_value(p.process), label_value(node), label_value(replica),
                      label_value(p.host));
      std::uint64_t cumulative = 0;
      for (std::size_t k = 0; k < h.counts.size(); ++k) {
        cumulative += h.counts[k];
        const std::string le = k < h.bounds.size() ? sample_value(h.bounds[k]) : "+Inf";
        e.add(name, "histogram", "A node's own histogram (context::metrics).",
              fmt::format("{},le=\"{}\"", labels, le), std::to_string(cumulative), "_bucket");
      }
      e.add(name, "histogram", "", labels, sample_value(h.sum), "_sum");
      e.add(name, "histogram", "", labels, std::to_string(cumulative), "_count");
    }
  }
  return e.text();
}

}  // namespace tlaunch::launch::observe
