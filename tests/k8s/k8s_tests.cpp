// --launch=k8s (launch/cluster/k8s.hpp) and what it shares with the other launchers: per-node
// environment and resource hints (launch/node_env.hpp). hello_world's manifests are parsed
// as YAML (python3-yaml) and checked for their shape; then its pods run for real on this
// machine, each started as Kubernetes would start it: the container's command and args,
// JOB_COMPLETION_INDEX, the Secret as a 0400 file at the mounted path (under a directory
// standing for the container's root) and the coordinator's name mapped to 127.0.0.1.
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "../common/temp_dir.hpp"
#include "../common/process.hpp"
#include <tlaunch/launch/cluster/k8s.hpp>
#include <tlaunch/launch/local_mt.hpp>
#include <tlaunch/launch/cluster/slurm.hpp>

namespace {

using namespace tlaunch::integration;
using tlaunch::launch::options;

struct Echo {
  int get() const { return 1; }
  using rpc = tlaunch::methods<&Echo::get>;
};

constexpr auto env_program =
    tlaunch::program(tlaunch::node<"learner", Echo>()
                         .replicas(2)
                         .env("CUDA_VISIBLE_DEVICES", "{index}")
                         .env("MODE", "train")
                         .resources({.cpus = 2, .gpus = 1, .memory_mb = 4096}),
                     tlaunch::node<"actor", Echo>().replicas(3).resources({.cpus = 1}));

bool has(const std::string& s, std::string_view what) { return s.find(what) != std::string::npos; }

// Checks the manifests' shape (raises on the first thing wrong) and prints what a pod gets,
// one "key<TAB>value" a line, then "ok".
constexpr const char* shape_check = R"PY(
import sys, yaml
docs = []
for path in sys.argv[1:]:
    with open(path) as f:
        docs += [d for d in yaml.safe_load_all(f) if d is not None]
by = {d["kind"]: d for d in docs}
assert {"Job", "Service", "Secret"} <= set(by), sorted(by)
job, svc, sec = by["Job"], by["Service"], by["Secret"]
ns = job["metadata"]["namespace"]
assert all(d["metadata"]["namespace"] == ns for d in docs)
assert job["apiVersion"] == "batch/v1" and svc["apiVersion"] == "v1" and sec["apiVersion"] == "v1"
js = job["spec"]
assert js["completionMode"] == "Indexed"
assert js["completions"] == js["parallelism"]
assert js["backoffLimit"] == 0
tmpl = js["template"]
pod = tmpl["spec"]
assert pod["restartPolicy"] == "Never"
assert pod["subdomain"] == svc["metadata"]["name"]
assert svc["spec"]["clusterIP"] == "None"
assert svc["spec"]["publishNotReadyAddresses"] is True
assert svc["spec"]["selector"].items() <= tmpl["metadata"]["labels"].items()
(c,) = pod["containers"]
vols = {v["name"]: v for v in pod["volumes"]}
(m,) = c["volumeMounts"]
assert m["readOnly"] is True
sv = vols[m["name"]]["secret"]
assert sv["secretName"] == sec["metadata"]["name"]
assert sv["defaultMode"] == 0o400
env = {e["name"]: e["value"] for e in c["env"]}
assert env["TLAUNCH_SECRET_FILE"].startswith(m["mountPath"] + "/")
key = env["TLAUNCH_SECRET_FILE"][len(m["mountPath"]) + 1:]
assert len(sec["stringData"][key]) == 64
assert "--tlaunch-role=k8s" in c["args"]
(coord,) = [a.split("=", 1)[1] for a in c["args"] if a.startswith("--tlaunch-coordinator=")]
host, port = coord.rsplit(":", 1)
assert host == "%s-%d.%s" % (job["metadata"]["name"], js["completions"] - 1, svc["metadata"]["name"])
assert int(port) == svc["spec"]["ports"][0]["port"] == c["ports"][0]["containerPort"]
if "PodGroup" in by:
    pg = by["PodGroup"]
    assert pg["spec"]["minMember"] == js["completions"]
    assert pod["schedulerName"] == "volcano"
    assert tmpl["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == pg["metadata"]["name"]
print("kinds\t" + ",".join(sorted(by)))
print("completions\t%d" % js["completions"])
print("image\t" + c["image"])
for a in c["command"]: print("command\t" + a)
for a in c["args"]: print("arg\t" + a)
for k, v in env.items(): print("env\t%s=%s" % (k, v))
print("secret_file\t" + env["TLAUNCH_SECRET_FILE"])
print("secret\t" + sec["stringData"][key])
print("coordinator_host\t" + host)
print("ok")
)PY";

// The shape check's lines, key -> values in order; fails the test when it raised.
std::multimap<std::string, std::string> check_shape(const std::filesystem::path& dir,
                                                    const std::vector<std::string>& files) {
  auto script = dir / "shape_check.py";
  std::ofstream(script) << shape_check;
  std::vector<std::string> argv = {"/usr/bin/python3", script.string()};
  argv.insert(argv.end(), files.begin(), files.end());
  auto r = run(argv, 30s);
  INFO(r.all);
  REQUIRE(r.code == 0);
  std::multimap<std::string, std::string> facts;
  std::istringstream in(r.out);
  std::string line;
  bool ok = false;
  while (std::getline(in, line)) {
    auto tab = line.find('\t');
    if (tab != std::string::npos) facts.emplace(line.substr(0, tab), line.substr(tab + 1));
    ok = ok || line == "ok";
  }
  REQUIRE(ok);
  return facts;
}

std::vector<std::string> all_of(const std::multimap<std::string, std::string>& f,
                                const std::string& key) {
  std::vector<std::string> out;
  for (auto [it, end] = f.equal_range(key); it != end; ++it) out.push_back(it->second);
  return out;
}
std::string one_of(const std::multimap<std::string, std::string>& f, const std::string& key) {
  auto v = all_of(f, key);
  REQUIRE(v.size() == 1);
  return v[0];
}

// A port free on 127.0.0.1 a moment ago.
std::uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Writes the manifests of `program` (argv[0] and its flags) and runs every pod of its Job
// on this machine, each as Kubernetes starts it (see the top of this file); returns how each
// ended, in completion index order, once all have. With `only`, just those indices start
// (the others stand for pods the cluster could not place).
std::vector<finished> run_as_pods(std::vector<std::string> program, std::vector<int> only = {}) {
  tlaunch::test_support::temp_dir dir("tlaunch-k8s");
  auto files = dir.path / "manifests";
  auto gen_argv = program;
  for (auto flag : {std::string("--launch=k8s"), std::string("--k8s-image=app:1"),
                    fmt::format("--k8s-out={}", files.string()),
                    fmt::format("--k8s-port={}", free_port())})
    gen_argv.insert(gen_argv.begin() + 1, flag);
  auto gen = run(gen_argv);
  INFO(gen.all);
  REQUIRE(gen.code == 0);
  auto f = check_shape(dir.path, {(files / "job.yaml").string(), (files / "service.yaml").string(),
                                  (files / "secret.yaml").string()});
  std::vector<std::string> argv = all_of(f, "command");
  REQUIRE(argv.size() == 1);
  CHECK(argv[0] == program[0]);
  for (auto& a : all_of(f, "arg")) argv.push_back(a);

  // The Secret's volume, with the container's root at dir/root.
  auto secret = dir.path / "root" / one_of(f, "secret_file").substr(1);
  std::filesystem::create_directories(secret.parent_path());
  std::ofstream(secret) << one_of(f, "secret");
  std::filesystem::permissions(secret, std::filesystem::perms::owner_read);
  for (auto& e : all_of(f, "env"))
    REQUIRE(e.substr(0, e.find('=')) == "TLAUNCH_SECRET_FILE");  // the pods' only variable
  ::setenv("TLAUNCH_SECRET_FILE", secret.c_str(), 1);
  ::setenv("TLAUNCH_K8S_HOSTS", (one_of(f, "coordinator_host") + "=127.0.0.1").c_str(), 1);

  // In index order: the node pods wait for the coordinator, which starts last.
  std::vector<std::unique_ptr<process>> procs;
  int pods = std::stoi(one_of(f, "completions"));
  for (int i = 0; i < pods; ++i) {
    if (!only.empty() && std::find(only.begin(), only.end(), i) == only.end()) continue;
    ::setenv("JOB_COMPLETION_INDEX", std::to_string(i).c_str(), 1);
    procs.push_back(std::make_unique<process>(argv));
  }
  for (const char* k : {"TLAUNCH_SECRET_FILE", "TLAUNCH_K8S_HOSTS", "JOB_COMPLETION_INDEX"})
    ::unsetenv(k);
  std::vector<finished> out;
  for (auto& p : procs) {
    int code = p->wait_or_kill(60s);
    out.push_back({code, p->out(), p->err(), p->all(), p->timed_out()});
  }
  return out;
}

// Checks the two Jobs of a program whose nodes have a restart policy, argv: the main Job's
// name, the restart Job's expected backoffLimit, the files (raises on the first thing
// wrong), and prints the restart Job's args, one "arg<TAB>value" a line, then "ok".
constexpr const char* restart_check = R"PY(
import sys, yaml
jobs = {}
for path in sys.argv[3:]:
    with open(path) as f:
        for d in yaml.safe_load_all(f):
            if d and d["kind"] == "Job":
                jobs[d["metadata"]["name"]] = d
name = sys.argv[1]
main, rest = jobs[name], jobs[name + "-restart"]
ms, rs = main["spec"], rest["spec"]
assert ms["template"]["spec"]["restartPolicy"] == "Never" and ms["backoffLimit"] == 0
assert rs["template"]["spec"]["restartPolicy"] == "OnFailure", rs["template"]["spec"]
assert rs["backoffLimit"] == int(sys.argv[2]), rs
assert rs["completionMode"] == "Indexed" and rs["completions"] == rs["parallelism"]
assert rs["template"]["spec"]["subdomain"] == ms["template"]["spec"]["subdomain"]
assert rs["template"]["metadata"]["labels"] == ms["template"]["metadata"]["labels"]
(mc,) = ms["template"]["spec"]["containers"]
(rc,) = rs["template"]["spec"]["containers"]
assert mc["command"] == rc["command"] and mc["env"] == rc["env"]
assert "--tlaunch-role=k8s" in mc["args"] and "--tlaunch-role=k8s-restart" in rc["args"]
print("completions\t%d" % rs["completions"])
for a in rc["args"]: print("arg\t" + a)
print("ok")
)PY";

}  // namespace

TEST_SUITE("k8s") {
  TEST_CASE("node<...>().env() and .resources() reach the launchers' view of the program") {
    auto nodes = tlaunch::detail::describe(env_program, {});
    REQUIRE(nodes.size() == 2);
    REQUIRE(nodes[0].env.size() == 2);
    CHECK(nodes[0].env[0].first == "CUDA_VISIBLE_DEVICES");
    CHECK(nodes[0].env[0].second == "{index}");
    CHECK(nodes[0].resources == tlaunch::node_resources{.cpus = 2, .gpus = 1, .memory_mb = 4096});
    CHECK(nodes[1].env.empty());
    CHECK(nodes[1].resources.cpus == 1);
    CHECK_FALSE(tlaunch::node_resources{}.any());
  }

  TEST_CASE("per-node environment: --env wins over .env(), \"{index}\" becomes the replica's") {
    auto nodes = tlaunch::detail::describe(env_program, {});
    options o;
    o.env["learner"] = {{"MODE", "eval"}, {"SHARD", "s{index}of2"}};
    auto vars = tlaunch::launch::node_env_vars(nodes[0], o);
    using kv = std::pair<std::string, std::string>;
    CHECK(vars == std::vector<kv>{{"CUDA_VISIBLE_DEVICES", "{index}"},
                                  {"MODE", "eval"},
                                  {"SHARD", "s{index}of2"}});
    CHECK(tlaunch::launch::node_env_vars(nodes[1], o).empty());
    // What a node process does first thing, for learner/1.
    tlaunch::launch::apply_node_env(nodes[0], o, 1);
    CHECK(std::string(std::getenv("CUDA_VISIBLE_DEVICES")) == "1");
    CHECK(std::string(std::getenv("MODE")) == "eval");
    CHECK(std::string(std::getenv("SHARD")) == "s1of2");
    for (const char* k : {"CUDA_VISIBLE_DEVICES", "MODE", "SHARD"}) ::unsetenv(k);
  }

  TEST_CASE("local_mt names in one line what does not apply in one process") {
    auto nodes = tlaunch::detail::describe(env_program, {});
    CHECK(tlaunch::launch::one_process_warning(nodes, options{}) ==
          "--launch=local_mt runs every node in this one process and does not apply the "
          "environment of 'learner' (every node shares this process's); the resource hints of "
          "'learner' (2 cpus, 1 gpus, 4096 MB) and 'actor' (1 cpus)");
    options o;
    o.env["actor"] = {{"MODE", "x"}};
    nodes[1].restart.max_restarts = 2;
    nodes[0].resources = nodes[1].resources = {};
    CHECK(tlaunch::launch::one_process_warning(nodes, o) ==
          "--launch=local_mt runs every node in this one process and does not apply the "
          "environment of 'learner' and 'actor' (every node shares this process's); the restart "
          "policy of 'actor' (a failure stops the program)");
    nodes[0].env.clear();
    CHECK(tlaunch::launch::one_process_warning(nodes, options{}) ==
          "--launch=local_mt runs every node in this one process and does not apply the restart "
          "policy of 'actor' (a failure stops the program)");
    nodes[1].restart.max_restarts = 0;
    CHECK(tlaunch::launch::one_process_warning(nodes, options{}).empty());
  }

  TEST_CASE("resource hints: srun takes the largest, with a warning; local_mp and ssh warn") {
    auto nodes = tlaunch::detail::describe(env_program, {});
    CHECK(
        tlaunch::launch::detail::srun_resource_args(nodes) ==
        std::vector<std::string>{"--cpus-per-task=2", "--gpus-per-task=1", "--mem-per-cpu=2048M"});
    CHECK(tlaunch::launch::largest_resources_warning(nodes, "slurm") ==
          "--launch=slurm gives every instance the same resources, the largest hint of any "
          "node: 2 cpus, 1 gpus, 4096 MB");
    CHECK(tlaunch::launch::ignored_resources_warning(nodes, "local_mp") ==
          "--launch=local_mp ignores the resource hints of learner (2 cpus, 1 gpus, 4096 MB), "
          "actor (1 cpus)");
    auto plain = nodes;
    for (auto& n : plain) n.resources = {};
    // Without hints, the step is as before: tasks may share CPUs.
    CHECK(tlaunch::launch::detail::srun_resource_args(plain) ==
          std::vector<std::string>{"--overcommit"});
    CHECK(tlaunch::launch::ignored_resources_warning(plain, "ssh").empty());
    plain[0].resources.memory_mb = 1000;
    CHECK(tlaunch::launch::detail::srun_resource_args(plain) ==
          std::vector<std::string>{"--overcommit", "--mem-per-cpu=1000M"});
  }

  TEST_CASE("the pod template carries the environment as --env flags and the largest resources") {
    auto nodes = tlaunch::detail::describe(env_program, {});
    options o;
    o.passthrough = {"--grace=2", "--env=actor:SEED=7", "--", "--steps", "3"};
    o.env["actor"] = {{"SEED", "7"}};
    tlaunch::launch::k8s_flags k;
    k.image = "registry.example/app:1";
    k.name = "app";
    k.binary = "/app/bin";
    k.volcano = true;
    auto args = tlaunch::launch::k8s_pod_args(nodes, 5, o, k);
    CHECK(args == std::vector<std::string>{
                      "--tlaunch-role=k8s", "--tlaunch-watch", "--tlaunch-coordinator=app-5.app:7070",
                      "--start-timeout=60", "--grace=2",
                      "--env=learner:CUDA_VISIBLE_DEVICES={index}", "--env=learner:MODE=train",
                      "--env=actor:SEED=7", "--", "--steps", "3"});
    auto ms = tlaunch::launch::k8s_manifests(nodes, {}, o, k, "00ff");
    std::map<std::string, std::string> by;
    for (auto& m : ms) by[m.file] = m.text;
    REQUIRE(by.size() == 4);
    CHECK(has(by["job.yaml"], "completions: 6\n"));
    CHECK(has(by["job.yaml"],
              "          requests:\n            cpu: \"2\"\n            memory: "
              "\"4096Mi\"\n            nvidia.com/gpu: \"1\"\n          limits:\n"));
    CHECK(has(by["job.yaml"], "schedulerName: volcano"));
    CHECK(has(by["podgroup.yaml"], "minMember: 6\n"));
    CHECK(has(by["secret.yaml"], "secret: \"00ff\""));
    // A group is one pod: one fewer, the coordinator's index one lower, and the pods get
    // --colocate to map their indices as the manifests did.
    o.colocate = {"learner/1,actor/0"};
    auto grouped = tlaunch::launch::k8s_manifests(
        nodes, tlaunch::launch::colocation_groups(nodes, {}, o), o, k, "00ff");
    for (auto& m : grouped) by[m.file] = m.text;
    CHECK(has(by["job.yaml"], "completions: 5\n"));
    CHECK(has(by["job.yaml"], "app-4.app:7070"));
    CHECK(has(by["job.yaml"], "--colocate=learner/1,actor/0"));
    CHECK(has(by["podgroup.yaml"], "minMember: 5\n"));
  }

  TEST_CASE("a pod's role is its completion index, as a Slurm task's is its rank") {
    auto nodes = tlaunch::detail::describe(env_program, {});
    tlaunch::test_support::temp_dir dir("tlaunch-k8s");
    auto file = dir.path / "secret";
    std::ofstream(file) << "0a0b\n";
    options o;
    o.coordinator = "app-5.app:7070";
    ::setenv("TLAUNCH_SECRET_FILE", file.c_str(), 1);
    ::setenv("TLAUNCH_K8S_HOSTS", "other=10.0.0.1,app-5.app=127.0.0.1", 1);
    ::setenv("JOB_COMPLETION_INDEX", "3", 1);
    auto r = tlaunch::launch::k8s_pod_role_of(nodes, {}, o);
    CHECK_FALSE(r.coordinator);
    CHECK(r.role == "actor/1");
    CHECK(r.coordinator_address == "127.0.0.1:7070");
    CHECK(r.secret == std::vector<std::uint8_t>{0x0a, 0x0b});
    ::setenv("JOB_COMPLETION_INDEX", "5", 1);
    CHECK(tlaunch::launch::k8s_pod_role_of(nodes, {}, o).coordinator);
    ::setenv("JOB_COMPLETION_INDEX", "6", 1);
    CHECK_THROWS_WITH_AS(tlaunch::launch::k8s_pod_role_of(nodes, {}, o),
                         doctest::Contains("JOB_COMPLETION_INDEX=6 names no node process"),
                         tlaunch::launch_error);
    // With groups {learner/1, actor/0} and {actor/1, actor/2}: four processes, in order of
    // their first members; the coordinator is index 3.
    options g;
    g.colocate = {"learner/1,actor/0", "actor/1,actor/2"};
    auto groups = tlaunch::launch::colocation_groups(nodes, {}, g);
    std::vector<std::string> roles;
    for (const char* i : {"0", "1", "2"}) {
      ::setenv("JOB_COMPLETION_INDEX", i, 1);
      roles.push_back(tlaunch::launch::k8s_pod_role_of(nodes, groups, o).role);
    }
    CHECK(roles == std::vector<std::string>{"learner/0", "learner/1,actor/0", "actor/1,actor/2"});
    ::setenv("JOB_COMPLETION_INDEX", "3", 1);
    CHECK(tlaunch::launch::k8s_pod_role_of(nodes, groups, o).coordinator);
    ::setenv("JOB_COMPLETION_INDEX", "4", 1);
    CHECK_THROWS_AS(tlaunch::launch::k8s_pod_role_of(nodes, groups, o), tlaunch::launch_error);
    for (const char* k : {"TLAUNCH_SECRET_FILE", "TLAUNCH_K8S_HOSTS", "JOB_COMPLETION_INDEX"})
      ::unsetenv(k);
  }

  TEST_CASE("hello_world's manifests are YAML of the expected shape, on stdout and in files") {
    tlaunch::test_support::temp_dir dir("tlaunch-k8s");
    auto out = run({TLAUNCH_HELLO_WORLD_EXE, "--launch=k8s", "--k8s-image=registry.example/hello:1",
                    "--k8s-namespace=team-a", "--k8s-volcano"});
    INFO(out.all);
    REQUIRE(out.code == 0);
    std::ofstream(dir.path / "all.yaml") << out.out;
    auto f = check_shape(dir.path, {(dir.path / "all.yaml").string()});
    CHECK(one_of(f, "kinds") == "Job,PodGroup,Secret,Service");
    CHECK(one_of(f, "completions") == "6");  // counter, 4 producers, the coordinator
    CHECK(one_of(f, "coordinator_host") == "tlaunch-hello-world-5.tlaunch-hello-world");

    auto files = dir.path / "manifests";
    auto written = run({TLAUNCH_HELLO_WORLD_EXE, "--launch=k8s", "--k8s-image=hello:1",
                        fmt::format("--k8s-out={}", files.string()), "--replicas", "producer=2"});
    INFO(written.all);
    REQUIRE(written.code == 0);
    CHECK(has(written.err, fmt::format("kubectl apply -f {}", files.string())));
    std::vector<std::string> paths;
    for (auto name : {"job.yaml", "service.yaml", "secret.yaml"}) {
      paths.push_back((files / name).string());
      struct stat st {};
      REQUIRE(::stat(paths.back().c_str(), &st) == 0);
      CHECK((st.st_mode & 0777) == 0600);
    }
    CHECK_FALSE(std::filesystem::exists(files / "podgroup.yaml"));
    auto g = check_shape(dir.path, paths);
    CHECK(one_of(g, "completions") == "4");
    // Two launches, two secrets.
    CHECK(one_of(g, "secret") != one_of(f, "secret"));
    auto bad = run({TLAUNCH_HELLO_WORLD_EXE, "--launch=k8s"});
    CHECK(bad.code == 2);
    CHECK(has(bad.err, "--launch=k8s needs --k8s-image=IMAGE"));
  }

  TEST_CASE("hello_world's pods, started as Kubernetes starts them, run the program to its end") {
    auto pods = run_as_pods({TLAUNCH_HELLO_WORLD_EXE});
    REQUIRE(pods.size() == 6);  // counter, 4 producers, the coordinator
    for (std::size_t i = 0; i < pods.size(); ++i) {
      INFO("pod ", i, ": ", pods[i].all);
      CHECK(pods[i].code == 0);
      if (i >= 1 && i <= 4) CHECK(has(pods[i].out, "added 100, total now"));
    }
    // The coordinator saw every node register and the program end well.
    CHECK(has(pods[5].all, "the program ended with exit code 0 (5 node pods"));
    CHECK_FALSE(has(pods[5].all, "failed"));
  }

  TEST_CASE("under --tls the coordinator pod's keys come from the launch's Secret") {
    // The coordinator takes the secret from the Secret after it is made: its TLS keys
    // must be derived from that one, as every node pod's are.
    auto pods = run_as_pods({TLAUNCH_HELLO_WORLD_EXE, "--tls"});
    REQUIRE(pods.size() == 6);
    for (std::size_t i = 0; i < pods.size(); ++i) {
      INFO("pod ", i, ": ", pods[i].all);
      CHECK(pods[i].code == 0);
    }
    CHECK(has(pods[5].all, "the program ended with exit code 0 (5 node pods"));
  }

  TEST_CASE("a colocation group is one pod that hosts every member; the program completes") {
    // counter and producer/0 share pod 0; producers 1-3 are pods 1-3, the coordinator 4.
    auto pods = run_as_pods({TLAUNCH_HELLO_WORLD_EXE, "--colocate", "counter,producer/0"});
    REQUIRE(pods.size() == 5);  // one pod fewer than without the group
    for (std::size_t i = 0; i < pods.size(); ++i) {
      INFO("pod ", i, ": ", pods[i].all);
      CHECK(pods[i].code == 0);
      if (i <= 3) CHECK(has(pods[i].out, "added 100, total now"));
    }
    // Both members are placed at pod 0: without it, the coordinator names them there.
    auto missing = run_as_pods({TLAUNCH_HELLO_WORLD_EXE, "--colocate", "counter,producer/0",
                                "--start-timeout=1", "--grace=0.2"},
                               {1, 2, 3, 4});
    REQUIRE(missing.size() == 4);
    INFO(missing[3].all);
    CHECK(missing[3].code == 1);
    CHECK(has(missing[3].all, "counter/0+producer/0@tlaunch-hello-world-0"));
    CHECK_FALSE(has(missing[3].all, "producer/1@"));
    CHECK(has(pods[4].all, "the program ended with exit code 0 (4 node pods"));
    CHECK_FALSE(has(pods[4].all, "failed"));
  }

  TEST_CASE("a pod's node process sets its node's --env variables, by replica") {
    // run_cmd: two runners run `echo` and the display prints what they said.
    auto pods = run_as_pods({TLAUNCH_RUN_CMD_EXE, "--replicas", "runner=2", "--env",
                             "runner:TAG=r{index}x", "--", "echo tag=$TAG"});
    REQUIRE(pods.size() == 4);  // 2 runners, the display, the coordinator
    for (const auto& p : pods) {
      INFO(p.all);
      CHECK(p.code == 0);
    }
    INFO(pods[2].all);
    CHECK(has(pods[2].out, "tag=r0x"));
    CHECK(has(pods[2].out, "tag=r1x"));
  }

  TEST_CASE("gang start: a pod that never comes fails the program within --start-timeout") {
    // Pod 3 (producer/2) is never placed: the coordinator names it and fails; the pods that
    // registered are stopped. A node pod whose coordinator never comes gives up alone.
    auto pods = run_as_pods({TLAUNCH_HELLO_WORLD_EXE, "--start-timeout=1", "--grace=0.2"},
                            {0, 1, 2, 4, 5});
    REQUIRE(pods.size() == 5);
    INFO(pods[4].all);
    CHECK(pods[4].code == 1);
    CHECK(has(pods[4].all, "did not register within"));
    CHECK(has(pods[4].all, "producer/2@tlaunch-hello-world-3"));
    for (int i = 0; i < 4; ++i) {
      INFO("pod ", i, ": ", pods[i].all);
      CHECK_FALSE(pods[i].timed_out);
      CHECK_FALSE(has(pods[i].out, "added 100"));  // no run() began without every node
    }
    auto alone = run_as_pods({TLAUNCH_HELLO_WORLD_EXE, "--start-timeout=0.5"}, {1});
    REQUIRE(alone.size() == 1);
    CHECK(alone[0].code == 3);
    CHECK(has(alone[0].err, "the coordinator at 127.0.0.1:"));
    CHECK(has(alone[0].err, "did not listen within 0.5 s"));
  }

  TEST_CASE("restart: a node with a policy runs in an OnFailure Job; its failed pod comes back") {
    // faulty: target has a restart policy (3 within 60 s), worker none. target/0 is the pod
    // of tlaunch-faulty-restart (restartPolicy OnFailure, backoffLimit 3); the workers and
    // the coordinator are the main Job's 3 pods (Never).
    tlaunch::test_support::temp_dir dir("tlaunch-k8s");
    auto files = dir.path / "manifests";
    auto gen = run({TLAUNCH_FAULTY_EXE, "--launch=k8s", "--k8s-image=app:1",
                    fmt::format("--k8s-out={}", files.string()),
                    fmt::format("--k8s-port={}", free_port()), "--", "calls", "6"});
    INFO(gen.all);
    REQUIRE(gen.code == 0);
    std::vector<std::string> paths = {(files / "job.yaml").string(),
                                      (files / "service.yaml").string(),
                                      (files / "secret.yaml").string()};
    auto f = check_shape(dir.path, paths);
    CHECK(one_of(f, "completions") == "3");
    auto script = dir.path / "restart_check.py";
    std::ofstream(script) << restart_check;
    auto checked = run({"/usr/bin/python3", script.string(), "tlaunch-faulty", "3",
                        (files / "job.yaml").string(), (files / "job-restart.yaml").string()},
                       30s);
    INFO(checked.all);
    REQUIRE(checked.code == 0);
    REQUIRE(has(checked.out, "completions\t1\n"));
    std::vector<std::string> main_argv = {one_of(f, "command")}, restart_argv = main_argv;
    for (auto& a : all_of(f, "arg")) main_argv.push_back(a);
    std::istringstream lines(checked.out);
    for (std::string l; std::getline(lines, l);)
      if (l.rfind("arg\t", 0) == 0) restart_argv.push_back(l.substr(4));

    // --restart target=0 takes the policy away: one Job, as without policies.
    auto off = run({TLAUNCH_FAULTY_EXE, "--launch=k8s", "--k8s-image=app:1", "--restart",
                    "target=0", fmt::format("--k8s-out={}", (dir.path / "off").string())});
    CHECK(off.code == 0);
    CHECK_FALSE(std::filesystem::exists(dir.path / "off" / "job-restart.yaml"));
    CHECK(has(read_file((dir.path / "off" / "job.yaml").string()), "restartPolicy: Never"));

    // The pods, as in run_as_pods; target aborts on its 3rd call, once.
    auto secret = dir.path / "root" / one_of(f, "secret_file").substr(1);
    std::filesystem::create_directories(secret.parent_path());
    std::ofstream(secret) << one_of(f, "secret");
    std::filesystem::permissions(secret, std::filesystem::perms::owner_read);
    auto once = (dir.path / "crashed").string();
    ::setenv("TLAUNCH_SECRET_FILE", secret.c_str(), 1);
    ::setenv("TLAUNCH_K8S_HOSTS", (one_of(f, "coordinator_host") + "=127.0.0.1").c_str(), 1);
    ::setenv("FAULTY_TARGET_CRASH", "3", 1);
    ::setenv("FAULTY_ONCE", once.c_str(), 1);
    std::vector<std::unique_ptr<process>> pods;
    for (int i = 0; i < 3; ++i) {
      ::setenv("JOB_COMPLETION_INDEX", std::to_string(i).c_str(), 1);
      pods.push_back(std::make_unique<process>(main_argv));
    }
    ::setenv("JOB_COMPLETION_INDEX", "0", 1);
    auto target = std::make_unique<process>(restart_argv);
    // This test plays the kubelet: the restart Job's container exited non-zero, so it is
    // started again in "the same pod": the same command, args, environment and index.
    int first = target->wait_or_kill(60s);
    INFO(target->all());
    CHECK(first == 128 + SIGABRT);
    auto again = std::make_unique<process>(restart_argv);
    for (const char* k : {"TLAUNCH_SECRET_FILE", "TLAUNCH_K8S_HOSTS", "JOB_COMPLETION_INDEX",
                          "FAULTY_TARGET_CRASH", "FAULTY_ONCE"})
      ::unsetenv(k);
    CHECK(again->wait_or_kill(60s) == 0);
    for (auto& p : pods) {
      int code = p->wait_or_kill(60s);
      INFO(p->all());
      CHECK(code == 0);
    }
    const std::string coordinator = pods[2]->all();
    INFO(coordinator);
    CHECK(has(pods[0]->out(), "6 good calls"));
    CHECK(has(coordinator, "node target/0@tlaunch-faulty-restart-0 failed: its connection closed"));
    CHECK(has(coordinator, "restart 1 of at most 3 within 60 s, awaiting its new process"));
    CHECK(has(coordinator, "node target/0@tlaunch-faulty-restart-0 restarted: registered "));
    CHECK(has(coordinator, "the program ended with exit code 0"));
  }
}
