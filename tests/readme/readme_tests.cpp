// The README's "Questions a new user asks" section: each snippet here is the README's code,
// compiled with the dev flags and run, so the README's statements stay true.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/thread_pool.hpp>
#include <asio/use_awaitable.hpp>

#include <tlaunch/store/client.hpp>
#include <tlaunch/testing.hpp>
#include <tlaunch/tlaunch.hpp>

namespace {

// ---- README: every replica of a node ----
struct Worker {
  int weight;  // a constructor argument, the same for every replica
  int work(int x) const { return x * weight; }
  using rpc = tlaunch::methods<&Worker::work>;
};

struct Boss {
  tlaunch::handles<Worker> workers;  // all replicas of "worker", in replica order
  std::size_t count() const { return workers.size(); }
  asio::awaitable<int> ask_one(std::size_t i, int x) {
    co_return co_await workers[i].call<&Worker::work>(x);  // replica i
  }
  asio::awaitable<std::vector<int>> ask_all(int x) {
    co_return co_await workers.broadcast<&Worker::work>(x);  // every replica at once
  }
  using rpc = tlaunch::methods<&Boss::count, &Boss::ask_one, &Boss::ask_all>;
};

constexpr auto team = tlaunch::program(
    tlaunch::node<"worker", Worker>(10).replicas(4),
    tlaunch::node<"boss", Boss>(tlaunch::ref<"worker">));
// ---- end ----

// ---- README: constructor arguments that are not refs ----
struct Sampler {
  Sampler(std::string_view name, double rate, std::array<int, 3> shape,
          tlaunch::handle<Worker> sink)
      : name(name), rate(rate), shape(shape), sink(sink) {}
  std::string describe() const {
    return std::string(name) + " " + std::to_string(rate) + " " + std::to_string(shape[2]);
  }
  using rpc = tlaunch::methods<&Sampler::describe>;

  std::string_view name;
  double rate;
  std::array<int, 3> shape;
  tlaunch::handle<Worker> sink;
};

enum class mode { fast, exact };
struct Settings {  // an aggregate: arguments initialize its members in order
  mode m;
  const char* label;
  int limit;
  std::string show() const {
    return std::string(label) + (m == mode::exact ? " exact " : " fast ") + std::to_string(limit);
  }
  using rpc = tlaunch::methods<&Settings::show>;
};

constexpr auto configured = tlaunch::program(
    tlaunch::node<"worker", Worker>(1),
    tlaunch::node<"sampler", Sampler>("left", 0.5, std::array{2, 3, 4}, tlaunch::ref<"worker">),
    tlaunch::node<"settings", Settings>(mode::exact, "run-7", 100));
// ---- end ----

// ---- README: bytes from a std::vector<float> ----
// No copy: the bytes view the vector's memory and keep the vector alive.
tlaunch::bytes to_bytes(std::vector<float> v) {
  auto keep = std::make_shared<const std::vector<float>>(std::move(v));
  return tlaunch::bytes(keep, reinterpret_cast<const char*>(keep->data()),
                        keep->size() * sizeof(float));
}
// data() has no alignment guarantee: copy the floats out, never cast the pointer.
std::vector<float> to_floats(const tlaunch::bytes& b) {
  std::vector<float> out(b.size() / sizeof(float));
  std::copy_n(b.data(), out.size() * sizeof(float), reinterpret_cast<char*>(out.data()));
  return out;
}
// ---- end ----

struct Store {
  // The sum of the floats, and how far data() is from a float boundary.
  std::pair<float, std::size_t> take(char, tlaunch::bytes b) {
    std::vector<float> v = to_floats(b);
    return {std::accumulate(v.begin(), v.end(), 0.0f),
            reinterpret_cast<std::uintptr_t>(b.data()) % alignof(float)};
  }
  using rpc = tlaunch::methods<&Store::take>;
};

struct Trainer {
  tlaunch::handle<Store> store;
  asio::awaitable<std::pair<float, std::size_t>> push(int n) {
    co_return co_await store.call<&Store::take>('w', to_bytes(std::vector<float>(n, 0.5f)));
  }
  using rpc = tlaunch::methods<&Trainer::push>;
};

constexpr auto training = tlaunch::program(tlaunch::node<"store", Store>(),
                                           tlaunch::node<"trainer", Trainer>(tlaunch::ref<"store">));

// ---- README: CPU-heavy work ----
double simulate(int steps);  // CPU-bound: seconds of work, no co_await

struct Solver {
  asio::thread_pool pool{2};  // threads for the heavy work, outside the io threads

  asio::awaitable<double> solve(int steps) {
    // Runs simulate() on the pool; the node's io thread serves its other methods, other
    // nodes and timers meanwhile, and this resumes on the node's strand with the result.
    co_return co_await asio::co_spawn(
        pool, [steps]() -> asio::awaitable<double> { co_return simulate(steps); },
        asio::use_awaitable);
  }
  int ping() const { return 1; }
  using rpc = tlaunch::methods<&Solver::solve, &Solver::ping>;
};
// ---- end ----

constexpr auto solving = tlaunch::program(tlaunch::node<"solver", Solver>());

// The test's simulate() waits until the test has called ping(), so solve() can only
// finish if the node answered ping while simulate() ran.
std::promise<void> pinged;
std::shared_future<void> pinged_seen = pinged.get_future().share();
double simulate(int steps) {
  pinged_seen.wait();
  return steps * 0.5;
}

// ---- README: data store node ----
struct transition {
  int state = 0, action = 0;
  float reward = 0;
  template <class Ar>
  void serialize(Ar& ar) { ar(state, action, reward); }
};

struct Actor {
  tlaunch::handle<tlaunch::data_store> replay;
  asio::awaitable<void> run(tlaunch::context& ctx) {
    tlaunch::store::writer<transition> out(replay, "replay", 32);  // 32 items per insert call
    for (int i = 0; i < 1000; ++i)
      co_await out.append(transition{i, i % 4, 1.0f}, /*priority=*/1.0 + ctx.index());
    co_await out.flush();  // the node has every item
  }
};

struct Learner {
  tlaunch::handle<tlaunch::data_store> replay;
  asio::awaitable<void> run(tlaunch::context& ctx) {
    tlaunch::store::sampler<transition> in(replay, "replay", 64);  // up to 64 items per call
    float total = 0;
    for (int i = 0; i < 2000; ++i) {
      tlaunch::store::sampled<transition> x = co_await in.next();  // waits for the rate limiter
      if (x.value.reward != 1.0f) throw std::runtime_error("corrupt item");
      total += x.value.reward;
      if (i % 100 == 0) {  // (g++ 12 rejects a braced list inside a co_await expression)
        std::vector<tlaunch::store::priority_update> lower{{x.key, 0.5}};
        co_await replay.call<&tlaunch::data_store::update_priorities>("replay", lower);
      }
    }
    ctx.log("learned from {} samples", total);
    ctx.stop_program();
  }
};

namespace store = tlaunch::store;
constexpr auto agent = tlaunch::program(
    tlaunch::node<"replay", tlaunch::data_store>(
        store::table_config{.name = "replay",
                            .sampler = store::prioritized(0.6),
                            .remover = store::fifo(),
                            .max_size = 10'000,
                            .limiter = store::sample_to_insert_ratio(2.0, 100, 50.0)},
        store::queue_table("episodes", 100)),
    tlaunch::node<"actor", Actor>(tlaunch::ref<"replay">).replicas(2),
    tlaunch::node<"learner", Learner>(tlaunch::ref<"replay">));
// ---- end ----

// ---- README: batched handlers ----
struct Policy {
  // One observation per call; one action per observation.
  std::vector<int> act(std::vector<std::vector<float>> observations) {
    std::vector<int> actions;
    for (const auto& o : observations) actions.push_back(o.at(0) > 0.5f ? 1 : 0);
    return actions;
  }
  using rpc = tlaunch::methods<tlaunch::batched<
      &Policy::act, tlaunch::batch_options{.max_batch = 64, .max_wait = std::chrono::milliseconds(2)}>>;
};

struct Player {
  tlaunch::handle<Policy> policy;
  asio::awaitable<void> run(tlaunch::context& ctx) {
    for (int step = 0; step < 100; ++step) {
      std::vector<float> observation{static_cast<float>((step + ctx.index()) % 2)};
      int action = co_await policy.call<&Policy::act>(observation);  // one request, one result
      if (action != (step + static_cast<int>(ctx.index())) % 2) throw std::runtime_error("wrong action");
    }
  }
};

constexpr auto players = tlaunch::program(
    tlaunch::node<"policy", Policy>(),
    tlaunch::node<"player", Player>(tlaunch::ref<"policy">).replicas(8));
// ---- end ----

}  // namespace

TEST_SUITE("readme") {
  TEST_CASE("handles<T>: index a replica, count them, broadcast to all") {
    tlaunch::testing::test_launch t(team);
    auto boss = t.get<"boss">();
    CHECK(boss.sync<&Boss::count>() == 4);
    CHECK(boss.sync<&Boss::ask_one>(std::size_t{3}, 2) == 20);
    CHECK(boss.sync<&Boss::ask_all>(3) == std::vector<int>{30, 30, 30, 30});
    CHECK_THROWS_AS(boss.sync<&Boss::ask_one>(std::size_t{4}, 2), tlaunch::remote_error);
  }

  TEST_CASE("constructor arguments that are not refs are copied into every instance") {
    tlaunch::testing::test_launch t(configured);
    CHECK(t.get<"sampler">().sync<&Sampler::describe>() == "left 0.500000 4");
    CHECK(t.get<"settings">().sync<&Settings::show>() == "run-7 exact 100");
  }

  TEST_CASE("test_launch options: force_wire, threads, replicas") {
    // ---- README: test_launch options ----
    tlaunch::launch::options o;
    o.force_wire = true;         // calls between nodes go over loopback TCP, as between processes
    o.threads = 1;               // io threads (default 2)
    o.replicas["worker"] = 2;    // as --replicas worker=2
    tlaunch::testing::test_launch t(team, o);
    // ---- end ----
    CHECK(t.get<"boss">().sync<&Boss::ask_all>(1) == std::vector<int>{10, 10});
  }

  TEST_CASE("bytes from a std::vector<float>; a received one has no alignment guarantee") {
    tlaunch::launch::options o;
    o.force_wire = true;
    tlaunch::testing::test_launch t(training, o);
    auto trainer = t.get<"trainer">();
    // 64 Ki floats (256 KiB): received as a view of the frame, 8-byte size and the
    // char before it, so at an odd offset.
    auto [sum, misalignment] = trainer.sync<&Trainer::push>(1 << 16);
    CHECK(sum == doctest::Approx((1 << 16) * 0.5));
    CHECK(misalignment != 0);
    auto [small_sum, small_misalignment] = trainer.sync<&Trainer::push>(8);
    CHECK(small_sum == doctest::Approx(4.0));
    (void)small_misalignment;  // copied into a buffer of its own: no promise either way
    CHECK(to_floats(to_bytes({})).empty());
  }

  TEST_CASE("CPU-heavy work on a thread pool leaves the node's io thread free") {
    tlaunch::launch::options o;
    o.threads = 1;  // one io thread: a simulate() run on it would block ping() forever
    tlaunch::testing::test_launch t(solving, o);
    auto solver = t.get<"solver">();
    auto result = solver.async<&Solver::solve>(8);
    CHECK(solver.sync<&Solver::ping>() == 1);  // answered while simulate() runs
    pinged.set_value();
    CHECK(result.get() == 4.0);
  }

  TEST_CASE("data store: actors write through a writer, a learner samples under the rate limiter") {
    tlaunch::launch::options o;
    o.force_wire = true;  // items cross loopback TCP, as between processes
    tlaunch::testing::test_launch t(agent, o);
    CHECK(t.wait() == 0);  // the learner got 2000 intact samples and stopped the program
  }

  TEST_CASE("batched handlers: eight players each get their own results from one batched method") {
    for (bool wire : {false, true}) {
      CAPTURE(wire);
      tlaunch::launch::options o;
      o.force_wire = wire;
      tlaunch::testing::test_launch t(players, o);
      CHECK(t.wait() == 0);  // every player got its own action for each of its 100 calls
    }
  }
}
