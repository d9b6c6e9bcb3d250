// The example programs, run as a user runs them: every launch type, the
// --replicas override, bad flags, --help and --log-dir.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <tlaunch/detail/sanitizers.hpp>

#include "../common/process.hpp"

namespace it = tlaunch::integration;
using it::process;

namespace {

const std::vector<std::vector<std::string>> launch_types = {
    {}, {"--force-wire"}, {"--launch=local_mp"}};

std::string describe(const std::vector<std::string>& flags) {
  return flags.empty() ? std::string("local_mt") : flags[0];
}

std::vector<std::string> with(std::string exe, std::vector<std::string> flags,
                              std::vector<std::string> more = {}) {
  std::vector<std::string> a{std::move(exe)};
  a.insert(a.end(), flags.begin(), flags.end());
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

bool has(const std::string& s, std::string_view needle) {
  return s.find(needle) != std::string::npos;
}

// The two numbers of the first line holding `text`, read with `format` from there on
// ("first window %lf, last window %lf"); NaNs when there is no such line.
std::pair<double, double> two_numbers(const std::string& out, const std::string& text,
                                      const char* format) {
  double a = std::nan(""), b = std::nan("");
  if (auto at = out.find(text); at != std::string::npos)
    std::sscanf(out.c_str() + at, format, &a, &b);
  return {a, b};
}

// The launch types the newer examples run under in these tests: local_mt and local_mp.
const std::vector<std::vector<std::string>> local_mt_and_mp = {{}, {"--launch=local_mp"}};

// hello_world, and the same source built header-only when the build has it (the sanitizer
// builds of CI leave it out: TLAUNCH_HEADER_ONLY_EXAMPLE).
const std::vector<const char*> hello_worlds = {
    TLAUNCH_HELLO_WORLD_EXE,
#ifdef TLAUNCH_HELLO_WORLD_HEADER_ONLY_EXE
    TLAUNCH_HELLO_WORLD_HEADER_ONLY_EXE,
#endif
};

}  // namespace

TEST_SUITE("examples") {
  TEST_CASE("hello_world: four producers add 400 in total under every launch type") {
    // hello_world_header_only: the same source built header-only (hello_world links the
    // compiled library).
    for (const char* exe : hello_worlds)
      for (const auto& flags : launch_types) {
        CAPTURE(exe);
        CAPTURE(describe(flags));
        auto r = it::run(with(exe, flags));
        CAPTURE(r.all);
        CHECK(r.code == 0);
        for (int i = 0; i < 4; ++i)
          CHECK(has(r.out, "[producer/" + std::to_string(i) + "] added 100, total now "));
        CHECK(!has(r.out, "[producer/4]"));
        // The producer whose adds came last sees every other producer's adds.
        CHECK(has(r.out, "total now 400\n"));
        CHECK(process::occurrences(r.out, "added 100") == 4);
      }
  }

  TEST_CASE("consumer_producers: the consumer gets every producer's value and the sum") {
    for (const auto& flags : launch_types) {
      CAPTURE(describe(flags));
      auto r = it::run(with(TLAUNCH_CONSUMER_PRODUCERS_EXE, flags));
      CAPTURE(r.all);
      CHECK(r.code == 0);
      CHECK(it::missing(r.out, {"[consumer/0] producer/0 returned 1\n",
                                "[consumer/0] producer/1 returned 4\n",
                                "[consumer/0] producer/2 returned 9\n",
                                "[consumer/0] broadcast work(10) to 3 producers: 300\n",
                                "[consumer/0] sum of 3 results: 14\n",
                                "[producer/0] served 2 calls, produced 101\n",
                                "[producer/1] served 2 calls, produced 104\n",
                                "[producer/2] served 2 calls, produced 109\n"}) == "");
      CHECK(r.err.empty());
    }
  }

  TEST_CASE("--replicas changes the number of node instances") {
    for (const auto& flags : launch_types) {
      CAPTURE(describe(flags));
      auto r = it::run(with(TLAUNCH_CONSUMER_PRODUCERS_EXE, flags, {"--replicas", "producer=5"}));
      CAPTURE(r.all);
      CHECK(r.code == 0);
      CHECK(has(r.out, "[consumer/0] producer/4 returned 25\n"));
      CHECK(has(r.out, "[consumer/0] sum of 5 results: 55\n"));
      CHECK(process::occurrences(r.out, "served 2 calls") == 5);
      CHECK(has(r.out, "[producer/4] served 2 calls, produced 125\n"));
      CHECK(!has(r.out, "producer/5"));
    }
    auto r = it::run({TLAUNCH_HELLO_WORLD_EXE, "--launch=local_mp", "--replicas=producer=2"});
    CAPTURE(r.all);
    CHECK(r.code == 0);
    CHECK(process::occurrences(r.out, "added 100") == 2);
    CHECK(has(r.out, "total now 200\n"));
  }

  TEST_CASE("every example takes --launch=local_mp (exit 0) and refuses --bogus (usage, exit 2)") {
    // Never an uncaught exception: a flag an example does not take is a usage error.
    std::vector<std::string> exes = {
        TLAUNCH_HELLO_WORLD_EXE,
        TLAUNCH_CONSUMER_PRODUCERS_EXE, TLAUNCH_RUN_CMD_EXE, TLAUNCH_ACTOR_LEARNER_EXE,
        TLAUNCH_TOPOLOGIES_EXE, TLAUNCH_DATA_PARALLEL_EXE, TLAUNCH_SWEEP_EXE};
#ifdef TLAUNCH_HELLO_WORLD_HEADER_ONLY_EXE
    exes.push_back(TLAUNCH_HELLO_WORLD_HEADER_ONLY_EXE);
#endif
    for (const auto& exe : exes) {
      CAPTURE(exe);
      // sweep launches through tlaunch::start, whose local_mp forks node processes from this
      // threaded one: ThreadSanitizer cannot follow that (they exit 66), and under ASan such
      // a fork can hang in the allocator, so under either only the usage error is checked,
      // as launch_api_tests and readme_tests do.
      if (!((tlaunch::detail::thread_sanitizer || tlaunch::detail::address_sanitizer) &&
            exe == std::string(TLAUNCH_SWEEP_EXE))) {
        auto r = it::run({exe, "--launch=local_mp"}, std::chrono::seconds(120));
        CAPTURE(r.all);
        CHECK(r.code == 0);
        CHECK_FALSE(has(r.all, "terminate called"));
      }
      auto r = it::run({exe, "--bogus"});
      CAPTURE(r.all);
      CHECK(r.code == 2);
      CHECK(has(r.err, "usage"));
      CHECK(has(r.err, "--bogus"));
      CHECK_FALSE(has(r.all, "terminate called"));
    }
  }

  TEST_CASE("a bad command line prints the usage and exits 2") {
    auto r = it::run({TLAUNCH_HELLO_WORLD_EXE, "--bogus"});
    CHECK(r.code == 2);
    CHECK(has(r.err, "unknown flag '--bogus'"));
    CHECK(has(r.err, "usage: "));
    CHECK(r.out.empty());

    r = it::run({TLAUNCH_HELLO_WORLD_EXE, "--launch=mars"});
    CHECK(r.code == 2);
    CHECK(has(r.err, "--launch: 'mars' is not one of local_mt, local_mp, ssh, slurm"));

    r = it::run({TLAUNCH_HELLO_WORLD_EXE, "--replicas", "producer=many"});
    CHECK(r.code == 2);
    CHECK(has(r.err, "--replicas: 'many' is not a number"));

    r = it::run({TLAUNCH_HELLO_WORLD_EXE, "stray"});
    CHECK(r.code == 2);
    CHECK(has(r.err, "unexpected argument 'stray'"));

    // Well-formed, but names no node of the program: the error lists the nodes.
    r = it::run({TLAUNCH_HELLO_WORLD_EXE, "--launch=local_mp", "--replicas=worker=2"});
    CAPTURE(r.err);
    CHECK(r.code == 2);
    CHECK(has(r.err, "'worker'"));
    CHECK(has(r.err, "counter, producer"));

    // --restart names nodes of the program under every launcher, local_mt too.
    for (const auto& flags : launch_types) {
      CAPTURE(describe(flags));
      r = it::run(with(TLAUNCH_HELLO_WORLD_EXE, flags, {"--restart", "worker=2"}));
      CAPTURE(r.err);
      CHECK(r.code == 2);
      CHECK(has(r.err, "--restart names node 'worker', which is not in the program"));
    }
  }

  TEST_CASE("local_mt says in one line what it does not apply, and runs the program") {
    auto r = it::run({TLAUNCH_HELLO_WORLD_EXE, "--restart", "producer=2", "--env",
                      "counter:MODE=x"});
    CAPTURE(r.all);
    CHECK(r.code == 0);
    CHECK(process::occurrences(r.err, "--launch=local_mt runs every node in this one process") ==
          1);
    CHECK(has(r.err, "the environment of 'counter'"));
    CHECK(has(r.err, "the restart policy of 'producer' (a failure stops the program)"));
    CHECK(process::occurrences(r.out, "added 100") == 4);
  }

  TEST_CASE("--help lists every flag on stdout and exits 0") {
    auto r = it::run({TLAUNCH_CONSUMER_PRODUCERS_EXE, "--help"});
    CHECK(r.code == 0);
    CHECK(r.err.empty());
    CHECK(has(r.out, "usage: "));
    for (const char* flag :
         {"--launch=", "--replicas ", "--threads=", "--grace=", "--start-timeout=", "--log-dir=",
          "--color=", "--force-wire", "--max-frame=", "--hosts=", "--hostfile=", "--place ",
          "--ssh-identity=", "--ssh-accept-new", "--known-hosts=", "--coordinator-host=",
          "--ssh-parallel=", "--help"}) {
      CAPTURE(flag);
      CHECK(has(r.out, flag));
    }
    // Nothing ran: no node output.
    CHECK(!has(r.out, "[consumer/0]"));
  }

  TEST_CASE("--log-dir writes one file per node instance") {
    for (const auto& flags : launch_types) {
      CAPTURE(describe(flags));
      auto dir = std::filesystem::temp_directory_path() / it::unique_marker("logs");
      auto r = it::run(with(TLAUNCH_CONSUMER_PRODUCERS_EXE, flags, {"--log-dir=" + dir.string()}));
      CAPTURE(r.all);
      CHECK(r.code == 0);
      auto consumer = it::read_file((dir / "consumer.0.log").string());
      CHECK(has(consumer, "producer/2 returned 9\n"));
      CHECK(has(consumer, "sum of 3 results: 14\n"));
      CHECK(!has(consumer, "[consumer/0]"));  // the file holds the bare lines
      for (int i = 0; i < 3; ++i) {
        auto f = it::read_file((dir / ("producer." + std::to_string(i) + ".log")).string());
        CHECK(has(f, "served 2 calls"));
        CHECK(!has(f, "returned"));
      }
      // The terminal still gets every line.
      CHECK(has(r.out, "[consumer/0] sum of 3 results: 14\n"));
      std::filesystem::remove_all(dir);
    }
  }

  TEST_CASE("actor_learner: the learner's curve improves, and it finds the best arm") {
    for (const auto& flags : local_mt_and_mp) {
      CAPTURE(describe(flags));
      auto r = it::run(with(TLAUNCH_ACTOR_LEARNER_EXE, flags, {"--color=never"}));
      CAPTURE(r.all);
      CHECK(r.code == 0);
      // 200 learner steps, one line per window of 20.
      CHECK(process::occurrences(r.out, "[learner/0] steps ") == 10);
      CHECK(has(r.out, "[learner/0] steps  181-200  mean reward "));
      auto [first, last] = two_numbers(r.out, "learning curve: first window ",
                                       "learning curve: first window %lf, last window %lf");
      // A random policy earns 0.4 on average, the best arm 0.9 (0.85 with 10% exploration);
      // the first window already holds some experience of the first policies (about 0.45).
      CHECK(last > 0.7);
      CHECK(last > first + 0.15);
      CHECK(has(r.out, "best arm 4 (of 5)\n"));
    }
  }

  TEST_CASE("actor_learner: a learner killed mid-run goes on from its snapshot, and --resume") {
    const auto dir = std::filesystem::temp_directory_path() / it::unique_marker("state");
    auto r = it::run({TLAUNCH_ACTOR_LEARNER_EXE, "--launch=local_mp", "--color=never",
                      "--state-dir=" + dir.string(), "--", "--kill-at=50", "--steps=100"});
    CAPTURE(r.all);
    CHECK(r.code == 0);
    CHECK(has(r.out, "[learner/0] killing this learner's process at step 50\n"));
    // Its snapshot of step 40 (the end of its second window) was loaded by its restart.
    CHECK(has(r.out, "[learner/0] resumed at step 40 (start 1 of this learner)\n"));
    // Two windows before the kill, the three after the snapshot: none lost, none twice.
    CHECK(process::occurrences(r.out, "[learner/0] steps ") == 5);
    CHECK(has(r.out, "[learner/0] steps   81-100  mean reward "));
    auto again = it::run({TLAUNCH_ACTOR_LEARNER_EXE, "--launch=local_mp", "--color=never",
                          "--resume=" + dir.string(), "--", "--steps=140"});
    CAPTURE(again.all);
    CHECK(again.code == 0);
    CHECK(has(again.out, "[learner/0] resumed at step 100 (start 0 of this learner)\n"));
    CHECK(!has(again.out, "[learner/0] steps    1-20 "));
    CHECK(has(again.out, "[learner/0] steps  121-140  mean reward "));
    CHECK(has(again.out, "best arm 4 (of 5)\n"));
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("actor_learner: actors added half-way get the policy and play") {
    auto r = it::run({TLAUNCH_ACTOR_LEARNER_EXE, "--launch=local_mp", "--color=never", "--",
                      "--grow-at=100"});
    CAPTURE(r.all);
    CHECK(r.code == 0);
    CHECK(has(r.out, "[learner/0] step 100: 8 actors now\n"));
    CHECK(has(r.all, "[launcher] node actor resized from 4 to 8 replicas in "));
    // The new actors got a policy of the second half (one the learner broadcast after they
    // joined: version 105 or later) and played it; the curve still converged.
    auto first_policy = [&](const std::string& actor) {
      const std::string line = "[" + actor + "] playing policy ";
      const auto at = r.out.find(line);
      return at == std::string::npos ? -1L : std::stol(r.out.substr(at + line.size()));
    };
    for (const char* added : {"actor/4", "actor/5", "actor/6", "actor/7"}) {
      CAPTURE(added);
      CHECK(first_policy(added) >= 105);
    }
    CHECK(first_policy("actor/3") == 5);
    CHECK(process::occurrences(r.out, "[learner/0] steps ") == 10);
    CHECK(has(r.out, "best arm 4 (of 5)\n"));
  }

  TEST_CASE("topologies: star, tree and net move every block as sent") {
    for (const auto& flags : local_mt_and_mp) {
      CAPTURE(describe(flags));
      auto star = it::run(with(TLAUNCH_TOPOLOGIES_EXE, flags, {"--color=never", "--", "--shape=star"}));
      CAPTURE(star.all);
      CHECK(star.code == 0);
      CHECK(process::occurrences(star.out, "[hub/0] hub -> leaf/") == 4);
      CHECK(has(star.out, "[hub/0] hub -> leaf/3: 1000 numbers, checksum 255567531500 arrived as "
                          "255567531500: ok\n"));
      CHECK(process::occurrences(star.out, " -> hub: 1000 numbers, checksum ") == 4);
      CHECK(has(star.out, "[hub/0] star: 4 blocks out and 4 back, all as sent\n"));
      CHECK(!has(star.out, "MISMATCH"));

      auto tree = it::run(with(TLAUNCH_TOPOLOGIES_EXE, flags, {"--color=never", "--", "--shape=tree"}));
      CAPTURE(tree.all);
      CHECK(tree.code == 0);
      // Two mids, each with two of the four leaves; 1..1000 split between them.
      CHECK(has(tree.out, "[root/0] root -> mid/1: numbers 501..1000\n"));
      CHECK(has(tree.out, "[root/0]   mid/1 -> leaf/3: 250 numbers; back: sum of squares 192927125: ok\n"));
      CHECK(process::occurrences(tree.out, " numbers; back: sum of squares ") == 4);
      CHECK(has(tree.out, "[root/0] mid/0 -> root: 2 partial sums, total 41791750\n"));
      CHECK(has(tree.out, "[root/0] tree: sum of squares of 1..1000 = 333833500, expected 333833500: ok\n"));

      auto net = it::run(with(TLAUNCH_TOPOLOGIES_EXE, flags,
                              {"--color=never", "--replicas", "peer=5", "--", "--shape=net"}));
      CAPTURE(net.all);
      CHECK(net.code == 0);
      // Every ordered pair of distinct peers: 5 * 4 blocks, each checked by sender and receiver.
      CHECK(process::occurrences(net.out, " 1000 numbers, checksum ") == 20);
      CHECK(process::occurrences(net.out, ": ok\n") == 25);
      CHECK(has(net.out, "[peer/4] peer/4 -> peer/0: 1000 numbers, checksum "));
      CHECK(process::occurrences(net.out, "received 4 blocks, one from every other peer: ok\n") == 5);
      CHECK(!has(net.out, "MISMATCH"));
    }
  }

  TEST_CASE("topologies: a changed number fails the check and the program; a bad shape exits 2") {
    for (const char* shape : {"--shape=star", "--shape=tree", "--shape=net"}) {
      CAPTURE(shape);
      auto r = it::run({TLAUNCH_TOPOLOGIES_EXE, "--launch=local_mp", "--color=never", "--", shape,
                        "--corrupt=1"});
      CAPTURE(r.all);
      CHECK(r.code == 1);
      CHECK(has(r.out, "MISMATCH"));
      CHECK(has(r.all, "mismatch: "));
    }
    auto r = it::run({TLAUNCH_TOPOLOGIES_EXE, "--", "--shape=ring"});
    CHECK(r.code == 2);
    CHECK(has(r.err, "--shape: 'ring' is not one of star, tree, net"));
  }

  TEST_CASE("data_parallel: the loss falls as the server combines the workers' gradients") {
    for (const auto& flags : local_mt_and_mp) {
      CAPTURE(describe(flags));
      auto r = it::run(with(TLAUNCH_DATA_PARALLEL_EXE, flags, {"--color=never"}));
      CAPTURE(r.all);
      CHECK(r.code == 0);
      // At zero weights every prediction is 1/2: log 2.
      CHECK(has(r.out, "[worker/0] step    1: loss 0.6931 "));
      CHECK(process::occurrences(r.out, "[worker/0] step ") == 11);
      auto [first, last] = two_numbers(r.out, "fell from ", "fell from %lf to %lf");
      CHECK(first == doctest::Approx(0.6931).epsilon(0.001));
      CHECK(last < 0.4);
      // The loss goes down from line to line (a batch of stale gradients may add a little).
      double previous = 1;
      for (std::size_t at = r.out.find("[worker/0] step "); at != std::string::npos;
           at = r.out.find("[worker/0] step ", at + 1)) {
        double loss = 0;
        int step = 0;
        REQUIRE(std::sscanf(r.out.c_str() + at, "[worker/0] step %d: loss %lf", &step, &loss) == 2);
        CAPTURE(step);
        CHECK(loss < previous + 0.02);
        previous = loss;
      }
    }
  }
}

