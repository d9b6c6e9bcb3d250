// One connection against peers that misbehave, on a real node: a node process (forked
// from this test, a runtime hosting one service on 127.0.0.1) and peers in this process,
// real ones (a runtime holding the same launch secret) and raw ones that speak frames.
//  - A peer that stops answering (SIGSTOP), with heartbeats on: a call in flight to
//    it, without a deadline, fails as unavailable naming it.
//  - --tls on one side only: refused, both sides naming --tls.
//  - A peer with the secret that never reads its replies: closed at the unsent limit.
//  - Frames a node never expects: ignored, logged once, the connection serves on.
//  - A frame that memory cannot hold: that connection closes, not the process.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <tlaunch/tlaunch.hpp>
#include <tlaunch/wire/frame.hpp>

#include "../common/node_fixture.hpp"
#include "../common/wire_peer.hpp"

using namespace std::chrono_literals;
using namespace tlaunch::test_support;
namespace wire = tlaunch::wire;

namespace {

// n calls twice(3) to instance 0, call ids 1..n, side by side.
std::vector<char> twice_calls(std::size_t n) {
  auto one = frame_of({.type = wire::kind::call, .target = 0, .call_id = 1,
                       .method = tlaunch::detail::method_id<&Echo::twice>()},
                      int{3});
  std::vector<char> out(one.size() * n);
  for (std::size_t i = 0; i < n; ++i) {
    std::memcpy(out.data() + i * one.size(), one.data(), one.size());
    wire::store_call_id(out.data() + i * one.size(), i + 1);
  }
  return out;
}

}  // namespace

TEST_SUITE("connection") {
  TEST_CASE("with heartbeats, a call in flight to a peer that stops answering fails as unavailable") {
    tlaunch::rpc::runtime_options ro;
    ro.heartbeat = 200ms;
    node_process node(ro);
    real_peer peer(node.address(), ro);
    REQUIRE(peer.call(1) == 2);
    // Idle for many intervals: the heartbeats keep the connection.
    std::this_thread::sleep_for(1s);
    CHECK(peer.call(2) == 4);
    auto f = peer.later(3);  // no deadline; answered after 2 s unless the node stops
    std::this_thread::sleep_for(100ms);
    REQUIRE(::kill(node.pid(), SIGSTOP) == 0);
    // Should the heartbeats not notice, the node goes on after 8 s and the call
    // returns its value: the test fails instead of waiting for ever.
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread watchdog([&] {
      std::unique_lock lk(mu);
      if (!cv.wait_for(lk, 8s, [&] { return done; })) ::kill(node.pid(), SIGCONT);
    });
    std::string what = unavailable_message([&] { f.get(); });
    {
      std::lock_guard lk(mu);
      done = true;
    }
    cv.notify_all();
    watchdog.join();
    ::kill(node.pid(), SIGCONT);
    CAPTURE(what);
    CHECK(what.find("echo/0") != std::string::npos);
    CHECK(what.find("stopped answering") != std::string::npos);
  }
}

TEST_SUITE("tls") {
  TEST_CASE("--tls: peers with TLS talk; a peer without it is refused, both sides naming --tls") {
    tlaunch::rpc::runtime_options with_tls;
    with_tls.tls = true;
    {
      node_process node(with_tls);
      real_peer peer(node.address(), with_tls);
      CHECK(peer.call(4) == 8);
      CHECK(peer.call(5) == 10);  // the same connection, on

      real_peer plain(node.address());
      std::string what = unavailable_message([&] { plain.call(1); });
      CAPTURE(what);
      CHECK(what.find(node.address()) != std::string::npos);  // names the peer
      CHECK(what.find("runs with --tls and the peer does not") != std::string::npos);
      CHECK(node.wait_for_err("runs with --tls and the peer does not"));
      CHECK(peer.call(6) == 12);  // the node serves its TLS peers on
    }
    {
      node_process node({});
      real_peer peer(node.address(), with_tls);
      std::string what = unavailable_message([&] { peer.call(1); });
      CAPTURE(what);
      CHECK(what.find(node.address()) != std::string::npos);
      CHECK(what.find("started a TLS handshake: it runs with --tls and this process does not") !=
            std::string::npos);
      CHECK(node.wait_for_err("started a TLS handshake"));
      real_peer plain(node.address());
      CHECK(plain.call(7) == 14);
    }
  }
}

// Peers that hold the launch secret but misbehave (a node with a bug, or compromised).
TEST_SUITE("connection") {
  TEST_CASE("a peer with the secret that never reads its replies is closed at the unsent limit") {
    tlaunch::rpc::runtime_options ro;
    ro.threads = 1;
    ro.max_frame = 65536;  // the unsent limit is then its floor, 64 MiB
    node_process node(ro);
    real_peer peer(node.address());
    REQUIRE(peer.call(1) == 2);
    const long rss_before = status_kb(node.pid(), "VmRSS");

    // 2.2 million calls (80 MB), replies (36 bytes each) never read.
    auto greedy = raw_peer(node.port(), 4096);
    auto calls = twice_calls(2200000);
    std::size_t sent = greedy.send(std::span<const char>(calls.data(), calls.size()));
    CHECK(greedy.closed_within(5s));
    CHECK(node.wait_for_err("does not read what it is sent"));
    const long rss_peak_growth = status_kb(node.pid(), "VmHWM") - rss_before;
    std::printf("sent %zu MB of calls, replies unread: node VmRSS before %ld kB, peak growth %ld kB\n",
                sent >> 20, rss_before, rss_peak_growth);
    // The queued replies (64 MiB at most) and the read buffer; without the limit, every
    // reply stays queued (measured: 144 MB of calls grew the node by 141 MB).
    if (TLAUNCH_TEST_MEMORY_BOUND) CHECK(rss_peak_growth < 100 * 1024);
    CHECK(serves_on(node, peer));
    const std::string err = node.err();
    CAPTURE(err);
    CHECK(count(err, "closing connection to raw: raw does not read what it is sent: ") == 1);
    CHECK(count(err, "more than the limit of 64 MiB") == 1);
  }

  TEST_CASE("frames a node never expects are ignored, logged once, and the connection serves on") {
    tlaunch::rpc::runtime_options ro;
    ro.threads = 1;
    node_process node(ro);
    auto odd = raw_peer(node.port());
    std::vector<char> all;
    auto add = [&all](std::vector<char> f) { all.insert(all.end(), f.begin(), f.end()); };
    for (std::uint64_t i = 0; i < 1000; ++i) {
      // Replies and cancels for calls never made, heartbeats, and the coordinator's frames.
      add(frame_of({.type = wire::kind::reply, .call_id = 1000 + i}, int{1}));
      add(frame_of({.type = wire::kind::error_reply, .call_id = 1000 + i}, std::uint8_t{1},
                   std::string("no")));
      add(frame_of({.type = wire::kind::cancel, .call_id = 1000 + i}));
      add(frame_of({.type = wire::kind::ping}));
      add(frame_of({.type = wire::kind::reg}, std::uint32_t{0}, std::string("x:1"), std::int64_t{1}));
      add(frame_of({.type = wire::kind::stop}));
      add(frame_of({.type = wire::kind::node_failed}, std::string("fake"), std::uint8_t{1}));
      // A call to an instance this process does not host, and to no method.
      add(frame_of({.type = wire::kind::call, .target = 9, .call_id = 1 + i,
                    .method = tlaunch::detail::method_id<&Echo::twice>()},
                   int{1}));
      add(frame_of({.type = wire::kind::call, .target = 0, .call_id = 100000 + i, .method = 77},
                   int{1}));
    }
    odd.send(all);
    // 2000 error replies, then the good call's reply on the same connection.
    odd.send(frame_of({.type = wire::kind::call, .target = 0, .call_id = 5,
                       .method = tlaunch::detail::method_id<&Echo::twice>()},
                      int{21}));
    int errors = 0;
    std::optional<std::pair<wire::frame_header, std::string>> f;
    while ((f = odd.read_frame()) && f->first.type == wire::kind::error_reply) ++errors;
    CHECK(errors == 2000);
    REQUIRE(f.has_value());
    CHECK(f->first.type == wire::kind::reply);
    CHECK(f->first.call_id == 5);
    int result = 0;
    wire::deserialize_from(std::span<const char>(f->second.data(), f->second.size()), result);
    CHECK(result == 42);
    CHECK(::kill(node.pid(), 0) == 0);
    const std::string err = node.err();
    CAPTURE(err);
    // 3000 control frames, one line (more within 10 s are counted, not printed).
    CHECK(count(err, "unexpected control frame") == 1);
    CHECK(count(err, "\n") < 4);
  }

  TEST_CASE("a frame that memory cannot hold closes that connection, not the process") {
    if (!TLAUNCH_TEST_MEMORY_BOUND) return;  // sanitizers map terabytes: no RLIMIT_AS for them
    tlaunch::rpc::runtime_options ro;
    ro.threads = 1;
    // Room for its io thread and two 200 MiB frames' buffers, not for four.
    node_process node(ro, 0, rlim_t{600} << 20);
    real_peer peer(node.address());
    REQUIRE(peer.call(1) == 2);
    std::vector<std::unique_ptr<wire_peer>> big;
    for (int i = 0; i < 4; ++i) {
      big.push_back(std::make_unique<wire_peer>(raw_peer(node.port())));
      auto h = frame_of({.type = wire::kind::call, .target = 0, .call_id = 1,
                         .method = tlaunch::detail::method_id<&Echo::twice>()});
      wire::detail::put32(reinterpret_cast<unsigned char*>(h.data()), 200u << 20);
      std::vector<char> some(100000, 'x');
      h.insert(h.end(), some.begin(), some.end());
      big.back()->send(h);
    }
    CHECK(node.wait_for_err("no memory for a frame of 209715232 bytes"));
    CHECK(::waitpid(node.pid(), nullptr, WNOHANG) == 0);
    CHECK(peer.call(5) == 10);
    const std::string err = node.err();
    CAPTURE(err);
    CHECK(count(err, "closing connection from raw: no memory for a frame") == 1);
  }
}
