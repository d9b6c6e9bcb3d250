// --launch=slurm on a real Slurm: slurmctld and two slurmd (node1, node2) on this machine,
// started by tools/slurm-fixture.sh (the CTest fixture `slurm`; TLAUNCH_SLURM_ENV names its
// env file). The examples and faulty run through sbatch and under salloc, as a user runs
// them; every test checks that no process of its run is left afterwards.
#include <doctest/doctest.h>
#include <signal.h>
#include <stdlib.h>

#include <fmt/format.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <tlaunch/launch/cluster/slurm.hpp>

#include "../common/temp_dir.hpp"
#include "../common/process.hpp"
#include "../observe/http_get.hpp"

using namespace tlaunch::integration;

namespace {

// SLURM_CONF from the fixture's env file, for salloc, sbatch, scancel and squeue.
void use_cluster() {
  const char* env = std::getenv("TLAUNCH_SLURM_ENV");
  REQUIRE_MESSAGE(env != nullptr, "TLAUNCH_SLURM_ENV is not set (run through ctest or "
                                  "tools/slurm-fixture.sh run)");
  std::ifstream in(env);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("SLURM_CONF=", 0) == 0) ::setenv("SLURM_CONF", line.c_str() + 11, 1);
  REQUIRE(std::getenv("SLURM_CONF") != nullptr);
}

bool has(const std::string& s, std::string_view what) { return s.find(what) != std::string::npos; }

// Live processes whose argv holds `marker`: the launcher, srun and the tasks.
std::vector<pid_t> pids_with(std::string_view marker) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    auto pid = static_cast<pid_t>(std::stol(name));
    if (pid != ::getpid() && has(cmdline(pid), marker) && alive(pid)) out.push_back(pid);
  }
  return out;
}

// Waits until no process with `marker` is left; true if that happened within `timeout`.
bool none_left(std::string_view marker, ms timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pids_with(marker).empty()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

// Waits until `count` node processes (tasks) with `marker` run.
bool tasks_running(std::string_view marker, std::size_t count, ms timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (node_pids(marker).size() < count) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

// The launcher of a salloc run: the process with `marker` that runs --launch=slurm.
pid_t launcher_pid(std::string_view marker) {
  for (pid_t p : pids_with(marker)) {
    auto cl = cmdline(p);
    if (has(cl, "--launch=slurm") && cl.rfind("srun ", 0) != 0 && cl.rfind("salloc ", 0) != 0 &&
        cl.rfind("/usr/bin/salloc ", 0) != 0)
      return p;
  }
  return 0;
}

std::vector<std::string> salloc(std::vector<std::string> command) {
  std::vector<std::string> argv = {"/usr/bin/salloc", "--nodes=2", "--quiet"};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

// Submits `command` as the script of an sbatch job on two nodes and waits for its end,
// polling scontrol (sbatch --wait polls only every few seconds); the job's exit code
// (from "ExitCode=code:signal") and its output file.
struct batch_result {
  int code;
  std::string output;
};
batch_result sbatch_wait(const std::string& command) {
  tlaunch::test_support::temp_dir dir("tlaunch-slurm-test");
  auto script = (dir.path / "job.sh").string(), out = (dir.path / "job.out").string();
  std::ofstream(script) << "#!/bin/sh\nexec " << command << "\n";
  auto submitted = run({"/usr/bin/sbatch", "--parsable", "--nodes=2", "--output=" + out, script}, 30s);
  REQUIRE(submitted.code == 0);
  std::string job = submitted.out.substr(0, submitted.out.find_first_of(";\n"));
  auto deadline = std::chrono::steady_clock::now() + 60s;
  std::string state;
  for (;;) {
    state = run({"/usr/bin/scontrol", "show", "job", "-o", job}, 10s).out;
    if (!has(state, "JobState=PENDING") && !has(state, "JobState=RUNNING") &&
        !has(state, "JobState=CONFIGURING") && !has(state, "JobState=COMPLETING"))
      break;
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(50ms);
  }
  INFO(state);
  auto at = state.find("ExitCode=");
  REQUIRE(at != std::string::npos);
  return {std::stoi(state.substr(at + 9)), read_file(out)};
}

}  // namespace

TEST_SUITE("slurm") {
  TEST_CASE("srun's reports of failed tasks become their exit statuses") {
    using tlaunch::launch::detail::parse_srun_task_report;
    auto code = parse_srun_task_report("srun: error: node2: task 3: Exited with exit code 2");
    REQUIRE(code);
    CHECK(code->ranks == std::vector<std::uint32_t>{3});
    CHECK(code->status.describe() == "exited with code 2");
    auto sig = parse_srun_task_report("srun: error: node1: tasks 0-2,5: Segmentation fault");
    REQUIRE(sig);
    CHECK(sig->ranks == std::vector<std::uint32_t>{0, 1, 2, 5});
    CHECK(sig->status.signal_name == "SEGV");
    auto aborted = parse_srun_task_report("srun: error: node1: task 1: Aborted (core dumped)");
    REQUIRE(aborted);
    CHECK(aborted->status.signal_name == "ABRT");
    CHECK_FALSE(parse_srun_task_report("srun: error: Unable to create step for job 7"));
    CHECK_FALSE(parse_srun_task_report("3: srun: error: node1: task 1: Killed"));
  }

  TEST_CASE("a task's role is the instance its SLURM_PROCID numbers, in program order") {
    std::vector<tlaunch::rpc::node_info> nodes(2);
    nodes[0].name = "counter";
    nodes[0].replicas = 1;
    nodes[1].name = "producer";
    nodes[1].replicas = 4;
    ::setenv("SLURM_PROCID", "0", 1);
    CHECK(tlaunch::launch::slurm_task_role(nodes) == "counter/0");
    ::setenv("SLURM_PROCID", "4", 1);
    CHECK(tlaunch::launch::slurm_task_role(nodes) == "producer/3");
    ::setenv("SLURM_PROCID", "5", 1);
    CHECK_THROWS_WITH_AS(tlaunch::launch::slurm_task_role(nodes),
                         doctest::Contains("SLURM_PROCID=5 names no node process"),
                         tlaunch::launch_error);
    // With a group {counter/0, producer/2}: rank 0 hosts both, rank 2 is producer/1, and
    // there are four tasks, the last producer/3.
    tlaunch::launch::options g;
    g.colocate = {"counter,producer/2"};
    auto groups = tlaunch::launch::colocation_groups(nodes, {}, g);
    ::setenv("SLURM_PROCID", "0", 1);
    CHECK(tlaunch::launch::slurm_task_role(nodes, groups) == "counter/0,producer/2");
    ::setenv("SLURM_PROCID", "2", 1);
    CHECK(tlaunch::launch::slurm_task_role(nodes, groups) == "producer/1");
    ::setenv("SLURM_PROCID", "3", 1);
    CHECK(tlaunch::launch::slurm_task_role(nodes, groups) == "producer/3");
    ::setenv("SLURM_PROCID", "4", 1);
    CHECK_THROWS_AS(tlaunch::launch::slurm_task_role(nodes, groups), tlaunch::launch_error);
    ::unsetenv("SLURM_PROCID");
    CHECK_THROWS_AS(tlaunch::launch::slurm_task_role(nodes), tlaunch::launch_error);
  }

  TEST_CASE("--launch=slurm refuses to run outside an allocation and as one of several tasks") {
    ::unsetenv("SLURM_JOB_ID");
    auto outside = run({TLAUNCH_HELLO_WORLD_EXE, "--launch=slurm"}, 30s);
    CHECK(outside.code == 2);
    CHECK(has(outside.err, "--launch=slurm runs inside a Slurm allocation"));

    use_cluster();
    auto tasks = run(salloc({"/usr/bin/srun", "--ntasks=2", "--overcommit", TLAUNCH_HELLO_WORLD_EXE,
                             "--launch=slurm"}),
                     60s);
    INFO(tasks.all);
    CHECK(tasks.code == 2);
    CHECK(has(tasks.all, "this process is one of 2 tasks of an srun step"));
  }

  TEST_CASE("hello_world and consumer_producers under salloc, on both nodes") {
    use_cluster();
    auto hello = run(salloc({TLAUNCH_HELLO_WORLD_EXE, "--launch=slurm"}), 60s);
    INFO(hello.all);
    CHECK(hello.code == 0);
    CHECK(has(hello.all, "total now 400"));
    CHECK(has(hello.all, "[producer/0@node2]"));  // round-robin: counter/0 on node1, then node2
    CHECK(has(hello.all, "[producer/1@node1]"));

    auto cp = run(salloc({TLAUNCH_CONSUMER_PRODUCERS_EXE, "--launch=slurm", "--place",
                          "consumer=node2", "--replicas", "producer=5"}),
                  60s);
    INFO(cp.all);
    CHECK(cp.code == 0);
    CHECK(has(cp.all, "[consumer/0@node2] sum of 5 results"));
  }

  TEST_CASE("a colocation group is one srun task that hosts every member") {
    use_cluster();
    auto marker = unique_marker("slurm-colocate");
    ::setenv("TLAUNCH_TIMINGS", "1", 1);
    auto r = run(salloc({TLAUNCH_FAULTY_EXE, "--launch=slurm", "--colocate", "target,worker/0",
                         "--", "colocation", marker}),
                 60s);
    ::unsetenv("TLAUNCH_TIMINGS");
    INFO(r.all);
    CHECK(r.code == 0);
    CHECK(has(r.all, "timings: 2 nodes on 2 Slurm nodes"));  // two tasks for three instances
    // "colocation index=I pid=P target_pid=T": worker/0 runs in target's process (at the
    // group's place, node1); worker/1 is the second task, round-robin on node2.
    auto pids = [&](const std::string& where) {
      std::pair<long, long> p{-1, -2};
      auto at = r.all.find(where + "colocation ");
      if (at != std::string::npos)
        std::sscanf(r.all.c_str() + at + where.size(),
                    "colocation index=%*d pid=%ld target_pid=%ld", &p.first, &p.second);
      return p;
    };
    auto grouped = pids("[target/0+worker/0@node1] ");
    CHECK(grouped.first == grouped.second);
    auto alone = pids("[worker/1@node2] ");
    CHECK(alone.first > 0);
    CHECK(alone.first != alone.second);
    CHECK(none_left(marker, 20s));
  }

  TEST_CASE("hello_world and consumer_producers through sbatch") {
    use_cluster();
    auto hello = sbatch_wait(std::string(TLAUNCH_HELLO_WORLD_EXE) + " --launch=slurm");
    INFO(hello.output);
    CHECK(hello.code == 0);
    CHECK(has(hello.output, "total now 400"));

    // 16 node instances on two 2-CPU nodes: srun --overcommit
    auto cp = sbatch_wait(std::string(TLAUNCH_CONSUMER_PRODUCERS_EXE) +
                          " --launch=slurm --replicas producer=15");
    INFO(cp.output);
    CHECK(cp.code == 0);
    CHECK(has(cp.output, "sum of 15 results"));
  }

  TEST_CASE("a failing node is named with its Slurm node; the others are stopped") {
    use_cluster();
    auto marker = unique_marker("slurm-fail");
    auto r = run(salloc({TLAUNCH_FAULTY_EXE, "--launch=slurm", "--place", "worker=node2", "--",
                         "exit", "3", marker}),
                 60s);
    INFO(r.all);
    CHECK(r.code == 1);
    CHECK(has(r.all, "node worker/0@node2 failed: exited with code 3"));
    CHECK(none_left(marker, 20s));

    auto thrown = run(salloc({TLAUNCH_FAULTY_EXE, "--launch=slurm", "--", "throw", marker}), 60s);
    INFO(thrown.all);
    CHECK(thrown.code == 1);
    CHECK(has(thrown.all, "node worker/0@node2 failed"));  // worker/0 is instance 1: node2
    CHECK(has(thrown.all, "faulty worker gave up on purpose"));
    CHECK(none_left(marker, 20s));
  }

  TEST_CASE("restart: a task that crashes, or hangs, comes back as a one-task step; exit 0") {
    // target (policy: 3 restarts) aborts on its 3rd call, once: srun reports the task, the
    // first step goes on, and target/0 starts again as a step of its own on node1; worker/0
    // retries the call that failed and makes all 6. The file is shared: one machine.
    use_cluster();
    auto marker = unique_marker("slurm-restart");
    tlaunch::test_support::temp_dir dir("tlaunch-slurm-test");
    auto once = (dir.path / "crashed").string();
    ::setenv("FAULTY_TARGET_CRASH", "3", 1);
    ::setenv("FAULTY_ONCE", once.c_str(), 1);
    ::setenv("FAULTY_CALL_TIMEOUT", "40", 1);  // a new step can take seconds to start
    auto r = run(salloc({TLAUNCH_FAULTY_EXE, "--launch=slurm", "--", "calls", "6", marker}), 90s);
    ::unsetenv("FAULTY_TARGET_CRASH");
    ::unsetenv("FAULTY_CALL_TIMEOUT");
    INFO(r.all);
    CHECK(r.code == 0);
    CHECK(has(r.all, "node target/0@node1 failed: killed by signal SIGABRT; restart 1 of at "
                     "most 3 within 60 s, in 100 ms"));
    CHECK(has(r.all, "node target/0@node1 restarted: registered "));
    CHECK(has(r.all, "[worker/0@node2] 6 good calls"));
    CHECK(none_left(marker, 20s));

    // worker/0 (task 1, on node2) stops itself with SIGSTOP once: the heartbeat finds it
    // silent and the launcher kills that task alone (its pid, on its node), not the step;
    // the new worker/0 stops the program. (--liveness=5: the task's own watch, below,
    // would kill it only after 10 s.)
    std::filesystem::remove(once);
    auto hung = run(salloc({TLAUNCH_FAULTY_EXE, "--launch=slurm", "--heartbeat=0.5", "--liveness=5",
                            "--restart", "worker=1", "--", "stall", marker}),
                    90s);
    INFO(hung.all);
    CHECK(hung.code == 0);
    CHECK(has(hung.all, "stopped answering (killed by signal SIGKILL); restart 1 of at most 1"));
    CHECK(has(hung.all, "[worker/0@node2] restarted after a stall"));
    CHECK_FALSE(has(hung.all, "killing the step"));
    CHECK(none_left(marker, 20s));

    // The same stall with the defaults (no heartbeat): the task's watch (its parent,
    // --tlaunch-watch) kills the node once stopped for two --liveness intervals, says so,
    // and worker/0 is restarted.
    std::filesystem::remove(once);
    auto watched = run(salloc({TLAUNCH_FAULTY_EXE, "--launch=slurm", "--restart", "worker=1", "--",
                               "stall", marker}),
                       90s);
    ::unsetenv("FAULTY_ONCE");
    INFO(watched.all);
    CHECK(watched.code == 0);
    CHECK(has(watched.all, "[worker/0@node2] tlaunch: node process stopped (SIGSTOP) for 2 s: it "
                           "stopped answering; killed"));
    CHECK(has(watched.all, "restart 1 of at most 1"));
    CHECK(has(watched.all, "[worker/0@node2] restarted after a stall"));
    CHECK(none_left(marker, 20s));
  }

#ifdef TLAUNCH_STATE_PROGRAM_EXE
  TEST_CASE("--state-dir under salloc: a task killed and restarted as a step loads its snapshot") {
    // The counter (tests/state/state_program.cpp) kills itself at 10; its one-task step
    // starts as its incarnation 1 and loads the snapshot it wrote. One machine: one folder.
    use_cluster();
    auto marker = unique_marker("slurm-state");
    tlaunch::test_support::temp_dir dir("tlaunch-slurm-state");
    auto r = run(salloc({TLAUNCH_STATE_PROGRAM_EXE, "--launch=slurm", "--place", "counter=node1",
                         "--place", "ticker=node2", "--place", "replay=node2",
                         "--state-dir=" + dir.path.string(), "--", "crash-at=10", "until=20",
                         marker}),
                 120s);
    INFO(r.all);
    CHECK(r.code == 0);
    CHECK(has(r.all, "[counter/0@node1] start incarnation=1 resumed=1 count=10 stored=10"));
    CHECK(has(r.all, "final count=20 incarnation=1 incarnations=0,1"));
    CHECK(none_left(marker, 20s));
  }
#endif

#ifdef TLAUNCH_ELASTIC_PROGRAM_EXE
  TEST_CASE("resize under salloc: new replicas start as one-task steps, removed ones exit") {
    // tests/elastic/elastic_program.cpp: `actor` goes 4 -> 8 -> 2 while a driver broadcasts
    // to it in a loop; every call the driver sent was served once, and nothing is left.
    use_cluster();
    auto marker = unique_marker("slurm-elastic");
    auto r = run(salloc({TLAUNCH_ELASTIC_PROGRAM_EXE, "--launch=slurm", "--", "steps=8,2",
                         "hold-ms=300", marker}),
                 120s);
    INFO(r.all);
    CHECK(r.code == 0);
    CHECK(has(r.all, "scaler sees 8 driver sees 8"));
    CHECK(has(r.all, "scaler sees 2 driver sees 2"));
    CHECK(has(r.all, "sizes=4,8,2 "));
    CHECK(has(r.all, "failures=0 "));
    CHECK(has(r.all, "error=none"));
    // Round the allocation's nodes, as at launch: actor/5 on the second.
    CHECK(has(r.all, "[actor/5@node2] actor 5 served "));
    CHECK(none_left(marker, 20s));
  }
#endif

  TEST_CASE("--env gives each replica its variables under local_mp and slurm; local_mt warns") {
    std::vector<std::string> env = {"--replicas", "runner=2", "--env", "runner:TAG=r{index}x",
                                    "--",         "echo tag=$TAG"};
    std::vector<std::string> local = {TLAUNCH_RUN_CMD_EXE, "--launch=local_mp"};
    local.insert(local.end(), env.begin(), env.end());
    auto mp = run(local, 60s);
    INFO(mp.all);
    CHECK(mp.code == 0);
    CHECK(has(mp.all, "tag=r0x"));
    CHECK(has(mp.all, "tag=r1x"));

    use_cluster();
    std::vector<std::string> slurm = {TLAUNCH_RUN_CMD_EXE, "--launch=slurm"};
    slurm.insert(slurm.end(), env.begin(), env.end());
    auto sl = run(salloc(slurm), 60s);
    INFO(sl.all);
    CHECK(sl.code == 0);
    CHECK(has(sl.all, "tag=r0x"));
    CHECK(has(sl.all, "tag=r1x"));

    auto mt = run({TLAUNCH_RUN_CMD_EXE, "--env", "runner:TAG=1", "--", "echo tag=$TAG."}, 30s);
    INFO(mt.all);
    CHECK(mt.code == 0);
    CHECK(has(mt.err, "does not apply the environment of 'runner'"));
    CHECK(has(mt.all, "tag=."));
    auto unknown = run({TLAUNCH_RUN_CMD_EXE, "--launch=local_mp", "--env", "nobody:TAG=1"}, 30s);
    CHECK(unknown.code == 2);
    CHECK(has(unknown.err, "--env names node 'nobody', which is not in the program"));
  }

  TEST_CASE("Ctrl-C and kill -9 of the launcher under salloc stop every task") {
    use_cluster();
    for (int sig : {SIGINT, SIGKILL}) {
      CAPTURE(sig);
      auto marker = unique_marker("slurm-signal");
      process p(salloc({TLAUNCH_FAULTY_EXE, "--launch=slurm", "--", "idle", marker}));
      // Both workers run (a stop before every node registered is another story).
      REQUIRE(p.wait_for_output("mode=idle", 30s, 2));
      REQUIRE(tasks_running(marker, 3, 30s));
      pid_t launcher = launcher_pid(marker);
      REQUIRE(launcher > 0);
      ::kill(launcher, sig);
      int code = p.wait_or_kill(30s);
      INFO(p.all());
      if (sig == SIGINT) {
        CHECK(code == 130);
        CHECK(has(p.all(), "interrupted: stopping every node"));
      }
      CHECK(none_left(marker, 20s));
    }
  }

  TEST_CASE("--dashboard, --metrics and --trace under salloc: the processes on their nodes") {
    use_cluster();
    auto marker = unique_marker("slurm-observe");
    process p(salloc({TLAUNCH_METRICS_PROGRAM_EXE, "--launch=slurm", "--place", "ps=node1",
                      "--place", "worker=node2", "--dashboard=127.0.0.1:0",
                      "--metrics=127.0.0.1:0", "--", marker}));
    REQUIRE_MESSAGE(p.wait_for_output("worker/1 calls ps", 60s), p.all());
    auto port_of = [&](const std::string& endpoint) {
      std::smatch m;
      const std::string all = p.all();
      REQUIRE_MESSAGE(std::regex_search(all, m, std::regex(endpoint + R"( at http://[^ ]*:(\d+)/)")),
                      all);
      return static_cast<std::uint16_t>(std::stoi(m[1]));
    };
    const auto dashboard = port_of("dashboard"), metrics = port_of("metrics");
    // The dashboard's state: each process on its Slurm node, running.
    std::string state;
    auto deadline = std::chrono::steady_clock::now() + 30s;
    do {
      std::this_thread::sleep_for(500ms);
      state = tlaunch::test_support::http_get("127.0.0.1", dashboard, "/api/state").body;
    } while (!has(state, "\"calls\":") && std::chrono::steady_clock::now() < deadline);
    INFO(state);
    for (const auto& [proc, host] : {std::pair<std::string, std::string>{"ps/0", "node1"},
                                     {"worker/0", "node2"}, {"worker/1", "node2"}})
      CHECK(std::regex_search(state, std::regex("\\{\"process\":\"" + proc + "\",\"host\":\"" +
                                                host + "\"[^}]*\"state\":\"running\"")));
    // Prometheus's page: the calls of a worker on node2 to ps/0 (each process is asked for
    // its sample once a second).
    const std::string series = "tlaunch_calls_total{process=\"worker/0\",node=\"worker\","
                               "replica=\"0\",host=\"node2\",peer=\"ps/0\","
                               "method=\"ParamServer::add\"}";
    std::string text;
    deadline = std::chrono::steady_clock::now() + 30s;
    do {
      text = tlaunch::test_support::http_get("127.0.0.1", metrics, "/metrics").body;
      if (!has(text, series)) std::this_thread::sleep_for(200ms);
    } while (!has(text, series) && std::chrono::steady_clock::now() < deadline);
    INFO(text);
    CHECK(has(text, series));
    pid_t launcher = launcher_pid(marker);
    REQUIRE(launcher > 0);
    ::kill(launcher, SIGTERM);
    CHECK(p.wait_or_kill(30s) == 143);
    CHECK(none_left(marker, 20s));

    // A chain of calls across the two nodes, traced.
    tlaunch::test_support::temp_dir dir("tlaunch-slurm-test");
    const std::string file = (dir.path / "trace.json").string();
    auto traced = run(salloc({TLAUNCH_TRACE_PROGRAM_EXE, "--launch=slurm", "--place", "front=node1",
                              "--place", "middle=node2", "--place", "back=node1",
                              "--trace=" + file, "--", "5"}),
                      60s);
    INFO(traced.all);
    CHECK(traced.code == 0);
    CHECK(has(traced.all, "trace: 30 spans written to " + file));
    const std::string json = read_file(file);
    CHECK(has(json, "\"name\":\"middle/0@node2\""));
    CHECK(has(json, "\"caller\":\"middle/0\",\"callee\":\"back/0\""));
  }

  TEST_CASE("scancel of the job stops the launcher and every task") {
    use_cluster();
    auto marker = unique_marker("slurm-scancel");
    tlaunch::test_support::temp_dir dir("tlaunch-slurm-test");
    auto script = (dir.path / "job.sh").string();
    std::ofstream(script) << "#!/bin/sh\nexec " << TLAUNCH_FAULTY_EXE
                          << " --launch=slurm -- idle " << marker << "\n";
    auto submitted = run({"/usr/bin/sbatch", "--parsable", "--nodes=2",
                          fmt::format("--output={}", (dir.path / "job.out").string()), script},
                         30s);
    REQUIRE(submitted.code == 0);
    std::string job = submitted.out.substr(0, submitted.out.find_first_of(";\n"));
    REQUIRE(tasks_running(marker, 3, 30s));
    CHECK(run({"/usr/bin/scancel", job}, 30s).code == 0);
    CHECK(none_left(marker, 30s));
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (has(run({"/usr/bin/squeue", "-h", "-j", job}, 10s).out, job) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(100ms);
    CHECK_FALSE(has(run({"/usr/bin/squeue", "-h", "-j", job}, 10s).out, job));
  }
}
