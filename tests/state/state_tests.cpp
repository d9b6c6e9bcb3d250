// Nodes that keep their state, end to end: state_program (a counter that snapshots after each
// step, a ticker snapshotted by its policy, a data store) runs as real processes; the tests
// kill its counter (restarts load its snapshots), kill its launcher with SIGKILL and resume
// the program from its state directory, feed it snapshots of another node type and of
// another build, and read the files the snapshots leave.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../common/process.hpp"
#include "../common/sshd_env.hpp"
#include "../common/temp_dir.hpp"

using namespace tlaunch::integration;
using tlaunch::test_support::temp_dir;
namespace fs = std::filesystem;

namespace {

const std::string program = TLAUNCH_STATE_PROGRAM_EXE;

// The sequence numbers of the snapshots in `folder`, ascending.
std::vector<std::uint64_t> sequences(const fs::path& folder) {
  std::vector<std::uint64_t> out;
  if (!fs::exists(folder)) return out;
  for (const auto& e : fs::directory_iterator(folder)) {
    const std::string n = e.path().filename().string();
    if (n.size() == 25 && n.ends_with(".snapshot")) out.push_back(std::stoull(n.substr(0, 16)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

fs::path newest(const fs::path& folder) {
  auto s = sequences(folder);
  REQUIRE_MESSAGE(!s.empty(), "no snapshot in " << folder);
  char name[32];
  std::snprintf(name, sizeof name, "%016llu.snapshot", static_cast<unsigned long long>(s.back()));
  return folder / name;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const fs::path& p, const std::string& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << b;
}

// A snapshot's file with one hex digit of its build id changed: as if another build wrote it.
// The header (after the 12-byte prefix) is cereal binary: a u32 format, then type name,
// instance and build id, each a u64 length and its bytes.
std::string with_other_build(std::string b) {
  std::size_t at = 12 + 4;
  auto skip_string = [&] {
    std::uint64_t n = 0;
    for (int k = 0; k < 8; ++k) n |= std::uint64_t(static_cast<unsigned char>(b.at(at + k))) << (8 * k);
    at += 8;
    return std::pair<std::size_t, std::uint64_t>{at, n};
  };
  auto [t_at, t_n] = skip_string();
  at = t_at + t_n;
  auto [i_at, i_n] = skip_string();
  at = i_at + i_n;
  auto [b_at, b_n] = skip_string();
  REQUIRE(b_n > 0);
  char& c = b.at(b_at + b_n - 1);
  c = c == '0' ? '1' : '0';
  return b;
}

// "start incarnation=I resumed=R count=C stored=S" of the counter: C and S.
std::pair<std::uint64_t, std::uint64_t> counter_start(const std::string& out) {
  const std::string key = "[counter/0] start incarnation=0 resumed=1 count=";
  auto at = out.find(key);
  REQUIRE_MESSAGE(at != std::string::npos, out);
  std::istringstream in(out.substr(at + key.size()));
  std::uint64_t count = 0, stored = 0;
  std::string rest;
  in >> count >> rest;  // "stored=S"
  REQUIRE(rest.rfind("stored=", 0) == 0);
  stored = std::stoull(rest.substr(7));
  return {count, stored};
}

}  // namespace

TEST_CASE("a counter killed three times keeps its count: each restart loads its latest snapshot") {
  temp_dir dir("tlaunch-state");
  auto r = run({program, "--launch=local_mp", "--color=never", "--state-dir=" + dir.path.string(),
                "--", "crash-at=10,20,30", "until=40"},
               180s);
  REQUIRE_MESSAGE(r.code == 0, r.all);
  CHECK(missing(r.all, {"[counter/0] start incarnation=0 resumed=0 count=0 stored=0",
                        "[counter/0] start incarnation=1 resumed=1 count=10 stored=10",
                        "[counter/0] start incarnation=2 resumed=1 count=20 stored=20",
                        "[counter/0] start incarnation=3 resumed=1 count=30 stored=30",
                        "final count=40 incarnation=3 incarnations=0,1,2,3",
                        "[ticker/0] start incarnation=0 resumed=0 count=0"}) == "");
  // On demand after each of 40 steps, once more at the graceful stop; the newest 3 kept.
  CHECK(sequences(dir.path / "counter" / "0") == std::vector<std::uint64_t>{39, 40, 41});
  // The ticker's policy: every 50 ms, the newest 2 kept (more than the stop's one).
  auto ticker = sequences(dir.path / "ticker" / "0");
  CHECK(ticker.size() == 2);
  CHECK(ticker.back() >= 3);
  // No temporary file is left behind.
  for (const auto& e : fs::recursive_directory_iterator(dir.path))
    CHECK_MESSAGE(e.path().extension() != ".tmp", e.path());
}

TEST_CASE("a launcher killed with SIGKILL: --resume goes on from every node's snapshot") {
  temp_dir dir("tlaunch-state");
  const std::string marker = unique_marker("state");
  {
    process p({program, "--launch=local_mp", "--color=never", "--state-dir=" + dir.path.string(),
               "--", "forever", marker});
    REQUIRE_MESSAGE(p.wait_for_output("[counter/0] count=30", 120s), p.all());
    auto pids = node_pids(marker);
    REQUIRE(pids.size() == 3);
    p.signal(SIGKILL);
    p.wait(10s);
    // The nodes see their launcher go, and stop.
    REQUIRE(all_gone(pids, marker, 30s));
  }
  auto r = run({program, "--launch=local_mp", "--color=never", "--resume=" + dir.path.string(),
                "--", "more=5", marker},
               180s);
  REQUIRE_MESSAGE(r.code == 0, r.all);
  auto [count, stored] = counter_start(r.all);
  CHECK(count >= 30);
  // The data store's tables came back through its own periodic snapshots (100 ms).
  CHECK(stored >= 1);
  CHECK(stored <= count + 1);
  CHECK(r.all.find("final count=" + std::to_string(count + 5) + " incarnation=0 incarnations=0,0") !=
        std::string::npos);
  CHECK(r.all.find(" bytes, an earlier launch)") != std::string::npos);
  CHECK(r.all.find("[ticker/0] start incarnation=0 resumed=1") != std::string::npos);
}

TEST_CASE("a snapshot of another node type, or of another build, is refused by name") {
  temp_dir dir("tlaunch-state");
  const std::string d = dir.path.string();
  auto first = run({program, "--launch=local_mp", "--color=never", "--state-dir=" + d, "--",
                    "until=5"},
                   120s);
  REQUIRE_MESSAGE(first.code == 0, first.all);
  const fs::path counter = dir.path / "counter" / "0", ticker = dir.path / "ticker" / "0";
  const std::vector<std::string> resume = {program, "--launch=local_mp", "--color=never",
                                           "--restart", "counter=0", "--resume=" + d, "--",
                                           "more=2"};

  SUBCASE("another node type's") {
    const fs::path planted = counter / "0000000000000999.snapshot";
    fs::copy_file(newest(ticker), planted);
    auto r = run(resume, 120s);
    CHECK(r.code != 0);
    CHECK_MESSAGE(r.all.find("node counter/0: snapshot " + planted.string() +
                             " holds the state of Ticker, not of Counter") != std::string::npos,
                  r.all);
  }
  SUBCASE("another build's, for a type that declares no state_version") {
    const fs::path latest = newest(counter);
    write_bytes(latest, with_other_build(bytes_of(latest)));
    auto r = run(resume, 120s);
    CHECK(r.code != 0);
    CHECK_MESSAGE(r.all.find("node counter/0: snapshot " + latest.string() +
                             " was written by another build of the program") != std::string::npos,
                  r.all);
  }
  SUBCASE("another build's, for a type that declares one: loaded") {
    const fs::path latest = newest(ticker);
    write_bytes(latest, with_other_build(bytes_of(latest)));
    auto r = run(resume, 120s);
    REQUIRE_MESSAGE(r.code == 0, r.all);
    CHECK(r.all.find("[ticker/0] start incarnation=0 resumed=1") != std::string::npos);
  }
  SUBCASE("a damaged one: the one before it is loaded") {
    const fs::path latest = newest(counter);
    std::string b = bytes_of(latest);
    write_bytes(latest, b.substr(0, b.size() - 1));
    auto r = run(resume, 120s);
    REQUIRE_MESSAGE(r.code == 0, r.all);
    CHECK(r.all.find("snapshot " + latest.string() + " of counter/0 is damaged") !=
          std::string::npos);
    // The stop's snapshot (count 5) was cut; the one before it holds the same count.
    CHECK(counter_start(r.all).first == 5);
  }
}

TEST_CASE("local_mt: the stop's snapshots, --resume, and --snapshot-every=0") {
  temp_dir dir("tlaunch-state");
  const std::string d = dir.path.string();
  auto first = run({program, "--launch=local_mt", "--color=never", "--state-dir=" + d,
                    "--snapshot-every=0", "--", "until=5"},
                   120s);
  REQUIRE_MESSAGE(first.code == 0, first.all);
  // --snapshot-every=0 in place of the ticker's 50 ms: its stop's snapshot alone.
  CHECK(sequences(dir.path / "ticker" / "0") == std::vector<std::uint64_t>{1});
  auto again = run({program, "--launch=local_mt", "--color=never", "--resume=" + d, "--",
                    "more=5"},
                   120s);
  REQUIRE_MESSAGE(again.code == 0, again.all);
  CHECK(counter_start(again.all) == std::pair<std::uint64_t, std::uint64_t>{5, 5});
  CHECK(again.all.find("final count=10 incarnation=0 incarnations=0,0") != std::string::npos);
}

TEST_CASE("--state-dir, --resume and --snapshot-every: what is wrong is named") {
  auto a = run({program, "--snapshot-every=1"});
  CHECK(a.code == 2);
  CHECK(a.err.find("--snapshot-every: there is no --state-dir=DIR") != std::string::npos);
  auto b = run({program, "--state-dir=/tmp/a", "--resume=/tmp/b"});
  CHECK(b.code == 2);
  CHECK(b.err.find("--resume=/tmp/b: the state directory is already /tmp/a") != std::string::npos);
  auto c = run({program, "--snapshot-every=soon", "--state-dir=/tmp/a"});
  CHECK(c.code == 2);
  CHECK(c.err.find("--snapshot-every: 'soon' is not a number of seconds") != std::string::npos);
  temp_dir dir("tlaunch-state");
  const std::string nowhere = (dir.path / "nowhere").string();
  auto d = run({program, "--launch=local_mp", "--color=never", "--resume=" + nowhere, "--",
                "until=1"},
               60s);
  CHECK(d.code != 0);
  CHECK_MESSAGE(d.all.find("--resume=" + nowhere + ": no such directory") != std::string::npos,
                d.all);
}

// Over SSH, against the loopback sshd of tools/sshd-fixture.sh (TLAUNCH_SSHD_ENV; the test
// `state_ssh` runs this case alone, with the fixture): the counter on one host, the rest on
// the other, each writing under the state directory on its own host.
TEST_CASE("ssh: a counter killed three times keeps its count") {
  const sshd_env env = read_sshd_env();
  temp_dir dir("tlaunch-state");
  auto r = run({program, "--launch=ssh", "--hosts=" + env.host(2) + "," + env.host(3),
                "--place", "counter=" + env.host(2), "--place", "ticker=" + env.host(3),
                "--place", "replay=" + env.host(3), "--color=never", env.identity_flag(),
                env.known_hosts_flag(), "--state-dir=" + dir.path.string(), "--",
                "crash-at=10,20,30", "until=40"},
               240s);
  REQUIRE_MESSAGE(r.code == 0, r.all);
  CHECK(missing(r.all, {"start incarnation=1 resumed=1 count=10 stored=10",
                        "start incarnation=2 resumed=1 count=20 stored=20",
                        "start incarnation=3 resumed=1 count=30 stored=30",
                        "final count=40 incarnation=3 incarnations=0,1,2,3"}) == "");
  CHECK(sequences(dir.path / "counter" / "0") == std::vector<std::uint64_t>{39, 40, 41});
}
