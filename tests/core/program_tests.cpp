// Program graphs: refs become handles, replicas become handle groups, run()
// bodies start after construction and stop the program when they end.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <tlaunch/tlaunch.hpp>
#include <tlaunch/launch/colocation.hpp>
#include <tlaunch/launch/local_mt.hpp>  // run_local_mt (not in tlaunch.hpp when compiled separately)

using namespace std::chrono_literals;

namespace {

struct Worker {
  int id = -1;
  int scale = 1;
  Worker() = default;
  explicit Worker(int s) : scale(s) {}
  int work(int x) { return x * scale; }
  asio::awaitable<void> reset() { co_return; }
  using rpc = tlaunch::methods<&Worker::work, &Worker::reset>;
};

std::atomic<int> finished_runs{0};
std::atomic<std::int64_t> gathered{0};

struct Boss {
  tlaunch::handles<Worker> workers;
  tlaunch::handle<Worker> single;
  asio::awaitable<void> run(tlaunch::context& ctx) {
    auto all = co_await workers.broadcast<&Worker::work>(2);
    gathered = std::accumulate(all.begin(), all.end(), std::int64_t{0});
    co_await workers.broadcast<&Worker::reset>();
    gathered += co_await single.call<&Worker::work>(100);
    ctx.log("boss {} of {} done", ctx.index(), ctx.replicas());
    ++finished_runs;
  }
};

constexpr auto graph = tlaunch::program(
    tlaunch::node<"worker", Worker>(3).replicas(4), tlaunch::node<"lone", Worker>(5),
    tlaunch::node<"boss", Boss>(tlaunch::ref<"worker">, tlaunch::ref<"lone">));

static_assert(graph.size == 3, "the program is a constexpr value");

// Colocation groups are part of the constant too (docs/guide/colocation.md).
constexpr auto colocated_graph = graph.colocate<"boss", "lone">().colocate<"worker/0", "worker/1">();
static_assert(colocated_graph.group_count == 2 && colocated_graph.groups[0].size == 2 &&
              colocated_graph.groups[1].members[1] == "worker/1");
static_assert(graph.colocate<"worker">().groups[0].members[0] == "worker");

struct Stopper {
  asio::awaitable<void> run(tlaunch::context& ctx) {
    co_await ctx.sleep_for(5ms);
    ctx.stop_program();
    co_await ctx.stopped();
  }
};
struct Sleeper {  // waits until the program stops
  asio::awaitable<void> run(tlaunch::context& ctx) { co_await ctx.stopped(); }
};
struct Thrower {
  asio::awaitable<void> run(tlaunch::context&) {
    throw std::runtime_error("thrower broke");
    co_return;
  }
};

}  // namespace

TEST_SUITE("program") {
  TEST_CASE("refs become handles and handle groups; the program ends when every run() ends") {
    for (bool wire : {false, true}) {
      CAPTURE(wire);
      finished_runs = 0;
      tlaunch::launch::options o;
      o.force_wire = wire;
      tlaunch::launch::output_printer out(tlaunch::launch::color_mode::never);
      CHECK(tlaunch::launch::run_local_mt(tlaunch::launch::plan_launch(graph, o), out) == 0);
      CHECK(finished_runs == 1);
      CHECK(gathered == 4 * 2 * 3 + 500);
    }
  }

  TEST_CASE("--replicas overrides the count; an unknown node is refused by name") {
    finished_runs = 0;
    tlaunch::launch::options o;
    o.replicas["worker"] = 7;
    tlaunch::launch::output_printer out(tlaunch::launch::color_mode::never);
    CHECK(tlaunch::launch::run_local_mt(tlaunch::launch::plan_launch(graph, o), out) == 0);
    CHECK(gathered == 7 * 2 * 3 + 500);
    o.replicas = {{"wroker", 2}};
    CHECK_THROWS_WITH_AS(tlaunch::launch::run_local_mt(tlaunch::launch::plan_launch(graph, o), out),
                         doctest::Contains("wroker"), tlaunch::launch_error);
  }

  TEST_CASE("colocate<...> declares groups; --colocate takes members out of them, --no-colocate drops them") {
    using tlaunch::launch::colocation_group;
    using tlaunch::launch::colocation_groups;
    tlaunch::detail::program_view view(colocated_graph);
    CHECK(view.colocated() == std::vector<std::vector<std::string>>{{"boss", "lone"},
                                                                    {"worker/0", "worker/1"}});
    auto nodes = view.describe({});  // worker/0..3 are 0..3, lone 4, boss 5
    tlaunch::launch::options o;
    CHECK(colocation_groups(nodes, view.colocated(), o) ==
          std::vector<colocation_group>{{0, 1}, {4, 5}});
    // A flag group wins: worker/1 leaves its declared group, which is left with one
    // instance and so is no group.
    o.colocate = {"lone,worker/1"};
    CHECK(colocation_groups(nodes, view.colocated(), o) ==
          std::vector<colocation_group>{{1, 4}});
    CHECK(colocation_groups(nodes, {{"worker"}}, tlaunch::launch::options{}) ==
          std::vector<colocation_group>{{0, 1, 2, 3}});
    o.colocate = {"worker"};  // a node's name: every replica
    CHECK(colocation_groups(nodes, view.colocated(), o) ==
          std::vector<colocation_group>{{0, 1, 2, 3}, {4, 5}});
    o.colocate = {};
    o.no_colocate = true;
    CHECK(colocation_groups(nodes, view.colocated(), o).empty());
    o.colocate = {"lone,wroker"};
    CHECK_THROWS_WITH_AS(colocation_groups(nodes, view.colocated(), o),
                         "--colocate lone,wroker names node 'wroker', which is not in the program "
                         "(nodes: worker, lone, boss)",
                         tlaunch::launch_error);
    o.colocate = {"lone,worker/1", "boss,worker/1"};
    CHECK_THROWS_WITH_AS(colocation_groups(nodes, view.colocated(), o),
                         "--colocate boss,worker/1 puts 'worker/1' in a second group (it is in "
                         "--colocate lone,worker/1)",
                         tlaunch::launch_error);
    o.colocate = {"lone,worker/4"};
    CHECK_THROWS_WITH_AS(colocation_groups(nodes, view.colocated(), o),
                         "--colocate lone,worker/4 names 'worker/4', but node 'worker' has 4 "
                         "replicas (0 to 3)",
                         tlaunch::launch_error);
    // A declared replica that --replicas removed drops out of its group.
    o = {};
    auto one = view.describe({{"worker", 1}});  // worker/0 is 0, lone 1, boss 2
    CHECK(colocation_groups(one, view.colocated(), o) == std::vector<colocation_group>{{1, 2}});
  }

  // Declared replicated in the program, the same is a compile error (tests/compile_fail/
  // handle_to_replicated_node.cpp); a count raised by --replicas is checked at launch.
  TEST_CASE("a single handle to a node --replicas makes replicated is refused at launch") {
    struct Needy {
      tlaunch::handle<Worker> w;
    };
    constexpr auto p = tlaunch::program(tlaunch::node<"worker", Worker>(),
                                        tlaunch::node<"needy", Needy>(tlaunch::ref<"worker">));
    tlaunch::launch::options o;
    o.replicas["worker"] = 2;
    tlaunch::launch::output_printer out(tlaunch::launch::color_mode::never);
    try {
      tlaunch::launch::run_local_mt(tlaunch::launch::plan_launch(p, o), out);
      FAIL("no error");
    } catch (const tlaunch::launch_error& e) {
      std::string m = e.what();
      CHECK(m.find("needy") != std::string::npos);
      CHECK(m.find("worker") != std::string::npos);
      CHECK(m.find("handles<") != std::string::npos);
    }
  }

  // The check constexpr programs fail to compile by, seen at run time: which constructor
  // arguments take a single handle is read from the node's type.
  TEST_CASE("a program built at run time with a handle to a replicated node throws") {
    struct Needy {
      int n;
      tlaunch::handles<Worker> all;
      tlaunch::handle<Worker> one;
    };
    auto build = [](std::uint32_t replicas) {
      return tlaunch::program(
          tlaunch::node<"worker", Worker>().replicas(replicas),
          tlaunch::node<"needy", Needy>(1, tlaunch::ref<"worker">, tlaunch::ref<"worker">));
    };
    CHECK_NOTHROW(build(1));
    CHECK_THROWS_WITH_AS(build(3),
                         doctest::Contains("node 'needy' takes a tlaunch::handle to 'worker', "
                                           "which the program declares replicated: take "
                                           "tlaunch::handles<"),
                         tlaunch::launch_error);
  }

  TEST_CASE("stop_program stops bodies waiting in ctx.stopped()") {
    constexpr auto p = tlaunch::program(tlaunch::node<"stopper", Stopper>(),
                                        tlaunch::node<"sleeper", Sleeper>().replicas(3));
    tlaunch::launch::options o;
    tlaunch::launch::output_printer out(tlaunch::launch::color_mode::never);
    CHECK(tlaunch::launch::run_local_mt(tlaunch::launch::plan_launch(p, o), out) == 0);
  }

  TEST_CASE("a run() that throws stops the program with exit code 1, naming the node") {
    constexpr auto p = tlaunch::program(tlaunch::node<"thrower", Thrower>(),
                                        tlaunch::node<"sleeper", Sleeper>());
    tlaunch::launch::options o;
    char* buf = nullptr;
    std::size_t len = 0;
    std::FILE* mem = open_memstream(&buf, &len);
    {
      tlaunch::launch::output_printer out(tlaunch::launch::color_mode::never, {}, mem, mem);
      CHECK(tlaunch::launch::run_local_mt(tlaunch::launch::plan_launch(p, o), out) == 1);
    }
    std::fclose(mem);
    std::string text(buf, len);
    std::free(buf);
    CHECK(text.find("thrower/0") != std::string::npos);
    CHECK(text.find("thrower broke") != std::string::npos);
  }

  TEST_CASE("a run() that throws while the other runs still start stops them all") {
    // The thrower may stop the program before the sleepers' runs have started: each must
    // still start and end with the stop, and run_local_mt return the failure.
    constexpr auto p = tlaunch::program(tlaunch::node<"thrower", Thrower>(),
                                        tlaunch::node<"sleeper", Sleeper>().replicas(64));
    for (int round = 0; round < 10; ++round) {
      CAPTURE(round);
      tlaunch::launch::options o;
      o.threads = 4;
      std::FILE* sink = std::fopen("/dev/null", "w");
      REQUIRE(sink);
      {
        tlaunch::launch::output_printer out(tlaunch::launch::color_mode::never, {}, sink, sink);
        CHECK(tlaunch::launch::run_local_mt(tlaunch::launch::plan_launch(p, o), out) == 1);
      }
      std::fclose(sink);
    }
  }

  TEST_CASE("ctx.spawn gives an in-process actor called directly") {
    struct Spawner {
      asio::awaitable<void> run(tlaunch::context& ctx) {
        auto w = ctx.spawn<Worker>(6);
        gathered = co_await w.call<&Worker::work>(7);
      }
    };
    constexpr auto p = tlaunch::program(tlaunch::node<"spawner", Spawner>());
    tlaunch::launch::options o;
    o.force_wire = true;  // spawned actors are in-process even then
    tlaunch::launch::output_printer out(tlaunch::launch::color_mode::never);
    CHECK(tlaunch::launch::run_local_mt(tlaunch::launch::plan_launch(p, o), out) == 0);
    CHECK(gathered == 42);
  }
}
