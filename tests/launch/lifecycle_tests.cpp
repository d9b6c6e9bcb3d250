// The lifecycle (launch/lifecycle.hpp): what counts as a failure before and during
// the stop, and the stop race it settles, reproduced with a real multi-process program
// whose stop reaches one node late (stop_race.cpp).
#include <doctest/doctest.h>

#include <signal.h>

#include <stdexcept>
#include <string>
#include <vector>
#include <tlaunch/launch/lifecycle.hpp>

#include "../common/process.hpp"

namespace it = tlaunch::integration;
using tlaunch::launch::fault;
using tlaunch::launch::lifecycle;
using namespace std::chrono_literals;

namespace {
bool has(const std::string& s, std::string_view needle) {
  return s.find(needle) != std::string::npos;
}
}  // namespace

TEST_SUITE("lifecycle") {
  TEST_CASE("phases: starting, running, stopping once, stopped") {
    lifecycle l;
    CHECK(l.current() == lifecycle::phase::starting);
    l.running();
    CHECK(l.current() == lifecycle::phase::running);
    CHECK_FALSE(l.stopping());
    CHECK(l.begin_stop("stop_program()"));
    CHECK_FALSE(l.begin_stop("again"));
    CHECK(l.stop_reason() == "stop_program()");
    CHECK(l.stopping());
    l.running();  // too late: stays stopping
    CHECK(l.current() == lifecycle::phase::stopping);
    l.stopped();
    CHECK(l.current() == lifecycle::phase::stopped);
    CHECK(l.exit_code() == 0);
    CHECK_FALSE(l.failure());
  }

  TEST_CASE("before the stop every fault counts, the first is kept and begins the stop") {
    for (fault f : {fault::call_error, fault::error, fault::exit_code, fault::signal, fault::lost,
                    fault::grace_overrun}) {
      CAPTURE(tlaunch::launch::to_string(f));
      lifecycle l;
      l.running();
      CHECK(l.fail("worker/1", "first", f));
      CHECK(l.stopping());
      CHECK(l.stop_reason() == "node worker/1 failed");
      CHECK(l.exit_code() == 1);
      // A later failure that counts does not replace the first.
      CHECK(l.fail("worker/2", "second", fault::error));
      REQUIRE(l.failure());
      CHECK(l.failure()->where == "worker/1");
      CHECK(l.failure()->why == "first");
    }
  }

  TEST_CASE("during the stop, errors the stop causes do not count; real failures do") {
    for (fault f : {fault::call_error, fault::lost}) {
      CAPTURE(tlaunch::launch::to_string(f));
      lifecycle l;
      l.begin_stop("stop_program()");
      CHECK_FALSE(l.fail("worker/1", "unavailable: closed by store/0", f));
      CHECK_FALSE(l.failure());
      CHECK(l.exit_code() == 0);
    }
    for (fault f : {fault::error, fault::exit_code, fault::signal, fault::grace_overrun}) {
      CAPTURE(tlaunch::launch::to_string(f));
      lifecycle l;
      l.begin_stop("stop_program()");
      CHECK(l.fail("worker/1", "real", f));
      CHECK(l.exit_code() == 1);
      CHECK(l.stop_reason() == "stop_program()");
    }
  }

  TEST_CASE("a node process's own failure is recorded without beginning the stop") {
    lifecycle l;
    l.running();
    CHECK(l.fail("worker/1", "boom", fault::error, /*stop=*/false));
    CHECK_FALSE(l.stopping());
    CHECK(l.exit_code() == 1);
    CHECK(l.begin_stop("stopped by the coordinator"));
  }

  TEST_CASE("a signal gives 128 + its number, unless a failure came first") {
    lifecycle a;
    a.interrupted(SIGINT);
    CHECK(a.begin_stop("interrupted"));
    CHECK(a.exit_code() == 130);
    lifecycle b;
    b.fail("worker/0", "boom", fault::error);
    b.interrupted(SIGTERM);
    CHECK(b.exit_code() == 1);
  }

  TEST_CASE("the fault of a run() error: call errors apart from the rest") {
    auto of = [](auto e) { return tlaunch::launch::fault_of(std::make_exception_ptr(e)); };
    tlaunch::call_site site{"store/0", "Store::get"};
    CHECK(of(tlaunch::unavailable(site, "closed by store/0")) == fault::call_error);
    CHECK(of(tlaunch::stopping(site, "closed by store/0")) == fault::call_error);
    CHECK(of(tlaunch::cancelled(site)) == fault::call_error);
    CHECK(of(tlaunch::timeout(site)) == fault::call_error);
    CHECK(of(tlaunch::remote_error(site, "no")) == fault::call_error);
    CHECK(of(std::runtime_error("mine")) == fault::error);
    CHECK(of(42) == fault::error);
  }

  TEST_CASE("a restart budget: at most N within the window, a doubling backoff") {
    using clock = std::chrono::steady_clock;
    tlaunch::launch::restart_budget b(3, 60s, 100ms);
    auto t = clock::time_point{} + 1h;
    CHECK(b.allows(t));
    CHECK(b.take(t) == 100ms);
    CHECK(b.take(t + 1s) == 200ms);
    CHECK(b.take(t + 2s) == 400ms);
    CHECK(!b.allows(t + 3s));
    CHECK(b.count() == 3);
    CHECK(b.allows(t + 60500ms));  // the first has left the window
    CHECK(b.count() == 2);
    CHECK(!tlaunch::launch::restart_budget().allows(t));  // no policy: never
    tlaunch::launch::restart_budget ever(2, 0ms, 20s);    // window 0: counted forever
    CHECK(ever.take(t) == 20s);
    CHECK(ever.take(t + 24h) == 20s);  // a backoff past 10 s does not grow
    CHECK(!ever.allows(t + 48h));
  }

  TEST_CASE("stop race: a node whose peer stopped before its own stop arrived does not fail") {
    // worker/1's stop is held back until it reports, so every run reaches the race.
    for (int round = 0; round < 3; ++round) {
      CAPTURE(round);
      auto marker = it::unique_marker("stop-race");
      it::process p({TLAUNCH_STOP_RACE_EXE, "--launch=local_mp", "--", "unavailable", marker});
      int code = p.wait_or_kill(30s);
      CAPTURE(p.all());
      // The race happened: worker/1's call failed because store/0 had stopped, which
      // store/0 had said (tlaunch::stopping)...
      CHECK(has(p.out(), "Store::get ended by the program's stop: "));
      // ...and that is not a failure of the program (the error's own text may say
      // "read ... failed", so look for the launcher's report of a failed node), nor
      // an error of worker/1's.
      CHECK(code == 0);
      CHECK_FALSE(has(p.err(), "[launcher] node "));
      CHECK_FALSE(has(p.all(), "ended with an error"));
      CHECK(it::node_pids(marker).empty());
    }
  }

  TEST_CASE("stop race: a call in flight when its callee stops ends with tlaunch::stopping") {
    // store/0 never answers worker/1's call; worker/0 stops the program once store/0
    // serves it, and worker/1's own stop is held back: store/0 always stops first, with
    // the call in flight. Plain TCP and --tls (the stopping frame travels inside TLS).
    for (std::vector<std::string> extra : {std::vector<std::string>{},
                                           std::vector<std::string>{"--tls"}}) {
      for (int round = 0; round < 2; ++round) {
        CAPTURE(round);
        CAPTURE(extra.size());
        auto marker = it::unique_marker("stop-in-flight");
        std::vector<std::string> argv{TLAUNCH_STOP_RACE_EXE, "--launch=local_mp"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        argv.insert(argv.end(), {"--", "in_flight", marker});
        it::process p(argv);
        int code = p.wait_or_kill(30s);
        CAPTURE(p.all());
        CHECK(has(p.out(), "[worker/0] worker/1's call is in flight: stopping the program"));
        CHECK(has(p.out(),
                  "[worker/1] in flight: tlaunch::stopping: store/0 Store::hang ended by the "
                  "program's stop: "));
        CHECK(code == 0);
        CHECK_FALSE(has(p.all(), "ended with an error"));
        CHECK_FALSE(has(p.all(), "failed"));
        CHECK_FALSE(has(p.all(), "exited with code"));
        CHECK(it::node_pids(marker).empty());
      }
    }
  }

  TEST_CASE("stop race: a real failure during the stop still fails the program") {
    auto marker = it::unique_marker("stop-race-real");
    it::process p({TLAUNCH_STOP_RACE_EXE, "--launch=local_mp", "--", "real", marker});
    int code = p.wait_or_kill(30s);
    CAPTURE(p.all());
    CHECK(code == 1);
    CHECK(has(p.err(), "node worker/1 failed: worker/1 gave up for real"));
    CHECK(it::node_pids(marker).empty());
  }
}
