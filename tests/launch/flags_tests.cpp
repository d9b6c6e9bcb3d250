// The launcher's command line.
#include <doctest/doctest.h>

#include <tlaunch/launch/registry.hpp>
#include <tlaunch/launch/node_env.hpp>
#include <algorithm>
#include <vector>

namespace {
tlaunch::launch::options parse(std::vector<const char*> a) {
  a.insert(a.begin(), "prog");
  return tlaunch::launch::parse(static_cast<int>(a.size()), a.data());
}
}  // namespace

TEST_SUITE("flags") {
  TEST_CASE("both flag forms, replicas, placement and program arguments") {
    auto o = parse({"--launch=local_mp", "--replicas", "worker=8,ps=2", "--grace=1.5",
                    "--place", "worker=h2,h3", "--hosts=h1,root@h2:2222", "--", "--count", "5"});
    CHECK(o.launch == "local_mp");
    CHECK(o.replicas.at("worker") == 8);
    CHECK(o.replicas.at("ps") == 2);
    CHECK(o.grace.count() == 1500);
    CHECK(o.place.at("worker") == std::vector<std::string>{"h2", "h3"});
    CHECK(o.hosts == std::vector<std::string>{"h1", "root@h2:2222"});
    CHECK(o.user_args == std::vector<std::string>{"--count", "5"});
    // What node processes must see to build the same graph.
    CHECK(o.passthrough == std::vector<std::string>{"--replicas=worker=8,ps=2", "--grace=1.5",
                                                    "--", "--count", "5"});
  }

  TEST_CASE("--busy-poll takes microseconds and reaches node processes") {
    auto o = parse({"--busy-poll=250"});
    CHECK(o.busy_poll == std::chrono::microseconds(250));
    CHECK(o.passthrough == std::vector<std::string>{"--busy-poll=250"});
    CHECK(parse({}).busy_poll == std::chrono::microseconds(0));
    CHECK_THROWS_WITH(parse({"--busy-poll=soon"}), doctest::Contains("--busy-poll: 'soon'"));
    CHECK_THROWS_WITH(parse({"--busy-poll=2000000"}), doctest::Contains("--busy-poll"));
  }

  TEST_CASE("bad input names the flag") {
    CHECK_THROWS_WITH(parse({"--lanch=ssh"}), doctest::Contains("unknown flag '--lanch'"));
    CHECK_THROWS_WITH(parse({"--launch=cloud"}), doctest::Contains("'cloud' is not one of"));
    CHECK_THROWS_WITH(parse({"--replicas", "worker"}), doctest::Contains("NAME=N"));
    CHECK_THROWS_WITH(parse({"--replicas=worker=-1"}), doctest::Contains("--replicas"));
    CHECK_THROWS_WITH(parse({"--grace=soon"}), doctest::Contains("--grace"));
    CHECK_THROWS_WITH(parse({"--threads"}), doctest::Contains("--threads needs a value"));
    CHECK_THROWS_WITH(parse({"stray"}), doctest::Contains("after `--`"));
    CHECK_THROWS_WITH(parse({"--force-wire=yes"}), doctest::Contains("takes no value"));
  }

  TEST_CASE("--handshake-timeout and --max-unauthenticated reach node processes") {
    auto o = parse({"--handshake-timeout=2.5", "--max-unauthenticated", "40"});
    CHECK(o.handshake_timeout == std::chrono::milliseconds(2500));
    CHECK(o.max_unauthenticated == 40);
    CHECK(o.passthrough ==
          std::vector<std::string>{"--handshake-timeout=2.5", "--max-unauthenticated=40"});
    CHECK(parse({}).handshake_timeout == std::chrono::milliseconds(5000));
    CHECK(parse({}).max_unauthenticated == 256);
    CHECK_THROWS_WITH(parse({"--handshake-timeout=soon"}), doctest::Contains("--handshake-timeout"));
    CHECK_THROWS_WITH(parse({"--max-unauthenticated=0"}), doctest::Contains("at least 1"));
  }

  TEST_CASE("--heartbeat is off by default and reaches node processes") {
    auto o = parse({"--heartbeat=0.5"});
    CHECK(o.heartbeat == std::chrono::milliseconds(500));
    CHECK(o.passthrough == std::vector<std::string>{"--heartbeat=0.5"});
    CHECK(parse({}).heartbeat == std::chrono::milliseconds(0));
    CHECK_THROWS_WITH(parse({"--heartbeat=-1"}), doctest::Contains("--heartbeat"));
  }

  TEST_CASE("usage lists every flag") {
    auto u = tlaunch::launch::usage("prog");
    for (const char* f : {"--launch", "--replicas", "--threads", "--busy-poll", "--grace", "--log-dir", "--color",
                          "--force-wire", "--max-frame", "--hosts", "--hostfile", "--place",
                          "--ssh-identity", "--ssh-accept-new", "--known-hosts",
                          "--coordinator-host", "--start-timeout", "--handshake-timeout",
                          "--max-unauthenticated", "--heartbeat", "--terminal=tmux",
                          "--terminal-close", "--ssh-terminal", "--help"})
      CHECK_MESSAGE(u.find(f) != std::string::npos, f);
  }

  TEST_CASE("--terminal=tmux, its close flag and the deprecated --ssh-terminal=tmux") {
    auto o = parse({"--launch=local_mp", "--terminal=tmux", "--terminal-close"});
    CHECK(o.terminal == "tmux");
    CHECK(o.terminal_close);
    CHECK(parse({"--launch=ssh", "--ssh-terminal=tmux"}).terminal == "tmux");
    CHECK(parse({"--launch=local_mp"}).terminal.empty());
    // Not a node process's flag: they never see it.
    CHECK(o.passthrough.empty());
    CHECK_THROWS_WITH(parse({"--terminal=tmux"}), doctest::Contains("--launch=local_mt runs every node"));
    CHECK_THROWS_WITH(parse({"--launch=ssh", "--ssh-terminal=screen"}),
                      doctest::Contains("'screen' is not tmux"));
    CHECK_THROWS_WITH(parse({"--launch=local_mp", "--terminal-close"}),
                      doctest::Contains("no --terminal=tmux session"));
  }
}

// A launcher of the test's own, registered beside the real ones the way
// launch/registry.hpp registers them: one type and one entry in a launcher_list.
namespace {
struct echo_launcher {
  static constexpr std::string_view name = "echo";
  static constexpr std::string_view summary = "prints the instances it would start";
  static constexpr std::string_view usage = "  --echo-prefix=TEXT       put TEXT before each line\n";
  static bool parse_flag(tlaunch::launch::options& o, const std::string& flag,
                         const tlaunch::launch::flag_reader& r) {
    if (flag != "--echo-prefix") return false;
    o.launcher_flags[flag] = r.value();
    return true;
  }
  // The plan is resolved before the launcher runs: its nodes have --replicas applied.
  static int run(const tlaunch::launch::launch_plan& plan, tlaunch::launch::output_printer&) {
    ran_with = plan.opt.launcher_flags.at("--echo-prefix");
    for (const auto& n : plan.nodes) instances += n.replicas;
    return 7;
  }
  static inline std::string ran_with;
  static inline std::uint32_t instances = 0;
};
static_assert(tlaunch::launch::launcher<echo_launcher>);

struct Svc {
  int f() const { return 1; }
  using rpc = tlaunch::methods<&Svc::f>;
};
constexpr auto small_program =
    tlaunch::program(tlaunch::node<"a", Svc>(), tlaunch::node<"b", Svc>().replicas(3));

using with_echo = tlaunch::launch::launcher_list<tlaunch::launch::local_mt_launcher,
                                                 tlaunch::launch::local_mp_launcher,
                                                 tlaunch::launch::ssh_launcher, echo_launcher>;
}  // namespace

TEST_SUITE("registry") {
  TEST_CASE("a launcher's traits: --terminal, --metrics, --dashboard and --trace need its node processes") {
    // local_mt and k8s say why they have none; the message is theirs.
    for (const char* flag : {"--terminal=tmux", "--metrics=127.0.0.1:0", "--dashboard=127.0.0.1:0",
                             "--trace=t.json"}) {
      CAPTURE(flag);
      CHECK_THROWS_WITH_AS(parse({"--launch=local_mt", flag}),
                           doctest::Contains("--launch=local_mt runs every node in this one "
                                             "process, so there are no node processes whose"),
                           tlaunch::launch::usage_error);
      CHECK_THROWS_WITH_AS(parse({"--launch=k8s", "--k8s-image=i", flag}),
                           doctest::Contains("--launch=k8s starts nothing on this machine"),
                           tlaunch::launch::usage_error);
      for (const char* launch : {"--launch=local_mp", "--launch=ssh", "--launch=slurm"})
        CHECK_NOTHROW(parse({launch, flag}));
    }
    CHECK_THROWS_WITH(parse({"--launch=local_mt", "--trace=t.json"}),
                      doctest::Contains("whose calls the launcher could gather"));
    CHECK_THROWS_WITH(parse({"--launch=local_mt", "--metrics=127.0.0.1:0"}),
                      doctest::Contains("whose counts the launcher could gather"));
    // From the launchers' types; a launcher without the traits has node processes and no forker.
    const auto table = tlaunch::launch::registered_launchers::table();
    CHECK(table.find("local_mp")->forks_nodes);
    for (const char* l : {"local_mt", "ssh", "slurm", "k8s"}) CHECK_FALSE(table.find(l)->forks_nodes);
    CHECK(table.find("ssh")->no_node_processes.empty());
    CHECK(table.find("nowhere") == nullptr);
    const auto echo = with_echo::table();
    CHECK(echo.find("echo")->no_node_processes.empty());
    CHECK_FALSE(echo.find("echo")->forks_nodes);
  }

  TEST_CASE("--launch values, --help and the error for an unknown one come from the registry") {
    auto u = tlaunch::launch::usage("prog");
    for (const char* l : {"local_mt: every node", "local_mp: one process per node", "ssh: nodes on",
                          "slurm: nodes as the tasks of one srun step",
                          "k8s: writes Kubernetes manifests", "--k8s-image=IMAGE"})
      CHECK_MESSAGE(u.find(l) != std::string::npos, l);
    CHECK_THROWS_WITH_AS(parse({"--launch=cloud"}),
                         "--launch: 'cloud' is not one of local_mt, local_mp, ssh, slurm, k8s",
                         tlaunch::launch::usage_error);
    // usage_error is a tlaunch::error.
    CHECK_THROWS_AS(parse({"--launch=cloud"}), tlaunch::error);
  }

  TEST_CASE("--env NAME:KEY=VALUE: per node, in order, passed to node processes, {index} templated") {
    auto o = parse({"--launch=local_mp", "--env", "learner:CUDA_VISIBLE_DEVICES={index}",
                    "--env=learner:MODE=a=b:c", "--env", "actor:X="});
    using var = std::pair<std::string, std::string>;
    CHECK(o.env.at("learner") ==
          std::vector<var>{{"CUDA_VISIBLE_DEVICES", "{index}"}, {"MODE", "a=b:c"}});
    CHECK(o.env.at("actor") == std::vector<var>{{"X", ""}});
    CHECK(std::find(o.passthrough.begin(), o.passthrough.end(), "--env=learner:MODE=a=b:c") !=
          o.passthrough.end());
    for (const char* bad : {"learner", ":K=V", "learner:=V", "learner:K"})
      CHECK_THROWS_WITH_AS(parse({"--env", bad}), doctest::Contains("is not NAME:KEY=VALUE"),
                           tlaunch::launch::usage_error);
    CHECK(tlaunch::launch::node_env_value("gpu{index},{index}x", 3) == "gpu3,3x");
    CHECK(tlaunch::launch::node_env_value("plain", 3) == "plain");
  }

  TEST_CASE("--restart NAME=N overrides a node's restart count; an unknown node is named") {
    using namespace std::chrono_literals;
    constexpr auto p = tlaunch::program(
        tlaunch::node<"a", Svc>().restart({.max_restarts = 3, .window = 10s, .backoff = 50ms}),
        tlaunch::node<"b", Svc>().replicas(2));
    auto o = parse({"--launch=local_mp", "--restart", "a=5,b=1", "--restart=b=2"});
    CHECK(o.restart.at("a") == 5);
    CHECK(o.restart.at("b") == 2);  // the later one wins
    CHECK(o.passthrough.empty());   // node processes never restart anything
    auto nodes = tlaunch::detail::describe(p, o.replicas);
    CHECK(nodes[0].restart.max_restarts == 3);  // the program's policy
    CHECK(nodes[0].restart.window == 10s);
    CHECK(nodes[1].restart.max_restarts == 0);  // default: no restart
    tlaunch::launch::apply_restart_flags(nodes, o);
    CHECK(nodes[0].restart.max_restarts == 5);
    CHECK(nodes[0].restart.window == 10s);  // the flag changes the count only
    CHECK(nodes[0].restart.backoff == 50ms);
    CHECK(nodes[1].restart.max_restarts == 2);
    CHECK(nodes[1].restart.window == 60s);
    CHECK_THROWS_WITH_AS(
        tlaunch::launch::apply_restart_flags(nodes, parse({"--restart=c=1"})),
        "--restart names node 'c', which is not in the program (nodes: a, b)",
        tlaunch::launch_error);
    for (const char* bad : {"a", "=1", "a=-1", "a=x"})
      CHECK_THROWS_WITH_AS(parse({"--restart", bad}), doctest::Contains("--restart"),
                           tlaunch::launch::usage_error);
    CHECK(tlaunch::launch::usage("prog").find("--restart NAME=N") != std::string::npos);
  }

  TEST_CASE("slurm's --srun-arg is repeatable and keeps each option whole") {
    auto o = parse({"--launch=slurm", "--srun-arg=--cpus-per-task=2", "--srun-arg=--mem=0"});
    CHECK(o.slurm.srun_args == std::vector<std::string>{"--cpus-per-task=2", "--mem=0"});
    CHECK_THROWS_WITH(parse({"--srun-arg"}), doctest::Contains("--srun-arg needs a value"));
  }

  TEST_CASE("a launcher's own flags are parsed by it; others reject them") {
    auto o = parse({"--launch=ssh", "--ssh-parallel=3", "--ssh-accept-new", "--known-hosts", "kh"});
    CHECK(o.ssh.parallel == 3);
    CHECK(o.ssh.accept_new);
    CHECK(o.ssh.known_hosts == "kh");
    CHECK_THROWS_WITH(parse({"--ssh-parallel=0"}), doctest::Contains("--ssh-parallel: must be at least 1"));
    CHECK_THROWS_WITH(parse({"--ssh-accept-new=yes"}), doctest::Contains("takes no value"));
    o = parse({"--launch=ssh", "--ssh-cache-dir=/scratch/tl", "--ssh-cache-keep", "0"});
    CHECK(o.ssh.cache_dir == "/scratch/tl");
    CHECK(o.ssh.cache_keep == 0u);
    CHECK_THROWS_WITH(parse({"--ssh-cache-keep=few"}), doctest::Contains("--ssh-cache-keep"));
    CHECK_THROWS_WITH(parse({"--ssh-cache-dir="}), doctest::Contains("--ssh-cache-dir: empty"));
    CHECK_THROWS_WITH(parse({"--echo-prefix=x"}), doctest::Contains("unknown flag '--echo-prefix'"));
  }

  TEST_CASE("adding a launcher: one type, one list entry; flags, help and dispatch follow") {
    auto table = with_echo::table();
    std::vector<const char*> a{"prog", "--launch=echo", "--echo-prefix", ">>", "--replicas=b=2"};
    auto o = tlaunch::launch::parse(static_cast<int>(a.size()), a.data(), table);
    CHECK(o.launch == "echo");
    auto u = tlaunch::launch::usage("prog", table);
    CHECK(u.find("echo: prints the instances") != std::string::npos);
    CHECK(u.find("--echo-prefix=TEXT") != std::string::npos);
    tlaunch::launch::output_printer out(tlaunch::launch::color_mode::never, "");
    CHECK(with_echo::run(tlaunch::launch::plan_launch(small_program, o), out) == 7);
    CHECK(echo_launcher::ran_with == ">>");
    CHECK(echo_launcher::instances == 3);
  }
}
