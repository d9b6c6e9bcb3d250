// --trace end to end: trace_program (front's run() calls Middle::relay, which calls
// Back::leaf twice) runs under local_mp as three real processes; the tests read the trace
// file it leaves as a strict JSON document of Chrome trace events and check that each call
// chain is there as nested spans in the right processes, tied by their ids, with the
// sampling the flags asked for. Also the flags' errors.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../common/process.hpp"
#include "../common/sshd_env.hpp"
#include "../common/temp_dir.hpp"
#include "json_reader.hpp"

using namespace tlaunch::integration;
using tlaunch::test_support::json_value;
using tlaunch::test_support::parse_json;
using tlaunch::test_support::temp_dir;

namespace {

const std::string program = TLAUNCH_TRACE_PROGRAM_EXE;

struct span {
  std::string name, cat, trace, id, parent, caller, callee, outcome;
  double ts = 0, dur = 0, bytes_out = 0, bytes_in = 0;
  int pid = 0, tid = 0;
};

struct trace_file {
  std::vector<span> spans;
  std::map<int, std::string> process_names;  // pid -> its name
  std::map<std::string, int> flows;          // "s" / "f" -> count
  std::map<std::string, const span*> by_id;
};

trace_file read_trace(const std::filesystem::path& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in, "no trace file at " << path);
  std::stringstream ss;
  ss << in.rdbuf();
  json_value doc;
  try {
    doc = parse_json(ss.str());
  } catch (const std::exception& e) {
    FAIL("the trace file is not JSON: " << e.what() << "\n" << ss.str().substr(0, 2000));
  }
  REQUIRE(doc.is_array());
  trace_file t;
  for (const auto& e : doc.arr()) {
    REQUIRE(e.is_object());
    const std::string ph = e["ph"].str();
    if (ph == "M") {
      if (e["name"].str() == "process_name")
        t.process_names[static_cast<int>(e["pid"].num())] = e["args"]["name"].str();
      continue;
    }
    if (ph == "s" || ph == "f") {
      ++t.flows[ph];
      continue;
    }
    REQUIRE(ph == "X");
    span s;
    s.name = e["name"].str();
    s.cat = e["cat"].str();
    s.ts = e["ts"].num();
    s.dur = e["dur"].num();
    s.pid = static_cast<int>(e["pid"].num());
    s.tid = static_cast<int>(e["tid"].num());
    const auto& a = e["args"];
    s.trace = a["trace"].str();
    s.id = a["span"].str();
    s.parent = a["parent"].str();
    if (a.has("caller")) s.caller = a["caller"].str();
    s.callee = a["callee"].str();
    s.outcome = a["outcome"].str();
    s.bytes_out = a["bytes_out"].num();
    s.bytes_in = a["bytes_in"].num();
    t.spans.push_back(s);
  }
  for (const auto& s : t.spans) t.by_id[s.id] = &s;
  return t;
}

std::vector<const span*> spans_of(const trace_file& t, std::string_view cat, std::string_view name) {
  std::vector<const span*> out;
  for (const auto& s : t.spans)
    if (s.cat == cat && s.name == name) out.push_back(&s);
  return out;
}

const std::string root_parent = "0000000000000000";

// `inner` lies within `outer` (microseconds; one host, one clock: 1 us of rounding).
bool within(const span& inner, const span& outer) {
  return inner.ts >= outer.ts - 1.0 && inner.ts + inner.dur <= outer.ts + outer.dur + 1.0;
}

finished run_traced(const std::filesystem::path& file, std::vector<std::string> flags,
                    int rounds) {
  std::vector<std::string> argv{program, "--launch=local_mp", "--trace=" + file.string()};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back("--");
  argv.push_back(std::to_string(rounds));
  return run(argv, 90s);
}

}  // namespace

// The spans of `rounds` relays, every call traced: each chain front -> middle -> back is a
// tree of nested spans in three processes (named `<instance><suffix>`).
void check_chains(const trace_file& t, std::size_t rounds, const std::string& front_suffix,
                  const std::string& middle_suffix, const std::string& back_suffix) {
  auto relay_calls = spans_of(t, "call", "Middle::relay");
  auto relays = spans_of(t, "served", "Middle::relay");
  auto leaf_calls = spans_of(t, "call", "Back::leaf");
  auto leaves = spans_of(t, "served", "Back::leaf");
  REQUIRE(relay_calls.size() == rounds);
  REQUIRE(relays.size() == rounds);
  REQUIRE(leaf_calls.size() == 2 * rounds);
  REQUIRE(leaves.size() == 2 * rounds);
  CHECK(t.spans.size() == 6 * rounds);

  // Three processes, named by their instances.
  const int front = relay_calls[0]->pid, middle = relays[0]->pid, back = leaves[0]->pid;
  CHECK(front != middle);
  CHECK(middle != back);
  CHECK(front != back);
  CHECK(t.process_names.at(front) == "front/0" + front_suffix);
  CHECK(t.process_names.at(middle) == "middle/0" + middle_suffix);
  CHECK(t.process_names.at(back) == "back/0" + back_suffix);

  std::set<std::string> traces;
  for (const span* c : relay_calls) {
    CHECK(c->pid == front);
    CHECK(c->parent == root_parent);  // made by run(), outside any trace
    CHECK(c->caller == "front/0");
    CHECK(c->callee == "middle/0");
    CHECK(c->outcome == "reply");
    CHECK(c->bytes_out > 32);
    CHECK(c->bytes_in > 32);
    traces.insert(c->trace);
  }
  CHECK(traces.size() == rounds);  // a trace per call from run()

  for (const span* s : relays) {
    CHECK(s->pid == middle);
    REQUIRE(t.by_id.count(s->parent));
    const span& call = *t.by_id.at(s->parent);
    CHECK(call.name == "Middle::relay");
    CHECK(call.cat == "call");
    CHECK(call.trace == s->trace);
    CHECK(within(*s, call));
  }
  std::map<std::string, int> leaf_calls_per_relay;
  for (const span* c : leaf_calls) {
    CHECK(c->pid == middle);
    CHECK(c->caller == "middle/0");
    REQUIRE_MESSAGE(t.by_id.count(c->parent), "Back::leaf call without its relay: " << c->parent);
    const span& relay = *t.by_id.at(c->parent);
    CHECK(relay.name == "Middle::relay");
    CHECK(relay.cat == "served");
    CHECK(relay.trace == c->trace);
    CHECK(c->tid == relay.tid);  // on the track of the served call
    CHECK(within(*c, relay));
    ++leaf_calls_per_relay[relay.id];
  }
  // Both calls of each relay, the second made after the coroutine resumed.
  CHECK(leaf_calls_per_relay.size() == rounds);
  for (const auto& [id, n] : leaf_calls_per_relay) CHECK(n == 2);
  for (const span* s : leaves) {
    CHECK(s->pid == back);
    REQUIRE(t.by_id.count(s->parent));
    const span& call = *t.by_id.at(s->parent);
    CHECK(call.name == "Back::leaf");
    CHECK(call.cat == "call");
    CHECK(call.trace == s->trace);
    CHECK(within(*s, call));
    CHECK(s->outcome == "reply");
  }
  // An arrow from each call to the span that served it.
  CHECK(t.flows.at("s") == static_cast<int>(3 * rounds));
  CHECK(t.flows.at("f") == static_cast<int>(3 * rounds));
}

TEST_CASE("a chain of calls front -> middle -> back is a tree of nested spans in three processes") {
  temp_dir dir("tlaunch-trace");
  const auto file = dir.path / "calls.json";
  const int rounds = 20;
  auto r = run_traced(file, {"--trace-sample=1"}, rounds);
  REQUIRE_MESSAGE(r.code == 0, r.all);
  CHECK(missing(r.all, {"20 relays", "trace: 120 spans written to " + file.string()}) == "");
  check_chains(read_trace(file), rounds, "", "", "");
}

// Over SSH, against the loopback sshd of tools/sshd-fixture.sh (TLAUNCH_SSHD_ENV; the test
// `observe_trace_ssh` runs this case alone, with the fixture): front/0 and back/0 on
// 127.0.0.2, middle/0 on 127.0.0.3.
TEST_CASE("ssh: the chains cross hosts, and each process's clock was probed") {
  const sshd_env env = read_sshd_env();
  const std::string h2 = env.host(2), h3 = env.host(3);
  temp_dir dir("tlaunch-trace");
  const auto file = dir.path / "ssh.json";
  const int rounds = 10;
  auto r = run({program, "--launch=ssh", "--hosts=" + h2 + "," + h3, "--place", "front=" + h2,
                "--place", "middle=" + h3, "--place", "back=" + h2, "--color=never",
                env.identity_flag(), env.known_hosts_flag(),
                "--trace=" + file.string(), "--", std::to_string(rounds)},
               180s);
  REQUIRE_MESSAGE(r.code == 0, r.all);
  CHECK(r.all.find("trace: 60 spans written to") != std::string::npos);
  check_chains(read_trace(file), rounds, "@" + h2, "@" + h3, "@" + h2);
  // Each process's track says the offset the launcher measured and applied.
  std::ifstream f(file);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  std::size_t labels = 0;
  for (auto at = text.find("clock offset "); at != std::string::npos;
       at = text.find("clock offset ", at + 1))
    ++labels;
  CHECK(labels == 3);
  CHECK(text.find("round trip -") == std::string::npos);  // -: never probed
}

TEST_CASE("--trace-sample starts a trace for that fraction of calls, and a trace is whole") {
  temp_dir dir("tlaunch-trace");
  const auto file = dir.path / "sampled.json";
  const int rounds = 200;
  auto r = run_traced(file, {"--trace-sample=0.3"}, rounds);
  REQUIRE_MESSAGE(r.code == 0, r.all);
  const trace_file t = read_trace(file);
  auto roots = spans_of(t, "call", "Middle::relay");
  // 60 expected; far outside this only if sampling is broken.
  CHECK(roots.size() >= 20);
  CHECK(roots.size() <= 110);
  std::map<std::string, int> per_trace;
  for (const auto& s : t.spans) ++per_trace[s.trace];
  CHECK(per_trace.size() == roots.size());
  for (const span* root : roots) CHECK(per_trace[root->trace] == 6);

  SUBCASE("0: no trace at all, and still a JSON document") {
    const auto none = dir.path / "none.json";
    auto z = run_traced(none, {"--trace-sample=0"}, 20);
    REQUIRE_MESSAGE(z.code == 0, z.all);
    CHECK(read_trace(none).spans.empty());
    CHECK(z.all.find("trace: 0 spans written to") != std::string::npos);
  }
}

TEST_CASE("--trace and --trace-sample: what is wrong is named") {
  temp_dir dir("tlaunch-trace");
  auto bad = run({program, "--launch=local_mp", "--trace=" + (dir.path / "t.json").string(),
                  "--trace-sample=2"});
  CHECK(bad.code == 2);
  CHECK(bad.all.find("--trace-sample: '2' is not a fraction from 0 to 1") != std::string::npos);
  CHECK(bad.all.find("usage: ") != std::string::npos);

  auto alone = run({program, "--launch=local_mp", "--trace-sample=0.5"});
  CHECK(alone.code == 2);
  CHECK(alone.all.find("--trace-sample: there is no --trace=FILE") != std::string::npos);

  auto mt = run({program, "--launch=local_mt", "--trace=" + (dir.path / "t.json").string()});
  CHECK(mt.code == 2);
  CHECK(mt.all.find("--trace=" + (dir.path / "t.json").string() +
                    ": --launch=local_mt runs every node in this one process, so there are no "
                    "node processes whose calls the launcher could gather") != std::string::npos);

  const std::string nowhere = (dir.path / "no-such-dir" / "t.json").string();
  auto unwritable = run({program, "--launch=local_mp", "--trace=" + nowhere});
  CHECK(unwritable.code != 0);
  CHECK(unwritable.all.find("--trace=" + nowhere + ": cannot write the file") != std::string::npos);
}
