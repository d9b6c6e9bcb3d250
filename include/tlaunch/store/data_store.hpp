// tlaunch::data_store: a node that hosts named tables of items (store/table.hpp), in
// the spirit of Reverb. Declared like any node:
//
//   tlaunch::node<"replay", tlaunch::data_store>(
//       tlaunch::store::table_config{.name = "replay", .sampler = tlaunch::store::prioritized(0.6),
//                                    .max_size = 100'000, .limiter = tlaunch::store::min_size(100)},
//       tlaunch::store::queue_table("queue", 1000),
//       tlaunch::store::options{.checkpoint_path = "/var/tmp/replay.ckpt"})
//
// insert and sample wait while the table's rate limiter says no. The node runs on its
// strand: a waiting call is a coroutine suspended on a timer that the strand cancels
// when the table can serve it (waiters are served in arrival order), so no thread is
// parked. A caller's deadline or cancellation ends the wait (the method throws, the
// caller gets tlaunch::timeout or tlaunch::cancelled).
#pragma once

#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <cereal/archives/binary.hpp>
#include <chrono>
#include <concepts>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "../context.hpp"
#include "../service.hpp"
#include "table.hpp"

namespace tlaunch {

namespace store {

// Node-wide settings; a literal type, so it is a node constructor argument.
struct options {
  // Written by checkpoint(""), and when the node stops; read when the node starts if
  // the file exists. Empty: no checkpoint file.
  std::string_view checkpoint_path = {};
  std::uint64_t seed = 0;  // of the samplers' random engines; 0: random
};

struct insert_item {
  tlaunch::bytes data = {};
  double priority = 1.0;
  item_key key = 0;  // 0: the table picks a key; an existing key replaces that item
  template <class Ar>
  void serialize(Ar& ar) {
    ar(data, priority, key);
  }
};

struct priority_update {
  item_key key = 0;
  double priority = 0;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(key, priority);
  }
};

}  // namespace store

class data_store {
 public:
  template <class... A>
    requires((std::same_as<A, store::table_config> || std::same_as<A, store::options>) && ...)
  explicit data_store(const A&... args) {
    (take(args), ...);
    std::uint64_t seed = options_.seed ? options_.seed : std::random_device{}();
    for (std::size_t i = 0; i < configs_.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j)
        if (configs_[j].name == configs_[i].name)
          throw std::invalid_argument(
              fmt_message("tlaunch::data_store: two tables named ", configs_[i].name));
      tables_.push_back(std::make_unique<hosted_table>(configs_[i], seed + i));
    }
    if (!checkpoint_path_.empty() && std::filesystem::exists(checkpoint_path_)) restore();
  }

  data_store(const data_store&) = delete;
  data_store& operator=(const data_store&) = delete;

  // The checkpoint at stop; a failure is reported, it cannot be thrown from here.
  ~data_store() {
    if (checkpoint_path_.empty()) return;
    try {
      write_checkpoint(checkpoint_path_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tlaunch::data_store: checkpoint at stop failed: %s\n", e.what());
    }
  }

  // Inserts the items in order, each waiting while the rate limiter refuses an insert.
  // Returns their keys. On a deadline or cancellation the items before the waiting one
  // stay inserted; a negative priority fails the call before any item is inserted.
  asio::awaitable<std::vector<store::item_key>> insert(std::string table,
                                                       std::vector<store::insert_item> items) {
    hosted_table& h = find(table);
    for (const auto& it : items)
      if (!(it.priority >= 0))
        throw std::invalid_argument(fmt_message("data_store: table ", table, ": priority < 0 or NaN"));
    std::vector<store::item_key> keys;
    keys.reserve(items.size());
    for (auto& it : items) {
      if (h.inserters.empty() && h.t.can_insert()) {
        keys.push_back(h.t.insert(it.key, it.priority, std::move(it.data)));
      } else {
        waiter w(co_await asio::this_coro::executor);
        w.key = it.key;
        w.priority = it.priority;
        w.data = std::move(it.data);
        const auto since = std::chrono::steady_clock::now();
        publish(h, 1);
        co_await wait(h.inserters, w);
        waited(h, since);
        keys.push_back(w.key);
      }
      serve_waiters(h);
    }
    publish(h);
    co_return keys;
  }

  // Waits until the rate limiter allows a sample, then returns as many items as it
  // allows now, at most max_items (at least 1).
  asio::awaitable<std::vector<store::sampled_item>> sample(std::string table,
                                                           std::uint32_t max_items) {
    hosted_table& h = find(table);
    if (max_items == 0) max_items = 1;
    std::vector<store::sampled_item> out;
    if (h.samplers.empty() && h.t.can_sample()) {
      take(h, out, max_items);
    } else {
      waiter w(co_await asio::this_coro::executor);
      w.out = &out;
      w.max_items = max_items;
      const auto since = std::chrono::steady_clock::now();
      publish(h, 1);
      co_await wait(h.samplers, w);
      waited(h, since);
    }
    serve_waiters(h);
    publish(h);
    co_return out;
  }

  // Returns how many keys were found.
  std::uint64_t update_priorities(std::string table, std::vector<store::priority_update> updates) {
    hosted_table& h = find(table);
    for (const auto& u : updates)
      if (!(u.priority >= 0))
        throw std::invalid_argument(fmt_message("data_store: table ", table, ": priority < 0 or NaN"));
    std::uint64_t n = 0;
    for (const auto& u : updates) n += h.t.update_priority(u.key, u.priority);
    return n;
  }

  // Deletes items by key; returns how many there were.
  std::uint64_t erase(std::string table, std::vector<store::item_key> keys) {
    hosted_table& h = find(table);
    std::uint64_t n = 0;
    for (auto k : keys) n += h.t.erase(k);
    serve_waiters(h);
    publish(h);
    return n;
  }

  std::vector<store::table_info> info() const {
    std::vector<store::table_info> out;
    for (const auto& h : tables_) {
      out.push_back(h->t.info());
      out.back().waiting_inserts = h->inserters.size();
      out.back().waiting_samples = h->samplers.size();
    }
    return out;
  }

  // Its state in snapshots (tlaunch/state.hpp; --state-dir, --resume): every table, as a
  // checkpoint holds them. Tables the program no longer declares are skipped on load.
  template <class Ar>
  void save_state(Ar& ar) const {
    ar(std::string(checkpoint_magic), static_cast<std::uint64_t>(tables_.size()));
    for (const auto& h : tables_) ar(h->t);
  }
  template <class Ar>
  void load_state(Ar& ar) {
    load_tables(ar, "the snapshot");
  }

  // Writes every table to `path` (empty: the configured checkpoint_path), through a
  // temporary file renamed over it. Returns the path written.
  std::string checkpoint(std::string path) {
    if (path.empty()) path = checkpoint_path_;
    if (path.empty()) throw std::runtime_error("data_store: no checkpoint path configured");
    write_checkpoint(path);
    return path;
  }

  // Its node's metrics (docs/guide/observing.md), given when the node is hosted: per table
  // `store_<table>_items`, `_waiting` (callers the rate limiter holds), `_inserts`,
  // `_samples` and `_rate_limited_seconds` (time callers waited, summed).
  void use_metrics(const tlaunch::node_metrics& m) {
    for (auto& h : tables_) {
      const std::string p = "store_" + std::string(h->t.name()) + "_";
      h->metrics.emplace(table_metrics{m.gauge(p + "items"), m.gauge(p + "waiting"),
                                       m.counter(p + "inserts"), m.counter(p + "samples"),
                                       m.counter(p + "rate_limited_seconds")});
      publish(*h);
    }
  }

  using rpc = tlaunch::methods<&data_store::insert, &data_store::sample,
                               &data_store::update_priorities, &data_store::erase,
                               &data_store::info, &data_store::checkpoint>;

 private:
  static constexpr std::string_view checkpoint_magic = "tlaunch.data_store.1";

  // A caller the rate limiter holds: an insert (key, priority, data in, key out) or a
  // sample (items out). serve_waiters fills it and cancels its timer.
  struct waiter {
    explicit waiter(const asio::any_io_executor& ex) : timer(ex) {
      timer.expires_at(asio::steady_timer::time_point::max());
    }
    asio::steady_timer timer;
    bool done = false;
    store::item_key key = 0;
    double priority = 0;
    tlaunch::bytes data;
    std::vector<store::sampled_item>* out = nullptr;
    std::uint32_t max_items = 1;
  };

  struct table_metrics {
    tlaunch::metric_gauge items, waiting;
    tlaunch::metric_counter inserts, samples, rate_limited_seconds;
    std::int64_t inserts_seen = 0, samples_seen = 0;  // the table's totals published so far
  };

  struct hosted_table {
    hosted_table(const store::table_config& c, std::uint64_t seed) : t(c, seed) {}
    store::table t;
    std::list<waiter*> inserters, samplers;
    std::optional<table_metrics> metrics;  // use_metrics
  };

  // `joining`: a caller about to wait, not in a waiter list yet.
  static void publish(hosted_table& h, std::size_t joining = 0) {
    if (!h.metrics) return;
    auto& m = *h.metrics;
    const auto i = h.t.info();
    m.items.set(static_cast<double>(i.size));
    m.waiting.set(static_cast<double>(h.inserters.size() + h.samplers.size() + joining));
    m.inserts.add(static_cast<double>(std::max<std::int64_t>(0, i.inserts - m.inserts_seen)));
    m.samples.add(static_cast<double>(std::max<std::int64_t>(0, i.samples - m.samples_seen)));
    m.inserts_seen = std::max(m.inserts_seen, i.inserts);
    m.samples_seen = std::max(m.samples_seen, i.samples);
  }
  static void waited(hosted_table& h, std::chrono::steady_clock::time_point since) {
    if (h.metrics)
      h.metrics->rate_limited_seconds.add(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count());
  }

  // Leaves the waiter list however the wait ends (served, cancelled, frame destroyed).
  struct waiting {
    std::list<waiter*>& list;
    std::list<waiter*>::iterator pos;
    waiter& w;
    ~waiting() {
      if (!w.done) list.erase(pos);
    }
  };

  static asio::awaitable<void> wait(std::list<waiter*>& list, waiter& w) {
    waiting guard{list, list.insert(list.end(), &w), w};
    std::error_code ec;
    co_await w.timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!w.done)
      throw std::system_error(asio::error::operation_aborted, "data_store: wait cancelled");
  }

  static void take(hosted_table& h, std::vector<store::sampled_item>& out, std::uint32_t max_items) {
    while (out.size() < max_items && h.t.can_sample()) out.push_back(h.t.sample());
  }

  // Serves waiting inserts and samples, oldest first, while the limiter allows; a
  // served insert may let samples go and the reverse, hence the loop.
  static void serve_waiters(hosted_table& h) {
    for (bool progress = true; progress;) {
      progress = false;
      while (!h.inserters.empty() && h.t.can_insert()) {
        waiter* w = h.inserters.front();
        h.inserters.pop_front();
        w->key = h.t.insert(w->key, w->priority, std::move(w->data));
        w->done = true;
        w->timer.cancel();
        progress = true;
      }
      while (!h.samplers.empty() && h.t.can_sample()) {
        waiter* w = h.samplers.front();
        h.samplers.pop_front();
        take(h, *w->out, w->max_items);
        w->done = true;
        w->timer.cancel();
        progress = true;
      }
    }
  }

  hosted_table& find(std::string_view name) {
    for (auto& h : tables_)
      if (h->t.name() == name) return *h;
    throw std::invalid_argument(fmt_message("data_store: no table named ", name));
  }

  void take(const store::table_config& c) { configs_.push_back(c); }
  void take(const store::options& o) {
    options_ = o;
    checkpoint_path_ = std::string(o.checkpoint_path);
  }

  template <class... S>
  static std::string fmt_message(const S&... parts) {
    std::string s;
    (s.append(std::string_view(parts)), ...);
    return s;
  }

  void write_checkpoint(const std::string& path) const {
    std::string tmp = path;
    tmp.append(".tmp");
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      if (!f) throw std::runtime_error(fmt_message("data_store: cannot write ", tmp));
      cereal::BinaryOutputArchive ar(f);
      save_state(ar);
      f.flush();
      if (!f) throw std::runtime_error(fmt_message("data_store: cannot write ", tmp));
    }
    std::filesystem::rename(tmp, path);
  }

  // Tables of the file that the program no longer declares are skipped.
  void restore() {
    std::ifstream f(checkpoint_path_, std::ios::binary);
    if (!f) throw std::runtime_error(fmt_message("data_store: cannot read ", checkpoint_path_));
    cereal::BinaryInputArchive ar(f);
    load_tables(ar, checkpoint_path_);
  }

  template <class Ar>
  void load_tables(Ar& ar, std::string_view from) {
    std::string magic;
    std::uint64_t n = 0;
    ar(magic);
    if (magic != checkpoint_magic)
      throw std::runtime_error(fmt_message("data_store: ", from, " is not a checkpoint"));
    ar(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      // The table's name leads its record: read it into a table of that name.
      std::string name;
      ar(name);
      hosted_table* h = nullptr;
      for (auto& t : tables_)
        if (t->t.name() == name) h = t.get();
      store::table skipped(store::table_config{.name = name});
      store::table& into = h ? h->t : skipped;
      into.load_after_name(ar);
    }
  }

  store::options options_;
  std::string checkpoint_path_;
  std::vector<store::table_config> configs_;
  std::vector<std::unique_ptr<hosted_table>> tables_;
};

}  // namespace tlaunch
