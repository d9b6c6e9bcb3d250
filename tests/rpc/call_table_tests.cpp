#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <tlaunch/rpc/call_table.hpp>

using tlaunch::rpc::call_table;
using tlaunch::rpc::pending_call;
namespace wire = tlaunch::wire;

namespace {

// A waiting call that remembers how it ended.
struct recorded_call final : pending_call {
  void complete(const wire::frame_header& h, std::span<const char> payload) override {
    ++endings;
    replied_id = h.call_id;
    reply.assign(payload.begin(), payload.end());
  }
  void fail_unavailable(const std::string& why) override {
    ++endings;
    failure = why;
  }
  int endings = 0;
  std::uint64_t replied_id = 0;
  std::string reply, failure;
};

}  // namespace

TEST_SUITE("call_table") {
  TEST_CASE("calls get increasing ids and are completed by their reply once") {
    call_table t;
    auto a = std::make_shared<recorded_call>(), b = std::make_shared<recorded_call>();
    CHECK(t.add(a) == 1);
    CHECK(t.add(b) == 2);
    CHECK(t.size() == 2);

    auto p = t.take(2);
    REQUIRE(p == b);
    std::string payload = "42";
    p->complete({.type = wire::kind::reply, .call_id = 2}, payload);
    CHECK(b->endings == 1);
    CHECK(b->reply == "42");
    CHECK(t.take(2) == nullptr);  // a second reply to the same id finds nothing
    CHECK(t.size() == 1);
    CHECK(t.take(99) == nullptr);  // never made
  }

  TEST_CASE("an abandoned call is gone: its late reply is dropped") {
    call_table t;
    auto a = std::make_shared<recorded_call>();
    auto id = t.add(a);
    auto abandoned = t.take(id);  // deadline or cancellation
    REQUIRE(abandoned == a);
    CHECK(t.take(id) == nullptr);  // the reply that comes later
    CHECK(a->endings == 0);        // the caller fails it (timeout, cancelled), not the table
  }

  TEST_CASE("fail-all takes every waiting call, and ids go on afterwards") {
    call_table t;
    std::vector<std::shared_ptr<recorded_call>> calls;
    for (int i = 0; i < 5; ++i) {
      calls.push_back(std::make_shared<recorded_call>());
      t.add(calls.back());
    }
    t.take(3);
    auto all = t.take_all();
    CHECK(all.size() == 4);
    CHECK(t.size() == 0);
    for (auto& p : all) p->fail_unavailable("closed by ps/0");
    for (int i = 0; i < 5; ++i) CHECK(calls[i]->endings == (i == 2 ? 0 : 1));
    CHECK(calls[0]->failure == "closed by ps/0");
    CHECK(t.add(std::make_shared<recorded_call>()) == 6);
  }

  TEST_CASE("thousands in flight, answered in any order") {
    call_table t;
    std::vector<std::uint64_t> ids;
    std::vector<std::shared_ptr<recorded_call>> calls;
    for (int i = 0; i < 3000; ++i) {
      calls.push_back(std::make_shared<recorded_call>());
      ids.push_back(t.add(calls.back()));
    }
    std::mt19937 rng(7);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (auto id : ids) {
      auto p = t.take(id);
      REQUIRE(p);
      p->complete({.type = wire::kind::reply, .call_id = id}, {});
    }
    CHECK(t.size() == 0);
    for (std::size_t i = 0; i < calls.size(); ++i) CHECK(calls[i]->replied_id == i + 1);
  }

  TEST_CASE("served calls: a cancel frame finds its coroutine once") {
    call_table t;
    int cancelled = 0;
    t.add_running(7, [&] { ++cancelled; });
    t.add_running(8, [&] { cancelled += 10; });
    auto c = t.take_running(7);
    REQUIRE(c);
    c();
    CHECK(cancelled == 1);
    CHECK_FALSE(t.take_running(7));
    t.remove_running(8);  // the method completed first
    CHECK_FALSE(t.take_running(8));
  }
}
