// batched_bench: calls/s and call latency of a batched method (tlaunch/batched.hpp)
// beside the same work as a plain method, with many concurrent callers, and the
// sizes of the batches that formed. A tlaunch program (the model and a driver), so
// it runs under every launch type: under local_mp every call crosses loopback TCP,
// under local_mt calls take the direct path.
//
//   ./batched_bench --launch=local_mp                      # 64 and 256 callers
//   ./batched_bench --launch=local_mt -- --calls=20000 --fixed-us=0
//
// Each call carries 16 floats and returns their dot product with the model's
// weights. Each invocation of a method first spins --fixed-us microseconds (the
// per-launch cost of a real model: a kernel launch, a forward pass's setup), which
// a batch pays once for all of its calls. Callers are coroutines of the driver,
// each making its calls one after another.
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <tlaunch/tlaunch.hpp>

#include "stats.hpp"

using namespace std::chrono_literals;

namespace {

struct bench_options {
  std::size_t calls = 40000;  // per row, spread over the callers
  std::vector<std::size_t> callers{64, 256};
  std::size_t fixed_us = 20;
};

constexpr const char* usage =
    "batched_bench [launch flags] -- [--calls=N] [--callers=K1,K2] [--fixed-us=U]\n"
    "  --calls=N        calls per row, spread over the callers (default 40000)\n"
    "  --callers=K,...  concurrent callers (default 64,256)\n"
    "  --fixed-us=U     microseconds each method invocation spins before its work (default 20)\n";

std::vector<std::size_t> number_list(const std::string& flag, const std::string& v,
                                     bool zero_ok) {
  std::vector<std::size_t> out;
  std::stringstream ss(v);
  std::string part;
  while (std::getline(ss, part, ',')) {
    std::size_t pos = 0;
    unsigned long long n = 0;
    try {
      n = std::stoull(part, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos != part.size() || (n == 0 && !zero_ok)) {
      std::string msg = "batched_bench: ";
      msg.append(flag).append(" takes numbers, got '").append(v).append("'\n").append(usage);
      throw std::invalid_argument(msg);
    }
    out.push_back(static_cast<std::size_t>(n));
  }
  if (out.empty()) throw std::invalid_argument(std::string("batched_bench: empty ") + flag);
  return out;
}

bench_options parse_options(const std::vector<std::string>& args) {
  bench_options o;
  for (const auto& a : args) {
    auto eq = a.find('=');
    std::string flag = a.substr(0, eq), v = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (flag == "--calls")
      o.calls = number_list(flag, v, false).at(0);
    else if (flag == "--callers")
      o.callers = number_list(flag, v, false);
    else if (flag == "--fixed-us")
      o.fixed_us = number_list(flag, v, true).at(0);
    else {
      std::string msg = "batched_bench: unknown option ";
      msg.append(a).append("\n").append(usage);
      throw std::invalid_argument(msg);
    }
  }
  return o;
}

constexpr std::size_t width = 16;
constexpr std::size_t max_batch = 64;

struct Model {
  std::vector<float> weights = std::vector<float>(width, 0.5f);
  std::chrono::microseconds fixed{0};
  std::vector<std::uint64_t> batch_sizes;

  void spin() const {
    if (fixed.count() == 0) return;
    auto until = std::chrono::steady_clock::now() + fixed;
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  float dot(const std::vector<float>& x) const {
    float s = 0;
    for (std::size_t i = 0; i < x.size() && i < weights.size(); ++i) s += x[i] * weights[i];
    return s;
  }

  float infer_one(std::vector<float> x) {
    spin();
    return dot(x);
  }
  std::vector<float> infer(std::vector<std::vector<float>> xs) {
    spin();
    batch_sizes.push_back(xs.size());
    std::vector<float> out;
    out.reserve(xs.size());
    for (const auto& x : xs) out.push_back(dot(x));
    return out;
  }

  void set_fixed_us(std::uint64_t us) { fixed = std::chrono::microseconds(us); }
  std::vector<std::uint64_t> take_batch_sizes() { return std::exchange(batch_sizes, {}); }

  using rpc = tlaunch::methods<
      &Model::infer_one,
      tlaunch::batched<&Model::infer,
                       tlaunch::batch_options{.max_batch = max_batch, .max_wait = 2ms}>,
      &Model::set_fixed_us, &Model::take_batch_sizes>;
};

// Runs k copies of `body` on this executor and waits for all; the first error is rethrown.
asio::awaitable<void> run_all(std::size_t k,
                              std::function<asio::awaitable<void>(std::size_t)> body) {
  auto ex = co_await asio::this_coro::executor;
  struct state {
    explicit state(const asio::any_io_executor& e)
        : done(e, asio::steady_timer::time_point::max()) {}
    asio::steady_timer done;
    std::size_t left = 0;
    std::exception_ptr error;
  };
  auto s = std::make_shared<state>(ex);
  s->left = k;
  for (std::size_t i = 0; i < k; ++i)
    asio::co_spawn(ex, body(i), [s](std::exception_ptr e) {
      if (e && !s->error) s->error = e;
      if (--s->left == 0) s->done.cancel();
    });
  std::error_code ec;
  co_await s->done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  if (s->error) std::rethrow_exception(s->error);
}

// Batch sizes by powers of two: "1", "2-3", ..., up to max_batch.
std::string batch_histogram(const std::vector<std::uint64_t>& sizes) {
  std::vector<std::size_t> counts;
  for (auto n : sizes) {
    std::size_t b = 0;
    while ((std::uint64_t{2} << b) <= n) ++b;
    if (counts.size() <= b) counts.resize(b + 1);
    ++counts[b];
  }
  std::string out;
  char line[160];
  std::size_t peak = 0;
  for (auto c : counts) peak = std::max(peak, c);
  for (std::size_t b = 0; b < counts.size(); ++b) {
    std::size_t lo = std::size_t{1} << b, hi = std::min((lo << 1) - 1, max_batch);
    std::string range = lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
    int bar = peak ? static_cast<int>(counts[b] * 40 / peak) : 0;
    if (counts[b] > 0 && bar == 0) bar = 1;
    std::snprintf(line, sizeof line, "  %7s |%-40s %zu (%.1f%%)\n", range.c_str(),
                  std::string(static_cast<std::size_t>(bar), '#').c_str(), counts[b],
                  100.0 * double(counts[b]) / double(sizes.size()));
    out += line;
  }
  return out;
}

struct Driver {
  tlaunch::handle<Model> model;

  template <auto M>
  asio::awaitable<tlaunch::bench::summary> row(std::size_t callers, std::size_t calls) {
    std::size_t per_caller = std::max<std::size_t>(1, calls / callers);
    std::vector<tlaunch::bench::latency_recorder> rec(callers);
    auto t0 = tlaunch::bench::bench_clock::now();
    co_await run_all(callers, [&](std::size_t c) -> asio::awaitable<void> {
      rec[c].reserve(per_caller);
      std::vector<float> x(width, 1.0f);
      for (std::size_t i = 0; i < per_caller; ++i) {
        auto t = tlaunch::bench::bench_clock::now();
        float y = co_await model.call<M>(x);
        rec[c].add(tlaunch::bench::elapsed_ns(t));
        if (y != 0.5f * width) throw std::runtime_error("batched_bench: wrong result");
      }
    });
    double wall = std::chrono::duration<double>(tlaunch::bench::bench_clock::now() - t0).count();
    tlaunch::bench::latency_recorder all;
    for (auto& r : rec)
      for (auto v : r.samples()) all.add(v);
    co_return all.summarize(wall);
  }

  asio::awaitable<void> run(tlaunch::context& ctx) {
    bench_options o;
    try {
      o = parse_options(ctx.args());
    } catch (const std::exception& e) {
      std::fputs(e.what(), stderr);
      throw;
    }
    co_await model.call<&Model::set_fixed_us>(std::uint64_t{o.fixed_us});
    std::printf("batched_bench: %zu calls per row, %zu us fixed cost per invocation, "
                "batched<max_batch = %zu, max_wait = 2 ms>\n\n",
                o.calls, o.fixed_us, max_batch);
    std::printf("| method | callers | calls/s | p50 | p90 | p99 | max | mean batch |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    std::vector<std::pair<std::size_t, std::vector<std::uint64_t>>> histograms;
    using tlaunch::bench::format_ns;
    for (std::size_t k : o.callers) {
      auto plain = co_await row<&Model::infer_one>(k, o.calls);
      std::printf("| plain | %zu | %.0f | %s | %s | %s | %s | 1 |\n", k, plain.calls_per_second(),
                  format_ns(double(plain.p50_ns)).c_str(), format_ns(double(plain.p90_ns)).c_str(),
                  format_ns(double(plain.p99_ns)).c_str(), format_ns(double(plain.max_ns)).c_str());
      co_await model.call<&Model::take_batch_sizes>();
      auto batched = co_await row<&Model::infer>(k, o.calls);
      auto sizes = co_await model.call<&Model::take_batch_sizes>();
      double total = 0;
      for (auto n : sizes) total += double(n);
      std::printf("| batched | %zu | %.0f | %s | %s | %s | %s | %.1f |\n", k,
                  batched.calls_per_second(), format_ns(double(batched.p50_ns)).c_str(),
                  format_ns(double(batched.p90_ns)).c_str(),
                  format_ns(double(batched.p99_ns)).c_str(),
                  format_ns(double(batched.max_ns)).c_str(),
                  sizes.empty() ? 0.0 : total / double(sizes.size()));
      std::fflush(stdout);
      histograms.emplace_back(k, std::move(sizes));
    }
    for (const auto& [k, sizes] : histograms)
      std::printf("\nbatch sizes, %zu callers (%zu batches):\n%s", k, sizes.size(),
                  batch_histogram(sizes).c_str());
    std::fflush(stdout);
    ctx.stop_program();
  }
};

constexpr auto program = tlaunch::program(tlaunch::node<"model", Model>(),
                                          tlaunch::node<"driver", Driver>(tlaunch::ref<"model">));

}  // namespace

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
