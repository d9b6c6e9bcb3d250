// The per-process runtime: one io_context run by a small pool, the node
// instances this process hosts, the directory of every instance's address, and
// the connections to other processes. Launch types configure it through hooks.
#pragma once

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../detail/config.hpp"
#include "../node_options.hpp"
#include "connection_api.hpp"
#include "instance.hpp"
#include "io_thread.hpp"
#include "metrics.hpp"
#include "trace.hpp"

namespace tlaunch::rpc {

// A node of the program as the runtime sees it.
struct node_info {
  std::string_view name;
  std::string_view type_name;
  // The flat ids the node takes: its replicas, or with .elastic(max) the most it may run.
  std::uint32_t replicas = 1;
  // How many run at launch (replicas unless elastic); an elastic node's running count
  // changes with resize (docs/guide/elastic.md), the rest of its ids wait unused.
  std::uint32_t initial = 1;  // read only when elastic
  bool elastic = false;
  bool has_run = false;
  std::uint32_t first = 0;  // flat id of replica 0
  // node<...>().env(KEY, VALUE) in program order; VALUE may hold "{index}".
  std::vector<std::pair<std::string_view, std::string_view>> env;
  node_resources resources;
  restart_policy restart{};
  snapshot_policy snapshot{};
};

// Every instance of every node: the size of the flat id space.
inline std::uint32_t instance_count(const std::vector<node_info>& nodes) {
  std::uint32_t n = 0;
  for (const auto& i : nodes) n += i.replicas;
  return n;
}

// A process's runtime: its connections' settings (rpc/connection_api.hpp) and its own.
struct runtime_options : rpc::connection_settings {
  unsigned threads = 2;
  bool force_wire = false;  // local calls go over TCP too (tests)
  std::chrono::milliseconds grace{5000};
  // io threads poll this long before sleeping (0: they sleep at once); see run_io.
  std::chrono::microseconds busy_poll{0};
  std::vector<std::string> user_args;
  // Snapshots (rpc/snapshots.hpp): none without a state directory.
  std::string state_dir;
  bool resume = false;
  std::chrono::milliseconds snapshot_every{-1};  // negative: each node's own policy
};

// The connection_config of a process whose connections follow s, with its launch secret
// and name; `peers` other processes may connect at once and never count against
// s.max_unauthenticated's cap (the cap is at least peers + 64).
TLAUNCH_DECL std::shared_ptr<connection_config> make_connection_config(
    const connection_settings& s, std::vector<std::uint8_t> secret, std::string name,
    std::size_t peers);

class snapshot_store;

class runtime final : public rpc::connection_sink {
 public:
  runtime(std::vector<node_info> nodes, runtime_options opt, std::vector<std::uint8_t> secret,
          std::string self_name);

  ~runtime() override;

  asio::io_context io;

  // ----- program shape -------------------------------------------------------------

  const std::vector<node_info>& nodes() const { return nodes_; }
  std::uint32_t total_instances() const { return total_; }
  const runtime_options& options() const { return opt_; }
  const node_info& node_of(std::uint32_t flat) const {
    for (std::size_t i = nodes_.size(); i-- > 0;)
      if (nodes_[i].first <= flat) return nodes_[i];
    return nodes_.front();
  }
  std::string instance_id(std::uint32_t flat) const;

  // ----- metrics (rpc/metrics.hpp) ---------------------------------------------------

  // This process's counts now, as the process `process` ("worker/0"): its calls by edge,
  // the calls it served, its users' metrics, CPU, memory, connections and unsent bytes.
  metrics_sample sample_metrics(const std::string& process) const;
  metrics_registry& metrics() const;

  // ----- hosting ---------------------------------------------------------------------

  rpc::instance& host(std::uint32_t flat);
  // Sets the methods inst serves, each with its counts in this process's registry.
  void serve_methods(rpc::instance& inst, std::span<const dispatch_entry> methods);
  // An in-process actor created at run time (context::spawn); never in the directory.
  rpc::instance& host_dynamic(std::string_view type_name);
  rpc::instance* hosted(std::uint32_t flat) const {
    return flat < total_ ? hosted_[flat].get() : nullptr;
  }
  // The instance to call directly, or null when the call must go over the wire.
  rpc::instance* local(std::uint32_t flat) const {
    return opt_.force_wire ? nullptr : hosted(flat);
  }
  template <class F>
  void for_each_hosted(F&& f) {
    for (auto& i : hosted_)
      if (i) f(*i);
  }

  // ----- state (rpc/snapshots.hpp) ---------------------------------------------------

  // The store of this process's snapshots; null without a state directory.
  snapshot_store* snapshots() const { return snapshots_.get(); }
  // Before the hosted instances serve or run: marks each as start `incarnation` of its
  // instance and, with a state directory, loads the latest snapshot of each that has
  // state when there is one to load. Throws (naming the instance and the file) when a
  // snapshot is refused.
  void restore_states(std::uint32_t incarnation);

  // ----- directory and connections ----------------------------------------------------

  // Binds ip:0 and starts accepting; returns "ip:port". Call before any connection.
  std::string listen(const std::string& ip);
  const std::string& listen_address() const { return listen_address_; }
  std::string listen_host() const;
  std::shared_ptr<const rpc::connection_config> config() const { return cfg_; }
  // --trace: the process's spans (rpc/trace.hpp); null when it records none.
  std::shared_ptr<trace_recorder> traces() const;

  void set_directory(std::vector<std::string> addresses);

  // A later directory: an instance was restarted at a new address. Connections to an
  // address that changed are closed (calls in flight on them fail as unavailable) and
  // the next call dials the new one.
  // "" for an instance that had an address: it is being restarted, and calls to it
  // wait for the next update (park_call).
  void update_directory(std::vector<std::string> addresses);

  // ----- elastic nodes (docs/guide/elastic.md) ----------------------------------------

  // How many replicas of node `node` (its index) run now: its initial count until a
  // directory with counts changes it.
  std::uint32_t running(std::uint32_t node) const {
    return running_[node].load(std::memory_order_acquire);
  }
  // Whether `flat` is a replica of an elastic node that does not run now (removed by a
  // resize, or not started yet): a call to it fails at once with tlaunch::removed.
  bool removed(std::uint32_t flat) const {
    if (!elastic_ || flat >= total_) return false;
    const node_info& n = node_of(flat);
    return n.elastic &&
           flat - n.first >= running(static_cast<std::uint32_t>(&n - nodes_.data()));
  }
  // Held while a broadcast to an elastic node reads its running count and sends its calls
  // (they are flushed before it is released): a membership update waits for it, so each
  // peer connection carries every call of the old membership before the update's fence.
  class membership_guard {
   public:
    explicit membership_guard(runtime& rt);
    ~membership_guard();
    membership_guard(const membership_guard&) = delete;
    membership_guard& operator=(const membership_guard&) = delete;

   private:
    runtime& rt_;
  };
  // The running count of every node as of membership epoch `epoch` (the coordinator's
  // directory after a resize). Then every peer connection gets a fence (wire::kind::fence)
  // with the epoch: no call this process starts after it goes to a replica removed by then.
  void update_membership(const std::vector<std::uint32_t>& counts, std::uint64_t epoch);
  std::uint64_t membership_epoch() const { return epoch_.load(std::memory_order_acquire); }
  // A replica hosted here that a resize removes: once every peer connection open now has
  // brought a fence of `epoch` (or closed), and every call its hosted instances were
  // serving then has been answered, or `max` passed, its instances stop serving (a later
  // call is answered with tlaunch::removed). "" when all that came in time; else what
  // was still missing after `max`.
  std::string retire(std::uint64_t epoch, std::chrono::milliseconds max);
  // ctx.resize(node, n): set by the launch type; `done` gets "" or why it was refused,
  // from any thread.
  std::function<void(const std::string& node, std::uint32_t n,
                      std::function<void(std::string)> done)>
      resize;

  // Whether the directory says `flat` is being restarted.
  bool restarting(std::uint32_t flat) const;
  // A call to an instance being restarted waits: `resume(true)` once its new address
  // is known, `resume(false)` when this process stops first. False (nothing kept) when
  // it is not being restarted (any more) or the process is stopping.
  bool park_call(std::uint32_t flat, std::function<void(bool)> resume);

  // The connection to the process hosting `flat`, opened on first use.
  // Empty with a reason when there is no address for it.
  std::shared_ptr<rpc::connection> connection_to(std::uint32_t flat, std::string& why);

  // The same for a call about to be sent. On this runtime's io threads it comes
  // from the thread's own cache, without the lock or a reference count: `hold`
  // stays empty and the pointer is valid until this thread asks again. Elsewhere
  // `hold` keeps the connection.
  rpc::connection* connection_for(std::uint32_t flat, std::string& why,
                                  std::shared_ptr<rpc::connection>& hold);

  // A connection to an address outside the directory (the coordinator).
  std::shared_ptr<rpc::connection> connect(const std::string& address);

  // ----- threads ---------------------------------------------------------------------

  static unsigned io_thread_count(const runtime_options& o) { return o.threads == 0 ? 1 : o.threads; }

  void start_threads();

  // An io thread's loop. With busy polling on, the thread keeps polling for that
  // long after its last handler before it sleeps in the reactor, so a reply that
  // arrives meanwhile is handled without a wake-up (which costs tens of
  // microseconds on some virtual machines) at the price of a busy core.
  void run_io();

  // Changes busy polling for this process's io threads (0: off).
  void set_busy_poll(std::chrono::microseconds d);
  std::chrono::microseconds busy_poll() const {
    return std::chrono::microseconds(busy_poll_us_.load(std::memory_order_relaxed));
  }

  bool on_io_thread() const { return current_runtime_thread != nullptr; }
  // On this runtime's only io thread: nothing else can run while a handler does,
  // so a local plain method may run at once instead of being queued.
  bool on_only_io_thread() const { return opt_.threads <= 1 && current_runtime_thread == this; }

  // Lets the io_context finish once it runs out of work, then joins the pool.
  void release_and_join();

  void shutdown();

  void close_all(const std::string& reason);

  // ----- hooks set by the launch type ----------------------------------------------

  // ctx.stop_program()
  std::function<void()> stop_program;
  // A run() body finished (null exception: returned normally).
  std::function<void(rpc::instance&, std::exception_ptr)> run_finished;
  // ctx.log() lines.
  std::function<void(const rpc::instance&, std::string_view)> log_line;
  // Control frames (coordinator protocol) and connection closes.
  std::function<void(const std::shared_ptr<rpc::connection>&, const wire::frame_header&,
                     std::span<const char>)>
      control;
  std::function<void(const std::shared_ptr<rpc::connection>&, const std::string&)> closed;

  // Starts the run() body of every hosted instance that has one.
  void start_runs();

  bool stop_requested() const { return stopping_.load(); }

  // The program is stopping (the coordinator said so): tells every peer connected now, or
  // later, with wire::kind::stopping, before any connection closes, so that their calls
  // to this process that fail from now on fail as tlaunch::stopping.
  void announce_stop();
  // This process knows the program is stopping: announce_stop(), or a peer's stopping frame.
  bool program_stopping() const;
  // Waits until what every connection has queued reached its socket, for at most `max`:
  // the directory's and accepted connections, and `also` (connect()'s, which are not kept).
  void drain_writes(std::chrono::milliseconds max,
                    const std::vector<std::shared_ptr<rpc::connection>>& also = {});

  // Cancels every run() body and wakes ctx.stopped() waiters; idempotent.
  void stop_instances();
  // Registered by each context so that stop_instances() can wake it.
  void add_stop_waker(std::function<void()> w);

  // ----- connection_sink ------------------------------------------------------------

  void on_call(rpc::connection& c, const wire::frame_header& h,
               std::span<const char> payload) override;
  void on_control(const std::shared_ptr<rpc::connection>& c, const wire::frame_header& h,
                  std::span<const char> payload) override;
  void on_ready(const std::shared_ptr<rpc::connection>& c) override;
  void on_closed(const std::shared_ptr<rpc::connection>& c, const std::string& reason) override;
  void log(const std::string& message) override;

 private:
  std::vector<node_info> nodes_;
  runtime_options opt_;
  std::uint32_t total_ = 0;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::atomic<std::int64_t> busy_poll_us_;  // see run_io
  // The listening socket and its accept loop (rpc/accept_loop.hpp), defined with the
  // members below: a program's files parse no socket.
  struct listener;
  std::unique_ptr<listener> listener_;
  std::shared_ptr<const rpc::connection_config> cfg_;
  std::string listen_address_;
  std::vector<std::unique_ptr<rpc::instance>> hosted_;
  std::vector<std::unique_ptr<rpc::instance>> dynamic_;
  std::unique_ptr<snapshot_store> snapshots_;  // destroyed before the instances it keeps

  mutable std::mutex mu_;
  std::vector<std::string> addresses_;
  std::vector<std::shared_ptr<rpc::connection>> conn_by_flat_;
  std::vector<bool> restarting_;                                 // see update_directory
  std::vector<std::vector<std::function<void(bool)>>> parked_;  // see park_call
  // Per io thread (index current_io_index), touched only by that thread: the
  // connections its calls went out on. Destroyed before io.
  std::vector<std::vector<std::shared_ptr<rpc::connection>>> thread_cache_;
  std::unordered_map<std::string, std::shared_ptr<rpc::connection>> by_address_;
  std::vector<std::shared_ptr<rpc::connection>> accepted_;
  std::vector<std::thread> threads_;
  std::vector<std::function<void()>> stop_wakers_;
  // Elastic nodes: each node's running count, the membership epoch, and the lock a
  // broadcast holds while it sends (membership_guard).
  std::unique_ptr<std::atomic<std::uint32_t>[]> running_;
  bool elastic_ = false;
  std::atomic<std::uint64_t> epoch_{0};
  std::shared_mutex membership_mu_;
  // The connections to and from other node processes (not connect()'s).
  std::vector<std::shared_ptr<rpc::connection>> peer_connections() const;
  std::atomic<bool> stopping_{false}, shut_down_{false};
  bool announced_ = false;  // announce_stop() was called; under mu_
};

}  // namespace tlaunch::rpc

// runtime's members that are not templates, defined here: inline in every translation unit,
// or, with TLAUNCH_SEPARATE_COMPILATION, compiled once where tlaunch/impl/src.hpp is
// included (a program's own files then neither parse nor compile them).
#if TLAUNCH_HEADER_DEFINITIONS
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include <asio/ip/tcp.hpp>

#include "../detail/build_id.hpp"
#include "accept_loop.hpp"
#include "connection.hpp"
#include "read_batch.hpp"
#include "snapshots.hpp"

namespace tlaunch::rpc {

struct runtime::listener {
  explicit listener(runtime& rt)
      : acceptor(rt.io),
        loop(
            acceptor, [&rt](asio::ip::tcp::socket s) { accepted(rt, std::move(s)); },
            [&rt](const std::string& line) { rt.log(line); }, nullptr) {}

  static void accepted(runtime& rt, asio::ip::tcp::socket s) {
    auto c = rpc::connection::accept(std::move(s), rt.cfg_, &rt);
    if (!c) return;  // too many strangers: closed at once
    std::lock_guard lk(rt.mu_);
    // Closed already (on another io thread): on_closed has looked for it.
    if (!c->closed()) rt.accepted_.push_back(c);
  }

  asio::ip::tcp::acceptor acceptor;
  rpc::accept_loop loop;
};

TLAUNCH_DECL std::shared_ptr<connection_config> make_connection_config(
    const connection_settings& s, std::vector<std::uint8_t> secret, std::string name,
    std::size_t peers) {
  auto cfg = std::make_shared<connection_config>();
  cfg->secret = std::move(secret);
  cfg->build_id = tlaunch::detail::self_build_id();
  cfg->name = std::move(name);
  cfg->max_frame = s.max_frame;
  cfg->handshake_timeout = s.handshake_timeout;
  cfg->heartbeat = s.heartbeat;
  cfg->liveness = s.liveness;
  if (s.tls) cfg->tls = std::make_shared<const tls_context>(cfg->secret);
  if (s.trace_sample >= 0) cfg->trace = std::make_shared<trace_recorder>(s.trace_sample);
  cfg->max_unauthenticated = static_cast<std::uint32_t>(
      std::max<std::size_t>(s.max_unauthenticated, peers + 64));
  return cfg;
}

TLAUNCH_DECL runtime::runtime(std::vector<node_info> nodes, runtime_options opt,
                              std::vector<std::uint8_t> secret, std::string self_name)
    : io(static_cast<int>(io_thread_count(opt))),
      nodes_(std::move(nodes)),
      opt_(std::move(opt)),
      work_(asio::make_work_guard(io)),
      busy_poll_us_(opt_.busy_poll.count() < 0 ? 0 : opt_.busy_poll.count()),
      listener_(std::make_unique<listener>(*this)) {
  std::uint32_t total = 0;
  running_ = std::make_unique<std::atomic<std::uint32_t>[]>(nodes_.size());
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    auto& n = nodes_[i];
    n.first = total;
    total += n.replicas;
    running_[i].store(n.elastic ? n.initial : n.replicas, std::memory_order_relaxed);
    elastic_ = elastic_ || n.elastic;
  }
  total_ = total;
  hosted_.resize(total);
  addresses_.resize(total);
  conn_by_flat_.resize(total);
  restarting_.assign(total, false);
  parked_.resize(total);
  // Every other process may connect at once.
  auto cfg = make_connection_config(opt_, std::move(secret), std::move(self_name), total);
  cfg->single_io_thread = opt_.threads <= 1;
  cfg->busy_poll_us = &busy_poll_us_;
  cfg_ = std::move(cfg);
  if (!opt_.state_dir.empty())
    snapshots_ = std::make_unique<snapshot_store>(
        opt_.state_dir, snapshot_store::launch_id_of(cfg_->secret), opt_.resume,
        [](const std::string& line) { std::fprintf(stderr, "tlaunch: %s\n", line.c_str()); });
}

TLAUNCH_DECL runtime::~runtime() { shutdown(); }

TLAUNCH_DECL void runtime::restore_states(std::uint32_t incarnation) {
  if (snapshots_ && incarnation == 0) snapshots_->check_resumable();
  for (auto& i : hosted_) {
    if (!i) continue;
    i->incarnation = incarnation;
    if (!snapshots_ || !i->state) continue;
    snapshots_->add(*i, node_of(i->flat_id).snapshot, opt_.snapshot_every);
    snapshots_->restore(*i);
  }
}

TLAUNCH_DECL std::string runtime::instance_id(std::uint32_t flat) const {
  if (flat >= total_) return "spawned#" + std::to_string(flat - total_);
  const auto& n = node_of(flat);
  return std::string(n.name) + "/" + std::to_string(flat - n.first);
}

TLAUNCH_DECL metrics_registry& runtime::metrics() const { return *cfg_->metrics; }

TLAUNCH_DECL std::shared_ptr<trace_recorder> runtime::traces() const { return cfg_->trace; }

TLAUNCH_DECL metrics_sample runtime::sample_metrics(const std::string& process) const {
  metrics_sample s;
  s.process = process;
  s.pid = static_cast<std::int64_t>(::getpid());
  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) == 0)
    s.cpu_seconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                    static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    unsigned long long size = 0, resident = 0;
    if (std::fscanf(f, "%llu %llu", &size, &resident) == 2)
      s.rss_bytes = resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    std::fclose(f);
  }
  {
    std::lock_guard lk(mu_);
    auto count = [&](const std::shared_ptr<rpc::connection>& c) {
      if (!c || c->closed()) return;
      ++s.connections;
      s.unsent_bytes += c->unsent_bytes();
    };
    for (const auto& [address, c] : by_address_) count(c);
    for (const auto& c : accepted_) count(c);
  }
  cfg_->metrics->sample_into(
      s, [this](std::uint32_t flat) { return instance_id(flat); },
      [this](std::uint32_t flat, std::uint64_t method) -> std::string {
        if (const rpc::instance* i = hosted(flat))
          if (const dispatch_entry* e = i->find(method)) return std::string(e->name);
        return "#" + std::to_string(method);
      });
  return s;
}

TLAUNCH_DECL void runtime::serve_methods(rpc::instance& inst,
                                         std::span<const dispatch_entry> methods) {
  inst.methods = methods;
  inst.served.clear();
  for (const auto& e : methods)
    inst.served.push_back(
        cfg_->metrics->served(inst.flat_id, e.id, this, io_thread_count(opt_)));
}

TLAUNCH_DECL rpc::instance& runtime::host(std::uint32_t flat) {
  const auto& n = node_of(flat);
  hosted_[flat] = std::make_unique<rpc::instance>(io, n.name, flat - n.first, n.replicas, flat);
  hosted_[flat]->metrics = cfg_->metrics.get();
  hosted_[flat]->type_name = n.type_name;
  return *hosted_[flat];
}

TLAUNCH_DECL rpc::instance& runtime::host_dynamic(std::string_view type_name) {
  std::lock_guard lk(mu_);
  auto id = total_ + static_cast<std::uint32_t>(dynamic_.size());
  dynamic_.push_back(std::make_unique<rpc::instance>(io, "spawned", id - total_, 1, id));
  dynamic_.back()->metrics = cfg_->metrics.get();
  dynamic_.back()->type_name = type_name;
  return *dynamic_.back();
}

TLAUNCH_DECL std::string runtime::listen(const std::string& ip) {
  asio::ip::tcp::endpoint ep(asio::ip::make_address(ip), 0);
  auto& acceptor = listener_->acceptor;
  acceptor.open(ep.protocol());
  ::fcntl(acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  acceptor.set_option(asio::socket_base::reuse_address(true));
  acceptor.bind(ep);
  acceptor.listen();
  auto port = acceptor.local_endpoint().port();
  listen_address_ = (ep.address().is_v6() ? "[" + ip + "]" : ip) + ":" + std::to_string(port);
  auto cfg = std::make_shared<rpc::connection_config>(*cfg_);
  cfg->listen_address = listen_address_;
  cfg_ = std::move(cfg);
  listener_->loop.start();
  return listen_address_;
}

TLAUNCH_DECL std::string runtime::listen_host() const {
  auto c = listen_address_.rfind(':');
  return c == std::string::npos ? std::string("127.0.0.1") : listen_address_.substr(0, c);
}

TLAUNCH_DECL void runtime::set_directory(std::vector<std::string> addresses) {
  std::lock_guard lk(mu_);
  addresses_ = std::move(addresses);
  addresses_.resize(total_);
}

TLAUNCH_DECL void runtime::update_directory(std::vector<std::string> addresses) {
  addresses.resize(total_);
  std::vector<std::shared_ptr<rpc::connection>> stale;
  std::vector<std::function<void(bool)>> resume;
  {
    std::lock_guard lk(mu_);
    for (std::uint32_t f = 0; f < total_; ++f) {
      if (addresses_[f] == addresses[f]) continue;
      if (addresses[f].empty()) {
        // A replica a resize removed is not coming back: calls to it fail at once.
        restarting_[f] = !removed(f);
      } else {
        restarting_[f] = false;
        for (auto& r : parked_[f]) resume.push_back(std::move(r));
        parked_[f].clear();
      }
      if (auto it = by_address_.find(addresses_[f]); it != by_address_.end()) {
        stale.push_back(it->second);
        by_address_.erase(it);
      }
      if (conn_by_flat_[f]) stale.push_back(std::move(conn_by_flat_[f]));
      conn_by_flat_[f].reset();
    }
    addresses_ = std::move(addresses);
  }
  for (auto& c : stale) c->close("its node instance was restarted at a new address");
  for (auto& r : resume) asio::post(io, [r = std::move(r)] { r(true); });
}

TLAUNCH_DECL bool runtime::restarting(std::uint32_t flat) const {
  std::lock_guard lk(mu_);
  return flat < total_ && restarting_[flat];
}

TLAUNCH_DECL bool runtime::park_call(std::uint32_t flat, std::function<void(bool)> resume) {
  std::lock_guard lk(mu_);
  if (flat >= total_ || !restarting_[flat] || stopping_) return false;
  parked_[flat].push_back(std::move(resume));
  return true;
}

TLAUNCH_DECL std::shared_ptr<rpc::connection> runtime::connection_to(std::uint32_t flat,
                                                                     std::string& why) {
  std::lock_guard lk(mu_);
  if (flat >= total_) {
    why = "no such node instance";
    return nullptr;
  }
  auto& c = conn_by_flat_[flat];
  if (c && !c->closed()) return c;
  const std::string& addr = addresses_[flat];
  if (addr.empty()) {
    why = "its address is not known (the program has not started or has stopped, or the "
          "instance is being restarted)";
    return nullptr;
  }
  auto it = by_address_.find(addr);
  if (it != by_address_.end() && !it->second->closed()) {
    c = it->second;
    return c;
  }
  c = rpc::connection::connect(io, addr, cfg_, this);
  by_address_[addr] = c;
  return c;
}

TLAUNCH_DECL rpc::connection* runtime::connection_for(std::uint32_t flat, std::string& why,
                                                     std::shared_ptr<rpc::connection>& hold) {
  if (elastic_ && removed(flat)) [[unlikely]] {
    why = "a resize removed it (" + std::string(node_of(flat).name) + " runs " +
          std::to_string(running(static_cast<std::uint32_t>(&node_of(flat) - nodes_.data()))) +
          " replicas now)";
    return nullptr;
  }
  if (current_runtime_thread == this && flat < total_) {
    auto& slot = thread_cache_[current_io_index][flat];
    if (!slot || slot->closed()) slot = connection_to(flat, why);
    return slot.get();
  }
  hold = connection_to(flat, why);
  return hold.get();
}

TLAUNCH_DECL std::shared_ptr<rpc::connection> runtime::connect(const std::string& address) {
  auto c = rpc::connection::connect(io, address, cfg_, this);
  c->mark_not_peer();
  return c;
}

TLAUNCH_DECL std::vector<std::shared_ptr<rpc::connection>> runtime::peer_connections() const {
  std::vector<std::shared_ptr<rpc::connection>> all;
  {
    std::lock_guard lk(mu_);
    for (auto& [a, c] : by_address_)
      if (c && c->is_peer()) all.push_back(c);
    for (auto& c : accepted_)
      if (c && c->is_peer()) all.push_back(c);
  }
  // An accepted connection may also be known by its peer's address: once each.
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

TLAUNCH_DECL void runtime::start_threads() {
  unsigned n = io_thread_count(opt_);
  thread_cache_.assign(n, std::vector<std::shared_ptr<rpc::connection>>(total_));
  for (unsigned i = 0; i < n; ++i)
    threads_.emplace_back([this, i] {
      current_runtime_thread = this;
      current_io_index = i;
      run_io();
    });
}

TLAUNCH_DECL void runtime::run_io() {
  using clock = std::chrono::steady_clock;
  while (!io.stopped()) {
    auto spin = std::chrono::microseconds(busy_poll_us_.load(std::memory_order_relaxed));
    if (spin.count() == 0) {
      // Returns when the poll setting changes (a posted handler) or work runs out.
      if (io.run_one() == 0) break;
      continue;
    }
    if (io.poll() > 0) continue;
    bool ran = false;
    // Also ends when polling is turned off: another thread may have run the
    // handlers set_busy_poll posted.
    for (auto until = clock::now() + spin;
         !io.stopped() && clock::now() < until &&
         busy_poll_us_.load(std::memory_order_relaxed) != 0;)
      if (io.poll() > 0) {
        ran = true;
        break;
      }
    if (!ran && !io.stopped() && io.run_one() == 0) break;
  }
}

TLAUNCH_DECL void runtime::set_busy_poll(std::chrono::microseconds d) {
  busy_poll_us_.store(d.count() < 0 ? 0 : d.count(), std::memory_order_relaxed);
  // Wake threads sleeping in the reactor, so they see it.
  unsigned n = io_thread_count(opt_);
  for (unsigned i = 0; i < n; ++i) asio::post(io, [] {});
}

TLAUNCH_DECL void runtime::release_and_join() {
  work_.reset();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

TLAUNCH_DECL void runtime::shutdown() {
  if (shut_down_.exchange(true)) return;
  {
    std::error_code ec;
    asio::post(io, [this] {
      std::error_code ec2;
      listener_->loop.stop();
      listener_->acceptor.close(ec2);
    });
  }
  close_all("process is stopping");
  work_.reset();
  io.stop();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

TLAUNCH_DECL void runtime::close_all(const std::string& reason) {
  std::vector<std::shared_ptr<rpc::connection>> all;
  {
    std::lock_guard lk(mu_);
    for (auto& [a, c] : by_address_) all.push_back(c);
    for (auto& c : accepted_) all.push_back(c);
    by_address_.clear();
    accepted_.clear();
    for (auto& c : conn_by_flat_) c.reset();
  }
  for (auto& c : all) c->close(reason);
}

TLAUNCH_DECL void runtime::start_runs() {
  for_each_hosted([](rpc::instance& i) {
    if (i.start_run) i.start_run(i);
  });
}

TLAUNCH_DECL void runtime::add_stop_waker(std::function<void()> w) {
  {
    std::lock_guard lk(mu_);
    if (!stopping_) {
      stop_wakers_.push_back(std::move(w));
      return;
    }
  }
  w();
}

TLAUNCH_DECL void runtime::on_call(rpc::connection& c, const wire::frame_header& h,
                                   std::span<const char> payload) {
  rpc::instance* inst = hosted(h.target);
  if (!inst) {
    rpc::reply_error(c, h.call_id, wire::error_code::no_such_node,
                     "this process does not host instance " + instance_id(h.target));
    return;
  }
  if (inst->retired.load(std::memory_order_acquire)) [[unlikely]] {
    rpc::reply_error(c, h.call_id, wire::error_code::removed,
                     "a resize removed instance " + inst->id());
    return;
  }
  const rpc::dispatch_entry* e = inst->find(h.method);
  if (!e) {
    rpc::reply_error(c, h.call_id, wire::error_code::no_such_method,
                     "node " + inst->id() + " (" + std::string(inst->type_name) +
                         ") exposes no method with id " + std::to_string(h.method));
    return;
  }
  // The method's counts (serve_methods made them): the call arrived with the connection's
  // last read; its reply counts its end.
  const auto k = static_cast<std::size_t>(e - inst->methods.data());
  rpc::served_stats* stats = k < inst->served.size() ? inst->served[k] : nullptr;
  if (stats) [[likely]]
    stats->update([&](served_shard& s) {
      s.calls.add(1);
      s.bytes_in.add(wire::header_size + h.size);
    });
  const served_call call{h.call_id, stats, c.read_at()};
  if (h.flags & wire::flag_traced) [[unlikely]] {
    // The payload ends with the trace: the caller's span (rpc/trace.hpp).
    if (payload.size() < trace_trailer_size) {
      rpc::reply_error(c, call, wire::error_code::bad_arguments,
                       "a traced call of " + std::string(e->name) +
                           " is shorter than its trace context");
      return;
    }
    const trace_context caller =
        decode_trace_trailer(payload.data() + payload.size() - trace_trailer_size);
    payload = payload.first(payload.size() - trace_trailer_size);
    if (cfg_->trace && caller) {
      const served_span s = cfg_->trace->begin_served(h.call_id, caller, h.target, e->name,
                                                      wire::header_size + h.size);
      c.begin_served_span(s);
      // A coroutine method started now runs under the span (start_served_run).
      trace_scope scope(s.ctx);
      e->serve(e->ops, *inst, c, h, payload, call);
      return;
    }
  }
  if (cfg_->trace) [[unlikely]] {
    // Not in a trace: neither are the calls a coroutine method makes while serving it.
    trace_scope scope({0, 0, h.target, true});
    e->serve(e->ops, *inst, c, h, payload, call);
    return;
  }
  e->serve(e->ops, *inst, c, h, payload, call);
}

TLAUNCH_DECL void runtime::on_control(const std::shared_ptr<rpc::connection>& c,
                                      const wire::frame_header& h, std::span<const char> payload) {
  if (h.type == wire::kind::fence) {
    std::uint64_t epoch = 0;
    if (payload.size() != sizeof epoch) {
      c->close("malformed fence frame");
      return;
    }
    std::memcpy(&epoch, payload.data(), sizeof epoch);
    c->note_fence(epoch);
    return;
  }
  if (control) return control(c, h, payload);
  // Rate-limited: a peer sending them in a loop must not fill the log.
  std::string line = "unexpected control frame (kind " +
                     std::to_string(static_cast<unsigned>(h.type)) + ") from " + c->peer_name();
  if (auto l = cfg_->bad_peer_log->admit("unexpected control frame", line)) log(*l);
}

TLAUNCH_DECL void runtime::on_ready(const std::shared_ptr<rpc::connection>& c) {
  bool announce;
  {
    // An accepted connection also carries our calls back to that process.
    std::lock_guard lk(mu_);
    auto addr = c->peer_listen_address();
    if (!addr.empty() && !by_address_.count(addr)) by_address_[addr] = c;
    announce = announced_;
  }
  if (announce) {
    wire::frame_buffer f;
    f.seal({.type = wire::kind::stopping});
    c->send(std::move(f));
  }
}

TLAUNCH_DECL bool runtime::program_stopping() const {
  return cfg_->program_stopping->load(std::memory_order_acquire);
}

TLAUNCH_DECL void runtime::announce_stop() {
  std::vector<std::shared_ptr<rpc::connection>> all;
  {
    std::lock_guard lk(mu_);
    cfg_->program_stopping->store(true, std::memory_order_release);
    if (announced_) return;
    announced_ = true;
    for (auto& [a, c] : by_address_) all.push_back(c);
    for (auto& c : accepted_)
      if (std::find(all.begin(), all.end(), c) == all.end()) all.push_back(c);
  }
  for (auto& c : all) {
    wire::frame_buffer f;
    f.seal({.type = wire::kind::stopping});
    c->send(std::move(f));
  }
}

TLAUNCH_DECL void runtime::drain_writes(std::chrono::milliseconds max,
                                        const std::vector<std::shared_ptr<rpc::connection>>& also) {
  std::vector<std::shared_ptr<rpc::connection>> all = also;
  {
    std::lock_guard lk(mu_);
    for (auto& [a, c] : by_address_) all.push_back(c);
    for (auto& c : accepted_) all.push_back(c);
  }
  auto until = std::chrono::steady_clock::now() + max;
  while (std::chrono::steady_clock::now() < until &&
         !std::all_of(all.begin(), all.end(), [](const auto& c) { return c->flushed(); }))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TLAUNCH_DECL void runtime::on_closed(const std::shared_ptr<rpc::connection>& c,
                                     const std::string& reason) {
  {
    std::lock_guard lk(mu_);
    for (auto it = by_address_.begin(); it != by_address_.end();)
      it = it->second == c ? by_address_.erase(it) : std::next(it);
    for (auto it = accepted_.begin(); it != accepted_.end();)
      it = *it == c ? accepted_.erase(it) : std::next(it);
    for (auto& f : conn_by_flat_)
      if (f == c) f.reset();
  }
  if (closed) closed(c, reason);
}

TLAUNCH_DECL void runtime::log(const std::string& message) {
  std::fprintf(stderr, "[tlaunch] %s: %s\n", cfg_->name.c_str(), message.c_str());
}

TLAUNCH_DECL runtime::membership_guard::membership_guard(runtime& rt) : rt_(rt) {
  rt_.membership_mu_.lock_shared();
}

TLAUNCH_DECL runtime::membership_guard::~membership_guard() {
  // The calls sent under the guard are queued on their connections before an update
  // queues its fences there.
  deferred_writes::flush_all();
  rt_.membership_mu_.unlock_shared();
}

TLAUNCH_DECL void runtime::update_membership(const std::vector<std::uint32_t>& counts,
                                             std::uint64_t epoch) {
  // Without an elastic node the counts never change and no replica retires: no fences.
  if (!elastic_) {
    epoch_.store(epoch, std::memory_order_release);
    return;
  }
  {
    std::unique_lock lk(membership_mu_);
    for (std::size_t i = 0; i < nodes_.size() && i < counts.size(); ++i)
      if (nodes_[i].elastic)
        running_[i].store(std::min(counts[i], nodes_[i].replicas), std::memory_order_release);
    epoch_.store(epoch, std::memory_order_release);
  }
  for (auto& c : peer_connections()) {
    wire::frame_buffer f;
    f.append(&epoch, sizeof epoch);
    f.seal({.type = wire::kind::fence});
    c->send(std::move(f));
  }
}

TLAUNCH_DECL std::string runtime::retire(std::uint64_t epoch, std::chrono::milliseconds max) {
  const auto until = std::chrono::steady_clock::now() + max;
  auto peers = [this] { return peer_connections(); };
  std::string missing;
  auto wait_for = [&](auto&& done) {
    while (!done()) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  };
  // 1. Every peer applied the membership without these replicas: what it sent before its
  // fence is all it sends them.
  std::string unfenced;
  if (!wait_for([&] {
        unfenced.clear();
        for (auto& c : peers())
          if (!c->closed() && c->fence_epoch() < epoch)
            unfenced += (unfenced.empty() ? "" : ", ") + c->peer_name();
        return unfenced.empty();
      }))
    missing = "no fence from " + unfenced;
  // 2. The plain calls received are queued on their strands: each strand runs them before
  // this marker. 3. The coroutine and batched calls being served are answered.
  auto left = std::make_shared<std::atomic<std::size_t>>(0);
  for_each_hosted([&](rpc::instance& i) {
    left->fetch_add(1);
    asio::post(i.strand, [left] { left->fetch_sub(1); });
  });
  std::size_t serving = 0;
  if (!wait_for([&] {
        if (left->load() > 0) return false;
        serving = 0;
        for (auto& c : peers())
          if (!c->closed()) serving += c->running_count();
        return serving == 0;
      }))
    missing += (missing.empty() ? "" : "; ") + std::string("calls still being served") +
               (serving > 0 ? " (" + std::to_string(serving) + ")" : "");
  for_each_hosted([](rpc::instance& i) { i.retired.store(true, std::memory_order_release); });
  return missing;
}

TLAUNCH_DECL void runtime::stop_instances() {
  std::vector<std::function<void(bool)>> parked;
  {
    std::lock_guard lk(mu_);
    if (stopping_.exchange(true)) return;
    for (auto& p : parked_) {
      for (auto& r : p) parked.push_back(std::move(r));
      p.clear();
    }
  }
  for (auto& r : parked) r(false);
  for_each_hosted([](rpc::instance& i) {
    asio::post(i.strand, [&i] { i.run_cancel.emit(asio::cancellation_type::terminal); });
  });
  std::vector<std::function<void()>> wakers;
  {
    std::lock_guard lk(mu_);
    wakers = std::move(stop_wakers_);
  }
  for (auto& w : wakers) w();
}

}  // namespace tlaunch::rpc

#endif
