// Hostile and faulty peers against a real node's listener: a node process (forked from
// this test, a runtime hosting one service on 127.0.0.1) is flooded with connections, and
// a real peer (a runtime in this process holding the same launch secret) calls it over a
// real hello exchange; then the launcher's port against peers that register wrongly.
//  - Out of descriptors (RLIMIT_NOFILE lowered in the node): accepting fails,
//    is logged once, and resumes once descriptors are free: a new peer is served.
//  - Hundreds of slow (one byte, then silence) and garbage peers: closed after
//    the handshake deadline or at once, the node's peak memory stays within a
//    bound, calls go on meanwhile, and the log gets a line per reason.
//  - A peer with the secret that registers wrongly at the launcher's port is closed and named.
// What one connection does with a peer that misbehaves after the hello exchange is in
// tests/rpc/connection_tests.cpp.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <tlaunch/tlaunch.hpp>
#include <tlaunch/launch/process/coordinator.hpp>
#include <tlaunch/launch/process/local_child.hpp>
#include <tlaunch/wire/frame.hpp>

#include "../common/node_fixture.hpp"
#include "../common/wire_peer.hpp"

using namespace std::chrono_literals;
using namespace tlaunch::test_support;
namespace wire = tlaunch::wire;

TEST_SUITE("accept_loop") {
  TEST_CASE("a listener out of descriptors logs it once, then serves a new peer") {
    // 32 descriptors: the runtime's own few, then the idle connections run it out.
    node_process node({}, 32);
    CHECK(call_from_new_peer(node, 1) == 2);
    std::vector<wire_peer> idle;
    for (int i = 0; i < 64; ++i) idle.emplace_back(node.port());
    REQUIRE(node.wait_for_err("accept failed: Too many open files"));
    std::this_thread::sleep_for(300ms);  // a few more failed accepts, behind the backoff
    idle.clear();
    CHECK(call_from_new_peer(node, 21) == 42);
    const std::string err = node.err();
    CAPTURE(err);
    // Rate-limited: the failures of this short test make one line, not one each.
    CHECK(count(err, "accept failed") == 1);
  }

  TEST_CASE("slow and garbage peers are closed, cost little memory, and calls go on") {
    tlaunch::rpc::runtime_options ro;
    ro.threads = 1;
    ro.handshake_timeout = 1s;
    ro.max_unauthenticated = 100;
    node_process node(ro);
    real_peer peer(node.address());
    REQUIRE(peer.call(1) == 2);  // this peer's connection exists before the flood
    const long rss_before = status_kb(node.pid(), "VmRSS");

    constexpr int slow_count = 300, garbage_count = 100;
    std::vector<wire_peer> slow, garbage;
    int served = 0;
    // Garbage first: each is closed at once, so the cap is not full yet.
    for (int i = 0; i < garbage_count; ++i) {
      auto& g = garbage.emplace_back(node.port());
      if (i % 2 == 0) {
        // A header announcing a frame larger than any hello, before authentication.
        unsigned char h[wire::header_size];
        wire::encode_header({.size = 1u << 20, .type = wire::kind::hello}, h);
        g.send(std::span<const char>(reinterpret_cast<const char*>(h), sizeof h));
      } else {
        g.send(std::string(3000, '\xff'));
      }
      if (i % 20 == 0) served += peer.call(i) == 2 * i;
    }
    for (int i = 0; i < slow_count; ++i) {
      slow.emplace_back(node.port()).send(std::string("T"));
      if (i % 30 == 0) served += peer.call(i) == 2 * i;
    }
    CHECK(served == slow_count / 30 + garbage_count / 20);

    // Every slow peer is closed: beyond the cap at once, the others at the deadline.
    int slow_closed = 0;
    for (auto& c : slow) slow_closed += c.closed_within(5s);
    CHECK(slow_closed == slow_count);
    int garbage_closed = 0;
    for (auto& c : garbage) garbage_closed += c.closed_within(5s);
    CHECK(garbage_closed == garbage_count);
    const long rss_peak_growth = status_kb(node.pid(), "VmHWM") - rss_before;
    std::printf("node VmRSS before the flood %ld kB; peak growth with %d strangers %ld kB\n",
                rss_before, slow_count + garbage_count, rss_peak_growth);
    // At most max_unauthenticated strangers live at once, each buffering 12 KiB at
    // most: with the connection's own state, well under 40 KiB each (measured: the
    // whole flood raised the peak by about 1.3 MB).
    if (TLAUNCH_TEST_MEMORY_BOUND)
      CHECK(rss_peak_growth < static_cast<long>(ro.max_unauthenticated) * 40);
    slow.clear();
    garbage.clear();

    // The existing connection and a new one are served.
    CHECK(serves_on(node, peer));
    const std::string err = node.err();
    CAPTURE(err);
    CHECK(count(err, "no complete hello exchange within 1 s") == 1);
    CHECK(count(err, "connections have not completed their hello exchange yet") == 1);
    CHECK(count(err, "before the hello exchange completed") == 1);
    // 400 strangers, a handful of lines (one per reason).
    CHECK(count(err, "\n") < 12);
  }
}

// A peer that holds the launch secret but misbehaves (a node with a bug, or compromised).
TEST_SUITE("accept_loop") {
  TEST_CASE("the launcher's port: a peer with the secret that registers wrongly is closed and named") {
    const std::string err_path = (std::filesystem::temp_directory_path() /
                                  ("tlaunch-coord-" + std::to_string(::getpid())))
                                     .string();
    auto [pid, port_line] = fork_reporting(err_path, true, [&](auto report) {
      // The coordinator of a program with one instance, echo/0, whose "process" is cat:
      // the test's raw peers play the node.
      tlaunch::launch::options o;
      tlaunch::launch::output_printer out(tlaunch::launch::color_mode::never);
      tlaunch::launch::coordinator coord(tlaunch::detail::describe(echo_program, {}), o, out);
      coord.use_secret(launch_secret);
      report(std::to_string(coord.listen("127.0.0.1")));
      int code = coord.run({{0, "echo/0", ""}}, [](const tlaunch::launch::placement&,
                                                   std::uint16_t, const std::vector<std::string>&,
                                                   tlaunch::launch::child_callbacks cb) {
        return tlaunch::launch::start_local_child({"/bin/cat"}, std::move(cb), {});
      });
      std::fprintf(stderr, "coordinator exit code %d\n", code);
      std::fflush(stderr);
    });
    const int port = std::stoi(port_line);
    auto reg = [](std::uint32_t flat) {
      return frame_of({.type = wire::kind::reg}, flat, std::string("127.0.0.1:1"), std::int64_t{1});
    };
    {
      INFO("an instance the program does not have");
      auto p = raw_peer(port);
      p.send(reg(5));
      CHECK(p.closed_within(5s));
    }
    {
      INFO("reports from a connection that registered nothing are ignored; a bad one closes it");
      auto p = raw_peer(port);
      p.send(frame_of({.type = wire::kind::node_failed}, std::string("fake"), std::uint8_t{1}));
      p.send(frame_of({.type = wire::kind::stop_request}));
      CHECK_FALSE(p.closed_within(300ms));
      p.send(frame_of({.type = wire::kind::node_failed}, std::string("fake"), std::uint8_t{77}));
      CHECK(p.closed_within(5s));
    }
    auto node = raw_peer(port);
    node.send(reg(0));
    auto dir = node.read_frame();
    REQUIRE(dir.has_value());
    CHECK(dir->first.type == wire::kind::directory);
    {
      INFO("an instance registered already");
      auto p = raw_peer(port);
      p.send(reg(0));
      CHECK(p.closed_within(5s));
    }
    // A call (the launcher hosts no nodes) and frames a launcher never expects.
    node.send(frame_of({.type = wire::kind::call, .target = 0, .call_id = 1, .method = 1}));
    node.send(frame_of({.type = wire::kind::stop}));
    node.send(frame_of({.type = wire::kind::reply, .call_id = 9}));
    auto r = node.read_frame();
    REQUIRE(r.has_value());
    CHECK(r->first.type == wire::kind::error_reply);
    CHECK(::waitpid(pid, nullptr, WNOHANG) == 0);  // the launcher runs on
    // The program still ends as its node asks.
    node.send(frame_of({.type = wire::kind::stop_request}));
    int status = 0;
    for (int i = 0; i < 200 && ::waitpid(pid, &status, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(50ms);
    const std::string err = slurp(err_path);
    std::filesystem::remove(err_path);
    CAPTURE(err);
    CHECK(WIFEXITED(status));
    CHECK(count(err, "coordinator exit code 0") == 1);
    CHECK(count(err, "bad registration for instance #5: the program has 1 instances") == 1);
    CHECK(count(err, "bad registration for instance #0 (echo/0): it is registered already") == 1);
    CHECK(count(err, "malformed control frame: unknown fault 77") == 1);
  }
}
