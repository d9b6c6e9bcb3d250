// store_bench: items/s and MB/s through a tlaunch::data_store node. A tlaunch program
// (the store and a driver), so it runs under every launch type; under local_mp each is a
// process of its own and every item crosses loopback TCP.
//
//   ./store_bench --launch=local_mp                       # 1 KiB and 64 KiB, 1/8/64 clients
//   ./store_bench --launch=local_mp -- --mib=32 --clients=1,8 --sizes=1024
//   ./store_bench --launch=local_mp --replicas client=8 -- --many=125   # 1,000 clients
//
// Per row: K writer coroutines (store::writer, 16 items or --call-kib KiB per call) insert
// --mib MiB of items, then K sampler coroutines (store::sampler, as many per call) sample
// as many. The table keeps at most 256 items (FIFO remover), samples uniformly and
// never deletes on sampling, so samplers never wait; a row inserts at least 256 items,
// so its samples are its own items.
//
// --many=C: instead, every replica of the "client" node (--replicas client=P) runs C
// coroutines at once, each inserting --many-items items of --sizes' first size with keys
// no other coroutine uses, in plain insert calls of --many-batch items; the driver then
// checks on the store that every key arrived exactly once (inserts, size, and an erase
// of every key that finds each one).
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

#include <tlaunch/store/client.hpp>
#include <tlaunch/tlaunch.hpp>

#include "stats.hpp"

namespace store = tlaunch::store;

namespace {

struct bench_options {
  std::size_t mib = 128;
  std::vector<std::size_t> sizes{1024, 65536};
  std::vector<std::size_t> clients{1, 8, 64};
  std::size_t call_kib = 0;  // 0: 16 items per call, the clients' default
  std::size_t many = 0;        // coroutines per client process; 0: the writer/sampler rows
  std::size_t many_items = 64;
  std::size_t many_batch = 8;
};

constexpr const char* usage =
    "store_bench [launch flags] -- [--mib=N] [--sizes=B1,B2] [--clients=K1,K2]\n"
    "  --mib=N          MiB inserted and then sampled per row (default 128)\n"
    "  --sizes=B,...    item sizes in bytes (default 1024,65536)\n"
    "  --clients=K,...  concurrent writers, then samplers (default 1,8,64)\n"
    "  --call-kib=N     KiB of items per insert or sample call (default: 16 items, as the clients)\n"
    "  --many=C         instead: C inserting coroutines in each client process (--replicas client=P)\n"
    "  --many-items=N   items per coroutine with --many (default 64)\n"
    "  --many-batch=N   items per insert call with --many (default 8)\n";

std::vector<std::size_t> number_list(const std::string& flag, const std::string& v) {
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
    if (pos != part.size() || n == 0) {
      std::string msg = "store_bench: ";
      msg.append(flag).append(" takes positive numbers, got '").append(v).append("'\n").append(usage);
      throw std::invalid_argument(msg);
    }
    out.push_back(static_cast<std::size_t>(n));
  }
  if (out.empty()) throw std::invalid_argument(std::string("store_bench: empty ") + flag);
  return out;
}

bench_options parse_options(const std::vector<std::string>& args) {
  bench_options o;
  for (const auto& a : args) {
    auto eq = a.find('=');
    std::string flag = a.substr(0, eq), v = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (flag == "--mib") o.mib = number_list(flag, v).at(0);
    else if (flag == "--sizes") o.sizes = number_list(flag, v);
    else if (flag == "--clients") o.clients = number_list(flag, v);
    else if (flag == "--call-kib") o.call_kib = number_list(flag, v).at(0);
    else if (flag == "--many") o.many = number_list(flag, v).at(0);
    else if (flag == "--many-items") o.many_items = number_list(flag, v).at(0);
    else if (flag == "--many-batch") o.many_batch = number_list(flag, v).at(0);
    else {
      std::string msg = "store_bench: unknown option ";
      msg.append(a).append("\n").append(usage);
      throw std::invalid_argument(msg);
    }
  }
  return o;
}

// Runs k copies of `body` on this executor and waits for all; the first error is rethrown.
asio::awaitable<void> run_all(std::size_t k, std::function<asio::awaitable<void>(std::size_t)> body) {
  auto ex = co_await asio::this_coro::executor;
  struct state {
    explicit state(const asio::any_io_executor& e) : done(e, asio::steady_timer::time_point::max()) {}
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

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string size_name(std::size_t b) {
  return b % 1024 == 0 ? std::to_string(b / 1024) + " KiB" : std::to_string(b) + " B";
}

constexpr std::size_t table_size = 256;
constexpr const char* many_table = "many";

// A process of --many coroutines inserting into the store; returns each insert call's latency.
struct Client {
  tlaunch::handle<tlaunch::data_store> store;

  asio::awaitable<std::vector<std::uint64_t>> insert_all(std::uint64_t first_key, std::uint32_t coroutines,
                                                        std::uint32_t items, std::uint32_t batch,
                                                        std::uint32_t size) {
    std::vector<std::uint64_t> latencies;
    tlaunch::bytes payload(std::string(size, 'x'));
    co_await run_all(coroutines, [&](std::size_t c) -> asio::awaitable<void> {
      std::uint64_t key = first_key + c * items;  // this coroutine's keys: [key, key + items)
      for (std::uint32_t done = 0; done < items;) {
        std::vector<store::insert_item> call;
        for (; done < items && call.size() < batch; ++done)
          call.push_back(store::insert_item{.data = payload, .priority = 1.0, .key = key++});
        auto t0 = tlaunch::bench::bench_clock::now();
        co_await store.call<&tlaunch::data_store::insert>(std::string(many_table), std::move(call));
        latencies.push_back(tlaunch::bench::elapsed_ns(t0));
      }
    });
    co_return latencies;
  }
  using rpc = tlaunch::methods<&Client::insert_all>;
};

struct Driver {
  tlaunch::handle<tlaunch::data_store> store;
  tlaunch::handles<Client> clients;

  // P processes x C coroutines insert at once; then every key must be in the table once.
  asio::awaitable<void> run_many(const bench_options& o) {
    auto size = static_cast<std::uint32_t>(o.sizes.at(0));
    auto c = static_cast<std::uint32_t>(o.many), n = static_cast<std::uint32_t>(o.many_items);
    std::size_t p = clients.size(), total = p * c * n;
    std::vector<std::vector<std::uint64_t>> per_process(p);
    auto t0 = std::chrono::steady_clock::now();
    co_await run_all(p, [&](std::size_t i) -> asio::awaitable<void> {
      per_process[i] = co_await clients[i].call<&Client::insert_all>(
          std::uint64_t{1} + i * c * n, c, n, static_cast<std::uint32_t>(o.many_batch), size);
    });
    double wall = seconds_since(t0);

    tlaunch::bench::latency_recorder rec;
    for (auto& v : per_process)
      for (auto ns : v) rec.add(ns);
    auto s = rec.summarize(wall, static_cast<std::uint64_t>(total) * size);

    // Exactly once: as many inserts as items (a repeated key would count twice and
    // replace), as many items held, and erasing every key finds each of them.
    std::uint64_t size_held = 0;
    std::int64_t inserts = 0;
    for (const auto& t : co_await store.call<&tlaunch::data_store::info>())
      if (t.name == many_table) size_held = t.size, inserts = t.inserts;
    std::vector<store::item_key> keys(total);
    for (std::size_t k = 0; k < total; ++k) keys[k] = k + 1;
    auto found = co_await store.call<&tlaunch::data_store::erase>(std::string(many_table), keys);
    bool ok = size_held == total && inserts == static_cast<std::int64_t>(total) && found == total;

    std::printf("| item | processes x coroutines | items | insert items/s | insert MB/s | p50 | p90 | p99 | max | "
                "items held once |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    std::printf("| %s | %zu x %u | %zu | %.0f | %.1f | %s | %s | %s | %s | %s |\n", size_name(size).c_str(), p, c,
                total, double(total) / wall, double(total) * size / wall / 1e6,
                tlaunch::bench::format_ns(double(s.p50_ns)).c_str(), tlaunch::bench::format_ns(double(s.p90_ns)).c_str(),
                tlaunch::bench::format_ns(double(s.p99_ns)).c_str(), tlaunch::bench::format_ns(double(s.max_ns)).c_str(),
                ok ? "yes" : "NO");
    std::fflush(stdout);
    if (!ok) {
      std::fprintf(stderr, "store_bench: %zu items sent; the table holds %llu, counted %lld inserts, %llu keys found\n",
                   total, static_cast<unsigned long long>(size_held), static_cast<long long>(inserts),
                   static_cast<unsigned long long>(found));
      throw std::runtime_error("store_bench: items lost or repeated");
    }
  }

  asio::awaitable<void> run(tlaunch::context& ctx) {
    bench_options o;
    try {
      o = parse_options(ctx.args());
    } catch (const std::exception& e) {
      std::fputs(e.what(), stderr);
      throw;
    }
    if (o.many) {
      co_await run_many(o);
      ctx.stop_program();
      co_return;
    }
    std::printf("| item | clients | insert items/s | insert MB/s | sample items/s | sample MB/s |\n");
    std::printf("| --- | --- | --- | --- | --- | --- |\n");
    for (std::size_t size : o.sizes) {
      std::size_t batch = o.call_kib ? std::max<std::size_t>(1, o.call_kib * 1024 / size) : 16;
      tlaunch::bytes payload(std::string(size, 'x'));
      for (std::size_t k : o.clients) {
        std::size_t total = std::max<std::size_t>({k, table_size, o.mib * 1024 * 1024 / size});
        std::size_t per_client = total / k;
        total = per_client * k;

        auto t0 = std::chrono::steady_clock::now();
        co_await run_all(k, [&](std::size_t) -> asio::awaitable<void> {
          store::writer<> w(store, "bench", batch);
          for (std::size_t i = 0; i < per_client; ++i) co_await w.append(payload);
          co_await w.flush();
        });
        double insert_s = seconds_since(t0);

        std::uint64_t sampled_bytes = 0;
        t0 = std::chrono::steady_clock::now();
        co_await run_all(k, [&](std::size_t) -> asio::awaitable<void> {
          store::sampler<> s(store, "bench", static_cast<std::uint32_t>(batch));
          for (std::size_t i = 0; i < per_client; ++i) sampled_bytes += (co_await s.next()).value.size();
        });
        double sample_s = seconds_since(t0);

        double n = static_cast<double>(total);
        std::printf("| %s | %zu | %.0f | %.1f | %.0f | %.1f |\n", size_name(size).c_str(), k, n / insert_s,
                    n * static_cast<double>(size) / insert_s / 1e6, n / sample_s,
                    static_cast<double>(sampled_bytes) / sample_s / 1e6);
        std::fflush(stdout);
      }
    }
    ctx.stop_program();
  }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"store", tlaunch::data_store>(store::table_config{
        .name = "bench", .sampler = store::uniform(), .remover = store::fifo(), .max_size = table_size},
        store::table_config{.name = many_table, .sampler = store::uniform(), .remover = store::fifo()}),
    // Idle unless --many: the processes of the 1,000-client run (--replicas client=8).
    tlaunch::node<"client", Client>(tlaunch::ref<"store">).replicas(2),
    tlaunch::node<"driver", Driver>(tlaunch::ref<"store">, tlaunch::ref<"client">));

}  // namespace

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
