// --metrics end to end: metrics_program (workers calling a parameter server) runs under
// local_mp as real processes; the tests read the launcher's endpoint as a scraper does, and
// a real Prometheus server (Debian's `prometheus`, on loopback) scrapes it and answers a
// query for the program's call rate.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <fstream>
#include <regex>
#include <string>

#include "../common/process.hpp"
#include "../common/sshd_env.hpp"
#include "../common/temp_dir.hpp"
#include "http_get.hpp"
#include "observed_program.hpp"

using namespace tlaunch::integration;
using tlaunch::test_support::http_get;
using tlaunch::test_support::observed_program;

namespace {

const std::string program = TLAUNCH_METRICS_PROGRAM_EXE;

// The value of the first line that starts with `series` followed by a space; -1 if none.
double value_of(const std::string& text, const std::string& series) {
  std::size_t at = text.rfind(series + " ", 0) == 0 ? 0 : text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  at += series.size() + (at == 0 ? 1 : 2);
  return std::stod(text.substr(at, text.find('\n', at) - at));
}

// Polls the endpoint until pred(body) holds (or 30 s pass); the last body.
template <class Pred>
std::string scrape_until(std::uint16_t port, Pred pred, const std::string& headers = "") {
  std::string body;
  for (int i = 0; i < 300; ++i) {
    auto r = http_get("127.0.0.1", port, "/metrics", headers);
    body = r.body;
    if (r.status == 200 && pred(body)) break;
    std::this_thread::sleep_for(100ms);
  }
  return body;
}

const std::string add_edge(int worker) {
  return "tlaunch_calls_total{process=\"worker/" + std::to_string(worker) +
         "\",node=\"worker\",replica=\"" + std::to_string(worker) +
         "\",host=\"\",peer=\"ps/0\",method=\"ParamServer::add\"}";
}

std::uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string url_encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// Runs a real Prometheus server that scrapes the endpoint on `port` every second, and
// checks its answers: the program's rate of ParamServer::add calls, and its `processes`
// processes up.
void check_prometheus_scrapes(std::uint16_t port, int processes) {
  tlaunch::test_support::temp_dir dir("tlaunch-prometheus");
  const std::string config = dir.path.string() + "/prometheus.yml";
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                           "scrape_configs:\n  - job_name: tlaunch\n    static_configs:\n"
                           "      - targets: ['127.0.0.1:"
                        << port << "']\n";
  const std::uint16_t prom_port = free_port();
  REQUIRE_MESSAGE(std::filesystem::exists("/usr/bin/prometheus"),
                  "Debian's prometheus package is needed (tools/install-deps.sh installs it)");
  process prom({"/usr/bin/prometheus", "--config.file=" + config,
                "--storage.tsdb.path=" + dir.path.string() + "/data",
                "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)});

  // The program's rate of ParamServer::add calls over the last 10 s, summed over its edges,
  // as Prometheus computes it from its scrapes.
  const std::string query =
      "/api/v1/query?query=" +
      url_encode("sum(rate(tlaunch_calls_total{method=\"ParamServer::add\"}[10s]))");
  std::string answer;
  double rate = 0;
  for (int i = 0; i < 120 && rate <= 0; ++i) {
    std::this_thread::sleep_for(500ms);
    answer = http_get("127.0.0.1", prom_port, query).body;
    std::smatch m;
    if (std::regex_search(answer, m, std::regex(R"re("value":\[[0-9.]+,"([0-9.eE+-]+)"\])re")))
      rate = std::stod(m[1]);
  }
  INFO("Prometheus answered: " << answer);
  INFO("Prometheus output: " << prom.all());
  CHECK(answer.find("\"status\":\"success\"") != std::string::npos);
  // Two workers, a call every 2 ms or so each: tens to hundreds of calls a second.
  CHECK(rate > 10);
  auto up = http_get("127.0.0.1", prom_port,
                     "/api/v1/query?query=" + url_encode("count(tlaunch_process_up == 1)"))
                .body;
  CHECK(up.find(",\"" + std::to_string(processes) + "\"]") != std::string::npos);
  // The workers' own histogram (add_seconds, buckets up to 0.1 s): its median as Prometheus
  // computes it from the buckets, a time of a call on this machine.
  const std::string median_query =
      "/api/v1/query?query=" +
      url_encode("histogram_quantile(0.5, sum by (le) (rate(tlaunch_user_add_seconds_bucket[10s])))");
  std::string median_answer;
  double median = -1;
  for (int i = 0; i < 20 && median < 0; ++i) {
    median_answer = http_get("127.0.0.1", prom_port, median_query).body;
    std::smatch m;
    if (std::regex_search(median_answer, m,
                          std::regex(R"re("value":\[[0-9.]+,"([0-9.eE+-]+)"\])re")))
      median = std::stod(m[1]);
    else
      std::this_thread::sleep_for(500ms);
  }
  INFO("Prometheus answered: " << median_answer);
  CHECK(median > 0);
  CHECK(median <= 0.1);
  prom.signal(SIGTERM);
  CHECK(prom.wait_or_kill(30s) == 0);
}

}  // namespace

TEST_CASE("local_mp --metrics: every edge's calls, errors and latency, the served calls, the "
          "nodes' own metrics and each process, growing while the program runs") {
  observed_program run("metrics", {"--metrics=127.0.0.1:0"});
  const auto port = run.port("metrics");
  // Processes are asked in turn over each second: each part of the page fills on its own.
  const std::string served_add = "tlaunch_served_calls_total{process=\"ps/0\",node=\"ps\","
                                 "replica=\"0\",host=\"\",method=\"ParamServer::add\"}";
  std::string text = scrape_until(port, [&](const std::string& b) {
    return value_of(b, add_edge(0)) > 20 && value_of(b, add_edge(1)) > 20 &&
           value_of(b, served_add) > 40;
  });
  INFO(text);
  const double first = value_of(text, add_edge(0));
  CHECK(first > 20);
  const std::string w0 = "process=\"worker/0\",node=\"worker\",replica=\"0\",host=\"\"";
  const std::string fail_edge = w0 + ",peer=\"ps/0\",method=\"ParamServer::fail\"";
  CHECK(value_of(text, "tlaunch_call_errors_total{" + fail_edge + ",kind=\"remote_error\"}") > 0);
  CHECK(value_of(text, "tlaunch_call_errors_total{" + w0 +
                           ",peer=\"ps/0\",method=\"ParamServer::add\",kind=\"remote_error\"}") ==
        0);
  CHECK(value_of(text, "tlaunch_call_duration_seconds_count{" + w0 +
                           ",peer=\"ps/0\",method=\"ParamServer::add\"}") > 0);
  CHECK(value_of(text, served_add) > 40);
  // The served side of the same calls: ParamServer::fail's errors as its process answered
  // them, add's time from arrival to reply, the replies' bytes, none left unanswered for long.
  const std::string ps0 = "process=\"ps/0\",node=\"ps\",replica=\"0\",host=\"\"";
  const std::string served_fail = ps0 + ",method=\"ParamServer::fail\"";
  const std::string served_add_labels = ps0 + ",method=\"ParamServer::add\"";
  CHECK(value_of(text, "tlaunch_served_errors_total{" + served_fail + ",kind=\"remote_error\"}") >
        0);
  CHECK(value_of(text, "tlaunch_served_errors_total{" + served_add_labels +
                           ",kind=\"remote_error\"}") == 0);
  const double served_replies =
      value_of(text, "tlaunch_served_duration_seconds_count{" + served_add_labels + "}");
  CHECK(served_replies > 0);
  CHECK(value_of(text, "tlaunch_served_duration_seconds_bucket{" + served_add_labels +
                           ",le=\"+Inf\"}") == served_replies);
  CHECK(value_of(text, "tlaunch_served_duration_seconds_sum{" + served_add_labels + "}") > 0);
  // Each reply has a 32-byte header at least; the sample reads the counts one by one while
  // the replies go on, so one a worker may be in the count and not yet in the bytes.
  CHECK(value_of(text, "tlaunch_served_sent_bytes_total{" + served_add_labels + "}") >=
        (served_replies - 2) * 32);
  const double in_flight = value_of(text, "tlaunch_served_in_flight{" + served_add_labels + "}");
  CHECK(in_flight >= 0);
  CHECK(in_flight <= 2);  // one call a worker at a time
  CHECK(value_of(text, "tlaunch_user_rounds_total{" + w0 + "}") > 0);
  CHECK(value_of(text, "tlaunch_user_last_total{" + w0 + "}") > 0);
  CHECK(value_of(text, "tlaunch_user_add_seconds_bucket{" + w0 + ",le=\"+Inf\"}") ==
        value_of(text, "tlaunch_user_add_seconds_count{" + w0 + "}"));
  CHECK(value_of(text, "tlaunch_user_add_seconds_count{" + w0 + "}") > 0);
  for (std::string proc : {"ps/0\",node=\"ps\",replica=\"0", "worker/0\",node=\"worker\",replica=\"0",
                           "worker/1\",node=\"worker\",replica=\"1"}) {
    CHECK(value_of(text, "tlaunch_process_up{process=\"" + proc + "\",host=\"\"}") == 1);
    CHECK(value_of(text, "tlaunch_process_resident_memory_bytes{process=\"" + proc +
                             "\",host=\"\"}") > 1e6);
  }
  CHECK(value_of(text, "tlaunch_launcher_instances") == 3);
  // The counts grow: the next samples (one a second) show more calls.
  text = scrape_until(port, [&](const std::string& b) { return value_of(b, add_edge(0)) > first; });
  CHECK(value_of(text, add_edge(0)) > first);
  run.stop();
}

TEST_CASE("--metrics off loopback: a scraper needs the token the launcher printed") {
  observed_program run("metrics-token", {"--metrics=0.0.0.0:0"});
  const auto port = run.port("metrics");
  const std::string token = run.token();
  auto denied = http_get("127.0.0.1", port, "/metrics");
  CHECK(denied.status == 401);
  CHECK(denied.body.find("tlaunch_") == std::string::npos);
  CHECK(http_get("127.0.0.1", port, "/metrics", "Authorization: Bearer 0123\r\n").status == 401);
  auto text = scrape_until(
      port, [](const std::string& b) { return value_of(b, add_edge(0)) > 0; },
      "Authorization: Bearer " + token + "\r\n");
  CHECK(value_of(text, add_edge(0)) > 0);
  run.stop();
}

TEST_CASE("a real Prometheus server scrapes a local_mp program and answers its call rate") {
  observed_program run("metrics-prom", {"--metrics=127.0.0.1:0"});
  check_prometheus_scrapes(run.port("metrics"), 3);
  run.stop();
}

// Over SSH, against the loopback sshd of tools/sshd-fixture.sh (TLAUNCH_SSHD_ENV; the test
// `observe_prometheus_ssh` runs this case alone, with the fixture): ps/0 and worker/1 on
// 127.0.0.2, worker/0 on 127.0.0.3.
TEST_CASE("ssh: a real Prometheus server scrapes a program on two hosts") {
  const sshd_env env = read_sshd_env();
  const std::string h2 = env.host(2), h3 = env.host(3);
  process p({program, "--launch=ssh", "--hosts=" + h2 + "," + h3, "--place", "worker=" + h3 + "," + h2,
             "--place", "ps=" + h2, "--color=never", env.identity_flag(),
             env.known_hosts_flag(), "--metrics=127.0.0.1:0"});
  REQUIRE_MESSAGE(p.wait_for_output("metrics at http://", 120s), p.all());
  std::smatch pm;
  const std::string printed = p.all();
  REQUIRE(std::regex_search(printed, pm, std::regex(R"(metrics at http://[^ ]*:(\d+)/)")));
  const auto port = static_cast<std::uint16_t>(std::stoi(pm[1]));
  const std::string worker0 = "tlaunch_calls_total{process=\"worker/0\",node=\"worker\","
                              "replica=\"0\",host=\"" + h3 + "\",peer=\"ps/0\","
                              "method=\"ParamServer::add\"}";
  const std::string served = "tlaunch_served_calls_total{process=\"ps/0\",node=\"ps\",replica=\"0\","
                             "host=\"" + h2 + "\",method=\"ParamServer::add\"}";
  auto text = scrape_until(port, [&](const std::string& b) {
    return value_of(b, worker0) > 0 && value_of(b, served) > 0;
  });
  INFO(text);
  CHECK(value_of(text, worker0) > 0);
  CHECK(value_of(text, served) > 0);
  check_prometheus_scrapes(port, 3);
  p.signal(SIGTERM);
  CHECK(p.wait_or_kill(60s) == 143);
}
