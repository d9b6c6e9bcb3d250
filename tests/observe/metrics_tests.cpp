// The counts of a process's calls (rpc/metrics.hpp), their Prometheus text
// (launch/observe/prometheus.hpp) and the launcher's HTTP endpoint
// (launch/observe/http_endpoint.hpp), without processes.
#include <doctest/doctest.h>

#include <tlaunch/context.hpp>
#include <tlaunch/launch/observe/http_endpoint.hpp>
#include <tlaunch/launch/observe/prometheus.hpp>
#include <tlaunch/rpc/metrics.hpp>
#include <tlaunch/rpc/read_batch.hpp>
#include <tlaunch/wire/codec.hpp>

#include <asio/executor_work_guard.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <regex>
#include <thread>
#include <vector>

#include "http_get.hpp"

using namespace tlaunch;
using tlaunch::test_support::http_get;
using tlaunch::test_support::http_raw;

namespace {

// The value of the first line that starts with `series` (name and labels) followed by a space.
double value_of(const std::string& text, const std::string& series) {
  auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  at += series.size() + 2;
  return std::stod(text.substr(at, text.find('\n', at) - at));
}

// An io_context run on a thread of its own while the test runs.
struct io_thread {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::thread t;
  void start() { t = std::thread([this] { io.run(); }); }
  ~io_thread() {
    work.reset();
    io.stop();
    if (t.joinable()) t.join();
  }
};

}  // namespace

TEST_CASE("latency buckets: bucket k holds durations under 2^k microseconds") {
  CHECK(rpc::latency_bucket(0) == 0);
  CHECK(rpc::latency_bucket(999) == 0);     // under 1 us
  CHECK(rpc::latency_bucket(1000) == 1);    // 1 us: under 2 us
  CHECK(rpc::latency_bucket(3999) == 2);    // 3.999 us: under 4 us
  CHECK(rpc::latency_bucket(4000) == 3);
  CHECK(rpc::latency_bucket(-5) == 0);
  CHECK(rpc::latency_bucket(std::int64_t{1} << 62) == rpc::latency_buckets - 1);
}

TEST_CASE("a connection's counts and the served methods' reach the sample, and stay there after it closes") {
  rpc::metrics_registry reg;
  auto link = reg.open_link();
  rpc::call_stats* add = link->calls_to(3, 77, "PS::add");
  CHECK(link->calls_to(3, 77, "PS::add") == add);  // found again
  rpc::call_stats* other = link->calls_to(4, 77, "PS::add");
  CHECK(other != add);
  for (int i = 0; i < 5; ++i) {
    add->calls.add(1);
    add->bytes_out.add(40);
  }
  rpc::link_metrics::ended(*add, rpc::call_outcome::reply, 1'000, 51'000, 48);  // 50 us
  rpc::link_metrics::ended(*add, rpc::call_outcome::reply, 0, 3'000'000, 48);   // 3 ms
  rpc::link_metrics::ended(*add, rpc::call_outcome::remote_error, 0, 10'000, 60);
  rpc::link_metrics::ended(*add, rpc::call_outcome::unavailable, 0, 0, 0);
  // Served: the blocks of instance 2's methods 9 and 10, as the runtime counts into them
  // (from this thread, which is none of a runtime's io threads: the shared shard).
  rpc::served_stats* m9 = reg.served(2, 9);
  CHECK(reg.served(2, 9) == m9);  // one block per instance and method
  for (int i = 0; i < 3; ++i)
    m9->update([](rpc::served_shard& sh) {
      sh.calls.add(1);
      sh.bytes_in.add(100);
    });
  // At least 1.5 ms: bucket 11 (under 2,048 us) or, on a slow machine, a later one.
  rpc::deferred_writes::count_served_end({1, m9, rpc::metrics_now() - 1'500'000},
                                         rpc::call_outcome::reply, 24);
  {
    // In a scope (a read's, a batch's), an end is counted as the scope's replies leave.
    rpc::deferred_writes::scope replies;
    // Arrived "later" than it ends: counted as 0 ns, in bucket 0.
    rpc::deferred_writes::count_served_end({2, m9, rpc::metrics_now() + 1'000'000'000},
                                           rpc::call_outcome::remote_error, 70);
    rpc::metrics_sample during;
    reg.sample_into(during, [](std::uint32_t) { return std::string(); },
                    [](std::uint32_t, std::uint64_t) { return std::string(); });
    CHECK(during.served[0].in_flight() == 2);
  }
  reg.served(2, 10)->update([](rpc::served_shard& sh) { sh.calls.add(1); });
  // Arguments that did not deserialize: answered bad_call on the reader.
  rpc::deferred_writes::count_served_end({3, reg.served(2, 10), rpc::metrics_now()},
                                         rpc::call_outcome::bad_call, 60);
  reg.user("worker/0", "rounds", true).add(7);
  reg.user("worker/0", "loss", false).set(0.25);

  auto names = [](std::uint32_t f) { return "node/" + std::to_string(f); };
  auto methods = [](std::uint32_t, std::uint64_t m) { return "M" + std::to_string(m); };
  auto check = [&](const rpc::metrics_sample& s) {
    REQUIRE(s.calls.size() == 2);
    const rpc::call_sample& c = s.calls[0];  // (3, 77) sorts before (4, 77)
    CHECK(c.callee == "node/3");
    CHECK(c.method == "PS::add");
    CHECK(c.calls == 5);
    CHECK(c.bytes_out == 200);
    CHECK(c.bytes_in == 48 + 48 + 60);  // an unavailable call received nothing
    CHECK(c.ended[static_cast<std::size_t>(rpc::call_outcome::reply)] == 2);
    CHECK(c.ended[static_cast<std::size_t>(rpc::call_outcome::remote_error)] == 1);
    CHECK(c.ended[static_cast<std::size_t>(rpc::call_outcome::unavailable)] == 1);
    CHECK(c.in_flight() == 1);
    CHECK(c.latency[rpc::latency_bucket(50'000)] == 1);
    CHECK(c.latency[rpc::latency_bucket(3'000'000)] == 1);
    CHECK(c.latency_ns == 50'000 + 3'000'000 + 10'000);
    REQUIRE(s.served.size() == 2);
    const rpc::served_sample& v = s.served[0];
    CHECK(v.instance == "node/2");
    CHECK(v.method == "M9");
    CHECK(v.calls == 3);
    CHECK(v.bytes_in == 300);
    CHECK(v.bytes_out == 24 + 70);
    REQUIRE(v.ended.size() == 4);  // reply, remote_error, timeout, bad_call
    CHECK(v.ended[static_cast<std::size_t>(rpc::call_outcome::reply)] == 1);
    CHECK(v.ended[static_cast<std::size_t>(rpc::call_outcome::remote_error)] == 1);
    CHECK(v.in_flight() == 1);
    REQUIRE(v.duration.size() == rpc::latency_buckets);
    CHECK(v.duration[0] == 1);
    std::uint64_t long_ones = 0;
    for (std::size_t k = rpc::latency_bucket(1'500'000); k < v.duration.size(); ++k)
      long_ones += v.duration[k];
    CHECK(long_ones == 1);
    CHECK(v.duration_ns >= 1'500'000);
    CHECK(s.served[1].ended[static_cast<std::size_t>(rpc::call_outcome::bad_call)] == 1);
    CHECK(s.served[1].in_flight() == 0);
    REQUIRE(s.user.size() == 2);
  };
  rpc::metrics_sample live;
  reg.sample_into(live, names, methods);
  check(live);
  reg.link_closed(link);
  link.reset();
  rpc::metrics_sample after;
  reg.sample_into(after, names, methods);
  check(after);
}

TEST_CASE("a node's histogram: each value under the first bound it does not exceed") {
  rpc::metrics_registry reg;
  tlaunch::node_metrics m(reg, "worker/0");
  auto h = m.histogram("step_seconds", {0.1, 1, 10});
  for (double x : {0.05, 0.1, 0.5, 1.0, 3.0, 99.0, std::nan("")}) h.observe(x);
  CHECK(h.count() == 6);  // NaN is not counted
  CHECK(h.sum() == doctest::Approx(0.05 + 0.1 + 0.5 + 1.0 + 3.0 + 99.0));
  // The same name again is the same histogram; other bounds are refused, naming it.
  m.histogram("step_seconds", {0.1, 1, 10}).observe(0.2);
  CHECK(h.count() == 7);
  CHECK_THROWS_WITH_AS(m.histogram("step_seconds", {1, 2}),
                       "the histogram \"step_seconds\" of worker/0 was made with other bucket bounds",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(m.histogram("bad", {1, 1}),
                       "histogram \"bad\": bucket bounds must be finite and ascending",
                       std::invalid_argument);
  CHECK_THROWS_AS(m.histogram("none", {}), std::invalid_argument);
  CHECK(m.histogram("latency").count() == 0);  // Prometheus's default buckets

  rpc::metrics_sample s;
  s.process = "worker/0";
  reg.sample_into(s, [](std::uint32_t) { return std::string(); },
                  [](std::uint32_t, std::uint64_t) { return std::string(); });
  REQUIRE(s.histograms.size() == 2);
  const rpc::histogram_sample& hs = s.histograms[1];  // "latency" sorts first
  CHECK(hs.name == "step_seconds");
  CHECK(hs.bounds == std::vector<double>{0.1, 1, 10});
  CHECK(hs.counts == std::vector<std::uint64_t>{2, 3, 1, 1});
  // Through the wire format, as the launcher gets it.
  wire::frame_buffer f;
  wire::serialize_into(f, s);
  rpc::metrics_sample back;
  wire::deserialize_from(f.bytes().subspan(wire::header_size), back);
  REQUIRE(back.histograms.size() == 2);
  CHECK(back.histograms[1].counts == hs.counts);
  CHECK(back.histograms[1].sum == hs.sum);

  std::vector<launch::observe::process_metrics> ps = {{"worker/0", "h", 0, true, &back}};
  const std::string text = launch::observe::render_prometheus(ps, 1);
  INFO(text);
  const std::string w0 = "process=\"worker/0\",node=\"worker\",replica=\"0\",host=\"h\"";
  CHECK(text.find("# TYPE tlaunch_user_step_seconds histogram\n") != std::string::npos);
  CHECK(value_of(text, "tlaunch_user_step_seconds_bucket{" + w0 + ",le=\"0.1\"}") == 2);
  CHECK(value_of(text, "tlaunch_user_step_seconds_bucket{" + w0 + ",le=\"1\"}") == 5);
  CHECK(value_of(text, "tlaunch_user_step_seconds_bucket{" + w0 + ",le=\"10\"}") == 6);
  CHECK(value_of(text, "tlaunch_user_step_seconds_bucket{" + w0 + ",le=\"+Inf\"}") == 7);
  CHECK(value_of(text, "tlaunch_user_step_seconds_count{" + w0 + "}") == 7);
  CHECK(value_of(text, "tlaunch_user_step_seconds_sum{" + w0 + "}") == doctest::Approx(hs.sum));
}

TEST_CASE("the Prometheus text: families once, labels escaped, histograms cumulative") {
  rpc::metrics_sample s;
  s.process = "worker/1";
  s.cpu_seconds = 1.5;
  s.rss_bytes = 1 << 20;
  s.connections = 2;
  rpc::call_sample c;
  c.callee = "ps/0";
  c.method = "PS::add";
  c.calls = 4;
  c.ended.assign(rpc::call_outcomes, 0);
  c.ended[0] = 3;
  c.latency.assign(rpc::latency_buckets, 0);
  c.latency[2] = 2;  // under 4 us
  c.latency[5] = 1;  // under 32 us
  c.latency_ns = 20'000;
  s.calls.push_back(c);
  rpc::served_sample poke;
  poke.instance = "worker/1";
  poke.method = "Worker::poke";
  poke.calls = 9;
  poke.bytes_in = 90;
  poke.bytes_out = 40;
  poke.ended = {5, 2, 1, 0};  // 1 in flight
  poke.duration.assign(rpc::latency_buckets, 0);
  poke.duration[3] = 4;   // under 8 us
  poke.duration[10] = 4;  // under 1,024 us
  poke.duration_ns = 2'000'000;
  s.served.push_back(poke);
  s.user.push_back({"worker/1", "episodes done", true, 12});
  s.user.push_back({"worker/1", "loss", false, 0.5});
  // Names that would collide once made metric names: the first is kept, the page stays valid.
  s.user.push_back({"worker/1", "a b", true, 1});
  s.user.push_back({"worker/1", "a_b", true, 2});
  s.user.push_back({"worker/1", "rounds", true, 3});
  s.user.push_back({"worker/1", "rounds_total", false, 4});
  std::vector<launch::observe::process_metrics> ps = {
      {"worker/1", "host\"a\nb", 2, true, &s},
      {"ps/0", "", 0, false, nullptr},
  };
  const std::string text = launch::observe::render_prometheus(ps, 3);
  INFO(text);
  const std::string edge =
      "process=\"worker/1\",node=\"worker\",replica=\"1\",host=\"host\\\"a\\nb\","
      "peer=\"ps/0\",method=\"PS::add\"";
  CHECK(value_of(text, "tlaunch_calls_total{" + edge + "}") == 4);
  CHECK(value_of(text, "tlaunch_calls_in_flight{" + edge + "}") == 1);
  CHECK(value_of(text, "tlaunch_call_duration_seconds_bucket{" + edge + ",le=\"1e-06\"}") == 0);
  CHECK(value_of(text, "tlaunch_call_duration_seconds_bucket{" + edge + ",le=\"4e-06\"}") == 2);
  CHECK(value_of(text, "tlaunch_call_duration_seconds_bucket{" + edge + ",le=\"1.6e-05\"}") == 2);
  CHECK(value_of(text, "tlaunch_call_duration_seconds_bucket{" + edge + ",le=\"3.2e-05\"}") == 3);
  CHECK(value_of(text, "tlaunch_call_duration_seconds_bucket{" + edge + ",le=\"+Inf\"}") == 3);
  CHECK(value_of(text, "tlaunch_call_duration_seconds_count{" + edge + "}") == 3);
  CHECK(value_of(text, "tlaunch_call_duration_seconds_sum{" + edge + "}") ==
        doctest::Approx(2e-5));
  CHECK(value_of(text, "tlaunch_call_errors_total{" + edge + ",kind=\"remote_error\"}") == 0);
  CHECK(value_of(text, "tlaunch_process_restarts_total{process=\"worker/1\",node=\"worker\","
                       "replica=\"1\",host=\"host\\\"a\\nb\"}") == 2);
  CHECK(value_of(text, "tlaunch_process_up{process=\"ps/0\",node=\"ps\",replica=\"0\","
                       "host=\"\"}") == 0);
  const std::string poked =
      "process=\"worker/1\",node=\"worker\",replica=\"1\",host=\"host\\\"a\\nb\","
      "method=\"Worker::poke\"";
  CHECK(value_of(text, "tlaunch_served_calls_total{" + poked + "}") == 9);
  CHECK(value_of(text, "tlaunch_served_in_flight{" + poked + "}") == 1);
  CHECK(value_of(text, "tlaunch_served_errors_total{" + poked + ",kind=\"remote_error\"}") == 2);
  CHECK(value_of(text, "tlaunch_served_errors_total{" + poked + ",kind=\"timeout\"}") == 1);
  CHECK(value_of(text, "tlaunch_served_errors_total{" + poked + ",kind=\"bad_call\"}") == 0);
  // Only a served call's kinds: nobody abandons or loses a call it serves.
  CHECK(text.find("tlaunch_served_errors_total{" + poked + ",kind=\"abandoned\"}") ==
        std::string::npos);
  CHECK(value_of(text, "tlaunch_served_sent_bytes_total{" + poked + "}") == 40);
  CHECK(value_of(text, "tlaunch_served_duration_seconds_bucket{" + poked + ",le=\"8e-06\"}") == 4);
  CHECK(value_of(text, "tlaunch_served_duration_seconds_bucket{" + poked + ",le=\"+Inf\"}") == 8);
  CHECK(value_of(text, "tlaunch_served_duration_seconds_count{" + poked + "}") == 8);
  CHECK(value_of(text, "tlaunch_served_duration_seconds_sum{" + poked + "}") ==
        doctest::Approx(2e-3));
  CHECK(text.find("tlaunch_user_episodes_done_total{") != std::string::npos);
  CHECK(text.find("# TYPE tlaunch_user_loss gauge\n") != std::string::npos);
  CHECK(value_of(text, "tlaunch_launcher_instances") == 3);
  const std::string w1 = "{process=\"worker/1\",node=\"worker\",replica=\"1\",host=\"host\\\"a\\nb\"}";
  CHECK(value_of(text, "tlaunch_user_a_b_total" + w1) == 1);
  CHECK(value_of(text, "tlaunch_user_rounds_total" + w1) == 3);
  CHECK(launch::observe::exposition{}.text().empty());
  for (std::string series : {"tlaunch_user_a_b_total" + w1, "tlaunch_user_rounds_total" + w1,
                             std::string("# TYPE tlaunch_user_rounds_total ")}) {
    std::size_t n = 0;
    for (auto at = text.find(series); at != std::string::npos; at = text.find(series, at + 1)) ++n;
    CHECK_MESSAGE(n == 1, series);
  }
  // Each family's HELP and TYPE once, and its lines together.
  for (std::string family : {"tlaunch_calls_total", "tlaunch_call_duration_seconds",
                             "tlaunch_process_up"}) {
    CHECK(launch::observe::exposition{}.text().empty());
    std::size_t types = 0;
    for (auto at = text.find("# TYPE " + family + " "); at != std::string::npos;
         at = text.find("# TYPE " + family + " ", at + 1))
      ++types;
    CHECK(types == 1);
  }
  // Every line is a comment or NAME{LABELS} VALUE.
  std::regex line(R"(^(# (HELP|TYPE) .*|[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? \S+)$)");
  std::size_t from = 0;
  while (from < text.size()) {
    auto nl = text.find('\n', from);
    std::string l = text.substr(from, nl - from);
    CHECK_MESSAGE(std::regex_match(l, line), l);
    from = nl + 1;
  }
}

TEST_CASE("the endpoint: GET only, statuses that say what was wrong, a token off loopback") {
  io_thread t;
  std::string token;
  SUBCASE("no token") {}
  SUBCASE("a token") { token = "s3cret"; }
  launch::observe::http_endpoint ep(
      t.io, {asio::ip::make_address("127.0.0.1"), 0}, token,
      [](std::string_view path) -> launch::observe::http_response {
        if (path == "/metrics") return {200, "text/plain", "up 1\n"};
        return {404, "text/plain", "not found\n"};
      });
  t.start();
  const auto port = ep.port();
  const std::string auth = token.empty() ? "" : "Authorization: Bearer " + token + "\r\n";
  auto r = http_get("127.0.0.1", port, "/metrics", auth);
  CHECK(r.status == 200);
  CHECK(r.body == "up 1\n");
  CHECK(r.headers.find("Content-Length: 5") != std::string::npos);
  CHECK(http_get("127.0.0.1", port, "/nothing", auth).status == 404);
  CHECK(http_raw("127.0.0.1", port, "POST /metrics HTTP/1.1\r\n" + auth + "\r\n").status == 405);
  CHECK(http_raw("127.0.0.1", port, "garbage\r\n\r\n").status == 400);
  CHECK(http_raw("127.0.0.1", port, std::string(20000, 'x')).status == 413);
  if (!token.empty()) {
    auto denied = http_get("127.0.0.1", port, "/metrics");
    CHECK(denied.status == 401);
    CHECK(denied.body.find("token") != std::string::npos);
    CHECK(http_get("127.0.0.1", port, "/metrics", "Authorization: Bearer wrong\r\n").status ==
          401);
    CHECK(http_get("127.0.0.1", port, "/metrics?token=" + token).status == 200);
    CHECK(http_get("127.0.0.1", port, "/metrics", "authorization: Bearer " + token + "\r\n")
              .status == 200);
  }
}

TEST_CASE("the endpoint: idle and slow clients are closed, and it keeps answering") {
  io_thread t;
  launch::observe::http_endpoint ep(
      t.io, {asio::ip::make_address("127.0.0.1"), 0}, "",
      [](std::string_view) -> launch::observe::http_response { return {200, "text/plain", "ok\n"}; },
      std::chrono::milliseconds(300));
  t.start();
  const auto port = ep.port();
  // More idle connections than it serves at once: the extra ones are closed at once, the
  // others after the timeout; then a request is answered.
  std::vector<int> idle;
  for (std::size_t i = 0; i < launch::observe::http_endpoint::max_clients + 8; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    idle.push_back(fd);
  }
  // Each idle connection ends (EOF) within a generous multiple of the timeout.
  for (int fd : idle) {
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char c;
    CHECK(::recv(fd, &c, 1, 0) <= 0);
    ::close(fd);
  }
  CHECK(http_get("127.0.0.1", port, "/").body == "ok\n");
}

TEST_CASE("endpoints: ADDR:PORT, or an error naming what is wrong") {
  std::string why;
  auto ep = launch::observe::parse_endpoint("127.0.0.1:9100", why);
  REQUIRE(ep);
  CHECK(ep->port() == 9100);
  CHECK(launch::observe::parse_endpoint("[::1]:0", why)->address().is_v6());
  CHECK_FALSE(launch::observe::parse_endpoint("localhost:9100", why));
  CHECK(why.find("'localhost' is not an IP address") != std::string::npos);
  CHECK_FALSE(launch::observe::parse_endpoint("127.0.0.1:99999", why));
  CHECK(why.find("not a port") != std::string::npos);
  CHECK_FALSE(launch::observe::parse_endpoint("9100", why));
  CHECK(why.find("not ADDR:PORT") != std::string::npos);
}
