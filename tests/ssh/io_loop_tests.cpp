// ssh/io_loop.hpp on a session logged in to the sshd of tools/sshd-fixture.sh.
#include <tlaunch/launch/ssh/connect.hpp>
#include <tlaunch/launch/ssh/io_loop.hpp>

#include "fixture.hpp"

#include <sys/socket.h>

#include <atomic>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace ssh_test;

namespace {

std::shared_ptr<ssh::io_loop> start_loop(ssh::io_loop::hooks h = {}) {
  auto s = ssh::login(host(), options());
  return ssh::io_loop::start(host(), s.release(), std::move(h));
}

// Waits until pred() holds, checking on the loop's thread; false after 20 s.
template <class Pred>
bool eventually(ssh::io_loop& loop, Pred pred) {
  for (int i = 0; i < 2000; ++i) {
    if (loop.call(pred)) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

}  // namespace

TEST_SUITE("ssh_io_loop") {
  TEST_CASE("call runs on the loop's thread and returns its value or rethrows") {
    ssh::io_loop_owner owner(start_loop());
    auto& loop = owner.loop();
    CHECK_FALSE(loop.on_io_thread());
    auto id = loop.call([] { return std::this_thread::get_id(); });
    CHECK(id != std::this_thread::get_id());
    CHECK(loop.call([&] { return loop.on_io_thread(); }));
    CHECK(loop.call([&] { return ssh_is_connected(loop.session()) != 0; }));
    CHECK_THROWS_WITH_AS(loop.call([]() -> int { throw std::runtime_error("from the loop"); }),
                         "from the loop", std::runtime_error);
    // a call made on the loop's thread runs at once instead of waiting for itself
    CHECK(loop.call([&] { return loop.call([] { return 7; }); }) == 7);
    CHECK(loop.host().display() == host().display());
  }

  TEST_CASE("posted tasks run in order, each turn after them") {
    auto turns = std::make_shared<std::atomic<int>>(0);
    ssh::io_loop::hooks h;
    h.turn = [turns] {
      ++*turns;
      return false;
    };
    ssh::io_loop_owner owner(start_loop(h));
    auto& loop = owner.loop();
    std::vector<int> order;  // touched only on the loop's thread
    for (int i = 0; i < 100; ++i) CHECK(loop.post([&order, i] { order.push_back(i); }));
    std::vector<int> expect(100);
    for (int i = 0; i < 100; ++i) expect[i] = i;
    CHECK(loop.call([&] { return order; }) == expect);
    // that call ran in some turn's batch of tasks; the turn's hook ran after the batch
    CHECK(loop.call([&] { return turns->load(); }) >= 1);
  }

  TEST_CASE("wait_ms bounds the wait between turns") {
    // With 0 the loop turns without any task or traffic; with the default 1000 ms the
    // 50 turns would take 50 s, past the 20 s eventually() waits.
    auto turns = std::make_shared<std::atomic<int>>(0);
    ssh::io_loop::hooks h;
    h.turn = [turns] {
      ++*turns;
      return false;
    };
    h.wait_ms = [] { return 0; };
    ssh::io_loop_owner owner(start_loop(h));
    int first = turns->load();
    for (int i = 0; i < 2000 && turns->load() < first + 50; ++i) std::this_thread::sleep_for(10ms);
    CHECK(turns->load() >= first + 50);
  }

  TEST_CASE("stopping runs the stopped hook while the session is open, then refuses work") {
    struct seen {
      std::thread::id thread;
      bool connected = false;
      int lost = 0;
    };
    auto s = std::make_shared<seen>();
    std::shared_ptr<ssh::io_loop> keep;
    ssh::io_loop::hooks h;
    h.stopped = [s, &keep] {
      s->thread = std::this_thread::get_id();
      s->connected = ssh_is_connected(keep->session()) != 0;
    };
    h.lost = [s](const std::string&) { ++s->lost; };
    keep = start_loop(h);
    auto loop_thread = keep->call([] { return std::this_thread::get_id(); });
    { ssh::io_loop_owner owner(keep); }  // stops and joins
    CHECK(s->thread == loop_thread);
    CHECK(s->connected);
    CHECK(s->lost == 0);  // a stop is not a lost connection
    CHECK_FALSE(keep->post([] {}));
    auto what = error_of([&] { keep->call([] { return 1; }); });
    CHECK(contains(what, "ssh root@127.0.0.2:"));
    CHECK(contains(what, "the session is closed"));
  }

  TEST_CASE("a lost connection is reported once; tasks still run, turns stop") {
    struct seen {
      std::atomic<int> turns{0}, lost{0};
      std::string reason;
    };
    auto s = std::make_shared<seen>();
    ssh::io_loop::hooks h;
    h.turn = [s] {
      ++s->turns;
      return false;
    };
    h.lost = [s](const std::string& why) {
      s->reason = why;
      ++s->lost;
    };
    ssh::io_loop_owner owner(start_loop(h));
    auto& loop = owner.loop();
    CHECK_FALSE(loop.call([&] { return loop.lost(); }));
    // the peer goes away as a dead link would leave it: the socket reads EOF
    loop.call([&] { ::shutdown(ssh_get_fd(loop.session()), SHUT_RDWR); });
    REQUIRE(eventually(loop, [&] { return loop.lost(); }));
    CHECK(s->lost == 1);
    CHECK_FALSE(s->reason.empty());
    CHECK(loop.call([&] { return loop.lost_reason(); }) == s->reason);
    int turns = s->turns;
    for (int i = 0; i < 5; ++i) CHECK(loop.call([i] { return i; }) == i);
    CHECK(s->turns == turns);
    CHECK(s->lost == 1);
  }

  TEST_CASE("dropping the last owner on the loop's own thread does not wait for itself") {
    auto stopped = std::make_shared<std::promise<void>>();
    ssh::io_loop::hooks h;
    h.stopped = [stopped] { stopped->set_value(); };
    auto owner = std::make_shared<ssh::io_loop_owner>(start_loop(h));
    auto done = stopped->get_future();
    CHECK(owner->loop().post([&owner] { owner.reset(); }));  // as a child's exit callback may
    REQUIRE(done.wait_for(20s) == std::future_status::ready);
  }
}
