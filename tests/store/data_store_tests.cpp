#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <tlaunch/store/client.hpp>
#include <tlaunch/testing.hpp>
#include <tlaunch/tlaunch.hpp>

#include "../common/temp_dir.hpp"

using namespace std::chrono_literals;
using tlaunch::data_store;
namespace store = tlaunch::store;

namespace {

std::vector<store::insert_item> items(std::initializer_list<std::string> texts, double priority = 1.0) {
  std::vector<store::insert_item> out;
  for (const auto& t : texts) out.push_back({tlaunch::bytes(t), priority, 0});
  return out;
}

std::string text_of(const store::sampled_item& s) { return std::string(s.data.view()); }

store::table_info info_of(const std::vector<store::table_info>& all, std::string_view name) {
  for (const auto& i : all)
    if (i.name == name) return i;
  throw std::out_of_range("no table");
}

template <class H>
store::table_info table_info_of(H& h, std::string_view name) {
  return info_of(h.template sync<&data_store::info>(), name);
}

// Waits (bounded) until the node holds no waiting sampler of that table: a cancelled
// wait leaves its list on the node's strand, after the caller may have seen the error.
template <class H>
bool no_waiting_samples(H& h, std::string_view name) {
  for (int i = 0; i < 2000; ++i) {
    if (table_info_of(h, name).waiting_samples == 0) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

// Runs a coroutine method of an object outside any program.
template <class T>
T run_now(asio::awaitable<T> a) {
  asio::io_context io;
  std::optional<T> out;
  std::exception_ptr err;
  asio::co_spawn(io, std::move(a), [&](std::exception_ptr e, T v) {
    err = e;
    if (!e) out = std::move(v);
  });
  io.run();
  if (err) std::rethrow_exception(err);
  return std::move(*out);
}

// Cancels waits with Asio's `||` from inside a node, as a program would.
struct Prober {
  tlaunch::handle<data_store> store;
  asio::awaitable<std::string> cancel_waits() {
    using namespace asio::experimental::awaitable_operators;
    auto ex = co_await asio::this_coro::executor;
    std::string out;
    // A sample call cancelled while it waits: the node drops the waiter.
    asio::steady_timer t1(ex, 20ms);
    auto r1 = co_await (store.call<&data_store::sample>(std::string("queue"), 1u) ||
                        t1.async_wait(asio::use_awaitable));
    out += r1.index() == 1 ? "call cancelled;" : "call returned;";
    // A sampler's next() cancelled: its call stays in flight and the next next() gets the item.
    store::sampler<> s(store, "queue", 1);
    asio::steady_timer t2(ex, 20ms);
    auto r2 = co_await (s.next() || t2.async_wait(asio::use_awaitable));
    out += r2.index() == 1 ? "next cancelled;" : "next returned;";
    auto late = items({"late"});  // (g++ 12 rejects a braced list inside a co_await expression)
    co_await store.call<&data_store::insert>(std::string("queue"), std::move(late));
    auto x = co_await s.next();
    out += std::string(x.value.view());
    co_return out;
  }
  using rpc = tlaunch::methods<&Prober::cancel_waits>;
};

constexpr auto limited = tlaunch::program(
    tlaunch::node<"replay", data_store>(
        store::table_config{.name = "min", .limiter = store::min_size(3)},
        store::table_config{.name = "ratio",
                            .sampler = store::fifo(),
                            .limiter = store::sample_to_insert_ratio(1.0, 2, 1.0)},
        store::queue_table("queue", 2), store::options{.seed = 1}),
    tlaunch::node<"prober", Prober>(tlaunch::ref<"replay">));

// The many-writers program: writers put every step into a queue (each item sampled
// once) and into a table whose items may be sampled twice; samplers report what they
// got to a tally.
struct step {
  std::uint64_t id = 0;
  std::vector<float> observation;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(id, observation);
  }
};

constexpr int writer_count = 4, items_per_writer = 150;

struct Tally {
  std::map<std::string, std::map<std::uint64_t, int>> seen;  // table -> id -> samples
  void record(std::string table, std::uint64_t id) { ++seen[table][id]; }
  std::uint64_t total() const {
    std::uint64_t n = 0;
    for (const auto& [t, ids] : seen)
      for (const auto& [id, c] : ids) n += static_cast<std::uint64_t>(c);
    return n;
  }
  std::map<std::uint64_t, int> of(std::string table) const {
    auto it = seen.find(table);
    return it == seen.end() ? std::map<std::uint64_t, int>{} : it->second;
  }
  using rpc = tlaunch::methods<&Tally::record, &Tally::total, &Tally::of>;
};

struct Writer {
  tlaunch::handle<data_store> store;
  asio::awaitable<void> run(tlaunch::context& ctx) {
    store::writer<step> queue(store, "queue", 8), twice(store, "twice", 5);
    for (int i = 0; i < items_per_writer; ++i) {
      step s{ctx.index() * 1000u + static_cast<std::uint64_t>(i), std::vector<float>(16, 0.5f)};
      co_await queue.append(s);
      co_await twice.append(s, 1.0 + i % 3);
    }
    co_await queue.flush();
    co_await twice.flush();
  }
};

struct Sampler {
  const char* table;
  tlaunch::handle<data_store> store;
  tlaunch::handle<Tally> tally;
  asio::awaitable<void> run(tlaunch::context&) {
    store::sampler<step> s(store, table, 4);
    for (;;) {
      auto x = co_await s.next();
      if (x.value.observation.size() != 16) throw std::runtime_error("bad item");
      co_await tally.call<&Tally::record>(std::string(table), x.value.id);
    }
  }
};

constexpr auto many = tlaunch::program(
    tlaunch::node<"replay", data_store>(
        store::queue_table("queue", 16),
        store::table_config{.name = "twice", .sampler = store::prioritized(1.0), .max_times_sampled = 2}),
    tlaunch::node<"tally", Tally>(),
    tlaunch::node<"writer", Writer>(tlaunch::ref<"replay">).replicas(writer_count),
    tlaunch::node<"queue_sampler", Sampler>("queue", tlaunch::ref<"replay">, tlaunch::ref<"tally">)
        .replicas(3),
    tlaunch::node<"twice_sampler", Sampler>("twice", tlaunch::ref<"replay">, tlaunch::ref<"tally">)
        .replicas(3));

}  // namespace

TEST_SUITE("data_store") {
  TEST_CASE("min_size: a sample waits until the table holds n items") {
    tlaunch::testing::test_launch t(limited);
    auto h = t.get<"replay">();
    auto f = h.async<&data_store::sample>(std::string("min"), 1u);
    h.sync<&data_store::insert>(std::string("min"), items({"a", "b"}));
    CHECK(table_info_of(h, "min").waiting_samples == 1);
    CHECK_FALSE(f.ready());
    h.sync<&data_store::insert>(std::string("min"), items({"c"}));
    auto got = f.get();
    REQUIRE(got.size() == 1);
    CHECK(got[0].table_size == 3);
    CHECK(table_info_of(h, "min").waiting_samples == 0);
  }

  TEST_CASE("sample-to-insert ratio: inserts and samples wait for each other") {
    tlaunch::testing::test_launch t(limited);
    auto h = t.get<"replay">();
    const std::string r = "ratio";
    // 1 sample per insert after 2 items, buffer 1: inserts - samples stays in [1, 3].
    CHECK(h.sync<&data_store::insert>(r, items({"1", "2", "3"})).size() == 3);
    auto blocked = h.async<&data_store::insert>(r, items({"4"}));
    CHECK(table_info_of(h, r).waiting_inserts == 1);
    auto one = h.sync<&data_store::sample>(r, 1u);
    CHECK(text_of(one.at(0)) == "1");
    CHECK(blocked.get().size() == 1);  // the sample let the insert go
    auto two = h.sync<&data_store::sample>(r, 10u);
    CHECK(two.size() == 2);  // 4 inserts, 3 samples: a fourth sample would leave diff 0
    auto waiting = h.async<&data_store::sample>(r, 10u);
    CHECK(table_info_of(h, r).waiting_samples == 1);
    h.sync<&data_store::insert>(r, items({"5"}));
    CHECK(waiting.get().size() == 1);
    auto i = table_info_of(h, r);
    CHECK(i.inserts == 5);
    CHECK(i.samples == 4);
  }

  TEST_CASE("queue: FIFO, each item once, inserts wait while it is full") {
    tlaunch::testing::test_launch t(limited);
    auto h = t.get<"replay">();
    const std::string q = "queue";
    h.sync<&data_store::insert>(q, items({"a", "b"}));
    auto blocked = h.async<&data_store::insert>(q, items({"c"}));
    CHECK(table_info_of(h, q).waiting_inserts == 1);
    auto first = h.sync<&data_store::sample>(q, 10u);
    REQUIRE(first.size() == 2);
    CHECK(text_of(first[0]) == "a");
    CHECK(text_of(first[1]) == "b");
    CHECK(blocked.get().size() == 1);
    auto next = h.sync<&data_store::sample>(q, 10u);
    REQUIRE(next.size() == 1);
    CHECK(text_of(next[0]) == "c");
    CHECK(table_info_of(h, q).size == 0);
    // Empty: a sample waits, and the caller's deadline ends the wait on the node too.
    CHECK_THROWS_AS(h.sync<&data_store::sample>(tlaunch::call_options{.timeout = 30ms}, q, 1u),
                    tlaunch::timeout);
    CHECK(no_waiting_samples(h, q));
    h.sync<&data_store::insert>(q, items({"d"}));
    CHECK(text_of(h.sync<&data_store::sample>(q, 1u).at(0)) == "d");  // not taken by the timed-out call
  }

  TEST_CASE("over the wire: deadlines end waits, bad calls fail, priorities update") {
    tlaunch::launch::options o;
    o.force_wire = true;
    tlaunch::testing::test_launch t(limited, o);
    auto h = t.get<"replay">();
    CHECK_THROWS_AS(h.sync<&data_store::sample>(tlaunch::call_options{.timeout = 30ms},
                                                std::string("queue"), 1u),
                    tlaunch::timeout);
    CHECK(no_waiting_samples(h, "queue"));
    CHECK_THROWS_AS(h.sync<&data_store::sample>(std::string("nope"), 1u), tlaunch::remote_error);
    CHECK_THROWS_AS(h.sync<&data_store::insert>(std::string("min"), items({"x"}, -1.0)),
                    tlaunch::remote_error);
    CHECK(table_info_of(h, "min").size == 0);  // a bad priority inserts nothing
    auto keys = h.sync<&data_store::insert>(std::string("min"), items({"p", "q", "r"}));
    CHECK(h.sync<&data_store::update_priorities>(
              std::string("min"), std::vector<store::priority_update>{{keys[0], 0.0}, {999, 1.0}}) == 1);
    CHECK(h.sync<&data_store::erase>(std::string("min"), std::vector<store::item_key>{keys[1]}) == 1);
    // A large item crosses intact.
    std::string big(100000, 'z');
    big[777] = 'y';
    h.sync<&data_store::insert>(std::string("queue"), items({big}));
    CHECK(text_of(h.sync<&data_store::sample>(std::string("queue"), 1u).at(0)) == big);
  }

  TEST_CASE("Asio cancellation ends a wait; a cancelled sampler.next() loses nothing") {
    for (bool wire : {false, true}) {
      CAPTURE(wire);
      tlaunch::launch::options o;
      o.force_wire = wire;
      tlaunch::testing::test_launch t(limited, o);
      auto h = t.get<"replay">();
      CHECK(t.get<"prober">().sync<&Prober::cancel_waits>() == "call cancelled;next cancelled;late");
      CHECK(no_waiting_samples(h, "queue"));
      auto q = table_info_of(h, "queue");
      CHECK(q.samples == 1);
      CHECK(q.size == 0);
    }
  }

  TEST_CASE("checkpoint on request and at destruction, restored at construction") {
    tlaunch::test_support::temp_dir dir("tlaunch-store");
    std::string path = (dir.path / "replay.ckpt").string();
    std::string copy = (dir.path / "copy.ckpt").string();
    auto make = [](std::string_view p) {
      return data_store(store::options{.checkpoint_path = p, .seed = 3},
                        store::table_config{.name = "a", .sampler = store::fifo()},
                        store::queue_table("q", 10));
    };
    {
      auto ds = make(path);
      run_now(ds.insert("a", items({"one", "two", std::string(70000, 'x')})));
      run_now(ds.insert("q", items({"q1", "q2"})));
      CHECK(text_of(run_now(ds.sample("a", 1)).at(0)) == "one");
      CHECK(ds.checkpoint(copy) == copy);
      run_now(ds.insert("a", items({"four"})));  // only in the checkpoint at destruction
    }
    REQUIRE(std::filesystem::exists(path));
    {
      auto ds = make(path);
      auto a = info_of(ds.info(), "a");
      CHECK(a.size == 4);
      CHECK(a.inserts == 4);
      CHECK(a.samples == 1);
      auto s = run_now(ds.sample("a", 1)).at(0);
      CHECK(text_of(s) == "one");
      CHECK(s.times_sampled == 2);
      CHECK(ds.erase("a", {s.key}) == 1);
      CHECK(run_now(ds.sample("a", 1)).at(0).data.size() == 3);
      CHECK(run_now(ds.sample("q", 10)).size() == 2);
      std::filesystem::remove(path);
    }
    {
      auto ds = make(copy);
      CHECK(info_of(ds.info(), "a").size == 3);
      CHECK(info_of(ds.info(), "q").size == 2);
    }
    std::filesystem::resize_file(path, 10);
    CHECK_THROWS(make(path));  // a truncated checkpoint fails the node's start
  }

  TEST_CASE("many writers and samplers over TCP: no item lost, none sampled more than allowed") {
    tlaunch::launch::options o;
    o.force_wire = true;
    tlaunch::testing::test_launch t(many, o);
    auto tally = t.get<"tally">();
    const std::uint64_t n = writer_count * items_per_writer;
    for (int i = 0; i < 6000 && tally.sync<&Tally::total>() < 3 * n; ++i) std::this_thread::sleep_for(5ms);
    auto queue = tally.sync<&Tally::of>(std::string("queue"));
    auto twice = tally.sync<&Tally::of>(std::string("twice"));
    CHECK(queue.size() == n);
    CHECK(twice.size() == n);
    int queue_max = 0, twice_min = 3, twice_max = 0;
    for (auto& [id, c] : queue) queue_max = std::max(queue_max, c);
    for (auto& [id, c] : twice) {
      twice_min = std::min(twice_min, c);
      twice_max = std::max(twice_max, c);
    }
    CHECK(queue_max == 1);
    CHECK(twice_min == 2);
    CHECK(twice_max == 2);
    auto info = t.get<"replay">().sync<&data_store::info>();
    CHECK(info_of(info, "queue").inserts == static_cast<std::int64_t>(n));
    CHECK(info_of(info, "twice").samples == static_cast<std::int64_t>(2 * n));
    CHECK(info_of(info, "twice").size == 0);
  }

  TEST_CASE("its node's metrics: items, waiting callers, inserts, samples, time held") {
    data_store ds(store::table_config{.name = "min", .limiter = store::min_size(2)});
    tlaunch::rpc::metrics_registry reg;
    ds.use_metrics(tlaunch::node_metrics(reg, "replay/0"));
    auto value = [&](const std::string& name) {
      tlaunch::rpc::metrics_sample s;
      reg.sample_into(s, [](std::uint32_t) { return std::string(); },
                      [](std::uint32_t, std::uint64_t) { return std::string(); });
      for (const auto& u : s.user)
        if (u.instance == "replay/0" && u.name == name) return u.value;
      return -1.0;
    };
    CHECK(value("store_min_items") == 0);
    // A sample that waits for the second item, while the node's strand runs the insert.
    asio::io_context io;
    std::vector<store::sampled_item> got;
    asio::co_spawn(io, ds.sample("min", 1), [&](std::exception_ptr e, std::vector<store::sampled_item> v) {
      REQUIRE(!e);
      got = std::move(v);
    });
    io.run_for(std::chrono::milliseconds(50));
    CHECK(value("store_min_waiting") == 1);
    asio::co_spawn(io, ds.insert("min", items({"a", "b"})), asio::detached);
    io.run();
    REQUIRE(got.size() == 1);
    CHECK(value("store_min_items") == 2);
    CHECK(value("store_min_waiting") == 0);
    CHECK(value("store_min_inserts") == 2);
    CHECK(value("store_min_samples") == 1);
    CHECK(value("store_min_rate_limited_seconds") >= 0.04);  // held for the 50 ms above
  }
}
