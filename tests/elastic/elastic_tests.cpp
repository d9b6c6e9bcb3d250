// Elastic nodes (docs/guide/elastic.md), end to end: elastic_program resizes its `actor` node
// while its driver broadcasts to every actor in a loop, as real processes under local_mp and
// over ssh (the "ssh:" case); the counts each actor served are checked against the calls the
// driver sent, replica by replica: no call lost, none served twice, no failure. Also the
// launch API's resize (running_program::resize) and what it refuses, and --replicas beyond
// an elastic node's max.
#include <doctest/doctest.h>

#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <tlaunch/detail/sanitizers.hpp>
#include <tlaunch/tlaunch.hpp>

#include "../common/process.hpp"
#include "../common/sshd_env.hpp"
#include "../observe/http_get.hpp"

using namespace tlaunch::integration;

namespace {

const std::string program = TLAUNCH_ELASTIC_PROGRAM_EXE;

std::vector<std::int64_t> numbers(const std::string& csv) {
  std::vector<std::int64_t> out;
  std::stringstream ss(csv);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(std::stoll(x));
  return out;
}

// What the driver reported ("driver rounds=... sent=..."), and what every actor served, by
// replica (summed over the replica's processes: one that was removed and came back has two).
struct outcome {
  std::int64_t rounds = -1, failures = -1;
  std::string sizes, error;
  std::vector<std::int64_t> sent;
  std::map<std::int64_t, std::int64_t> served;
  std::map<std::int64_t, std::vector<std::int64_t>> incarnations;
};

outcome read_outcome(const std::string& all) {
  outcome o;
  std::smatch m;
  const std::regex driver(
      R"(driver rounds=(\d+) failures=(\d+) sizes=([0-9,]*) sent=([0-9,]*) error=(.*))");
  const std::regex actor(R"(actor (\d+) served (\d+) incarnation (\d+))");
  std::stringstream ss(all);
  for (std::string line; std::getline(ss, line);) {
    if (std::regex_search(line, m, driver)) {
      o.rounds = std::stoll(m[1]);
      o.failures = std::stoll(m[2]);
      o.sizes = m[3];
      o.sent = numbers(m[4]);
      o.error = m[5];
    } else if (std::regex_search(line, m, actor)) {
      o.served[std::stoll(m[1])] += std::stoll(m[2]);
      o.incarnations[std::stoll(m[1])].push_back(std::stoll(m[3]));
    }
  }
  return o;
}

// Every replica the driver ever called served exactly the calls it sent to it.
void check_counts(const outcome& o, const std::string& all) {
  REQUIRE_MESSAGE(o.rounds > 0, all);
  CHECK_MESSAGE(o.failures == 0, o.error);
  CHECK(o.error == "none");
  REQUIRE_MESSAGE(o.served.size() == o.sent.size(), all);
  for (std::size_t i = 0; i < o.sent.size(); ++i) {
    CAPTURE(i);
    CHECK(o.sent[i] > 0);
    CHECK(o.served.at(static_cast<std::int64_t>(i)) == o.sent[i]);
  }
}

}  // namespace

TEST_CASE("local_mp: resize 4 -> 16 -> 2 under a broadcast loop loses, repeats and fails no call") {
  auto r = run({program, "--launch=local_mp", "--color=never", "--", "steps=16,2"}, 180s);
  REQUIRE_MESSAGE(r.code == 0, r.all);
  CHECK(missing(r.all, {"resized to 16 in", "scaler sees 16 driver sees 16",
                        "resized to 2 in", "scaler sees 2 driver sees 2",
                        "node actor resized from 4 to 16 replicas",
                        "node actor resized from 16 to 2 replicas"}) == "");
  // A handle kept to a removed replica fails at once, with its own error.
  CHECK(missing(r.all, {"removed replica: actor/15 Actor::bump removed: a resize removed it"}) ==
        "");
  CHECK(r.all.find("removed replica answered") == std::string::npos);
  const outcome o = read_outcome(r.all);
  // Every size the broadcasts saw, in order.
  CHECK(o.sizes == "4,16,2");
  CHECK(o.sent.size() == 16);
  check_counts(o, r.all);
  for (const auto& [index, inc] : o.incarnations) CHECK(inc == std::vector<std::int64_t>{0});
}

TEST_CASE("local_mp: replicas removed and added again start as new incarnations") {
  auto r = run({program, "--launch=local_mp", "--color=never", "--", "steps=2,6", "hold-ms=200"},
               180s);
  REQUIRE_MESSAGE(r.code == 0, r.all);
  const outcome o = read_outcome(r.all);
  CHECK(o.sizes == "4,2,6");
  check_counts(o, r.all);
  // 2 and 3 ran, were removed, and came back; 4 and 5 started with the second resize.
  CHECK(o.incarnations.at(2) == std::vector<std::int64_t>{0, 1});
  CHECK(o.incarnations.at(3) == std::vector<std::int64_t>{0, 1});
  CHECK(o.incarnations.at(4) == std::vector<std::int64_t>{0});
  CHECK(o.incarnations.at(0) == std::vector<std::int64_t>{0});
}

TEST_CASE("--replicas beyond an elastic node's max is refused, naming the node") {
  auto r = run({program, "--launch=local_mp", "--replicas", "actor=65"}, 30s);
  CHECK(r.code == 2);
  CHECK(missing(r.all, {"node 'actor' starts 65 replicas, more than its .elastic(64) allows"}) ==
        "");
}

TEST_CASE("the dashboard resizes with a POST that carries the launch's token") {
  using tlaunch::test_support::http_get;
  using tlaunch::test_support::http_raw;
  // No steps of its own: the scaler waits 4 s, then ends the program.
  process p({program, "--launch=local_mp", "--color=never", "--dashboard=127.0.0.1:0", "--",
             "steps=", "hold-ms=4000"});
  REQUIRE(p.wait_for_output("Bearer ", 30s));
  std::smatch m;
  const std::string head = p.all();
  REQUIRE(std::regex_search(head, m, std::regex(R"(dashboard at http://127\.0\.0\.1:(\d+)/)")));
  const auto port = static_cast<std::uint16_t>(std::stoi(m[1]));
  REQUIRE(std::regex_search(head, m, std::regex(R"(Bearer ([0-9a-f]+))")));
  const std::string token = m[1];
  auto post = [&](const std::string& target, const std::string& headers) {
    return http_raw("127.0.0.1", port,
                    "POST " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + "\r\n");
  };
  const std::string auth = "Authorization: Bearer " + token + "\r\n";
  // Even on loopback, a resize needs the token.
  CHECK(post("/api/resize?node=actor&replicas=6", "").status == 401);
  auto bad = post("/api/resize?node=driver&replicas=2", auth);
  CHECK(bad.status == 400);
  CHECK(bad.body.find("resize: node 'driver' is not elastic") != std::string::npos);
  CHECK(post("/api/resize?node=actor&replicas=65", auth).status == 400);
  CHECK(post("/api/resize?node=actor&replicas=x", auth).status == 400);
  auto ok = post("/api/resize?node=actor&replicas=6", auth);
  CHECK(ok.status == 202);
  CHECK(p.wait_for_output("node actor resized from 4 to 6 replicas", 30s));
  auto state = http_get("127.0.0.1", port, "/api/state");
  CHECK(state.body.find(R"({"name":"actor","replicas":6,"max_replicas":64})") != std::string::npos);
  REQUIRE(p.wait(60s) == 0);
  const outcome o = read_outcome(p.all());
  CHECK(o.sizes == "4,6");
  check_counts(o, p.all());
}

namespace {

struct Worker {
  int ping() { return 1; }
  using rpc = tlaunch::methods<&Worker::ping>;
};

constexpr auto small = tlaunch::program(tlaunch::node<"worker", Worker>().replicas(2).elastic(4),
                                        tlaunch::node<"fixed", Worker>());

std::string refusal(tlaunch::running_program& run, const std::string& node, std::uint32_t n) {
  try {
    run.resize(node, n);
  } catch (const tlaunch::launch_error& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("running_program::resize grows and shrinks, and names what it refuses") {
  // local_mp forks node processes from this threaded process, which the sanitizers' runtimes
  // cannot follow (tests/launch/launch_api_tests.cpp); the program above covers them there.
  if (tlaunch::detail::thread_sanitizer || tlaunch::detail::address_sanitizer) return;
  tlaunch::launch_options o;
  o.launch = tlaunch::launcher::local_mp;
  auto run = tlaunch::start(small, o);
  CHECK(refusal(run, "worker", 4) == "(accepted)");
  CHECK(refusal(run, "worker", 1) == "(accepted)");
  CHECK(refusal(run, "worker", 5) ==
        "resize: node 'worker' may run at most 4 replicas (its .elastic(4)), not 5");
  CHECK(refusal(run, "fixed", 2) ==
        "resize: node 'fixed' is not elastic (declare it with node<...>(...).elastic(max))");
  CHECK(refusal(run, "nope", 2) ==
        "resize: node 'nope' is not in the program (nodes: worker, fixed)");
  run.stop();
  CHECK(run.wait() == 0);
  CHECK(refusal(run, "worker", 2).find("the program has stopped") != std::string::npos);
}

TEST_CASE("local_mt runs an elastic node's initial replicas and refuses a resize") {
  tlaunch::launch_options o;
  o.launch = tlaunch::launcher::local_mt;
  auto run = tlaunch::start(small, o);
  CHECK(refusal(run, "worker", 3).find("local_mt runs a fixed set") != std::string::npos);
  run.stop();
  CHECK(run.wait() == 0);
}

TEST_CASE("ssh: resize 4 -> 16 -> 2 over two hosts under a broadcast loop") {
  const sshd_env env = read_sshd_env();
  auto r = run({program, "--launch=ssh", "--hosts=" + env.host(2) + "," + env.host(3),
                "--color=never", env.identity_flag(), env.known_hosts_flag(), "--", "steps=16,2"},
               240s);
  REQUIRE_MESSAGE(r.code == 0, r.all);
  CHECK(missing(r.all, {"scaler sees 16 driver sees 16", "scaler sees 2 driver sees 2"}) == "");
  const outcome o = read_outcome(r.all);
  CHECK(o.sizes == "4,16,2");
  check_counts(o, r.all);
  // Placed as at launch: round the hosts.
  CHECK(r.all.find("[actor/5@" + env.host(3).substr(0, env.host(3).find(':'))) !=
        std::string::npos);
}
