// What a node's run(context&) body sees of the program.
#pragma once

#include <fmt/format.h>

#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "detail/config.hpp"
#include "detail/fixed_string.hpp"
#include "handle.hpp"
#include "rpc/call_paths.hpp"
#include "rpc/instance.hpp"
#include "rpc/runtime.hpp"

namespace tlaunch {

class context;

namespace detail {
// How the library makes and finds a node's context; users only receive one.
struct context_access {
  // The context of a hosted instance, which owns it (rpc::instance::run_context).
  TLAUNCH_DECL static std::shared_ptr<context> make(rpc::runtime& rt, rpc::instance& inst);
  static context& of(rpc::instance& inst) {
    return *static_cast<context*>(inst.run_context.get());
  }
};
}  // namespace detail

// A node's own metric, served with the program's (--metrics, docs/guide/observing.md) and
// labelled with the node instance. Cheap to keep and to copy; valid while the program runs.
class metric_counter {
 public:
  explicit metric_counter(rpc::user_metric& m) : m_(&m) {}
  // Adds n (a counter only grows: n < 0 throws std::invalid_argument).
  void add(double n = 1) const {
    if (n < 0) throw std::invalid_argument("a metric_counter only grows; use a gauge");
    m_->add(n);
  }
  double value() const { return m_->get(); }

 private:
  rpc::user_metric* m_;
};

class metric_gauge {
 public:
  explicit metric_gauge(rpc::user_metric& m) : m_(&m) {}
  void set(double v) const { m_->set(v); }
  void add(double d) const { m_->add(d); }
  double value() const { return m_->get(); }

 private:
  rpc::user_metric* m_;
};

// A histogram: each observation counted under the first of its bucket bounds it does not
// exceed (served as Prometheus's histogram: cumulative `le` buckets, `_sum`, `_count`).
class metric_histogram {
 public:
  explicit metric_histogram(rpc::user_histogram& h) : h_(&h) {}
  // Counts x (NaN is not counted).
  void observe(double x) const { h_->observe(x); }
  std::uint64_t count() const { return h_->count(); }
  double sum() const { return h_->sum(); }

 private:
  rpc::user_histogram* h_;
};

// A node's metrics: ctx.metrics().counter("episodes").add(1). Each name is one metric of
// this instance, made on first use; keep what counter() returns where it is used often.
class node_metrics {
 public:
  node_metrics(rpc::metrics_registry& r, std::string instance)
      : r_(&r), instance_(std::move(instance)) {}
  metric_counter counter(std::string_view name) const {
    return metric_counter(r_->user(instance_, std::string(name), true));
  }
  metric_gauge gauge(std::string_view name) const {
    return metric_gauge(r_->user(instance_, std::string(name), false));
  }
  // Prometheus's default buckets: 5 ms to 10 s, for durations in seconds.
  static std::vector<double> default_buckets() {
    return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  }
  // The histogram `name` with these upper bounds (finite, ascending; one name, one set of
  // bounds: std::invalid_argument otherwise).
  metric_histogram histogram(std::string_view name,
                             std::vector<double> bounds = default_buckets()) const {
    if (bounds.empty())
      throw std::invalid_argument("histogram \"" + std::string(name) + "\": no bucket bounds");
    for (std::size_t i = 0; i < bounds.size(); ++i)
      if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i - 1] < bounds[i])))
        throw std::invalid_argument("histogram \"" + std::string(name) +
                                    "\": bucket bounds must be finite and ascending");
    return metric_histogram(r_->histogram(instance_, std::string(name), bounds));
  }

 private:
  rpc::metrics_registry* r_;
  std::string instance_;
};

class context {
  friend struct detail::context_access;
  TLAUNCH_DECL context(rpc::runtime& rt, rpc::instance& inst);

 public:
  context(const context&) = delete;
  context& operator=(const context&) = delete;

  // The node's name, this replica's index and the number of replicas (an elastic node's:
  // how many run now).
  std::string_view name() const noexcept { return inst_.node_name; }
  std::uint32_t index() const noexcept { return inst_.replica; }
  TLAUNCH_DECL std::uint32_t replicas() const noexcept;

  // Makes elastic node `node` (node<...>().elastic(max)) run n replicas, 0 to max, and
  // completes once the change is done everywhere: new replicas registered and known to
  // every process (a broadcast after it reaches them), removed ones finished the calls they
  // were serving and stopped. Under launchers of node processes (local_mp, ssh, slurm).
  // Throws tlaunch::launch_error naming the node when the resize is refused (not elastic,
  // n over max, the program stopping, a new replica that could not start).
  // docs/guide/elastic.md.
  TLAUNCH_DECL asio::awaitable<void> resize(std::string_view node, std::uint32_t n);
  template <detail::fixed_string Node>
  asio::awaitable<void> resize(std::uint32_t n) {
    return resize(Node.view(), n);
  }
  // "producer/3"
  std::string id() const { return inst_.id(); }

  // Which start of this instance this is: 0 at launch, then 1, 2, ... for each restart
  // (under k8s, where the kubelet restarts the container, it stays 0). resumed(): it loaded
  // a snapshot before it started (a restart's under --state-dir, or --resume's).
  // docs/guide/state.md.
  std::uint32_t incarnation() const noexcept { return inst_.incarnation; }
  bool resumed() const noexcept { return inst_.resumed; }

  // Whether snapshot() can write: the node has state and there is a --state-dir.
  bool can_snapshot() const noexcept {
    return inst_.state != nullptr && !rt_.options().state_dir.empty();
  }

  // Writes a snapshot of this node's state now, under --state-dir (tlaunch/state.hpp), and
  // returns the file's path. Call it from the node's run() or methods (its strand).
  // Throws std::logic_error when the node has no state or there is no --state-dir, and
  // std::runtime_error when the file cannot be written.
  TLAUNCH_DECL asio::awaitable<std::string> snapshot();

  // One line of output, shown by the launcher as "[producer/3] ...".
  template <class... A>
  void log(fmt::format_string<A...> f, A&&... args) const {
    auto line = fmt::format(f, std::forward<A>(args)...);
    if (rt_.log_line)
      rt_.log_line(inst_, line);
    else
      fmt::print("[{}] {}\n", inst_.id(), line);
  }

  // Stops every node of the program, on every host.
  void stop_program() const {
    if (rt_.stop_program) rt_.stop_program();
  }
  bool stop_requested() const noexcept { return rt_.stop_requested(); }

  // Completes when the program is stopping (or the awaiting body is cancelled).
  TLAUNCH_DECL asio::awaitable<void> stopped();

  // Waits d; returns early (throwing asio's operation_aborted) when stopping.
  template <class Rep, class Period>
  asio::awaitable<void> sleep_for(std::chrono::duration<Rep, Period> d) {
    return sleep_steady(std::chrono::duration_cast<std::chrono::steady_clock::duration>(d));
  }

  // The node's strand: run work here to keep actor semantics.
  rpc::strand_type executor() const { return inst_.strand; }

  // The program's own arguments: everything after `--` on the command line.
  const std::vector<std::string>& args() const noexcept { return rt_.options().user_args; }

  // Busy polling of this process's io threads and connections (see --busy-poll);
  // it is shared by every node of the process. 0 turns it off.
  std::chrono::microseconds busy_poll() const { return rt_.busy_poll(); }
  void set_busy_poll(std::chrono::microseconds d) const { rt_.set_busy_poll(d); }

  // This node's own counters and gauges (see node_metrics).
  node_metrics metrics() const { return node_metrics(rt_.metrics(), inst_.id()); }

  // The IP address this process serves on ("127.0.0.1" when all local).
  std::string listen_host() const { return rt_.listen_host(); }

  // Starts an in-process actor S (constructed from args) on its own strand and
  // returns a handle whose calls go to it directly, without serialization.
  template <class S, class... A>
  handle<S> spawn(A&&... args) {
    auto& inst = rt_.host_dynamic(detail::type_name<S>());
    if constexpr (std::is_aggregate_v<S>)
      inst.object = std::shared_ptr<void>(new S{std::forward<A>(args)...}, [](void* p) {
        delete static_cast<S*>(p);
      });
    else
      inst.object = std::shared_ptr<void>(new S(std::forward<A>(args)...), [](void* p) {
        delete static_cast<S*>(p);
      });
    return handle<S>(&rt_, inst.flat_id, &inst);
  }

 private:
  TLAUNCH_DECL asio::awaitable<void> sleep_steady(std::chrono::steady_clock::duration d);

  rpc::runtime& rt_;
  rpc::instance& inst_;
  asio::steady_timer stop_timer_;
};

}  // namespace tlaunch

// The definitions: inline in every translation unit, or, with TLAUNCH_SEPARATE_COMPILATION,
// compiled once in the library (tlaunch/impl/src/rpc.hpp): a program's files make no timer.
#if TLAUNCH_HEADER_DEFINITIONS
#include "rpc/snapshots.hpp"

namespace tlaunch {

TLAUNCH_DECL context::context(rpc::runtime& rt, rpc::instance& inst)
    : rt_(rt),
      inst_(inst),
      stop_timer_(rpc::any_executor_of(inst.strand), asio::steady_timer::time_point::max()) {
  rt_.add_stop_waker([this] {
    asio::post(inst_.strand, [this] { stop_timer_.cancel(); });
  });
}

TLAUNCH_DECL asio::awaitable<void> context::stopped() {
  if (stop_requested()) co_return;
  std::error_code ec;
  co_await stop_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

TLAUNCH_DECL asio::awaitable<std::string> context::snapshot() {
  rpc::snapshot_store* store = rt_.snapshots();
  if (!inst_.state)
    throw std::logic_error("ctx.snapshot(): node " + inst_.id() + "'s type " +
                           std::string(inst_.type_name) +
                           " has no state(Archive&) to snapshot (tlaunch/state.hpp)");
  if (!store || !store->has(inst_))
    throw std::logic_error("ctx.snapshot(): node " + inst_.id() +
                           ": snapshots need --state-dir=DIR");
  if (!inst_.strand.running_in_this_thread())
    throw std::logic_error("ctx.snapshot(): node " + inst_.id() +
                           ": call it on the node's strand (from its run() or methods)");
  co_return store->write(inst_);
}

TLAUNCH_DECL std::uint32_t context::replicas() const noexcept {
  if (inst_.flat_id >= rt_.total_instances()) return inst_.replicas;  // spawned
  const rpc::node_info& n = rt_.node_of(inst_.flat_id);
  return n.elastic ? rt_.running(static_cast<std::uint32_t>(&n - rt_.nodes().data()))
                   : inst_.replicas;
}

namespace detail {
struct resize_reply {
  std::string refused;
  asio::steady_timer wake;
  explicit resize_reply(const rpc::strand_type& s)
      : wake(rpc::any_executor_of(s), asio::steady_timer::time_point::max()) {}
};
}  // namespace detail

TLAUNCH_DECL asio::awaitable<void> context::resize(std::string_view node, std::uint32_t n) {
  if (!rt_.resize)
    throw launch_error("ctx.resize(\"" + std::string(node) +
                       "\"): this launch cannot resize nodes (local_mt runs a fixed set; "
                       "launch with local_mp, ssh or slurm)");
  // The reply (from any thread) cancels a timer that waits on this node's strand.
  auto r = std::make_shared<detail::resize_reply>(inst_.strand);
  const std::string name(node);
  rt_.resize(name, n, [r, strand = inst_.strand](std::string refused) {
    asio::post(strand, [r, refused = std::move(refused)]() mutable {
      r->refused = std::move(refused);
      r->wake.cancel();
    });
  });
  std::error_code ec;
  co_await r->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  if (!r->refused.empty()) throw launch_error(r->refused);
}

TLAUNCH_DECL asio::awaitable<void> context::sleep_steady(std::chrono::steady_clock::duration d) {
  asio::steady_timer t(rpc::any_executor_of(inst_.strand), d);
  co_await t.async_wait(asio::use_awaitable);
}

TLAUNCH_DECL std::shared_ptr<context> detail::context_access::make(rpc::runtime& rt,
                                                                   rpc::instance& inst) {
  return std::shared_ptr<context>(new context(rt, inst));
}

}  // namespace tlaunch

#endif
