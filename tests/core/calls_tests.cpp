// Calls through handles, the way a user writes them, on both paths: direct
// (local_mt) and over the wire (local_mt with force_wire, loopback TCP).
// rpc::test_counters::polled_reads shows which path a read took (linked to the compiled
// library, which the build then compiles with TLAUNCH_TEST_COUNTERS too).
#ifndef TLAUNCH_TEST_COUNTERS
#define TLAUNCH_TEST_COUNTERS
#endif
#include <doctest/doctest.h>

#include <asio/experimental/awaitable_operators.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_future.hpp>
#include <time.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <tlaunch/rpc/connection.hpp>  // test_counters
#include <tlaunch/testing.hpp>
#include <tlaunch/tlaunch.hpp>
#include <utility>
#include <vector>

#include "../common/launch_paths.hpp"

using namespace std::chrono_literals;

namespace {

struct Account {
  std::int64_t balance = 0;
  int inside = 0;        // calls currently inside slow_add
  int max_inside = 0;    // must stay 1: actor semantics
  int interleavings = 0; // another call ran while one was suspended

  asio::awaitable<std::int64_t> slow_add(std::int64_t k) {
    ++inside;
    max_inside = std::max(max_inside, inside);
    std::int64_t before = balance;
    asio::steady_timer t(co_await asio::this_coro::executor, 1ms);
    --inside;  // suspended: others may run now, but never at the same time
    co_await t.async_wait(asio::use_awaitable);
    ++inside;
    max_inside = std::max(max_inside, inside);
    if (balance != before) ++interleavings;
    balance += k;
    --inside;
    co_return balance;
  }
  std::int64_t add(std::int64_t k) {
    ++inside;
    max_inside = std::max(max_inside, inside);
    balance += k;
    --inside;
    return balance;
  }
  std::int64_t get() const { return balance; }
  int max_concurrency() const { return max_inside; }
  int interleaved() const { return interleavings; }
  void fail(std::string why) { throw std::runtime_error(why); }
  asio::awaitable<void> fail_later(std::string why) {
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    throw std::invalid_argument(why);
  }
  int aborted_sleeps = 0;  // sleep_ms calls that were cancelled while sleeping
  asio::awaitable<int> sleep_ms(int ms) {
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(ms));
    std::error_code ec;
    co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      ++aborted_sleeps;
      throw std::system_error(ec);
    }
    co_return ms;
  }
  int aborted() const { return aborted_sleeps; }
  std::vector<char> echo(std::vector<char> v) { return v; }
  std::vector<std::int64_t> echo_numbers(std::vector<std::int64_t> v) { return v; }
  std::string echo_string(std::string s) { return s; }
  tlaunch::bytes echo_bytes(tlaunch::bytes b) { return b; }
  // Where a received payload lies in its page: views of the frame buffer start
  // right after the 32-byte header and the 8-byte size.
  std::uint64_t offset_in_page(tlaunch::bytes b) {
    return reinterpret_cast<std::uintptr_t>(b.data()) % 4096;
  }
  std::string concat(std::string a, const std::string& b, int n) {
    std::string r;
    for (int i = 0; i < n; ++i) r += a + b;
    return r;
  }
  using rpc = tlaunch::methods<&Account::slow_add, &Account::add, &Account::get,
                               &Account::max_concurrency, &Account::interleaved, &Account::fail,
                               &Account::fail_later, &Account::sleep_ms, &Account::echo,
                               &Account::echo_bytes, &Account::offset_in_page, &Account::aborted,
                               &Account::concat, &Account::echo_numbers, &Account::echo_string>;
};

constexpr auto bank = tlaunch::program(tlaunch::node<"account", Account>(),
                                       tlaunch::node<"other", Account>().replicas(3));

struct Caller {
  tlaunch::handle<Account> acc;
  std::string try_sync() {
    try {
      acc.sync<&Account::get>();
    } catch (const std::logic_error& e) {
      return e.what();
    }
    return "no error";
  }
  using rpc = tlaunch::methods<&Caller::try_sync>;
};

// Records the order calls arrive in; note_later is a coroutine method that
// records before its first suspension.
struct Log {
  std::vector<int> order;
  int note(int i) {
    order.push_back(i);
    return i;
  }
  asio::awaitable<int> note_later(int i) {
    order.push_back(i);
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    co_return i;
  }
  std::vector<int> seen() const { return order; }
  int refuse(int i) { throw std::runtime_error("refused " + std::to_string(i)); }
  using rpc = tlaunch::methods<&Log::note, &Log::note_later, &Log::seen, &Log::refuse>;
};

// Awaits plain methods of Log one by one, also while Log's strand has work
// queued: note_later(1) leaves its resumption queued there, so the call of
// note(2) must wait its turn behind it (in one process, on one io thread, a
// call to an idle strand runs at once instead).
struct Awaiter {
  tlaunch::handle<Log> log;
  asio::awaitable<std::vector<int>> run_calls() {
    std::vector<int> got;
    auto f = log.async<&Log::note_later>(1);
    got.push_back(co_await log.call<&Log::note>(2));
    got.push_back(co_await log.call<&Log::note>(3));
    got.push_back(co_await f.async_wait());
    for (int i = 4; i < 8; ++i) got.push_back(co_await log.call<&Log::note>(i));
    try {
      co_await log.call<&Log::refuse>(8);
      got.push_back(-1);
    } catch (const tlaunch::remote_error& e) {
      if (std::string(e.what()).find("refused 8") != std::string::npos) got.push_back(8);
    }
    got.push_back(co_await log.call<&Log::note>(9));
    co_return got;
  }
  using rpc = tlaunch::methods<&Awaiter::run_calls>;
};

// Sends bursts from its strand, so they leave in few writes and arrive in few reads.
struct Burst {
  tlaunch::handle<Log> log;
  asio::awaitable<std::int64_t> burst(int n) {
    std::vector<tlaunch::future<int>> fs;
    for (int i = 0; i < n; ++i)
      fs.push_back(i % 3 == 2 ? log.async<&Log::note_later>(i) : log.async<&Log::note>(i));
    std::int64_t sum = 0;
    for (auto& f : fs) sum += co_await f.async_wait();
    // And awaited one by one, interleaved with futures.
    for (int i = n; i < n + 20; ++i) {
      auto f = log.async<&Log::note>(i);
      sum += co_await log.call<&Log::note_later>(i + 1000);
      sum += co_await f.async_wait();
    }
    co_return sum;
  }
  using rpc = tlaunch::methods<&Burst::burst>;
};

// Methods whose calls and replies take every shape a frame can: plain numbers
// (built on the stack), nothing (void), a string (serialized), an error reply.
struct Counter {
  std::int64_t total = 0;
  int bumps = 0;
  std::int64_t add(std::int64_t k) { return total += k; }
  void bump() { ++bumps; }
  std::string name(int i) { return "n" + std::to_string(i) + "/" + std::to_string(bumps); }
  void fail(int i) { throw std::runtime_error("fail " + std::to_string(i)); }
  void reset() { total = bumps = 0; }
  // A string argument: this call is serialized, never batched with the others.
  std::string tag(std::string s) { return s + "@" + std::to_string(total); }
  using rpc = tlaunch::methods<&Counter::add, &Counter::bump, &Counter::name, &Counter::fail,
                               &Counter::reset, &Counter::tag>;
};

// Starts n calls of all five shapes at once, then awaits them newest first;
// returns "ok" or the first result that was wrong. Calls whose arguments are
// plain numbers may be batched; tag() is not, and must not overtake them.
struct Mixer {
  tlaunch::handle<Counter> counter;
  asio::awaitable<std::string> mixed(int n) {
    co_await counter.call<&Counter::reset>();
    std::vector<std::pair<int, tlaunch::future<std::int64_t>>> adds;
    std::vector<std::pair<int, tlaunch::future<void>>> bumps, fails;
    std::vector<std::pair<int, tlaunch::future<std::string>>> names, tags;
    // What each call must see, were they run one by one in order.
    std::vector<std::string> expect(static_cast<std::size_t>(n));
    std::int64_t total = 0;
    int bumped = 0;
    for (int i = 0; i < n; ++i) {
      auto& e = expect[static_cast<std::size_t>(i)];
      switch (i % 5) {
        case 0:
          adds.emplace_back(i, counter.async<&Counter::add>(std::int64_t{i}));
          e = std::to_string(total += i);
          break;
        case 1:
          bumps.emplace_back(i, counter.async<&Counter::bump>());
          ++bumped;
          break;
        case 2:
          names.emplace_back(i, counter.async<&Counter::name>(i));
          e = "n" + std::to_string(i) + "/" + std::to_string(bumped);
          break;
        case 3: fails.emplace_back(i, counter.async<&Counter::fail>(i)); break;
        default:
          tags.emplace_back(i, counter.async<&Counter::tag>(std::string("t") + std::to_string(i)));
          e = "t" + std::to_string(i) + "@" + std::to_string(total);
          break;
      }
    }
    auto wrong = [&](int i, const std::string& got) {
      return "call " + std::to_string(i) + ": " + got + " instead of " +
             expect[static_cast<std::size_t>(i)];
    };
    for (auto* list : {&names, &tags})
      for (auto it = list->rbegin(); it != list->rend(); ++it) {
        auto got = co_await it->second.async_wait();
        if (got != expect[static_cast<std::size_t>(it->first)]) co_return wrong(it->first, got);
      }
    for (auto it = fails.rbegin(); it != fails.rend(); ++it) {
      try {
        co_await it->second.async_wait();
        co_return wrong(it->first, "fail() did not throw");
      } catch (const tlaunch::remote_error& e) {
        if (std::string(e.what()).find("fail " + std::to_string(it->first)) == std::string::npos)
          co_return wrong(it->first, e.what());
      }
    }
    for (auto it = bumps.rbegin(); it != bumps.rend(); ++it) co_await it->second.async_wait();
    for (auto it = adds.rbegin(); it != adds.rend(); ++it) {
      auto got = std::to_string(co_await it->second.async_wait());
      if (got != expect[static_cast<std::size_t>(it->first)]) co_return wrong(it->first, got);
    }
    co_return "ok";
  }
  using rpc = tlaunch::methods<&Mixer::mixed>;
};

// A node that reads and sets its process's busy polling.
struct Spinner {
  tlaunch::context* ctx = nullptr;
  std::int64_t add(std::int64_t a, std::int64_t b) { return a + b; }
  std::vector<char> echo(std::vector<char> v) { return v; }
  std::vector<std::int64_t> echo_numbers(std::vector<std::int64_t> v) { return v; }
  std::string echo_string(std::string s) { return s; }
  std::int64_t poll_us() { return ctx ? ctx->busy_poll().count() : -1; }
  void set_poll(std::int64_t us) {
    if (ctx) ctx->set_busy_poll(std::chrono::microseconds(us));
  }
  using rpc = tlaunch::methods<&Spinner::add, &Spinner::echo, &Spinner::poll_us, &Spinner::set_poll>;
  asio::awaitable<void> run(tlaunch::context& c) {
    ctx = &c;
    co_await c.stopped();
    ctx = nullptr;
  }
};

// CPU time this process used while the calling thread sleeps for 300 ms, as a
// fraction of that time (1.0: one core busy throughout).
double idle_cpu_share() {
  auto cpu = [] {
    timespec ts{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
  };
  auto wall = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  double c0 = cpu(), w0 = wall();
  std::this_thread::sleep_for(300ms);
  return (cpu() - c0) / (wall() - w0);
}

// Polls f for up to 3 s.
template <class F>
bool eventually(F f) {
  for (int i = 0; i < 300; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

tlaunch::launch::options opts(bool wire) { return tlaunch::test_support::launch_options(wire); }
using tlaunch::test_support::on_every_path;

}  // namespace

TEST_SUITE("calls") {
  TEST_CASE("sync calls return values and carry arguments") {
    for (bool wire : {false, true}) {
      CAPTURE(wire);
      tlaunch::testing::test_launch t(bank, opts(wire));
      auto acc = t.get<"account">();
      CHECK(acc.sync<&Account::add>(5) == 5);
      CHECK(acc.sync<&Account::slow_add>(7) == 12);
      CHECK(acc.sync<&Account::get>() == 12);
      CHECK(acc.sync<&Account::concat>(std::string("ab"), std::string("c"), 3) == "abcabcabc");
      std::vector<char> big(3 << 20);
      for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
      CHECK(acc.sync<&Account::echo>(big) == big);
      tlaunch::bytes bb(std::vector<char>(big.begin(), big.end()));
      auto back = acc.sync<&Account::echo_bytes>(bb);
      CHECK(back == bb);
      if (!wire) CHECK(back.data() == bb.data());  // shared in one process, never copied
      CHECK(acc.sync<&Account::echo_bytes>(tlaunch::bytes(std::string("small"))).view() == "small");
      // Replicas are distinct instances.
      CHECK(t.get<"other">(1).sync<&Account::add>(1) == 1);
      CHECK(t.get<"other">(2).sync<&Account::add>(2) == 2);
      CHECK(t.get<"other">(1).sync<&Account::get>() == 1);
    }
  }

  TEST_CASE("empty vectors, strings and bytes go both ways, directly and over the wire") {
    // Empty containers have no data pointer: sanitizer builds check that none
    // reaches memcpy on either side.
    for (bool wire : {false, true}) {
      CAPTURE(wire);
      tlaunch::testing::test_launch t(bank, opts(wire));
      auto acc = t.get<"account">();
      CHECK(acc.sync<&Account::echo_numbers>(std::vector<std::int64_t>{}).empty());
      CHECK(acc.sync<&Account::echo_numbers>(std::vector<std::int64_t>{-1, 2}) ==
            std::vector<std::int64_t>{-1, 2});
      CHECK(acc.sync<&Account::echo_string>(std::string()).empty());
      CHECK(acc.sync<&Account::echo>(std::vector<char>{}).empty());
      CHECK(acc.sync<&Account::echo_bytes>(tlaunch::bytes()).empty());
      CHECK(acc.sync<&Account::concat>(std::string(), std::string(), 2).empty());
    }
  }

  TEST_CASE("large bytes arrive as a view of the received frame, not a copy") {
    tlaunch::testing::test_launch t(bank, opts(true));
    auto acc = t.get<"account">();
    CHECK(acc.sync<&Account::offset_in_page>(tlaunch::bytes(std::string(1 << 20, 'x'))) ==
          tlaunch::wire::header_size + 8);
  }

  TEST_CASE("a future: ready() and get() see the reply, a late waiter fires, a second one is refused") {
    for (bool wire : {false, true}) {
      CAPTURE(wire);
      tlaunch::testing::test_launch t(bank, opts(wire));
      auto acc = t.get<"account">();

      // Installed before the reply: fired by it. A second waiter is an error.
      auto f = acc.async<&Account::sleep_ms>(500);
      CHECK_FALSE(f.ready());
      std::promise<int> first;
      f.async_wait([&](std::exception_ptr e, int v) {
        if (e)
          first.set_exception(e);
        else
          first.set_value(v);
      });
      CHECK_THROWS_WITH_AS(f.async_wait([](std::exception_ptr, int) {}),
                           "tlaunch::future awaited twice", std::logic_error);
      CHECK(first.get_future().get() == 500);
      CHECK(f.ready());

      // get() blocking on another thread before the reply, then ready().
      auto g = acc.async<&Account::sleep_ms>(50);
      int got = 0;
      std::thread waiter([&] { got = g.get(); });
      waiter.join();
      CHECK(got == 50);
      CHECK(g.ready());

      // Awaited after the reply came: fires at once with the result or the error.
      auto h = acc.async<&Account::add>(7);
      auto bad = acc.async<&Account::fail>(std::string("late"));
      CHECK(eventually([&] { return h.ready() && bad.ready(); }));
      std::promise<std::int64_t> late;
      h.async_wait([&](std::exception_ptr e, std::int64_t v) {
        if (e)
          late.set_exception(e);
        else
          late.set_value(v);
      });
      CHECK(late.get_future().get() == 7);
      // The error is looked at where it arrives: an exception_ptr shared with this
      // thread would be released on the other one without ThreadSanitizer seeing
      // the synchronization inside libstdc++.
      std::promise<std::string> late_error;
      bad.async_wait([&](std::exception_ptr e) {
        std::string what = "no error";
        try {
          if (e) std::rethrow_exception(std::exchange(e, nullptr));
        } catch (const tlaunch::remote_error& r) {
          what = std::string("remote_error: ") + r.what();
        } catch (...) {
          what = "another error";
        }
        late_error.set_value(what);
      });
      auto what = late_error.get_future().get();
      CHECK(what.rfind("remote_error: ", 0) == 0);
      CHECK(what.find("late") != std::string::npos);
    }
  }

  TEST_CASE("methods of one node never run at the same time") {
    for (bool wire : {false, true}) {
      CAPTURE(wire);
      tlaunch::testing::test_launch t(bank, opts(wire));
      auto acc = t.get<"account">();
      std::vector<tlaunch::future<std::int64_t>> fs;
      for (int i = 0; i < 200; ++i) {
        fs.push_back(acc.async<&Account::slow_add>(1));
        fs.push_back(acc.async<&Account::add>(1));
      }
      std::vector<std::thread> callers;
      for (int k = 0; k < 4; ++k)
        callers.emplace_back([&] {
          for (int i = 0; i < 50; ++i) acc.sync<&Account::add>(1);
        });
      for (auto& c : callers) c.join();
      for (auto& f : fs) f.get();
      CHECK(acc.sync<&Account::get>() == 600);
      CHECK(acc.sync<&Account::max_concurrency>() == 1);
      // They did interleave at co_await: slow_add suspended while others ran.
      CHECK(acc.sync<&Account::interleaved>() > 0);
    }
  }

  TEST_CASE("a method that throws gives remote_error naming node, method and message") {
    for (bool wire : {false, true}) {
      CAPTURE(wire);
      tlaunch::testing::test_launch t(bank, opts(wire));
      auto acc = t.get<"other">(2);
      try {
        acc.sync<&Account::fail>(std::string("insufficient funds"));
        FAIL("no exception");
      } catch (const tlaunch::remote_error& e) {
        CHECK(e.node() == "other/2");
        CHECK(e.method().ends_with("::Account::fail"));  // the namespace is spelled per compiler
        CHECK(e.remote_what() == "insufficient funds");
        CHECK(std::string(e.what()).find("other/2") != std::string::npos);
      }
      CHECK_THROWS_AS(acc.sync<&Account::fail_later>(std::string("later")), tlaunch::remote_error);
      // The node keeps serving.
      CHECK(acc.sync<&Account::add>(3) == 3);
    }
  }

  TEST_CASE("a deadline gives tlaunch::timeout and cancels the method") {
    for (bool wire : {false, true}) {
      CAPTURE(wire);
      tlaunch::testing::test_launch t(bank, opts(wire));
      auto acc = t.get<"account">();
      auto start = std::chrono::steady_clock::now();
      CHECK_THROWS_AS(acc.sync<&Account::sleep_ms>(tlaunch::call_options{.timeout = 50ms}, 5000),
                      tlaunch::timeout);
      CHECK(std::chrono::steady_clock::now() - start < 2500ms);
      CHECK(eventually([&] { return acc.sync<&Account::aborted>() == 1; }));
      CHECK(acc.sync<&Account::sleep_ms>(tlaunch::call_options{.timeout = 2000ms}, 1) == 1);
      // A plain method with a deadline that it meets.
      CHECK(acc.sync<&Account::add>(tlaunch::call_options{.timeout = 2000ms}, 4) == 4);
    }
  }

  TEST_CASE("an error reply is reported by its code: a deadline the callee saw is a timeout") {
    // The callee runs the caller's deadline too; when its timer fires first, its
    // reply must read as tlaunch::timeout, as if the caller's own timer had fired.
    tlaunch::rpc::runtime* none = nullptr;
    const tlaunch::rpc::call_target target{none, 0, "Account::sleep_ms"};
    auto outcome = [&](tlaunch::wire::error_code code) {
      tlaunch::wire::frame_buffer f;
      tlaunch::wire::encode_error(f, code, "deadline exceeded: Operation aborted.");
      auto payload = f.bytes().subspan(tlaunch::wire::header_size);
      const tlaunch::wire::frame_header h{.type = tlaunch::wire::kind::error_reply, .call_id = 7};
      auto [e, r] = tlaunch::rpc::decode_reply<int>(target, h, payload);
      REQUIRE(e);
      return e;
    };
    CHECK_THROWS_AS(std::rethrow_exception(outcome(tlaunch::wire::error_code::deadline_exceeded)),
                    tlaunch::timeout);
    CHECK_THROWS_AS(std::rethrow_exception(outcome(tlaunch::wire::error_code::remote_exception)),
                    tlaunch::remote_error);
    CHECK_THROWS_AS(std::rethrow_exception(outcome(tlaunch::wire::error_code::no_such_method)),
                    tlaunch::unavailable);
  }

  TEST_CASE("a reply whose bool is neither 0 nor 1 is malformed, like any reply that does not load") {
    tlaunch::rpc::runtime* none = nullptr;
    const tlaunch::rpc::call_target target{none, 0, "Account::flag"};
    const tlaunch::wire::frame_header h{.type = tlaunch::wire::kind::reply, .call_id = 7};
    const char one = 1, two = 2;
    auto [ok, value] = tlaunch::rpc::decode_reply<bool>(target, h, std::span<const char>(&one, 1));
    CHECK(!ok);
    CHECK(value);
    auto bad = tlaunch::rpc::decode_reply<bool>(target, h, std::span<const char>(&two, 1));
    REQUIRE(bad.first);
    CHECK_THROWS_WITH_AS(std::rethrow_exception(bad.first),
                         doctest::Contains("malformed reply: a bool holds the byte 2"),
                         tlaunch::unavailable);
  }

  TEST_CASE("Asio cancellation cancels a call in flight, and the method") {
   for (bool wire : {false, true}) {
    CAPTURE(wire);
    using namespace asio::experimental::awaitable_operators;
    tlaunch::testing::test_launch t(bank, opts(wire));
    auto acc = t.get<"account">();
    asio::io_context io;
    auto fut = asio::co_spawn(
        io,
        [acc]() -> asio::awaitable<int> {
          asio::steady_timer timer(co_await asio::this_coro::executor, 30ms);
          auto r = co_await (acc.call<&Account::sleep_ms>(5000) ||
                             timer.async_wait(asio::use_awaitable));
          co_return static_cast<int>(r.index());
        },
        asio::use_future);
    io.run();
    CHECK(fut.get() == 1);  // the timer won; the call was cancelled
    CHECK(eventually([&] { return acc.sync<&Account::aborted>() == 1; }));
    CHECK(acc.sync<&Account::get>() == 0);
   }
  }

  TEST_CASE("bursts of calls run in the order they were made, on one io thread or two") {
    constexpr auto p = tlaunch::program(tlaunch::node<"log", Log>(),
                                        tlaunch::node<"burst", Burst>(tlaunch::ref<"log">));
    on_every_path([&](const tlaunch::launch::options& o) {
      tlaunch::testing::test_launch t(p, o);
      const int n = 300;
      std::int64_t expect = std::int64_t{n} * (n - 1) / 2;
      for (int i = n; i < n + 20; ++i) expect += i + (i + 1000);
      CHECK(t.get<"burst">().sync<&Burst::burst>(n) == expect);
      auto seen = t.get<"log">().sync<&Log::seen>();
      REQUIRE(seen.size() == static_cast<std::size_t>(n + 40));
      for (int i = 0; i < n; ++i) REQUIRE(seen[static_cast<std::size_t>(i)] == i);
      for (int i = n; i < n + 20; ++i) {
        // The future's call was made first.
        CHECK(seen[static_cast<std::size_t>(n + 2 * (i - n))] == i);
        CHECK(seen[static_cast<std::size_t>(n + 2 * (i - n) + 1)] == i + 1000);
      }
    });
  }

  TEST_CASE("awaited calls run in order and return their own results, also behind queued work") {
    constexpr auto p = tlaunch::program(tlaunch::node<"log", Log>(),
                                        tlaunch::node<"awaiter", Awaiter>(tlaunch::ref<"log">));
    on_every_path([&](const tlaunch::launch::options& o) {
      tlaunch::testing::test_launch t(p, o);
      for (int round = 0; round < 3; ++round)
        CHECK(t.get<"awaiter">().sync<&Awaiter::run_calls>() ==
              std::vector<int>{2, 3, 1, 4, 5, 6, 7, 8, 9});
      std::vector<int> order;
      for (int round = 0; round < 3; ++round)
        for (int i : {1, 2, 3, 4, 5, 6, 7, 9}) order.push_back(i);
      CHECK(t.get<"log">().sync<&Log::seen>() == order);
    });
  }

  TEST_CASE("a burst of every frame shape: each reply reaches its own call") {
    constexpr auto p = tlaunch::program(tlaunch::node<"counter", Counter>(),
                                        tlaunch::node<"mixer", Mixer>(tlaunch::ref<"counter">));
    on_every_path([&](const tlaunch::launch::options& o) {
      tlaunch::testing::test_launch t(p, o);
      auto m = t.get<"mixer">();
      // 1000 calls in flight: many reads and writes, each carrying many frames.
      // A reply that never came fails the call here instead of hanging.
      for (int round = 0; round < 3; ++round)
        CHECK(m.sync<&Mixer::mixed>(tlaunch::call_options{.timeout = 20s}, 1000) == "ok");
      t.stop();
      CHECK(t.wait() == 0);
    });
  }

  TEST_CASE("busy polling: calls work, idle io threads keep polling, and a node can turn it off") {
    constexpr auto p = tlaunch::program(tlaunch::node<"spinner", Spinner>());
    for (bool wire : {false, true}) {
      CAPTURE(wire);
      auto o = opts(wire);
      o.busy_poll = std::chrono::seconds(5);  // longer than the test: idle threads never sleep
      tlaunch::testing::test_launch t(p, o);
      auto s = t.get<"spinner">();
      REQUIRE(eventually([&] { return s.sync<&Spinner::poll_us>() >= 0; }));
      CHECK(s.sync<&Spinner::poll_us>() == 5'000'000);
      for (std::int64_t i = 0; i < 200; ++i) REQUIRE(s.sync<&Spinner::add>(i, 7) == i + 7);
      // Nothing to do, yet the io threads are running: polling, not sleeping. On a loaded
      // machine a polling thread gets only its share of a core (0.13 seen at load 18), so
      // the bounds leave room for that and compare with the same process sleeping.
      double polling = idle_cpu_share();
      CHECK(polling > 0.08);
      s.sync<&Spinner::set_poll>(0);
      CHECK(s.sync<&Spinner::poll_us>() == 0);
      // Now they sleep in the reactor, as by default.
      double sleeping = idle_cpu_share();
      CHECK(sleeping < 0.2);
      CHECK(sleeping < polling / 2);
      CHECK(s.sync<&Spinner::add>(1, 2) == 3);
      t.stop();
      CHECK(t.wait() == 0);
    }
  }

  TEST_CASE("busy polling reads by polling: every frame shape, large payloads, pauses, and off again") {
    constexpr auto p = tlaunch::program(tlaunch::node<"counter", Counter>(),
                                        tlaunch::node<"mixer", Mixer>(tlaunch::ref<"counter">),
                                        tlaunch::node<"spinner", Spinner>());
    for (unsigned threads : {1u, 2u}) {
      CAPTURE(threads);
      auto o = opts(true);
      o.threads = threads;
      // Longer than the calls below take: on two cores, two polling io threads
      // can keep the test's thread from the CPU for a while between its calls.
      o.busy_poll = 5s;
      tlaunch::testing::test_launch t(p, o);
      auto s = t.get<"spinner">();
      REQUIRE(eventually([&] { return s.sync<&Spinner::poll_us>() >= 0; }));
      // Calls one after the other: the call and its reply each come in a read
      // of their own, while the connection is polling.
      const auto before = tlaunch::rpc::test_counters::polled_reads.load();
      for (std::int64_t i = 0; i < 200; ++i) REQUIRE(s.sync<&Spinner::add>(i, 7) == i + 7);
      CHECK(tlaunch::rpc::test_counters::polled_reads.load() - before >= 200);  // of about 400
      for (int round = 0; round < 3; ++round)
        CHECK(t.get<"mixer">().sync<&Mixer::mixed>(tlaunch::call_options{.timeout = 20s}, 1000) == "ok");
      s.sync<&Spinner::set_poll>(200);  // counts at once, also for a read polling now
      CHECK(s.sync<&Spinner::poll_us>() == 200);
      // A frame larger than the read buffer: read into a buffer of its own.
      std::vector<char> big(3 << 20);
      for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 13);
      CHECK(s.sync<&Spinner::echo>(big) == big);
      // Pauses longer than the polling: the waits went to the reactor, and the
      // next call is still read.
      for (std::int64_t i = 0; i < 5; ++i) {
        std::this_thread::sleep_for(5ms);
        CHECK(s.sync<&Spinner::add>(i, 1) == i + 1);
      }
      s.sync<&Spinner::set_poll>(0);
      CHECK(s.sync<&Spinner::poll_us>() == 0);
      std::this_thread::sleep_for(20ms);  // a polling turn in progress ends
      const auto off = tlaunch::rpc::test_counters::polled_reads.load();
      for (std::int64_t i = 0; i < 50; ++i) CHECK(s.sync<&Spinner::add>(i, 2) == i + 2);
      CHECK(tlaunch::rpc::test_counters::polled_reads.load() == off);  // the reactor's reads again
      s.sync<&Spinner::set_poll>(5'000'000);  // on again (long: see above)
      for (std::int64_t i = 0; i < 50; ++i) CHECK(s.sync<&Spinner::add>(i, 3) == i + 3);
      CHECK(tlaunch::rpc::test_counters::polled_reads.load() > off);
      t.stop();
      CHECK(t.wait() == 0);
    }
  }

  TEST_CASE("sync on an io thread is refused with a clear error") {
    constexpr auto p = tlaunch::program(tlaunch::node<"account", Account>(),
                                        tlaunch::node<"caller", Caller>(tlaunch::ref<"account">));
    tlaunch::testing::test_launch t(p, opts(false));
    auto msg = t.get<"caller">().sync<&Caller::try_sync>();
    CHECK(msg.find("io thread") != std::string::npos);
  }

  TEST_CASE("stop() ends a test launch of services with exit code 0") {
    tlaunch::testing::test_launch t(bank, opts(true));
    CHECK(t.get<"account">().sync<&Account::add>(1) == 1);
    CHECK_FALSE(t.finished());
    t.stop();
    CHECK(t.wait() == 0);
    CHECK(t.finished());
  }
}
