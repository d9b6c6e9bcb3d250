// The coordinator's state machine (launch/process/coordinator.hpp), driven in one process:
// its spawn function hands out test children that record what the coordinator does to
// them (the launch secret on stdin, stdin closed, kill) and report the exit a test
// chooses; each instance's node is played by a wire_peer on loopback that speaks the real
// control protocol (hello with the secret read from the child's stdin, reg, directory,
// node_done / node_failed, stop). Every wait is bounded; run() runs on a thread of its own.
#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <tlaunch/detail/secret.hpp>
#include <tlaunch/launch/process/coordinator.hpp>
#include <tlaunch/wire/codec.hpp>
#include <tlaunch/wire/frame.hpp>

#include "../common/wire_peer.hpp"

using namespace std::chrono_literals;
namespace launch = tlaunch::launch;
namespace wire = tlaunch::wire;
using tlaunch::test_support::frame_of;
using tlaunch::test_support::wire_peer;

namespace {

// How long any one wait of these tests may take: far more than anything needs.
constexpr auto patience = 10s;

// What the coordinator did to one started process, and the means to end it.
struct child_state : std::enable_shared_from_this<child_state> {
  std::mutex mu;
  std::condition_variable cv;
  launch::placement place;
  std::uint16_t port = 0;
  std::vector<std::string> argv;
  launch::child_callbacks cb;
  std::string stdin_data;
  bool stdin_closed = false;
  int kills = 0;
  bool exited = false;
  bool exit_on_kill = true;  // a kill ends it, as SIGKILL would
  long registered_pid = -1;

  template <class Pred>
  bool wait(Pred pred) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, patience, pred);
  }
  // Reports the process's end (once), as a child's I/O thread would.
  void exit(const launch::exit_status& st) {
    {
      std::lock_guard lk(mu);
      if (exited) return;
      exited = true;
    }
    cv.notify_all();
    cb.on_exit(st);
  }
  void exit_code(int code) {
    launch::exit_status st;
    st.code = code;
    exit(st);
  }
  bool has_exited() {
    std::lock_guard lk(mu);
    return exited;
  }
  int kill_count() {
    std::lock_guard lk(mu);
    return kills;
  }
  bool stdin_was_closed() {
    std::lock_guard lk(mu);
    return stdin_closed;
  }
};

class test_child final : public launch::child {
 public:
  explicit test_child(std::shared_ptr<child_state> s) : s_(std::move(s)) {}
  void write_stdin(std::string_view data) override {
    {
      std::lock_guard lk(s_->mu);
      s_->stdin_data.append(data);
    }
    s_->cv.notify_all();
  }
  void close_stdin() override {
    {
      std::lock_guard lk(s_->mu);
      s_->stdin_closed = true;
    }
    s_->cv.notify_all();
  }
  void kill() override {
    bool end;
    {
      std::lock_guard lk(s_->mu);
      ++s_->kills;
      end = s_->exit_on_kill;
    }
    s_->cv.notify_all();
    if (end) {
      launch::exit_status st;
      st.signal = SIGKILL;
      s_->exit(st);
    }
  }
  bool running() const override {
    std::lock_guard lk(s_->mu);
    return !s_->exited;
  }
  std::string host() const override { return ""; }
  long pid() const override { return 100000 + static_cast<long>(s_->place.flat); }
  void registered(long pid) override {
    {
      std::lock_guard lk(s_->mu);
      s_->registered_pid = pid;
    }
    s_->cv.notify_all();
  }

 private:
  std::shared_ptr<child_state> s_;
};

// The spawn function's side: every process it was asked to start, in order.
class spawner {
 public:
  launch::spawn_fn fn() {
    return [this](const launch::placement& p, std::uint16_t port,
                  const std::vector<std::string>& tail,
                  launch::child_callbacks cb) -> launch::child_ptr {
      auto s = std::make_shared<child_state>();
      s->place = p;
      s->port = port;
      s->argv = tail;
      s->cb = std::move(cb);
      {
        std::lock_guard lk(mu_);
        children_.push_back(s);
      }
      cv_.notify_all();
      return std::make_unique<test_child>(s);
    };
  }
  // The i-th process started (from 0), once it is; null when none comes in time.
  std::shared_ptr<child_state> nth(std::size_t i) {
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, patience, [&] { return children_.size() > i; })) return nullptr;
    return children_[i];
  }
  std::size_t count() {
    std::lock_guard lk(mu_);
    return children_.size();
  }
  std::vector<std::shared_ptr<child_state>> all() {
    std::lock_guard lk(mu_);
    return children_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<child_state>> children_;
};

// One instance's node process, played over the real control protocol.
class node_peer {
 public:
  // read_timeout: how long each frame read waits.
  explicit node_peer(std::shared_ptr<child_state> c, std::chrono::milliseconds read_timeout = 5s)
      : child_(std::move(c)) {
    REQUIRE(child_ != nullptr);
    // The launch secret comes on stdin, one hex line, as run_node_process reads it.
    REQUIRE(child_->wait([&] { return child_->stdin_data.find('\n') != std::string::npos; }));
    std::string line;
    {
      std::lock_guard lk(child_->mu);
      line = child_->stdin_data.substr(0, child_->stdin_data.find('\n'));
    }
    auto secret = tlaunch::detail::from_hex(line);
    REQUIRE(secret.has_value());
    REQUIRE_FALSE(secret->empty());
    peer_.emplace(child_->port, 0, read_timeout);
    peer_->authenticate(*secret, "node-" + child_->place.id);
  }

  child_state& child() { return *child_; }
  std::uint32_t flat() const { return child_->place.flat; }
  const std::string& address() const { return address_; }

  void reg(std::string address) { reg_as(child_->place.flat, std::move(address)); }
  // Registers instance `flat` (a member of a colocation group, in its leader's process).
  void reg_as(std::uint32_t flat, std::string address) {
    address_ = std::move(address);
    peer_->send(frame_of({.type = wire::kind::reg}, flat, address_,
                         static_cast<std::int64_t>(4000 + child_->place.flat)));
  }
  void done() { peer_->send(frame_of({.type = wire::kind::node_done})); }
  void failed(const std::string& why, launch::fault f = launch::fault::error) {
    peer_->send(frame_of({.type = wire::kind::node_failed}, why, static_cast<std::uint8_t>(f)));
  }
  void stop_request() { peer_->send(frame_of({.type = wire::kind::stop_request})); }

  // The next control frame of kind k (pings skipped); nothing if another kind comes first,
  // or nothing within the peer's read timeout.
  std::optional<std::string> next(wire::kind k) {
    for (;;) {
      auto f = peer_->read_frame();
      if (!f) return std::nullopt;
      if (f->first.type == wire::kind::ping) continue;
      if (f->first.type != k) {
        MESSAGE("expected frame kind " << int(k) << ", got " << int(f->first.type));
        return std::nullopt;
      }
      return f->second;
    }
  }
  std::vector<std::uint64_t> epochs;  // of each directory received, in order
  std::optional<std::vector<std::string>> directory() {
    auto p = next(wire::kind::directory);
    if (!p) return std::nullopt;
    // Every instance's address, each node's running count, the membership epoch.
    std::vector<std::string> addrs;
    std::vector<std::uint32_t> counts;
    std::uint64_t epoch = 0;
    wire::deserialize_from(std::span<const char>(p->data(), p->size()), addrs, counts, epoch);
    epochs.push_back(epoch);
    return addrs;
  }
  // The stop frame's flag (1: the program stops, 0: only this process).
  std::optional<int> stop() {
    auto p = next(wire::kind::stop);
    if (!p) return std::nullopt;
    std::uint8_t whole = 255;
    wire::deserialize_from(std::span<const char>(p->data(), p->size()), whole);
    return whole;
  }
  // Whether the coordinator closed the connection within `limit`.
  bool closed_within(std::chrono::milliseconds limit) { return peer_->closed_within(limit); }

  // Its connection closes, its process does not end.
  void drop_connection() { peer_.reset(); }

  // The process ends: its connection closes, then its exit status is reported.
  void exit(int code) {
    peer_.reset();
    child_->exit_code(code);
  }

 private:
  std::shared_ptr<child_state> child_;
  std::optional<wire_peer> peer_;
  std::string address_;
};

inline std::string node_address(std::uint32_t flat, int start = 0) {
  return "127.0.0.1:" + std::to_string(20000 + start * 100 + static_cast<int>(flat));
}

// A coordinator over a program of `nodes`, listening on loopback, its run() on a thread.
class harness {
 public:
  explicit harness(std::vector<tlaunch::rpc::node_info> nodes) : nodes_(std::move(nodes)) {
    opt.handle_signals = false;  // the test process's signals stay its own
    opt.start_timeout = 20s;     // never the reason a test ends
    opt.grace = 5s;
  }
  harness(const harness&) = delete;
  harness& operator=(const harness&) = delete;

  ~harness() {
    if (!thread_.joinable()) return;
    // A test that failed half-way: stop the program and end every process it has.
    if (!finished()) {
      coord->request_stop("the test is over");
      auto until = std::chrono::steady_clock::now() + patience;
      while (!finished() && std::chrono::steady_clock::now() < until) {
        for (auto& c : spawn.all()) c->exit_code(0);
        std::this_thread::sleep_for(20ms);
      }
      if (!finished()) {
        std::fprintf(stderr, "coordinator_tests: the coordinator's run() did not end\n");
        std::abort();
      }
    }
    thread_.join();
  }

  void start() {
    coord = std::make_unique<launch::coordinator>(nodes_, opt, out);
    port = coord->listen("127.0.0.1");
    if (!groups.empty()) coord->colocate(groups);
    std::uint32_t flat = 0;
    for (auto& n : nodes_)
      for (std::uint32_t r = 0; r < n.replicas; ++r)
        places_.push_back({flat++, std::string(n.name) + "/" + std::to_string(r), ""});
    fn_ = spawn.fn();
    thread_ = std::thread([this] {
      int rc = coord->run(places_, fn_);
      {
        std::lock_guard lk(mu_);
        rc_ = rc;
      }
      cv_.notify_all();
    });
  }

  bool finished() {
    std::lock_guard lk(mu_);
    return rc_.has_value();
  }
  // run()'s exit code once it returned, or nothing if it did not within `limit`.
  std::optional<int> result(std::chrono::milliseconds limit = patience) {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, limit, [&] { return rc_.has_value(); });
    return rc_;
  }

  // Nodes for each started instance (the first `n` processes), registered, in flat order.
  std::vector<std::unique_ptr<node_peer>> register_all(std::size_t n) {
    std::vector<std::unique_ptr<node_peer>> v;
    for (std::size_t i = 0; i < n; ++i) {
      auto c = spawn.nth(i);
      REQUIRE(c != nullptr);
      v.push_back(std::make_unique<node_peer>(c));
    }
    for (auto& f : v) f->reg(node_address(f->flat()));
    return v;
  }

  // Declared before the coordinator, which keeps references to them.
  launch::options opt;
  std::vector<launch::colocation_group> groups;  // applied with colocate() before run()
  launch::output_printer out{launch::color_mode::never};
  spawner spawn;
  std::unique_ptr<launch::coordinator> coord;
  std::uint16_t port = 0;

 private:
  std::vector<tlaunch::rpc::node_info> nodes_;
  std::vector<launch::placement> places_;
  launch::spawn_fn fn_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<int> rc_;
};

tlaunch::rpc::node_info workers(std::uint32_t replicas, std::uint32_t max_restarts = 0,
                                   std::string_view name = "worker") {
  tlaunch::rpc::node_info n;
  n.name = name;
  n.type_name = "Worker";
  n.replicas = replicas;
  n.has_run = true;
  n.restart.max_restarts = max_restarts;
  n.restart.backoff = 50ms;
  return n;
}

std::vector<std::string> addresses(const std::vector<std::unique_ptr<node_peer>>& nodes) {
  std::vector<std::string> v;
  for (auto& n : nodes) v.push_back(n->address());
  return v;
}

}  // namespace

TEST_CASE("every instance registers, gets the directory, and the program ends 0 once every run() is done") {
  harness h({workers(3)});
  h.start();
  auto nodes = h.register_all(3);
  for (auto& n : nodes) {
    CHECK(n->child().argv.at(0) == "--tlaunch-role=" + n->child().place.id);
    CHECK(n->child().port == h.port);
  }
  auto want = addresses(nodes);
  for (auto& n : nodes) {
    auto d = n->directory();
    REQUIRE(d.has_value());
    CHECK(*d == want);
    CHECK(n->child().wait([&] { return n->child().registered_pid == 4000 + n->flat(); }));
  }
  // Two of three done: nothing stops yet.
  nodes[0]->done();
  nodes[2]->done();
  CHECK_FALSE(h.result(300ms).has_value());
  for (auto& n : nodes) CHECK_FALSE(n->child().stdin_was_closed());
  nodes[1]->done();
  for (auto& n : nodes) {
    auto s = n->stop();
    REQUIRE(s.has_value());
    CHECK(*s == 1);
    CHECK(n->child().wait([&] { return n->child().stdin_closed; }));
  }
  CHECK_FALSE(h.finished());  // waits for the processes' exits
  for (auto& n : nodes) n->exit(0);
  auto rc = h.result();
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  CHECK_FALSE(h.coord->failure().has_value());
  CHECK(h.spawn.count() == 3);
  for (auto& n : nodes) CHECK(n->child().kill_count() == 0);
}

TEST_CASE("a failed instance without a restart policy stops every other; run() ends 1 naming it") {
  harness h({workers(3)});
  h.start();
  auto nodes = h.register_all(3);
  for (auto& n : nodes) REQUIRE(n->directory().has_value());
  nodes[1]->failed("boom");
  for (auto& n : nodes) {
    auto s = n->stop();
    REQUIRE(s.has_value());
    CHECK(*s == 1);
    CHECK(n->child().wait([&] { return n->child().stdin_closed; }));
  }
  nodes[0]->exit(0);
  nodes[2]->exit(0);
  nodes[1]->exit(1);  // run() threw: the node exits 1, judged already by its report
  auto rc = h.result();
  REQUIRE(rc.has_value());
  CHECK(*rc == 1);
  auto f = h.coord->failure();
  REQUIRE(f.has_value());
  CHECK(f->where == "worker/1");
  CHECK(f->why.find("boom") != std::string::npos);
  CHECK(h.spawn.count() == 3);  // nothing restarted
  for (auto& n : nodes) CHECK(n->child().kill_count() == 0);
}

TEST_CASE("an instance that exits before the program stops is its failure") {
  harness h({workers(2)});
  h.start();
  auto nodes = h.register_all(2);
  for (auto& n : nodes) REQUIRE(n->directory().has_value());
  nodes[0]->exit(3);
  auto s = nodes[1]->stop();
  REQUIRE(s.has_value());
  CHECK(*s == 1);
  nodes[1]->exit(0);
  auto rc = h.result();
  REQUIRE(rc.has_value());
  CHECK(*rc == 1);
  auto f = h.coord->failure();
  REQUIRE(f.has_value());
  CHECK(f->where == "worker/0");
  CHECK(f->why.find("exited with code 3") != std::string::npos);
}

TEST_CASE("a failed instance with a restart policy is started again and the program ends 0") {
  harness h({workers(2, /*max_restarts=*/1)});
  h.start();
  auto nodes = h.register_all(2);
  for (auto& n : nodes) REQUIRE(n->directory().has_value());
  nodes[1]->failed("boom");
  // Only worker/1 is stopped, as a process to be replaced (flag 0).
  auto s = nodes[1]->stop();
  REQUIRE(s.has_value());
  CHECK(*s == 0);
  CHECK(nodes[1]->child().wait([&] { return nodes[1]->child().stdin_closed; }));
  CHECK_FALSE(nodes[0]->child().stdin_was_closed());
  nodes[1]->exit(1);
  // Its old address goes from the directory at once.
  auto gone = nodes[0]->directory();
  REQUIRE(gone.has_value());
  CHECK(*gone == std::vector<std::string>{nodes[0]->address(), ""});
  // Started again, for the same instance, with the same secret.
  auto again = h.spawn.nth(2);
  REQUIRE(again != nullptr);
  CHECK(again->place.flat == 1);
  CHECK(again->place.id == "worker/1");
  CHECK(again->argv.at(0) == "--tlaunch-role=worker/1");
  CHECK(h.spawn.count() == 3);
  node_peer second(again);
  second.reg(node_address(1, 1));
  auto want = std::vector<std::string>{nodes[0]->address(), second.address()};
  auto d0 = nodes[0]->directory();
  REQUIRE(d0.has_value());
  CHECK(*d0 == want);
  auto d1 = second.directory();
  REQUIRE(d1.has_value());
  CHECK(*d1 == want);
  // Each directory is one membership epoch more: the first, the one without worker/1, this.
  CHECK(nodes[0]->epochs == std::vector<std::uint64_t>{1, 2, 3});
  CHECK(second.epochs == std::vector<std::uint64_t>{3});
  CHECK_FALSE(h.finished());
  nodes[0]->done();
  second.done();
  for (auto* n : {nodes[0].get(), &second}) {
    auto st = n->stop();
    REQUIRE(st.has_value());
    CHECK(*st == 1);
  }
  nodes[0]->exit(0);
  second.exit(0);
  auto rc = h.result();
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  CHECK_FALSE(h.coord->failure().has_value());
  CHECK(h.spawn.count() == 3);
}

TEST_CASE("a failure beyond the restart budget ends the program 1") {
  harness h({workers(2, /*max_restarts=*/1)});
  h.start();
  auto nodes = h.register_all(2);
  for (auto& n : nodes) REQUIRE(n->directory().has_value());
  nodes[1]->failed("boom");
  REQUIRE(nodes[1]->stop() == std::optional<int>(0));
  nodes[1]->exit(1);
  REQUIRE(nodes[0]->directory().has_value());  // worker/1's address gone
  auto again = h.spawn.nth(2);
  REQUIRE(again != nullptr);
  REQUIRE(again->place.flat == 1);
  node_peer second(again);
  second.reg(node_address(1, 1));
  REQUIRE(nodes[0]->directory().has_value());
  REQUIRE(second.directory().has_value());
  second.failed("boom again");
  for (auto* n : {nodes[0].get(), &second}) {
    auto st = n->stop();
    REQUIRE(st.has_value());
    CHECK(*st == 1);
  }
  nodes[0]->exit(0);
  second.exit(1);
  auto rc = h.result();
  REQUIRE(rc.has_value());
  CHECK(*rc == 1);
  auto f = h.coord->failure();
  REQUIRE(f.has_value());
  CHECK(f->where == "worker/1");
  CHECK(f->why.find("boom again") != std::string::npos);
  CHECK(f->why.find("restarted 1 time") != std::string::npos);
  CHECK(h.spawn.count() == 3);  // no third start of worker/1
}

TEST_CASE("an instance that does not exit within the grace period is killed") {
  harness h({workers(2)});
  h.opt.grace = 200ms;
  h.start();
  auto nodes = h.register_all(2);
  for (auto& n : nodes) REQUIRE(n->directory().has_value());
  auto began = std::chrono::steady_clock::now();
  nodes[0]->done();
  nodes[1]->done();
  for (auto& n : nodes) REQUIRE(n->stop() == std::optional<int>(1));
  nodes[0]->exit(0);
  // worker/1 never exits by itself: killed after the grace period (and its kill ends it).
  CHECK(nodes[1]->child().wait([&] { return nodes[1]->child().kills > 0; }));
  auto waited = std::chrono::steady_clock::now() - began;
  CHECK(waited >= 200ms);  // not before the grace period
  auto rc = h.result();
  REQUIRE(rc.has_value());
  CHECK(*rc == 1);  // a node that had to be killed failed to stop
  CHECK(nodes[1]->child().kill_count() == 1);
  CHECK(nodes[0]->child().kill_count() == 0);
  auto f = h.coord->failure();
  REQUIRE(f.has_value());
  CHECK(f->where == "worker/1");
  CHECK(f->why.find("grace period") != std::string::npos);
}

TEST_CASE("request_stop from another thread stops the program with exit code 0") {
  harness h({workers(2)});
  h.start();
  auto nodes = h.register_all(2);
  for (auto& n : nodes) REQUIRE(n->directory().has_value());
  std::thread([&] { h.coord->request_stop("the test asked"); }).join();
  for (auto& n : nodes) {
    auto s = n->stop();
    REQUIRE(s.has_value());
    CHECK(*s == 1);
    CHECK(n->child().wait([&] { return n->child().stdin_closed; }));
  }
  for (auto& n : nodes) n->exit(0);
  auto rc = h.result();
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  CHECK_FALSE(h.coord->failure().has_value());
  for (auto& n : nodes) CHECK(n->child().kill_count() == 0);
}

TEST_CASE("stop_program() from a node stops the program with exit code 0") {
  harness h({workers(2)});
  h.start();
  auto nodes = h.register_all(2);
  for (auto& n : nodes) REQUIRE(n->directory().has_value());
  nodes[0]->stop_request();
  for (auto& n : nodes) REQUIRE(n->stop() == std::optional<int>(1));
  for (auto& n : nodes) n->exit(0);
  auto rc = h.result();
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  CHECK_FALSE(h.coord->failure().has_value());
}

TEST_CASE("an instance that does not register within start_timeout fails the program") {
  harness h({workers(2)});
  h.opt.start_timeout = 300ms;
  h.start();
  auto c0 = h.spawn.nth(0), c1 = h.spawn.nth(1);
  REQUIRE(c0 != nullptr);
  REQUIRE(c1 != nullptr);
  node_peer n0(c0);
  n0.reg(node_address(0));
  // worker/1 never registers: no directory; the stop instead, and worker/1's stdin closes.
  auto s = n0.stop();
  REQUIRE(s.has_value());
  CHECK(*s == 1);
  CHECK(c1->wait([&] { return c1->stdin_closed; }));
  n0.exit(0);
  c1->exit_code(0);
  auto rc = h.result();
  REQUIRE(rc.has_value());
  CHECK(*rc == 1);
  auto f = h.coord->failure();
  REQUIRE(f.has_value());
  CHECK(f->where == "launcher");
  CHECK(f->why.find("worker/1") != std::string::npos);
  CHECK(f->why.find("worker/0") == std::string::npos);
}

// A node that registers once the stop began gets its stop frame then: the stop had only
// closed its stdin (it had no connection yet), which a node does not take as a stop for
// a second, and announces to nobody.
TEST_CASE("an instance that registers after the stop began gets its stop frame") {
  harness h({workers(2)});
  h.start();
  auto c0 = h.spawn.nth(0), c1 = h.spawn.nth(1);
  REQUIRE(c0 != nullptr);
  REQUIRE(c1 != nullptr);
  node_peer n0(c0);
  n0.reg(node_address(0));
  REQUIRE(c0->wait([&] { return c0->registered_pid == 4000; }));  // its registration was taken
  node_peer n1(c1, 2s);
  h.coord->request_stop("the test asked");
  REQUIRE(n0.stop() == std::optional<int>(1));
  REQUIRE(c1->wait([&] { return c1->stdin_closed; }));
  n1.reg(node_address(1));
  auto s = n1.stop();
  CHECK(s == std::optional<int>(1));
  n0.exit(0);
  n1.exit(0);
  auto rc = h.result();
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
}

TEST_CASE("an instance that loses its connection is killed and, with a restart policy, started again") {
  harness h({workers(2, /*max_restarts=*/1)});
  h.start();
  auto nodes = h.register_all(2);
  for (auto& n : nodes) REQUIRE(n->directory().has_value());
  // worker/1's connection closes, its process does not end (hung, say).
  auto& old = nodes[1]->child();
  nodes[1]->drop_connection();
  CHECK(old.wait([&] { return old.kills > 0; }));
  auto again = h.spawn.nth(2);
  REQUIRE(again != nullptr);
  CHECK(again->place.id == "worker/1");
  node_peer second(again);
  second.reg(node_address(1, 1));
  auto want = std::vector<std::string>{nodes[0]->address(), second.address()};
  CHECK(nodes[0]->directory() == std::optional(std::vector<std::string>{nodes[0]->address(), ""}));
  CHECK(nodes[0]->directory() == std::optional(want));
  CHECK(second.directory() == std::optional(want));
  nodes[0]->done();
  second.done();
  REQUIRE(nodes[0]->stop() == std::optional<int>(1));
  REQUIRE(second.stop() == std::optional<int>(1));
  nodes[0]->exit(0);
  second.exit(0);
  auto rc = h.result();
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  CHECK(old.kill_count() == 1);
  CHECK(again->kill_count() == 0);
}

TEST_CASE("a call error reported while stopping is no failure; another error is") {
  // Not a structured binding: clang 14 cannot capture one in a lambda (CAPTURE, REQUIRE).
  for (auto c : {std::pair{launch::fault::call_error, 0}, std::pair{launch::fault::error, 1}}) {
    const launch::fault f = c.first;
    const int want = c.second;
    CAPTURE(launch::to_string(f));
    harness h({workers(2)});
    h.start();
    auto nodes = h.register_all(2);
    for (auto& n : nodes) REQUIRE(n->directory().has_value());
    h.coord->request_stop("the test asked");
    for (auto& n : nodes) REQUIRE(n->stop() == std::optional<int>(1));
    nodes[0]->failed("peer went away", f);
    nodes[0]->exit(1);
    nodes[1]->exit(0);
    auto rc = h.result();
    REQUIRE(rc.has_value());
    CHECK(*rc == want);
    CHECK(h.coord->failure().has_value() == (want == 1));
  }
}

TEST_CASE("an exit code 1 while stopping, without a report, is a failure once its connection closes") {
  harness h({workers(2)});
  h.start();
  auto nodes = h.register_all(2);
  for (auto& n : nodes) REQUIRE(n->directory().has_value());
  h.coord->request_stop("the test asked");
  for (auto& n : nodes) REQUIRE(n->stop() == std::optional<int>(1));
  // The exit status comes before the connection closes (as an ssh agent may relay it).
  nodes[0]->child().exit_code(1);
  nodes[1]->exit(0);
  CHECK_FALSE(h.result(200ms).has_value());  // judged once the connection closes
  nodes[0]->drop_connection();
  auto rc = h.result();
  REQUIRE(rc.has_value());
  CHECK(*rc == 1);
  auto f = h.coord->failure();
  REQUIRE(f.has_value());
  CHECK(f->where == "worker/0");
  CHECK(f->why.find("exited with code 1 while stopping") != std::string::npos);
}

TEST_CASE("a second registration of an instance, or one of an unknown instance, is closed") {
  harness h({workers(2)});
  h.start();
  auto nodes = h.register_all(2);
  for (auto& n : nodes) REQUIRE(n->directory().has_value());
  {
    node_peer impostor(nodes[1]->child().shared_from_this());
    impostor.reg(node_address(1, 5));
    CHECK(impostor.closed_within(5s));
  }
  {
    auto c = std::make_shared<child_state>();
    {
      std::lock_guard lk(nodes[0]->child().mu);
      c->stdin_data = nodes[0]->child().stdin_data;
    }
    c->port = h.port;
    c->place = {7, "worker/7", ""};
    node_peer stranger(c);
    stranger.reg(node_address(7));
    CHECK(stranger.closed_within(5s));
  }
  // The program goes on, with the first registrations.
  nodes[0]->done();
  nodes[1]->done();
  for (auto& n : nodes) REQUIRE(n->stop() == std::optional<int>(1));
  for (auto& n : nodes) n->exit(0);
  auto rc = h.result();
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
}

TEST_CASE("a stop during a restart's backoff cancels the restart; the program ends 0") {
  auto w = workers(2, /*max_restarts=*/1);
  w.restart.backoff = 2s;
  harness h({w});
  h.opt.grace = 20s;  // worker/0 keeps the program running past the backoff
  h.start();
  auto nodes = h.register_all(2);
  for (auto& n : nodes) REQUIRE(n->directory().has_value());
  nodes[1]->failed("boom");
  REQUIRE(nodes[1]->stop() == std::optional<int>(0));
  nodes[1]->exit(1);
  auto ended = std::chrono::steady_clock::now();
  REQUIRE(nodes[0]->directory().has_value());  // worker/1's address gone: the backoff runs
  h.coord->request_stop("the test asked");
  REQUIRE(nodes[0]->stop() == std::optional<int>(1));
  std::this_thread::sleep_until(ended + 2500ms);  // past the backoff: no new process
  CHECK(h.spawn.count() == 2);
  CHECK_FALSE(h.finished());
  nodes[0]->exit(0);
  auto rc = h.result();
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  CHECK_FALSE(h.coord->failure().has_value());
  CHECK(h.spawn.count() == 2);
}

TEST_CASE("a restarted instance that does not register within start_timeout, its budget spent, fails") {
  harness h({workers(2, /*max_restarts=*/1)});
  h.opt.start_timeout = 1s;
  h.start();
  auto nodes = h.register_all(2);
  for (auto& n : nodes) REQUIRE(n->directory().has_value());
  nodes[1]->failed("boom");
  REQUIRE(nodes[1]->stop() == std::optional<int>(0));
  nodes[1]->exit(1);
  auto again = h.spawn.nth(2);
  REQUIRE(again != nullptr);
  // It never registers: after start_timeout the program stops, its stdin closes.
  REQUIRE(nodes[0]->directory().has_value());  // worker/1's address gone
  REQUIRE(nodes[0]->stop() == std::optional<int>(1));
  CHECK(again->wait([&] { return again->stdin_closed; }));
  nodes[0]->exit(0);
  again->exit_code(0);
  auto rc = h.result();
  REQUIRE(rc.has_value());
  CHECK(*rc == 1);
  auto f = h.coord->failure();
  REQUIRE(f.has_value());
  CHECK(f->where == "worker/1");
  CHECK(f->why.find("did not register") != std::string::npos);
  CHECK(h.spawn.count() == 3);
}

TEST_CASE("a colocation group is one process; a member's failure is the group's") {
  harness h({workers(1, 0, "a"), workers(1, 0, "b"), workers(1)});
  h.groups = {{0, 1}};
  h.start();
  auto group = h.spawn.nth(0), worker = h.spawn.nth(1);
  REQUIRE(group != nullptr);
  REQUIRE(worker != nullptr);
  CHECK(group->place.flat == 0);
  CHECK(group->argv.at(0) == "--tlaunch-role=a/0,b/0");
  CHECK(worker->place.flat == 2);
  // Each member registers on a connection of its own, from the one process.
  node_peer a(group), b(group), w(worker);
  a.reg_as(0, node_address(0));
  b.reg_as(1, node_address(1));
  w.reg(node_address(2));
  auto want = std::vector<std::string>{a.address(), b.address(), w.address()};
  for (auto* n : {&a, &b, &w}) CHECK(n->directory() == std::optional(want));
  b.failed("boom");
  for (auto* n : {&a, &b, &w}) CHECK(n->stop() == std::optional<int>(1));
  a.drop_connection();
  b.exit(1);
  w.exit(0);
  auto rc = h.result();
  REQUIRE(rc.has_value());
  CHECK(*rc == 1);
  auto f = h.coord->failure();
  REQUIRE(f.has_value());
  CHECK(f->where == "a/0+b/0");
  CHECK(f->why.find("b/0: boom") != std::string::npos);
  CHECK(h.spawn.count() == 2);
}
