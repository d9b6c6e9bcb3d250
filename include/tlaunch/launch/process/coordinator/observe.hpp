// The coordinator's --metrics and --dashboard (launch/process/coordinator.hpp): every
// second it asks each node process for its sample (wire::kind::metrics_request; control.hpp
// keeps the answers); its endpoints (launch/observe/http_endpoint.hpp) serve the last ones
// in Prometheus's format (launch/observe/prometheus.hpp) and, for the dashboard's page
// (launch/observe/dashboard_page.hpp), as JSON with the processes' state, their last lines
// of output and the launcher's own lines as events.
// Compiled once in the library (tlaunch/impl/src/launch_process.hpp), inline when header-only.
#pragma once

#include "../coordinator.hpp"
#include "../../observe/dashboard_page.hpp"
#include "../../observe/deltas.hpp"
#include "../../observe/http_endpoint.hpp"
#include "../../observe/json.hpp"
#include "../../observe/prometheus.hpp"

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_PROCESS)
namespace tlaunch::launch {

TLAUNCH_DECL coordinator::~coordinator() {
  if (!opt_.dashboard.empty()) out_.observe(nullptr);
}

TLAUNCH_DECL std::string coordinator::derived_endpoint_token() {
  if (endpoint_token_.empty()) {
    endpoint_token_ = opt_.endpoint_token;
    if (endpoint_token_.empty()) {
      static constexpr std::string_view label = "tlaunch endpoint token";
      auto mac = tlaunch::detail::hmac_sha256(
          secret_, {reinterpret_cast<const std::uint8_t*>(label.data()), label.size()});
      endpoint_token_ = tlaunch::detail::to_hex(std::span<const std::uint8_t>(mac.data(), 16));
    }
  }
  return endpoint_token_;
}

TLAUNCH_DECL std::unique_ptr<observe::http_endpoint> coordinator::open_endpoint(
    const std::string& flag, const std::string& address,
    std::function<observe::http_response(std::string_view)> handler) {
  std::string why;
  auto ep = observe::parse_endpoint(address, why);
  if (!ep) throw launch_error(flag + ": " + why);
  // Off loopback a client needs the token: the one given, or one derived from the launch
  // secret (the same for both endpoints and every request of this launch), printed here.
  std::string token;
  if (!ep->address().is_loopback()) token = derived_endpoint_token();
  std::unique_ptr<observe::http_endpoint> e;
  try {
    e = std::make_unique<observe::http_endpoint>(io_, *ep, token, std::move(handler));
  } catch (const std::system_error& x) {
    throw launch_error(flag + "=" + address + ": cannot listen: " + x.what());
  }
  const std::string host = ep->address().is_v6() ? "[" + ep->address().to_string() + "]"
                                                  : ep->address().to_string();
  std::string line = fmt::format("{} at http://{}:{}{}", flag == "--metrics" ? "metrics" : "dashboard",
                                 host, e->port(), flag == "--metrics" ? "/metrics" : "/");
  if (!token.empty() && opt_.endpoint_token.empty())
    line += " (off loopback: send Authorization: Bearer " + token + ", or open ?token=" + token + ")";
  out_.print("launcher", stream::err, line);
  return e;
}

TLAUNCH_DECL void coordinator::start_observing() {
  if (!opt_.dashboard.empty()) {
    // The launcher's own lines are the dashboard's events.
    out_.observe([this](std::string_view who, std::string_view line) {
      if (who != "launcher") return;
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                     started_at_).count();
      std::lock_guard lk(events_mu_);
      events_.push_back({t, std::string(line)});
      if (events_.size() > 200) events_.pop_front();
    });
    dashboard_http_ = open_endpoint(
        "--dashboard", opt_.dashboard, [this](std::string_view path) -> observe::http_response {
          if (path == "/" || path == "/index.html")
            return {200, "text/html; charset=utf-8", std::string(observe::dashboard_page)};
          if (path == "/api/state")
            return {200, "application/json", dashboard_state()};
          return {404, "text/plain; charset=utf-8", "not found: " + std::string(path) + "\n"};
        });
    if (std::any_of(nodes_.begin(), nodes_.end(), [](const auto& n) { return n.elastic; })) {
      // A resize changes the program: it needs the token wherever the dashboard listens.
      const std::string token = derived_endpoint_token();
      dashboard_http_->serve_post(token, [this](std::string_view path, std::string_view query) {
        return resize_by_post(path, query);
      });
      out_.print("launcher", stream::err,
                 "dashboard resize: POST /api/resize?node=NAME&replicas=N with Authorization: "
                 "Bearer " + token);
    }
  }
  if (!opt_.metrics.empty())
    metrics_http_ = open_endpoint("--metrics", opt_.metrics,
                                  [this](std::string_view path) -> observe::http_response {
                                    if (path == "/metrics")
                                      return {200, "text/plain; version=0.0.4; charset=utf-8",
                                              metrics_text()};
                                    if (path == "/")
                                      return {200, "text/plain; charset=utf-8",
                                              "tlaunch: see /metrics\n"};
                                    return {404, "text/plain; charset=utf-8",
                                            "not found: " + std::string(path) + "\n"};
                                  });
  if (metrics_http_ || dashboard_http_) ask_metrics();
  if (!opt_.trace.empty())
    trace_ = std::make_unique<observe::trace_file>(opt_.trace, rpc::trace_wall_now());
}

TLAUNCH_DECL void coordinator::probe_clock(slot& s) {
  if (!trace_ || !s.conn) return;
  wire::frame_buffer f;
  wire::serialize_into(f, rpc::trace_wall_now());
  f.seal({.type = wire::kind::clock_probe});
  s.conn->send(std::move(f));
}

TLAUNCH_DECL void coordinator::on_clock_reply(const std::shared_ptr<rpc::connection>& c,
                                              std::int64_t sent, std::int64_t node_now,
                                              std::int64_t now) {
  for (auto& s : slots_)
    if (s.conn == c) {
      s.clock.add(sent, node_now, now);
      if (s.clock.probes < 5) probe_clock(s);
    }
}

TLAUNCH_DECL void coordinator::on_trace_spans(const std::shared_ptr<rpc::connection>& c,
                                              const rpc::trace_batch& b) {
  if (!trace_) return;
  for (auto& s : slots_) {
    if (s.conn != c) continue;
    const std::uint32_t leader = s.leader;
    const auto n = static_cast<std::uint32_t>(slots_.size());
    // A call from a run() body is named by its process's instances ("a/0+b/0" for a group).
    std::string ids;
    for (std::uint32_t m : slots_[leader].members) ids.append(ids.empty() ? "" : "+").append(slots_[m].id);
    trace_->write(
        b, leader + 1, s.clock.correction_ns(),
        [leader, n](std::uint32_t flat) { return flat < n ? flat + 1 : leader + 1; },
        [this, n](std::uint32_t flat) { return flat < n ? slots_[flat].id : std::string("?"); },
        ids);
    return;
  }
}

TLAUNCH_DECL void coordinator::finish_trace() {
  if (!trace_) return;
  for (std::uint32_t i = 0; i < slots_.size(); ++i) {
    const slot& s = slots_[i];
    if (s.leader != i) continue;
    trace_->name_process(i + 1, s.where, s.clock);
    for (std::uint32_t m : s.members) trace_->name_thread(i + 1, m + 1, slots_[m].id);
  }
  trace_->close();
  std::string line = fmt::format("trace: {} spans written to {}", trace_->spans(), trace_->path());
  if (trace_->dropped() > 0)
    line += fmt::format(" ({} more dropped: a process recorded them faster than it could send "
                        "them; lower --trace-sample)",
                        trace_->dropped());
  out_.print("launcher", stream::err, line);
}

TLAUNCH_DECL void coordinator::record_history() {
  if (!dashboard_http_) return;
  struct sum {
    double rate = 0;
    std::vector<std::uint64_t> latency;
  };
  std::map<std::string, sum> methods;
  for (std::uint32_t f = 0; f < slots_.size(); ++f) {
    const auto& s = slots_[f];
    if (s.leader != f || !s.metrics) continue;
    const double dt = std::chrono::duration<double>(s.metrics_at - s.metrics_before_at).count();
    for (const auto& c : s.metrics->calls) {
      auto d = observe::delta_of(c, s.metrics_before.get(), dt);
      auto& m = methods[c.method];
      m.rate += d.rate;
      m.latency.resize(std::max(m.latency.size(), d.latency.size()));
      for (std::size_t i = 0; i < d.latency.size(); ++i) m.latency[i] += d.latency[i];
    }
  }
  const double t =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_at_).count();
  for (auto& [name, m] : methods) {
    auto& h = method_history_[name];
    h.push_back({t, m.rate, observe::p99_of(m.latency)});
    if (h.size() > 120) h.pop_front();
  }
}

TLAUNCH_DECL void coordinator::ask_metrics() {
  // Each process once a second, a tenth of them every 100 ms: their answers, and the
  // wake-ups of that many processes, are spread over the second. Asked all at once, a
  // thousand processes kept this thread from serving the endpoints for up to 0.8 s.
  const std::uint32_t part = metrics_tick_++ % 10;
  if (part == 0) record_history();
  for (std::uint32_t f = 0; f < slots_.size(); ++f) {
    const auto& s = slots_[f];
    if (s.leader != f || !s.conn || f % 10 != part) continue;
    wire::frame_buffer fr;
    fr.seal({.type = wire::kind::metrics_request});
    s.conn->send(std::move(fr));
  }
  metrics_timer_.expires_after(std::chrono::milliseconds(100));
  metrics_timer_.async_wait([this](std::error_code ec) {
    if (!ec) ask_metrics();
  });
}

TLAUNCH_DECL std::string coordinator::metrics_text() const {
  std::vector<observe::process_metrics> processes;
  for (std::uint32_t f = 0; f < slots_.size(); ++f) {
    const auto& s = slots_[f];
    if (s.leader != f) continue;
    observe::process_metrics p;
    for (std::uint32_t m : s.members) p.process += (p.process.empty() ? "" : "+") + slots_[m].id;
    p.host = s.place.host;
    p.restarts = s.gen;
    p.up = s.conn != nullptr && !s.exited;
    p.sample = s.metrics.get();
    processes.push_back(std::move(p));
  }
  return observe::render_prometheus(processes, slots_.size());
}

TLAUNCH_DECL std::string coordinator::dashboard_state() const {
  using observe::json_list;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_at_).count();
  json_list top('{');
  top.field("elapsed_seconds", elapsed);
  top.field("state", life_.stopping() ? "stopping" : directory_sent_ ? "running" : "starting");
  top.field("instances", static_cast<std::uint64_t>(active_slots()));
  json_list nodes('[');
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    json_list node('{');
    node.field("name", std::string(nodes_[i].name))
        .field("replicas", static_cast<std::uint64_t>(running_[i]));
    if (nodes_[i].elastic) node.field("max_replicas", static_cast<std::uint64_t>(nodes_[i].replicas));
    nodes.raw(node.done());
  }
  top.field("nodes", std::string_view(nodes.done()));
  json_list processes('['), edges('[');
  for (std::uint32_t f = 0; f < slots_.size(); ++f) {
    const auto& s = slots_[f];
    if (s.leader != f || s.dormant) continue;
    std::string process;
    for (std::uint32_t m : s.members) process += (process.empty() ? "" : "+") + slots_[m].id;
    const char* state = s.exited                         ? "exited"
                        : s.replacing                    ? "restarting"
                        : life_.stopping()               ? "stopping"
                        : (s.conn && !s.address.empty()) ? "running"
                        : s.gen > 0                      ? "restarting"
                                                         : "starting";
    json_list p('{');
    p.field("process", process).field("host", s.place.host).field("state", state);
    p.field("pid", static_cast<std::uint64_t>(s.pid > 0 ? s.pid : 0));
    p.field("restarts", static_cast<std::uint64_t>(s.gen));
    const rpc::metrics_sample* m = s.metrics.get();
    p.field("rss_bytes", static_cast<std::uint64_t>(m ? m->rss_bytes : 0));
    p.field("cpu_seconds", m ? m->cpu_seconds : 0.0);
    const double dt = std::chrono::duration<double>(s.metrics_at - s.metrics_before_at).count();
    const rpc::metrics_sample* before = s.metrics_before.get();
    p.field("cpu_percent",
            m && before && dt > 0 ? 100 * (m->cpu_seconds - before->cpu_seconds) / dt : -1.0);
    json_list lines('[');
    for (const auto& l : out_.last_lines(s.where)) lines.raw(observe::json_string(l));
    p.field("lines", std::string_view(lines.done()));
    processes.raw(p.done());
    if (!m) continue;
    for (const auto& c : m->calls) {
      json_list e('{');
      e.field("caller", process).field("callee", c.callee).field("method", c.method);
      e.field("calls", c.calls).field("in_flight", c.in_flight());
      std::uint64_t errors = 0;
      for (std::size_t k = 1; k < c.ended.size(); ++k) errors += c.ended[k];
      e.field("errors", errors);
      // The last interval's calls per second, p99 and latency buckets (-1: no call ended).
      const auto d = observe::delta_of(c, before, dt);
      e.field("rate", d.rate).field("p99", observe::p99_of(d.latency));
      json_list buckets('[');
      for (auto b : d.latency) buckets.raw(std::to_string(b));
      e.field("latency", std::string_view(buckets.done()));
      edges.raw(e.done());
    }
  }
  top.field("processes", std::string_view(processes.done()));
  top.field("edges", std::string_view(edges.done()));
  json_list events('[');
  {
    std::lock_guard lk(events_mu_);
    for (const auto& e : events_)
      events.raw(json_list('{').field("t", e.t).field("text", e.text).done());
  }
  top.field("events", std::string_view(events.done()));
  json_list methods('[');
  for (const auto& [name, points] : method_history_) {
    json_list ps('[');
    for (const auto& pt : points)
      ps.raw(json_list('[').raw(observe::json_number(pt.t)).raw(observe::json_number(pt.rate))
                 .raw(observe::json_number(pt.p99)).done());
    methods.raw(json_list('{').field("name", name).field("points", std::string_view(ps.done())).done());
  }
  top.field("methods", std::string_view(methods.done()));
  return top.done();
}

}  // namespace tlaunch::launch
#endif
