// --dashboard end to end: metrics_program runs under local_mp; the page is opened in a real
// headless Chromium (Debian's `chromium`), which runs its script against the launcher, and
// the test reads the DOM it rendered: the graph, the instance table, an edge's changing
// numbers, the methods' charts, a restart on the timeline. It saves a screenshot
// (dashboard.png, in the test's working directory). The "ssh:" case runs the program on two
// hosts and reads the same page.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "../common/process.hpp"
#include "../common/sshd_env.hpp"
#include "http_get.hpp"
#include "observed_program.hpp"

using namespace tlaunch::integration;
using tlaunch::test_support::http_get;
using tlaunch::test_support::observed_program;

namespace {

const std::string chromium = "/usr/bin/chromium";

// The page as Chromium rendered it after running its script for `ms` of virtual time.
std::string rendered(const std::string& url, int ms) {
  auto r = run({chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--virtual-time-budget=" + std::to_string(ms),
                "--dump-dom", url},
               90s);
  INFO(r.err);
  REQUIRE(r.code == 0);
  return r.out;
}

// The numbers in the edges table's "calls" column, in row order.
std::vector<long> calls_column(const std::string& dom) {
  std::vector<long> out;
  std::regex cell(R"(<td class="num calls">(\d+)</td>)");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), cell); it != std::sregex_iterator(); ++it)
    out.push_back(std::stol((*it)[1]));
  return out;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("the dashboard in a real browser: graph, instances, live numbers, charts, events") {
  REQUIRE_MESSAGE(std::filesystem::exists(chromium),
                  "Debian's chromium package is needed (tools/install-deps.sh installs it)");
  observed_program launched("dashboard", {"--dashboard=127.0.0.1:0", "--restart", "worker=3"});
  auto& p = launched.process();
  const auto port = launched.port("dashboard");
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";

  // The state behind it, as the page reads it.
  auto state = http_get("127.0.0.1", port, "/api/state");
  CHECK(state.status == 200);
  CHECK(has(state.headers, "application/json"));
  CHECK(has(state.body, R"("nodes":[{"name":"ps","replicas":1},{"name":"worker","replicas":2}])"));

  // Let calls flow, then kill worker/1's process: it is restarted, and the launcher's line
  // about it becomes an event.
  std::this_thread::sleep_for(2s);
  auto pids = node_pids(launched.marker(), "worker/1");
  REQUIRE(pids.size() == 1);
  REQUIRE(::kill(pids[0], SIGKILL) == 0);
  REQUIRE_MESSAGE(p.wait_for_output("restarted", 30s), p.all());
  std::this_thread::sleep_for(2s);

  const std::string first = rendered(url, 5000);
  INFO(first);
  // The graph: a node per program node, replicas grouped, and an edge labelled with its
  // calls per second and p99.
  CHECK(has(first, "worker \u00d72</text>"));
  CHECK(has(first, ">ps</text>"));
  CHECK(std::regex_search(first, std::regex(R"(class="edge-label"[^>]*>[0-9]+\.[0-9]/s, p99 [0-9.]+ (us|ms)<)")));
  // The instance table: every process, running, with a pid; worker/1 restarted once.
  for (std::string proc : {"ps/0", "worker/0", "worker/1"})
    CHECK(std::regex_search(first, std::regex("data-process=\"" + proc +
                                               "\"><td>[^<]*</td><td>\\(local\\)</td><td>[1-9][0-9]*</td><td class=\"state-running\">running</td>")));
  CHECK(std::regex_search(first, std::regex(R"(data-process="worker/1">(<td[^>]*>[^<]*</td>){4}<td class="num">1</td>)")));
  // Its last output.
  CHECK(std::regex_search(first, std::regex(R"(data-process="worker/0">.*?<td class="out">worker/0 calls ps</td>)")));
  // The methods' charts and the events.
  CHECK(has(first, "data-method=\"ParamServer::add\""));
  CHECK(has(first, "data-method=\"ParamServer::fail\""));
  CHECK(std::regex_search(first, std::regex("<li>[0-9.]+ s  node worker/1[^<]*restarted")));
  CHECK(has(first, "<circle cx=")); // marks on the timeline

  // Live: a second look shows more calls on the same edges.
  const auto before = calls_column(first);
  REQUIRE(!before.empty());
  std::this_thread::sleep_for(2s);
  const auto after = calls_column(rendered(url, 3000));
  REQUIRE(after.size() == before.size());
  long grown = 0;
  for (std::size_t i = 0; i < before.size(); ++i) grown += after[i] > before[i];
  CHECK(grown > 0);

  // What a person would look at.
  const std::string shot = (std::filesystem::current_path() / "dashboard.png").string();
  std::filesystem::remove(shot);
  auto s = run({chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1280,1000",
                "--virtual-time-budget=6000", "--screenshot=" + shot, url},
               90s);
  CHECK(s.code == 0);
  REQUIRE(std::filesystem::exists(shot));
  CHECK(std::filesystem::file_size(shot) > 20000);
  MESSAGE("screenshot: " << shot);
  launched.stop();
}

TEST_CASE("the dashboard off loopback: the page and its state need the printed token") {
  observed_program run("dashboard-token", {"--dashboard=0.0.0.0:0"});
  const auto port = run.port("dashboard");
  const std::string token = run.token();
  CHECK(http_get("127.0.0.1", port, "/").status == 401);
  CHECK(http_get("127.0.0.1", port, "/api/state").status == 401);
  CHECK(http_get("127.0.0.1", port, "/?token=" + token).status == 200);
  auto state = http_get("127.0.0.1", port, "/api/state?token=" + token);
  CHECK(state.status == 200);
  CHECK(has(state.body, "\"processes\":["));
  run.stop();
}

// Over SSH, against the loopback sshd of tools/sshd-fixture.sh (TLAUNCH_SSHD_ENV; the test
// `observe_dashboard_ssh` runs this case alone, with the fixture): ps/0 and worker/1 on
// 127.0.0.2, worker/0 on 127.0.0.3.
TEST_CASE("ssh: the dashboard of a program on two hosts, in a real browser") {
  REQUIRE_MESSAGE(std::filesystem::exists(chromium),
                  "Debian's chromium package is needed (tools/install-deps.sh installs it)");
  const sshd_env env = read_sshd_env();
  const std::string h2 = env.host(2), h3 = env.host(3);
  process p({TLAUNCH_METRICS_PROGRAM_EXE, "--launch=ssh", "--hosts=" + h2 + "," + h3, "--place",
             "worker=" + h3 + "," + h2, "--place", "ps=" + h2, "--color=never",
             env.identity_flag(), env.known_hosts_flag(),
             "--dashboard=127.0.0.1:0"});
  REQUIRE_MESSAGE(p.wait_for_output("dashboard at http://", 120s), p.all());
  std::smatch pm;
  const std::string printed = p.all();
  REQUIRE(std::regex_search(printed, pm, std::regex(R"(dashboard at http://[^ ]*:(\d+)/)")));
  const std::string url = "http://127.0.0.1:" + std::string(pm[1]) + "/";
  REQUIRE_MESSAGE(p.wait_for_output("worker/0 calls ps", 60s), p.all());
  std::this_thread::sleep_for(3s);

  const std::string dom = rendered(url, 5000);
  INFO(dom);
  CHECK(has(dom, "worker \u00d72</text>"));
  CHECK(has(dom, ">ps</text>"));
  CHECK(std::regex_search(dom, std::regex(R"(class="edge-label"[^>]*>[0-9]+\.[0-9]/s, p99 [0-9.]+ (us|ms)<)")));
  // Each process on its host, running, with the pid it has there.
  for (const auto& [proc, host] : {std::pair<std::string, std::string>{"ps/0", h2},
                                   {"worker/0", h3}, {"worker/1", h2}})
    CHECK(std::regex_search(dom, std::regex("data-process=\"" + proc + "\"><td>[^<]*</td><td>" +
                                            std::regex_replace(host, std::regex(R"([.])"), "\\.") +
                                            "</td><td>[1-9][0-9]*</td><td class=\"state-running\">running</td>")));
  // Live numbers from both hosts' processes.
  const auto before = calls_column(dom);
  REQUIRE(!before.empty());
  std::this_thread::sleep_for(2s);
  const auto after = calls_column(rendered(url, 3000));
  REQUIRE(after.size() == before.size());
  long grown = 0;
  for (std::size_t i = 0; i < before.size(); ++i) grown += after[i] > before[i];
  CHECK(grown > 0);
  p.signal(SIGTERM);
  CHECK(p.wait_or_kill(60s) == 143);
}
