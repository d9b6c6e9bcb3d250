// The documentation's C++: README.md's "The program" (its service) and "Calls", and the
// guide's pages in docs/guide/ (program, questions, data store, batched handlers,
// clusters, restarts, colocation, launch API) and docs/compiler-pitfalls.md. Each snippet
// is the page's code, copied between `// ---- <page>: ... ----` markers, compiled with the
// dev flags and run, so the pages' statements stay true; tests/docs/check_docs.py (ctest
// docs_snippets) fails when a page's ```cpp block is no longer found here verbatim.
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

#include <tlaunch/detail/sanitizers.hpp>
#include <tlaunch/store/client.hpp>
#include <tlaunch/testing.hpp>
#include <tlaunch/tlaunch.hpp>


namespace {

// ---- README: the program (its service; the whole program is examples/hello_world.cpp) ----
struct Counter {  // a service: a plain class, coroutine or plain methods
  std::int64_t total = 0;
  asio::awaitable<std::int64_t> add(std::int64_t k) { co_return total += k; }
  std::int64_t get() const { return total; }
  using rpc = tlaunch::methods<&Counter::add, &Counter::get>;
};
// ---- end ----

// ---- docs/guide/questions.md: every replica of a node ----
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

// "Calls": the README's lines, in a method so that the test can check what each returned.
struct Calls {
  tlaunch::handle<Counter> counter;
  tlaunch::handles<Worker> workers;
  asio::awaitable<std::vector<std::int64_t>> make() {
    using namespace std::chrono_literals;
    // ---- README and docs/guide/program.md: calls ----
    auto n = co_await counter.call<&Counter::add>(1);                   // value, or throws
    auto n2 = co_await counter.call<&Counter::add>(tlaunch::call_options{.timeout = 100ms}, 1);
    auto f = counter.async<&Counter::add>(1);                           // started now, many in flight
    auto n3 = co_await f.async_wait();                                  // ... awaited later
    std::vector<int> all = co_await workers.broadcast<&Worker::work>(7); // tlaunch::handles<Worker>
    // ---- end ----
    std::vector<std::int64_t> out{n, n2, n3};
    out.insert(out.end(), all.begin(), all.end());
    co_return out;
  }
  using rpc = tlaunch::methods<&Calls::make>;
};

constexpr auto calling = tlaunch::program(
    tlaunch::node<"counter", Counter>(), tlaunch::node<"worker", Worker>(10).replicas(2),
    tlaunch::node<"calls", Calls>(tlaunch::ref<"counter">, tlaunch::ref<"worker">));

// ---- docs/guide/questions.md: constructor arguments that are not refs ----
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

// ---- docs/guide/questions.md: bytes from a std::vector<float> ----
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

// ---- docs/guide/questions.md: CPU-heavy work ----
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

// ---- docs/guide/data-store.md: data store node ----
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
    for (int i = 0; i < 1000; ++i) {
      transition t{i, i % 4, 1.0f};  // named first: see docs/compiler-pitfalls.md
      co_await out.append(std::move(t), /*priority=*/1.0 + ctx.index());
    }
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

// ---- docs/guide/batched.md: batched handlers ----
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

// ---- docs/compiler-pitfalls.md: the safe spellings ----
struct step {
  std::vector<float> observation;  // a member that owns memory: a double free would show
  int action = 0;
  template <class Ar>
  void serialize(Ar& ar) { ar(observation, action); }
};

struct Recorder {
  tlaunch::handle<tlaunch::data_store> replay;
  asio::awaitable<void> run(tlaunch::context& ctx) {
    tlaunch::store::writer<step> out(replay, "steps", 8);
    for (int i = 0; i < 100; ++i) {
      std::vector<float> observation(4, static_cast<float>(i));
      step s{observation, i % 4};                 // 1. name the object first,
      co_await out.append(std::move(s), /*priority=*/1.0);  // then move it into the call
    }
    co_await out.flush();
    std::vector<tlaunch::store::table_info> tables =
        co_await replay.call<&tlaunch::data_store::info>();
    std::uint64_t size = tables.at(0).size;         // 2. await into a variable,
    if (size != 100) throw std::runtime_error("lost items");  // then compare
    std::vector<tlaunch::store::priority_update> lower{{1, 0.5}};  // 3. a braced list, named
    co_await replay.call<&tlaunch::data_store::update_priorities>("steps", lower);
    ctx.stop_program();
  }
};

constexpr auto recording = tlaunch::program(
    tlaunch::node<"replay", tlaunch::data_store>(tlaunch::store::table_config{.name = "steps"}),
    tlaunch::node<"recorder", Recorder>(tlaunch::ref<"replay">));
// ---- end ----

// ---- docs/guide/clusters.md, faults.md (restarts), colocation.md: the programs ----
namespace cluster {
struct Learner {
  int ping() const { return 1; }
  using rpc = tlaunch::methods<&Learner::ping>;
};
struct Actor {
  tlaunch::handles<Learner> learner;
};
constexpr auto program = tlaunch::program(
    tlaunch::node<"learner", Learner>()
        .replicas(2)
        .env("CUDA_VISIBLE_DEVICES", "{index}")              // "0" in learner/0, "1" in learner/1
        .resources({.cpus = 2, .gpus = 1, .memory_mb = 4096}),
    tlaunch::node<"actor", Actor>(tlaunch::ref<"learner">).replicas(16));
}  // namespace cluster

namespace restarts {
struct Learner {
  int ping() const { return 1; }
  using rpc = tlaunch::methods<&Learner::ping>;
};
struct Actor {
  tlaunch::handle<Learner> learner;
  asio::awaitable<void> run(tlaunch::context&) { co_await learner.call<&Learner::ping>(); }
};
constexpr auto program = tlaunch::program(
    tlaunch::node<"learner", Learner>(),
    tlaunch::node<"actor", Actor>(tlaunch::ref<"learner">).replicas(8).restart(
        {.max_restarts = 3, .window = std::chrono::seconds(60),
         .backoff = std::chrono::milliseconds(100)}));
}  // namespace restarts

namespace colocation {
struct Replay {
  int ping() const { return 1; }
  using rpc = tlaunch::methods<&Replay::ping>;
};
struct Learner {
  tlaunch::handle<Replay> replay;
  asio::awaitable<int> ping() {
    int r = co_await replay.call<&Replay::ping>();
    co_return r + 1;
  }
  using rpc = tlaunch::methods<&Learner::ping>;
};
struct Actor {
  tlaunch::handle<Learner> learner;
  asio::awaitable<void> run(tlaunch::context&) {
    int n = co_await learner.call<&Learner::ping>();
    if (n != 2) throw std::runtime_error("wrong answer");
  }
};
constexpr auto program =
    tlaunch::program(tlaunch::node<"learner", Learner>(tlaunch::ref<"replay">),
                     tlaunch::node<"replay", Replay>(),
                     tlaunch::node<"actor", Actor>(tlaunch::ref<"learner">).replicas(8))
        .colocate<"learner", "replay">()
        .colocate<"actor/0", "actor/1">();
}  // namespace colocation
// ---- end ----

struct Diverging {
  asio::awaitable<void> run(tlaunch::context&) {
    throw std::runtime_error(fmt::format("diverged (loss {:.1e})", 9.1e12));
    co_return;
  }
};
constexpr auto diverging = tlaunch::program(tlaunch::node<"trainer", Diverging>());

// "Launch API": the README's lines, launching `program`.
template <class Program>
std::pair<int, std::string> launch_api(const Program& program) {
  // ---- docs/guide/launch-api.md: launch API ----
  tlaunch::launch_options o;   // the flags' user settings as typed fields
  o.launch = tlaunch::launcher::local_mp;  // or local_mt (the default); no other launcher
  o.grace = std::chrono::seconds(3);
  tlaunch::running_program run = tlaunch::start(program, o);  // returns at once
  int code = run.wait();       // blocks: 0 stopped normally, 1 a node failed
  std::string why = run.failure();  // "" or "node trainer/0 failed: diverged (loss 9.1e+12)"
  // ---- end ----
  return {code, why};
}

}  // namespace

TEST_SUITE("readme") {
  TEST_CASE("test_launch: typed handles by node name, sync calls from the test's thread") {
    // ---- README and docs/guide/program.md: test_launch ----
    constexpr auto counter_only = tlaunch::program(tlaunch::node<"counter", Counter>());
    tlaunch::testing::test_launch t(counter_only);  // no producers adding meanwhile
    CHECK(t.get<"counter">().sync<&Counter::add>(2) == 2);
    t.stop();              // as ctx.stop_program(); t.wait() returns the exit code
    // ---- end ----
    CHECK(t.wait() == 0);
  }

  TEST_CASE("calls: call, call_options, async, sync from a plain thread, broadcast") {
    for (bool wire : {false, true}) {
      CAPTURE(wire);
      tlaunch::launch_settings o;
      o.force_wire = wire;
      tlaunch::testing::test_launch t(calling, o);
      auto counter = t.get<"counter">();
      CHECK(t.get<"calls">().sync<&Calls::make>() == std::vector<std::int64_t>{1, 2, 3, 70, 70});
      auto n4 = counter.sync<&Counter::get>();                            // from a plain (non-io) thread
      CHECK(n4 == 3);
    }
  }

  TEST_CASE("the programs of Running on a cluster, Restarts and Colocation under local_mt") {
    // local_mt runs them all: a per-node environment, restart policies and resource hints
    // do not apply there (one warning line says so), colocation holds already.
    tlaunch::testing::test_launch t(cluster::program);
    CHECK(t.get<"learner">(1).sync<&cluster::Learner::ping>() == 1);
    t.stop();
    CHECK(t.wait() == 0);
    tlaunch::testing::test_launch r(restarts::program);
    CHECK(r.wait() == 0);
    tlaunch::testing::test_launch c(colocation::program);
    CHECK(c.wait() == 0);
  }

  TEST_CASE("launch API: tlaunch::start under local_mp, a failure named, the next start works") {
    // ThreadSanitizer cannot follow a fork of a threaded process that starts threads again,
    // which local_mp's forked node processes do (exit 66): as in launch_api_tests, local_mp
    // runs here in the other builds only.
    if (tlaunch::detail::thread_sanitizer) return;
    // Nor under ASan: clang 14's allocator is not fork-safe, and a node forked while another
    // thread of this process allocates can hang before it registers
    // (tlaunch/detail/sanitizers.hpp).
    if (tlaunch::detail::address_sanitizer) return;
    auto [failed, why] = launch_api(diverging);
    CHECK(failed == 1);
    CHECK(why == "node trainer/0 failed: diverged (loss 9.1e+12)");
    auto [code, none] = launch_api(players);
    CHECK(code == 0);
    CHECK(none == "");
  }

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
    // ---- docs/guide/questions.md: test_launch options ----
    tlaunch::launch_settings o;
    o.force_wire = true;         // calls between nodes go over loopback TCP, as between processes
    o.threads = 1;               // io threads (default 2)
    o.replicas["worker"] = 2;    // as --replicas worker=2
    tlaunch::testing::test_launch t(team, o);
    // ---- end ----
    CHECK(t.get<"boss">().sync<&Boss::ask_all>(1) == std::vector<int>{10, 10});
    // Options that do not fit the program are refused by the constructor.
    o.replicas["boss"] = 1;
    o.replicas["wroker"] = 2;
    auto misspelt = [&] { tlaunch::testing::test_launch bad(team, o); };
    CHECK_THROWS_WITH_AS(misspelt(), doctest::Contains("--replicas names node 'wroker'"),
                         tlaunch::launch_error);
  }

  TEST_CASE("bytes from a std::vector<float>; a received one has no alignment guarantee") {
    tlaunch::launch_settings o;
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
    tlaunch::launch_settings o;
    o.threads = 1;  // one io thread: a simulate() run on it would block ping() forever
    tlaunch::testing::test_launch t(solving, o);
    auto solver = t.get<"solver">();
    auto result = solver.async<&Solver::solve>(8);
    CHECK(solver.sync<&Solver::ping>() == 1);  // answered while simulate() runs
    pinged.set_value();
    CHECK(result.get() == 4.0);
  }

  TEST_CASE("data store: actors write through a writer, a learner samples under the rate limiter") {
    tlaunch::launch_settings o;
    o.force_wire = true;  // items cross loopback TCP, as between processes
    tlaunch::testing::test_launch t(agent, o);
    CHECK(t.wait() == 0);  // the learner got 2000 intact samples and stopped the program
  }

  TEST_CASE("compiler pitfalls: the safe spellings append a vector-holding struct intact") {
    tlaunch::launch_settings o;
    o.force_wire = true;
    tlaunch::testing::test_launch t(recording, o);
    CHECK(t.wait() == 0);  // 100 items stored, their priorities updated, the program stopped
  }

  TEST_CASE("batched handlers: eight players each get their own results from one batched method") {
    for (bool wire : {false, true}) {
      CAPTURE(wire);
      tlaunch::launch_settings o;
      o.force_wire = wire;
      tlaunch::testing::test_launch t(players, o);
      CHECK(t.wait() == 0);  // every player got its own action for each of its 100 calls
    }
  }
}
