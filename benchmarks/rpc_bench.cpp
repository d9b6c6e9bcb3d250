// rpc_bench: tlaunch call latency and throughput, beside a plain Asio TCP echo over
// the same path in the same run. It is itself a tlaunch program (a ping service and
// a driver), so it runs under every launch type:
//
//   ./rpc_bench                                   # local_mt: both nodes in one process
//   ./rpc_bench --launch=local_mp -- --count=100000 --pin
//   ./rpc_bench --launch=ssh --hosts=h1,h2 --place ping=h2 -- --count=100000
//
// The ping node also serves the baseline echo (and gRPC's ping when built with it)
// on the address its tlaunch server bound, so every figure is measured between the
// same two processes.
#include <sched.h>
#include <unistd.h>

#include <tlaunch/tlaunch.hpp>

#include <asio/steady_timer.hpp>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <future>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "baseline.hpp"
#include "raw_socket.hpp"
#include "stats.hpp"
#ifdef TLAUNCH_BENCH_GRPC
#include "grpc/grpc_ping.hpp"
#endif

namespace bench = tlaunch::bench;

namespace {

// Pins every thread of this process to one CPU (sched_setaffinity(0) would pin only
// the calling thread, and the io pool has several).
bool pin_process(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  bool ok = true;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    pid_t tid = static_cast<pid_t>(std::stol(e.path().filename().string()));
    if (::sched_setaffinity(tid, sizeof set, &set) != 0) ok = false;
  }
  return ok && !ec;
}

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

// ----- the service ------------------------------------------------------------------

struct Ping {
  std::int64_t add(std::int32_t a, std::int32_t b) { return std::int64_t{a} + b; }
  // tlaunch::bytes: large payloads travel without copies (same bytes on the wire as a
  // std::vector<char>: a u64 size, then the data).
  tlaunch::bytes echo(tlaunch::bytes p) { return p; }

  // "host:port" of the baseline echo server, empty until run() has started it.
  std::string baseline_address() { return baseline_; }
  std::string grpc_address() { return grpc_; }
  std::string raw_address() { return raw_; }
  // Which process this is, so the driver can tell whether they share one.
  std::string process() { return host_name() + "/" + std::to_string(::getpid()); }
  bool pin(std::int32_t cpu) { return pin_process(cpu); }
  // Sets this process's busy polling (--busy-poll), in microseconds.
  bool busy_poll(std::int64_t us) {
    if (!ctx_) return false;
    ctx_->set_busy_poll(std::chrono::microseconds(us));
    return true;
  }

  using rpc = tlaunch::methods<&Ping::add, &Ping::echo, &Ping::baseline_address, &Ping::grpc_address,
                               &Ping::raw_address, &Ping::process, &Ping::pin, &Ping::busy_poll>;

  asio::awaitable<void> run(tlaunch::context& ctx) {
    ctx_ = &ctx;
    auto host = ctx.listen_host();
    echo_ = std::make_unique<bench::echo_server>(ctx.executor());
    auto port = echo_->start(host);
#ifdef TLAUNCH_BENCH_GRPC
    grpc_server_ = std::make_unique<bench::grpc_ping_server>(host);
    grpc_ = host + ":" + std::to_string(grpc_server_->port());
#endif
    // The raw echo's threads spin as long as --busy-poll lets the io threads.
    raw_echo_ = std::make_unique<bench::raw_echo_server>(ctx.busy_poll().count());
    auto raw_port = raw_echo_->start(host);
    auto bracketed = host.find(':') != std::string::npos ? "[" + host + "]" : host;
    raw_ = bracketed + ":" + std::to_string(raw_port);
    baseline_ = bracketed + ":" + std::to_string(port);
    co_await ctx.stopped();
    echo_->stop();
    raw_echo_->stop();
    ctx_ = nullptr;
  }

 private:
  tlaunch::context* ctx_ = nullptr;
  std::unique_ptr<bench::echo_server> echo_;
  std::unique_ptr<bench::raw_echo_server> raw_echo_;
  std::string baseline_, grpc_, raw_;
#ifdef TLAUNCH_BENCH_GRPC
  std::unique_ptr<bench::grpc_ping_server> grpc_server_;
#endif
};

// ----- options ------------------------------------------------------------------------

struct bench_options {
  std::size_t payload = 8;  // 8: Ping::add (two int32 in, one int64 out); else Ping::echo
  std::size_t count = 20000;
  std::size_t warmup = 1000;
  std::size_t inflight = 64;
  std::size_t bulk_count = 200;
  std::size_t bulk_bytes = 1 << 20;
  std::size_t rounds = 4;  // baseline and tlaunch alternate, so drift hits both alike
  bool json = false;
  bool pin = false;
  bool histogram = true;
};

constexpr const char* usage =
    "rpc_bench options (after --):\n"
    "  --payload=BYTES     call payload; 8 (default) calls add(int32, int32) -> int64,\n"
    "                      anything else calls echo(tlaunch::bytes) with that many bytes\n"
    "  --count=N           timed sequential and pipelined calls (default 20000)\n"
    "  --warmup=N          untimed calls before each measurement (default 1000)\n"
    "  --inflight=K        calls in flight for the pipelined figure (default 64)\n"
    "  --bulk-count=N      1 MiB echoes for the bulk figure (default 200)\n"
    "  --rounds=N          alternate baseline and tlaunch in N rounds (default 4)\n"
    "  --no-histogram      table only\n"
    "  --json              one JSON object on stdout instead of the table\n"
    "  --pin               pin driver and ping to separate CPUs (sched_setaffinity)\n"
    "  --help              this list\n";

bench_options parse_options(const std::vector<std::string>& args) {
  bench_options o;
  auto number = [](const std::string& flag, const std::string& v) {
    try {
      std::size_t used = 0;
      auto n = std::stoull(v, &used);
      if (used != v.size()) throw std::invalid_argument(v);
      return static_cast<std::size_t>(n);
    } catch (const std::exception&) {
      throw std::invalid_argument("rpc_bench: " + flag + " wants a whole number, not '" + v + "'\n" + usage);
    }
  };
  for (const auto& a : args) {
    auto eq = a.find('=');
    std::string flag = a.substr(0, eq), v = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (flag == "--payload") o.payload = number(flag, v);
    else if (flag == "--count") o.count = number(flag, v);
    else if (flag == "--warmup") o.warmup = number(flag, v);
    else if (flag == "--inflight") o.inflight = number(flag, v);
    else if (flag == "--bulk-count") o.bulk_count = number(flag, v);
    else if (flag == "--rounds") o.rounds = number(flag, v);
    else if (flag == "--json") o.json = true;
    else if (flag == "--pin") o.pin = true;
    else if (flag == "--no-histogram") o.histogram = false;
    else throw std::invalid_argument("rpc_bench: unknown option '" + a + "'\n" + usage);
  }
  if (o.count == 0) throw std::invalid_argument("rpc_bench: --count must be at least 1\n" + std::string(usage));
  if (o.rounds == 0) o.rounds = 1;
  if (o.inflight == 0) o.inflight = 1;
  return o;
}

// ----- the driver -----------------------------------------------------------------------

class Driver {
 public:
  explicit Driver(tlaunch::handle<Ping> p) : ping(std::move(p)) {}

  asio::awaitable<void> run(tlaunch::context& ctx) {
    try {
      co_await measure(ctx);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rpc_bench: %s\n", e.what());
      throw;  // a failed run() stops the program; stop_program() first would hide the failure
    }
    ctx.stop_program();
  }

 private:
  // The bytes tlaunch puts after its frame header for one call (cereal binary).
  static std::size_t wire_payload(std::size_t payload) {
    return payload == 8 ? 8 : 8 + payload;  // two int32, or a vector's u64 size + bytes
  }

  // Sequential calls of the configured shape. The timed region holds the call
  // alone (no benchmark coroutine around it), like the baseline's round trip.
  asio::awaitable<double> tlaunch_sequential(const tlaunch::handle<Ping>& h, const std::vector<char>& body,
                                             std::size_t warmup, std::size_t count,
                                             bench::latency_recorder& rec, bool add) {
    if (add) {
      auto check = [](std::int64_t r, std::int32_t i) {
        if (r != std::int64_t{i} + 2) throw std::runtime_error("Ping::add returned a wrong sum");
      };
      for (std::size_t i = 0; i < warmup; ++i) {
        auto n = static_cast<std::int32_t>(i);
        check(co_await h.call<&Ping::add>(n, 2), n);
      }
      auto start = bench::bench_clock::now();
      for (std::size_t i = 0; i < count; ++i) {
        auto n = static_cast<std::int32_t>(i);
        auto t0 = bench::bench_clock::now();
        auto r = co_await h.call<&Ping::add>(n, 2);
        rec.add(bench::elapsed_ns(t0));
        check(r, n);
      }
      co_return double(bench::elapsed_ns(start)) / 1e9;
    }
    tlaunch::bytes payload(body);  // made once: the copy is not the call's cost
    auto check = [&](const tlaunch::bytes& r) {
      if (r.size() != body.size()) throw std::runtime_error("Ping::echo returned a wrong size");
    };
    for (std::size_t i = 0; i < warmup; ++i) check(co_await h.call<&Ping::echo>(payload));
    auto start = bench::bench_clock::now();
    for (std::size_t i = 0; i < count; ++i) {
      auto t0 = bench::bench_clock::now();
      auto r = co_await h.call<&Ping::echo>(payload);
      rec.add(bench::elapsed_ns(t0));
      check(r);
    }
    co_return double(bench::elapsed_ns(start)) / 1e9;
  }

  // K calls in flight through futures, refilled like the baseline: await the
  // oldest, take every other reply that has arrived by then, and start as many
  // new calls (one batch, so they leave in one write). Like the baseline, a
  // batch's calls share one send time, taken before the first of them starts.
  template <auto M, class... A>
  asio::awaitable<double> tlaunch_pipelined_with(std::size_t inflight, std::size_t count,
                                                 bench::latency_recorder& rec, const A&... args) {
    using F = decltype(ping.async<M>(args...));
    std::deque<std::pair<F, bench::bench_clock::time_point>> q;
    std::size_t started = 0;
    auto start = bench::bench_clock::now();
    while (started < count && q.size() < inflight) {
      q.emplace_back(ping.async<M>(args...), start);
      ++started;
    }
    while (!q.empty()) {
      co_await q.front().first.async_wait();
      std::size_t got = 0;
      auto now = bench::bench_clock::now();
      while (!q.empty() && (got == 0 || q.front().first.ready())) {
        rec.add(static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(now - q.front().second).count()));
        q.pop_front();
        ++got;
      }
      for (; got > 0 && started < count; --got, ++started)
        q.emplace_back(ping.async<M>(args...), now);
    }
    co_return double(bench::elapsed_ns(start)) / 1e9;
  }

  asio::awaitable<double> tlaunch_pipelined(const std::vector<char>& body, std::size_t inflight,
                                            std::size_t count, bench::latency_recorder& rec) {
    if (use_add_) co_return co_await tlaunch_pipelined_with<&Ping::add>(inflight, count, rec, 1, 2);
    co_return co_await tlaunch_pipelined_with<&Ping::echo>(inflight, count, rec, tlaunch::bytes(body));
  }

  // One round of blocking calls (gRPC's, the raw socket's) on a thread of its own,
  // so the io pool keeps serving; returns what job returns. Busy polling is off in
  // both processes meanwhile: spinning io threads would only take the cores that
  // gRPC's threads, or the raw echo's spinning ones, need.
  template <class Job>
  asio::awaitable<double> off_io_round(tlaunch::context& ctx, bool shared_process, Job job) {
    const auto poll = ctx.busy_poll();
    if (poll.count() != 0) {
      ctx.set_busy_poll(std::chrono::microseconds(0));
      if (!shared_process) co_await ping.call<&Ping::busy_poll>(0);
    }
    auto done = std::async(std::launch::async, std::move(job));
    asio::steady_timer t(co_await asio::this_coro::executor);
    while (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      t.expires_after(std::chrono::milliseconds(5));
      co_await t.async_wait(asio::use_awaitable);
    }
    double wall = done.get();
    if (poll.count() != 0) {
      ctx.set_busy_poll(poll);
      if (!shared_process) co_await ping.call<&Ping::busy_poll>(poll.count());
    }
    co_return wall;
  }

  static std::pair<std::string, std::uint16_t> split_address(const std::string& address) {
    auto colon = address.rfind(':');
    std::string host = address.substr(0, colon);
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    return {host, static_cast<std::uint16_t>(std::stoul(address.substr(colon + 1)))};
  }

  // The ping node starts its servers in run(), which may begin after ours.
  template <auto M>
  asio::awaitable<std::string> address_of(tlaunch::context& ctx) {
    for (int i = 0; i < 5000; ++i) {
      auto a = co_await ping.call<M>();
      if (!a.empty()) co_return a;
      co_await ctx.sleep_for(std::chrono::milliseconds(1));
    }
    throw std::runtime_error("the ping node did not start its servers within 5 s");
  }

  asio::awaitable<void> measure(tlaunch::context& ctx) {
    auto o = parse_options(ctx.args());
    use_add_ = o.payload == 8;
    std::vector<char> body(use_add_ ? 8 : o.payload, 'x');
    const std::size_t wire = wire_payload(o.payload);
    const std::size_t bulk_wire = wire_payload(o.bulk_bytes);
    std::vector<char> bulk_body(o.bulk_bytes, 'b');

    auto ping_process = co_await ping.call<&Ping::process>();
    std::string my_process = host_name() + "/" + std::to_string(::getpid());
    bool shared_process = ping_process == my_process;
    std::string pinned = "no";
    if (o.pin) {
      if (shared_process) {
        pinned = "no (ping and driver share a process; use --launch=local_mp)";
      } else {
        bool a = pin_process(0);
        bool b = co_await ping.call<&Ping::pin>(1);
        pinned = a && b ? "driver cpu 0, ping cpu 1" : "failed (sched_setaffinity)";
      }
    }

    auto address = co_await address_of<&Ping::baseline_address>(ctx);
    auto [bhost, bport] = split_address(address);
    auto sock = co_await bench::connect_echo(bhost, bport);
    // The raw socket echo: the same messages with no event loop on either side.
    auto [rhost, rport] = split_address(co_await address_of<&Ping::raw_address>(ctx));
    bench::raw_echo_client raw_client(rhost, rport);
    bench::latency_recorder raw_rec;
    double wall_raw = 0;

    const auto busy_poll = ctx.busy_poll();
    std::string busy = busy_poll.count() == 0 ? "off" : std::to_string(busy_poll.count()) + " us";
    if (!o.json)
      std::printf("rpc_bench: ping %s, driver %s, baseline echo at %s, payload %zu B (%s), pin: %s, "
                  "busy-poll: %s\n",
                  ping_process.c_str(), my_process.c_str(), address.c_str(), o.payload,
                  use_add_ ? "add(int32, int32) -> int64" : "echo(tlaunch::bytes)", pinned.c_str(),
                  busy.c_str());

    // gRPC's ping, when built: its rounds join the sequential ones.
    std::optional<bench::summary> grpc_seq;
    bench::latency_recorder grpc_rec;
#ifdef TLAUNCH_BENCH_GRPC
    double wall_grpc = 0;
    bench::grpc_ping_client grpc_client(co_await address_of<&Ping::grpc_address>(ctx));
#endif
    // Sequential: rounds alternate baseline and tlaunch (and gRPC); warm-up before
    // each first round. Within a round the two take turns in short runs, the round's
    // first run alternating between them: how fast a wake-up is can depend on what
    // the threads did just before (on this project's test VM a few thousand short
    // sleeps in a row make them several times slower, and gRPC's longer sleeps make
    // them fast again), so whole runs one after the other would favour the first.
    bench::latency_recorder seq_b, seq_t, pipe_b, pipe_t, bulk_t, local_t;
    double wall_seq_b = 0, wall_seq_t = 0, wall_pipe_b = 0, wall_pipe_t = 0;
    std::size_t per_round = std::max<std::size_t>(1, o.count / o.rounds);
    seq_b.reserve(per_round * o.rounds);
    seq_t.reserve(per_round * o.rounds);
    for (std::size_t r = 0; r < o.rounds; ++r) {
      std::size_t w = r == 0 ? o.warmup : 0;
      bool baseline_turn = r % 2 == 0;
      for (std::size_t done = 0, left_b = per_round, left_t = per_round; left_b + left_t > 0;
           baseline_turn = !baseline_turn) {
        std::size_t& left = baseline_turn ? left_b : left_t;
        std::size_t n = std::min(left, seq_turn);
        if (n == 0) continue;
        std::size_t warm = done < 2 ? w : 0;
        if (baseline_turn)
          wall_seq_b += co_await bench::echo_sequential_run(sock, wire, warm, n, seq_b);
        else
          wall_seq_t += co_await tlaunch_sequential(ping, body, warm, n, seq_t, use_add_);
        left -= n;
        ++done;
      }
      wall_raw += co_await off_io_round(ctx, shared_process, [&, w] {
        return raw_client.sequential(wire, w, per_round, raw_rec, busy_poll.count());
      });
#ifdef TLAUNCH_BENCH_GRPC
      wall_grpc += co_await off_io_round(
          ctx, shared_process, [&, w] { return grpc_client.sequential(w, per_round, grpc_rec); });
#endif
    }
#ifdef TLAUNCH_BENCH_GRPC
    grpc_seq = grpc_rec.summarize(wall_grpc);
#endif
    // Pipelined: each round's rate is kept too, for the paired ratio.
    std::vector<double> round_rate_b, round_rate_t;
    for (std::size_t r = 0; r < o.rounds; ++r) {
      double b = (co_await bench::echo_pipelined(sock, wire, o.inflight, per_round, pipe_b)).wall_seconds;
      double t = co_await tlaunch_pipelined(body, o.inflight, per_round, pipe_t);
      wall_pipe_b += b;
      wall_pipe_t += t;
      round_rate_b.push_back(b > 0 ? double(per_round) / b : 0);
      round_rate_t.push_back(t > 0 ? double(per_round) / t : 0);
    }
    // Bulk: rounds alternate as above; the baseline runs with both write strategies
    // in every round and the faster one over all rounds is kept.
    double wall_bulk_t = 0;
    std::optional<bench::summary> bulk_best;
    bench::write_mode bulk_mode = bench::write_mode::write_some_loop;
    std::size_t bulk_per_round = std::max<std::size_t>(1, o.bulk_count / o.rounds);
    std::size_t bulk_total = o.bulk_count > 0 ? bulk_per_round * o.rounds : 0;
    if (o.bulk_count > 0) {
      const bench::write_mode modes[2] = {bench::write_mode::write_some_loop,
                                          bench::write_mode::async_write};
      bench::latency_recorder mode_rec[2];
      double mode_wall[2] = {0, 0};
      for (std::size_t r = 0; r < o.rounds; ++r) {
        std::size_t bw = r == 0 ? std::min<std::size_t>(o.warmup, 5) : 0;
        for (int m = 0; m < 2; ++m)
          mode_wall[m] += (co_await bench::echo_sequential(sock, bulk_wire, bw, bulk_per_round,
                                                           mode_rec[m], modes[m]))
                              .wall_seconds;
        wall_bulk_t +=
            co_await tlaunch_sequential(ping, bulk_body, bw, bulk_per_round, bulk_t, false);
      }
      for (int m = 0; m < 2; ++m) {
        auto s = mode_rec[m].summarize(mode_wall[m], 2 * std::uint64_t(bulk_total) * bulk_wire);
        if (!bulk_best || s.mb_per_second() > bulk_best->mb_per_second()) {
          bulk_best = s;
          bulk_mode = modes[m];
        }
      }
    }
    // Colocated: an in-process Ping, called directly.
    auto local = ctx.spawn<Ping>();
    auto wall_local = co_await tlaunch_sequential(local, body, o.warmup, o.count, local_t, use_add_);
    sock.close();


    const std::uint64_t bytes = 2 * std::uint64_t(per_round * o.rounds) * wire;
    auto sb = seq_b.summarize(wall_seq_b, bytes), st = seq_t.summarize(wall_seq_t, bytes);
    auto pb = pipe_b.summarize(wall_pipe_b, bytes), pt = pipe_t.summarize(wall_pipe_t, bytes);
    auto bb = bulk_best.value_or(bench::summary{});
    auto bt = bulk_t.summarize(wall_bulk_t, 2 * std::uint64_t(bulk_total) * bulk_wire);
    auto lt = local_t.summarize(wall_local);
    auto rs = raw_rec.summarize(wall_raw, bytes);

    std::string shape = use_add_ ? "8 B add" : std::to_string(o.payload) + " B echo";
    std::string pipe_name = "pipelined x" + std::to_string(o.inflight) + " " + shape;
    std::vector<bench::comparison> rows;
    auto time_row = [&](std::string scen, std::string metric, double v, std::optional<double> base,
                        std::optional<double> target) {
      bench::comparison c;
      c.scenario = std::move(scen);
      c.metric = std::move(metric);
      c.value = v;
      c.baseline = base;
      c.target_ratio = target;
      rows.push_back(std::move(c));
    };
    auto rate_row = [&](std::string scen, std::string metric, double v, std::optional<double> base,
                        std::optional<double> target) {
      time_row(std::move(scen), std::move(metric), v, base, target);
      rows.back().is_time = false;
    };
    // The targets are set for the 8-byte call; other payloads show ratios only.
    // They are also cross-process targets: in one process the handle calls directly.
    auto target = [&](double t) {
      return use_add_ && !shared_process ? std::optional<double>(t) : std::nullopt;
    };
    time_row("sequential " + shape, "p50", double(st.p50_ns), double(sb.p50_ns), target(1.1));
    time_row("sequential " + shape, "p90", double(st.p90_ns), double(sb.p90_ns), std::nullopt);
    time_row("sequential " + shape, "p99", double(st.p99_ns), double(sb.p99_ns), target(1.3));
    time_row("sequential " + shape, "p99.9", double(st.p999_ns), double(sb.p999_ns), std::nullopt);
    time_row("sequential " + shape, "max", double(st.max_ns), double(sb.max_ns), std::nullopt);
    rate_row("sequential " + shape, "calls/s", st.calls_per_second(), sb.calls_per_second(), std::nullopt);
    time_row(pipe_name, "p50", double(pt.p50_ns), double(pb.p50_ns), std::nullopt);
    rate_row(pipe_name, "calls/s", pt.calls_per_second(), pb.calls_per_second(), std::nullopt);
    // The target is judged on the paired rounds: on a shared machine a burst of
    // noise can slow a few rounds of one side several times over.
    rate_row(pipe_name, "calls/s med", bench::median_of(round_rate_t), bench::median_of(round_rate_b),
             o.inflight == 64 ? target(0.7) : std::nullopt);
    rows.back().paired_ratio = bench::median_paired_ratio(round_rate_t, round_rate_b);
    if (o.bulk_count > 0) {
      time_row("bulk 1 MiB echo", "p50", double(bt.p50_ns), double(bb.p50_ns), std::nullopt);
      rate_row("bulk 1 MiB echo", "MB/s", bt.mb_per_second(), bb.mb_per_second(),
               o.bulk_bytes == (1u << 20) && !shared_process ? std::optional<double>(0.8)
                                                             : std::nullopt);
    }
    time_row("colocated " + shape, "p50", double(lt.p50_ns), std::nullopt, std::nullopt);
    if (use_add_) rows.back().target_value = 1000;
    time_row("colocated " + shape, "p99", double(lt.p99_ns), std::nullopt, std::nullopt);
    rate_row("colocated " + shape, "calls/s", lt.calls_per_second(), std::nullopt, std::nullopt);
    // The path's floor: tlaunch against the raw socket echo (no event loop).
    time_row("vs raw socket: sequential", "p50", double(st.p50_ns), double(rs.p50_ns), std::nullopt);
    rows.back().baseline_name = "raw";
    time_row("vs raw socket: sequential", "p99", double(st.p99_ns), double(rs.p99_ns), std::nullopt);
    rows.back().baseline_name = "raw";
    if (grpc_seq) {
      // Here the baseline is gRPC: tlaunch should be at most a quarter of it.
      time_row("vs gRPC: sequential", "p50", double(st.p50_ns), double(grpc_seq->p50_ns),
               use_add_ ? std::optional<double>(0.25) : std::nullopt);
      rows.back().baseline_name = "grpc";
      time_row("vs gRPC: sequential", "p99", double(st.p99_ns), double(grpc_seq->p99_ns), std::nullopt);
      rows.back().baseline_name = "grpc";
      // What the path allows: the plain echo against gRPC.
      time_row("vs gRPC: plain echo", "p50", double(sb.p50_ns), double(grpc_seq->p50_ns), std::nullopt);
      rows.back().baseline_name = "grpc";
      time_row("vs gRPC: raw socket", "p50", double(rs.p50_ns), double(grpc_seq->p50_ns), std::nullopt);
      rows.back().baseline_name = "grpc";
    }

    if (o.json) {
      std::vector<std::pair<std::string, std::string>> config = {
          {"payload", std::to_string(o.payload)},
          {"call", bench::json_string(use_add_ ? "add" : "echo")},
          {"wire_payload", std::to_string(wire)},
          {"count", std::to_string(o.count)},
          {"warmup", std::to_string(o.warmup)},
          {"inflight", std::to_string(o.inflight)},
          {"bulk_count", std::to_string(o.bulk_count)},
          {"bulk_bytes", std::to_string(o.bulk_bytes)},
          {"rounds", std::to_string(o.rounds)},
          {"baseline_bulk_write", bench::json_string(bench::to_string(bulk_mode))},
          {"ping_process", bench::json_string(ping_process)},
          {"driver_process", bench::json_string(my_process)},
          {"same_process", shared_process ? "true" : "false"},
          {"pin", bench::json_string(pinned)},
          {"busy_poll_us", std::to_string(busy_poll.count())},
      };
      std::vector<bench::named_summary> results = {
          {"baseline_sequential", sb}, {"tlaunch_sequential", st}, {"baseline_pipelined", pb},
          {"tlaunch_pipelined", pt},   {"baseline_bulk", bb},      {"tlaunch_bulk", bt},
          {"colocated_sequential", lt}, {"raw_sequential", rs}};
      if (grpc_seq) results.emplace_back("grpc_sequential", *grpc_seq);
      // Sequential latency histograms (benchmarks/plot_histogram.py draws them).
      std::vector<bench::named_histogram> histograms = {
          {"baseline_sequential", bench::log_histogram(seq_b.samples())},
          {"tlaunch_sequential", bench::log_histogram(seq_t.samples())},
          {"raw_sequential", bench::log_histogram(raw_rec.samples())}};
      if (grpc_seq) histograms.emplace_back("grpc_sequential", bench::log_histogram(grpc_rec.samples()));
      std::fputs(bench::to_json(config, results, rows, histograms).c_str(), stdout);
    } else {
      std::printf("\n%s", bench::format_table(rows).c_str());
      std::printf("(ratio = tlaunch / baseline; baseline = plain Asio echo of the same bytes%s;\n"
                  " calls/s med: the median round of each, and the median of the rounds' ratios\n"
                  " (tlaunch round against the baseline round before it);\n"
                  " bulk MB/s counts both directions; baseline bulk writes with %s)\n",
                  grpc_seq ? ", or the raw socket echo or gRPC where marked"
                           : ", or the raw socket echo where marked",
                  bench::to_string(bulk_mode));
      if (shared_process)
        std::printf(" ping and driver share a process, so tlaunch's calls above are direct, not over\n"
                    " TCP: run with --launch=local_mp (or ssh) for the cross-process figures\n");
      if (o.histogram) {
        std::printf("\nbaseline sequential latency (%zu calls):\n%s", sb.count,
                    bench::text_histogram(seq_b.samples()).c_str());
        std::printf("\ntlaunch sequential latency (%zu calls):\n%s", st.count,
                    bench::text_histogram(seq_t.samples()).c_str());
      }
    }
    std::fflush(stdout);
  }

  tlaunch::handle<Ping> ping;
  bool use_add_ = true;
  // Calls in one turn of the sequential rounds, where baseline and tlaunch take turns.
  static constexpr std::size_t seq_turn = 500;
};

constexpr auto program = tlaunch::program(tlaunch::node<"ping", Ping>(),
                                          tlaunch::node<"driver", Driver>(tlaunch::ref<"ping">));

// The program's options (after `--`) are checked here first, in every role, so that
// --help prints them and a bad one is reported once, with them, before anything starts.
int main(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--") {
      args.assign(argv + i + 1, argv + argc);
      break;
    }
  for (const auto& a : args)
    if (a == "--help" || a == "-h") {
      std::fputs(usage, stdout);
      return 0;
    }
  try {
    (void)parse_options(args);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s", e.what());
    return 2;
  }
  return tlaunch::main(program, argc, argv);
}
