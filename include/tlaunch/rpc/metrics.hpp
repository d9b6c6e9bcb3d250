// What a process counts of its calls, always on: per edge (the calls this process makes
// to one instance's method) and per served method, and the user's own counters, gauges and
// histograms (tlaunch::context::metrics). A connection counts the calls it makes into blocks
// of its own (link_metrics), written under the connection's lock, which the call path takes
// anyway, without read-modify-write instructions. A served method counts into its
// instance's block (served_stats): its calls as the connections' readers take them, their
// ends as their replies leave, each io thread in a shard of its own. A registry per process (metrics_registry) keeps the live
// blocks and the totals of closed connections, and makes a sample (metrics_sample) on demand: the
// launcher asks every node process for one (wire::kind::metrics_request) and serves them
// (launch/observe/).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "io_thread.hpp"

namespace tlaunch::rpc {

// A count written by one thread at a time (a plain load and store: no locked instruction)
// and read by any.
class metric_count {
 public:
  void add(std::uint64_t n) {
    v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  std::uint64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> v_{0};
};

// Latency buckets: bucket k holds durations under 2^k microseconds (k < latency_buckets - 1);
// the last one holds the rest.
inline constexpr std::size_t latency_buckets = 25;
inline std::size_t latency_bucket(std::int64_t ns) {
  const auto us = static_cast<std::uint64_t>(ns < 0 ? 0 : ns) / 1000;
  return std::min<std::size_t>(static_cast<std::size_t>(std::bit_width(us)), latency_buckets - 1);
}

// Nanoseconds of the steady clock.
inline std::int64_t metrics_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// How a call ended: one this process made, as its connection saw it, or one it served, as
// it replied (reply, remote_error, timeout or bad_call).
enum class call_outcome : std::uint8_t {
  reply,         // the method's result
  remote_error,  // the method threw
  timeout,       // the callee saw the caller's deadline pass
  bad_call,      // refused: no such node or method, arguments that did not deserialize
  abandoned,     // the caller stopped waiting (its deadline, a cancellation)
  unavailable,   // the connection closed first
};
inline constexpr std::size_t call_outcomes = 6;

// One edge: calls to instance `target`'s method `method`, from this process.
struct call_stats {
  std::uint32_t target = 0;
  std::uint64_t method = 0;
  std::string name;  // "Service::method"
  metric_count calls, bytes_out, bytes_in, latency_ns;
  std::array<metric_count, call_outcomes> ended;
  std::array<metric_count, latency_buckets> latency;
};

// A served method's counts on one thread (served_stats).
struct served_shard {
  metric_count calls, bytes_in, bytes_out, duration_ns;
  std::array<metric_count, 4> ended;  // reply, remote_error, timeout, bad_call
  std::array<metric_count, latency_buckets> duration;

  // A reply of `bytes` on the wire, `ns` after the call arrived.
  void end(call_outcome o, std::size_t bytes, std::int64_t ns) {
    ended[std::min<std::size_t>(static_cast<std::size_t>(o), ended.size() - 1)].add(1);
    bytes_out.add(bytes);
    duration_ns.add(static_cast<std::uint64_t>(std::max<std::int64_t>(0, ns)));
    duration[latency_bucket(ns)].add(1);
  }
};

// Calls of instance `target`'s method `method` that this process served, from the call
// frame's arrival to its reply. Each hosted instance has one per method, made by the
// registry when the instance is hosted and kept for the process's life. Each io thread of
// the runtime that owns it counts into a shard of its own, with plain adds and no cache
// line shared with another thread (the calls arrive on the connections' readers and end
// wherever their replies are made); any other thread counts into the last shard, under a
// lock. A sample sums the shards.
class served_stats {
 public:
  served_stats(std::uint32_t t, std::uint64_t m, const void* owner, unsigned threads)
      : target(t), method(m), owner_(owner), threads_(owner ? threads : 0),
        shards_(std::make_unique<padded[]>(threads_ + 1)) {}

  // Runs f(shard) on the shard this thread counts into.
  template <class F>
  void update(F&& f) {
    if (current_runtime_thread == owner_ && current_io_index < threads_) [[likely]]
      return f(static_cast<served_shard&>(shards_[current_io_index]));
    std::lock_guard lk(other_mu_);
    f(static_cast<served_shard&>(shards_[threads_]));
  }

  template <class F>
  void for_each_shard(F&& f) const {
    for (unsigned i = 0; i <= threads_; ++i) f(static_cast<const served_shard&>(shards_[i]));
  }

  const std::uint32_t target;
  const std::uint64_t method;

 private:
  struct alignas(64) padded : served_shard {};
  const void* owner_;
  unsigned threads_;
  std::unique_ptr<padded[]> shards_;
  std::mutex other_mu_;
};

// One call being served: its id, its method's counts (null: not counted) and when it
// arrived (metrics_now(), read once per read of the connection).
struct served_call {
  std::uint64_t id = 0;
  served_stats* stats = nullptr;
  std::int64_t arrived = 0;
};

// One connection's counts of the calls it makes. Its entries are found by their writer (under
// the connection's lock) without mu, and added under mu, which a sample also takes.
class link_metrics {
 public:
  // Caller's side; under the connection's lock.
  call_stats* calls_to(std::uint32_t target, std::uint64_t method, std::string_view name) {
    if (last_call_ && last_call_->target == target && last_call_->method == method)
      return last_call_;
    for (auto& c : calls_)
      if (c->target == target && c->method == method) return last_call_ = c.get();
    auto c = std::make_unique<call_stats>();
    c->target = target;
    c->method = method;
    c->name = std::string(name);
    std::lock_guard lk(mu_);
    calls_.push_back(std::move(c));
    return last_call_ = calls_.back().get();
  }
  // A call's end; under the connection's lock.
  static void ended(call_stats& s, call_outcome o, std::int64_t started, std::int64_t now,
                    std::size_t reply_bytes) {
    s.ended[static_cast<std::size_t>(o)].add(1);
    if (o == call_outcome::abandoned || o == call_outcome::unavailable) return;
    s.bytes_in.add(reply_bytes);
    s.latency_ns.add(static_cast<std::uint64_t>(std::max<std::int64_t>(0, now - started)));
    s.latency[latency_bucket(now - started)].add(1);
  }
  template <class F>
  void visit(F&& on_call) const {
    std::lock_guard lk(mu_);
    for (const auto& c : calls_) on_call(*c);
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<call_stats>> calls_;
  call_stats* last_call_ = nullptr;
};

// ---- Samples: what a node process sends the launcher (cereal-serializable) --------------

struct call_sample {
  std::string callee;  // "ps/0"
  std::string method;  // "ParameterServer::get"
  std::uint64_t calls = 0, bytes_out = 0, bytes_in = 0, latency_ns = 0;
  std::vector<std::uint64_t> ended;    // by call_outcome
  std::vector<std::uint64_t> latency;  // by latency bucket, not cumulative
  // Calls started and not ended.
  std::uint64_t in_flight() const {
    std::uint64_t e = 0;
    for (auto n : ended) e += n;
    return calls > e ? calls - e : 0;
  }
  template <class A>
  void serialize(A& a) {
    a(callee, method, calls, bytes_out, bytes_in, latency_ns, ended, latency);
  }
};

struct served_sample {
  std::string instance, method;
  std::uint64_t calls = 0, bytes_in = 0, bytes_out = 0, duration_ns = 0;
  std::vector<std::uint64_t> ended;     // by call_outcome: reply, remote_error, timeout, bad_call
  std::vector<std::uint64_t> duration;  // by latency bucket, not cumulative; replied calls
  // Calls that arrived and have not been answered.
  std::uint64_t in_flight() const {
    std::uint64_t e = 0;
    for (auto n : ended) e += n;
    return calls > e ? calls - e : 0;
  }
  template <class A>
  void serialize(A& a) {
    a(instance, method, calls, bytes_in, bytes_out, duration_ns, ended, duration);
  }
};

// A user's histogram (tlaunch::context::metrics): its observations counted under each upper
// bound (not cumulative; the last count is of those above every bound), and their sum.
struct histogram_sample {
  std::string instance, name;
  std::vector<double> bounds;  // ascending
  std::vector<std::uint64_t> counts;  // bounds.size() + 1
  double sum = 0;
  template <class A>
  void serialize(A& a) {
    a(instance, name, bounds, counts, sum);
  }
};

// A user's metric (tlaunch::context::metrics).
struct user_sample {
  std::string instance, name;
  bool counter = true;  // else a gauge
  double value = 0;
  template <class A>
  void serialize(A& a) {
    a(instance, name, counter, value);
  }
};

struct metrics_sample {
  std::string process;  // the node process's role: "worker/0", or a group's "a/0,b/0"
  std::int64_t pid = 0;
  double cpu_seconds = 0;
  std::uint64_t rss_bytes = 0;
  std::uint32_t connections = 0;
  std::uint64_t unsent_bytes = 0;
  std::vector<call_sample> calls;
  std::vector<served_sample> served;
  std::vector<user_sample> user;
  std::vector<histogram_sample> histograms;
  template <class A>
  void serialize(A& a) {
    a(process, pid, cpu_seconds, rss_bytes, connections, unsent_bytes, calls, served, user,
      histograms);
  }
};

// ---- The process's registry ------------------------------------------------------------

// A user's counter or gauge: a value any thread may change.
class user_metric {
 public:
  void add(double d) {
    double v = value_.load(std::memory_order_relaxed);
    while (!value_.compare_exchange_weak(v, v + d, std::memory_order_relaxed)) {
    }
  }
  void set(double d) { value_.store(d, std::memory_order_relaxed); }
  double get() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A user's histogram: counts any thread may add to (a relaxed atomic increment each).
class user_histogram {
 public:
  explicit user_histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  // Counts x under the first bound it does not exceed (Prometheus's `le`); NaN is not counted.
  void observe(double x) {
    if (x != x) return;
    const auto k = static_cast<std::size_t>(
        std::lower_bound(bounds_.begin(), bounds_.end(), x) - bounds_.begin());
    counts_[k].fetch_add(1, std::memory_order_relaxed);
    double v = sum_.load(std::memory_order_relaxed);
    while (!sum_.compare_exchange_weak(v, v + x, std::memory_order_relaxed)) {
    }
  }
  const std::vector<double>& bounds() const { return bounds_; }
  std::uint64_t count() const {
    std::uint64_t n = 0;
    for (const auto& c : counts_) n += c.load(std::memory_order_relaxed);
    return n;
  }
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  void sample_into(histogram_sample& out) const {
    out.bounds = bounds_;
    out.counts.clear();
    for (const auto& c : counts_) out.counts.push_back(c.load(std::memory_order_relaxed));
    out.sum = sum();
  }

 private:
  std::vector<double> bounds_;
  std::vector<std::atomic<std::uint64_t>> counts_;
  std::atomic<double> sum_{0};
};

class metrics_registry {
 public:
  // A connection's block, kept until link_closed folds it into the totals.
  std::shared_ptr<link_metrics> open_link() {
    auto l = std::make_shared<link_metrics>();
    std::lock_guard lk(mu_);
    live_.push_back(l);
    return l;
  }
  void link_closed(const std::shared_ptr<link_metrics>& l) {
    std::lock_guard lk(mu_);
    auto it = std::find(live_.begin(), live_.end(), l);
    if (it == live_.end()) return;
    add_to(closed_calls_, *l);
    live_.erase(it);
  }

  // The counts of instance `target`'s method `method` as this process serves it (made on
  // first use, kept for the process's life: a restarted instance counts on), sharded for
  // `threads` io threads of runtime `owner` (rpc/io_thread.hpp; none: every count takes a
  // lock). Asked for when an instance is hosted, for the methods of its type only.
  served_stats* served(std::uint32_t target, std::uint64_t method, const void* owner = nullptr,
                       unsigned threads = 0) {
    std::lock_guard lk(mu_);
    auto& e = served_[{target, method}];
    if (!e) e = std::make_unique<served_stats>(target, method, owner, threads);
    return e.get();
  }

  // The user's counter (or gauge) `name` of instance `instance` (made on first use; never
  // removed). A counter and a gauge of one name are two metrics.
  user_metric& user(const std::string& instance, const std::string& name, bool counter) {
    std::lock_guard lk(mu_);
    auto& e = user_[{instance, name, counter}];
    if (!e) e = std::make_unique<user_metric>();
    return *e;
  }

  // The user's histogram `name` of instance `instance`, with these upper bounds (made on
  // first use; never removed). Asking again with other bounds throws std::invalid_argument.
  user_histogram& histogram(const std::string& instance, const std::string& name,
                            const std::vector<double>& bounds) {
    std::lock_guard lk(mu_);
    auto& e = histograms_[{instance, name}];
    if (!e) e = std::make_unique<user_histogram>(bounds);
    if (e->bounds() != bounds)
      throw std::invalid_argument("the histogram \"" + name + "\" of " + instance +
                                  " was made with other bucket bounds");
    return *e;
  }

  // Every count so far; names of targets and served methods through the functions given.
  template <class InstanceName, class MethodName>
  void sample_into(metrics_sample& out, InstanceName&& instance_name,
                   MethodName&& served_method_name) const {
    call_totals calls;
    std::vector<std::pair<key, served_sample>> served;
    std::vector<std::pair<std::pair<std::string, std::string>, std::pair<bool, double>>> user;
    {
      std::lock_guard lk(mu_);
      calls = closed_calls_;
      for (const auto& l : live_) add_to(calls, *l);
      for (const auto& [k, v] : served_) {
        served_sample x;
        x.ended.assign(4, 0);
        x.duration.assign(latency_buckets, 0);
        v->for_each_shard([&](const served_shard& sh) {
          x.calls += sh.calls.get();
          x.bytes_in += sh.bytes_in.get();
          x.bytes_out += sh.bytes_out.get();
          x.duration_ns += sh.duration_ns.get();
          for (std::size_t i = 0; i < x.ended.size(); ++i) x.ended[i] += sh.ended[i].get();
          for (std::size_t i = 0; i < latency_buckets; ++i) x.duration[i] += sh.duration[i].get();
        });
        served.emplace_back(k, std::move(x));
      }
      for (const auto& [k, v] : user_)
        user.push_back({{std::get<0>(k), std::get<1>(k)}, {std::get<2>(k), v->get()}});
      for (const auto& [k, v] : histograms_) {
        histogram_sample h;
        h.instance = k.first;
        h.name = k.second;
        v->sample_into(h);
        out.histograms.push_back(std::move(h));
      }
    }
    for (const auto& [k, v] : calls) {
      call_sample c;
      c.callee = instance_name(k.first);
      c.method = v.name;
      c.calls = v.calls;
      c.bytes_out = v.bytes_out;
      c.bytes_in = v.bytes_in;
      c.latency_ns = v.latency_ns;
      c.ended.assign(v.ended.begin(), v.ended.end());
      c.latency.assign(v.latency.begin(), v.latency.end());
      out.calls.push_back(std::move(c));
    }
    for (auto& [k, v] : served) {
      v.instance = instance_name(k.first);
      v.method = served_method_name(k.first, k.second);
      out.served.push_back(std::move(v));
    }
    for (const auto& [k, v] : user) out.user.push_back({k.first, k.second, v.first, v.second});
  }

 private:
  struct call_total {
    std::string name;
    std::uint64_t calls = 0, bytes_out = 0, bytes_in = 0, latency_ns = 0;
    std::array<std::uint64_t, call_outcomes> ended{};
    std::array<std::uint64_t, latency_buckets> latency{};
  };
  using key = std::pair<std::uint32_t, std::uint64_t>;
  using call_totals = std::map<key, call_total>;

  static void add_to(call_totals& calls, const link_metrics& l) {
    l.visit([&](const call_stats& s) {
      auto& t = calls[{s.target, s.method}];
      t.name = s.name;
      t.calls += s.calls.get();
      t.bytes_out += s.bytes_out.get();
      t.bytes_in += s.bytes_in.get();
      t.latency_ns += s.latency_ns.get();
      for (std::size_t i = 0; i < call_outcomes; ++i) t.ended[i] += s.ended[i].get();
      for (std::size_t i = 0; i < latency_buckets; ++i) t.latency[i] += s.latency[i].get();
    });
  }

  mutable std::mutex mu_;
  std::vector<std::shared_ptr<link_metrics>> live_;
  call_totals closed_calls_;
  std::map<key, std::unique_ptr<served_stats>> served_;
  std::map<std::tuple<std::string, std::string, bool>, std::unique_ptr<user_metric>> user_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<user_histogram>> histograms_;
};

}  // namespace tlaunch::rpc
