// A data-store table: items (bytes with a key, a priority and a sample count), a
// sampler and a remover (store/selectors.hpp), max_size, max_times_sampled and a
// rate limiter (store/rate_limiter.hpp). Not thread-safe and never waits: the node
// (store/data_store.hpp) calls it from its strand and makes callers wait while
// can_insert() or can_sample() is false.
#pragma once

#include <algorithm>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "../bytes.hpp"
#include "rate_limiter.hpp"
#include "selectors.hpp"

namespace tlaunch::store {

// One table of a data_store node; a literal type, so it is a node constructor argument:
//   store::table_config{.name = "replay", .sampler = store::prioritized(0.6),
//                       .max_size = 100'000, .limiter = store::min_size(1000)}
struct table_config {
  std::string_view name = {};
  selector_spec sampler = uniform();
  selector_spec remover = fifo();  // picks the item to delete when an insert finds the table full
  std::uint64_t max_size = std::numeric_limits<std::uint64_t>::max();
  std::uint32_t max_times_sampled = 0;  // an item sampled this often is deleted; 0: never
  rate_limiter_spec limiter = min_size(1);
};

// Reverb's Queue: FIFO, each item sampled once, inserts wait while `size` items are unsampled.
constexpr table_config queue_table(std::string_view name, std::uint64_t size) {
  return {name, fifo(), fifo(), size, 1, queue_limiter(static_cast<std::int64_t>(size))};
}

struct sampled_item {
  item_key key = 0;
  double priority = 0;
  std::uint32_t times_sampled = 0;  // including this sample
  double probability = 1;           // of this pick (for importance weights)
  std::uint64_t table_size = 0;     // when it was picked
  tlaunch::bytes data = {};
  template <class Ar>
  void serialize(Ar& ar) {
    ar(key, priority, times_sampled, probability, table_size, data);
  }
};

struct table_info {
  std::string name = {};
  std::uint64_t size = 0, max_size = 0;
  std::uint32_t max_times_sampled = 0;
  std::int64_t inserts = 0, samples = 0, deletes = 0;  // since the table was made (checkpoints keep them)
  std::uint64_t waiting_inserts = 0, waiting_samples = 0;  // callers the rate limiter holds now
  template <class Ar>
  void serialize(Ar& ar) {
    ar(name, size, max_size, max_times_sampled, inserts, samples, deletes, waiting_inserts,
       waiting_samples);
  }
};

class table {
 public:
  explicit table(const table_config& c, std::uint64_t seed = std::random_device{}())
      : config_(c),
        name_(c.name),
        sampler_(make_selector(c.sampler)),
        remover_(make_selector(c.remover)),
        limiter_(c.limiter),
        rng_(seed) {
    if (name_.empty()) throw std::invalid_argument("store::table: empty name");
    if (c.max_size == 0) throw std::invalid_argument(message(": max_size 0"));
  }

  const std::string& name() const { return name_; }
  const table_config& config() const { return config_; }
  std::size_t size() const { return items_.size(); }
  bool contains(item_key k) const { return items_.count(k) != 0; }
  const rate_limiter& limiter() const { return limiter_; }

  bool can_insert() const { return limiter_.can_insert(); }
  bool can_sample() const { return !items_.empty() && limiter_.can_sample(); }

  // Inserts an item, or replaces the one with that key (counted as a delete and an
  // insert). Key 0 takes the table's next free key. A full table first deletes the
  // remover's pick. Returns the key. Does not consult the rate limiter.
  item_key insert(item_key key, double priority, tlaunch::bytes data) {
    if (!(priority >= 0)) throw std::invalid_argument(message(": priority < 0 or NaN"));
    if (key == 0) {
      while (next_key_ == 0 || items_.count(next_key_)) ++next_key_;
      key = next_key_++;
    }
    if (auto it = items_.find(key); it != items_.end()) {
      erase(key);
    } else if (items_.size() >= config_.max_size) {
      erase(remover_->select(rng_).key);
    }
    items_.emplace(key, stored{priority, 0, next_seq_++, std::move(data)});
    sampler_->insert(key, priority);
    remover_->insert(key, priority);
    limiter_.inserted();
    return key;
  }

  // Picks an item with the sampler and counts the sample; an item that reaches
  // max_times_sampled is deleted. Requires size() > 0; does not consult the rate limiter.
  sampled_item sample() {
    if (items_.empty()) throw std::logic_error(message(": sample of an empty table"));
    selection s = sampler_->select(rng_);
    stored& it = items_.at(s.key);
    ++it.times_sampled;
    limiter_.sampled();
    sampled_item out{s.key, it.priority, it.times_sampled, s.probability, items_.size(), it.data};
    if (config_.max_times_sampled && it.times_sampled >= config_.max_times_sampled) erase(s.key);
    return out;
  }

  // False when no item has that key.
  bool update_priority(item_key key, double priority) {
    if (!(priority >= 0)) throw std::invalid_argument(message(": priority < 0 or NaN"));
    auto it = items_.find(key);
    if (it == items_.end()) return false;
    it->second.priority = priority;
    sampler_->update(key, priority);
    remover_->update(key, priority);
    return true;
  }

  bool erase(item_key key) {
    auto it = items_.find(key);
    if (it == items_.end()) return false;
    items_.erase(it);
    sampler_->erase(key);
    remover_->erase(key);
    limiter_.deleted();
    return true;
  }

  table_info info() const {
    return {name_,
            items_.size(),
            config_.max_size,
            config_.max_times_sampled,
            limiter_.inserts(),
            limiter_.samples(),
            limiter_.deletes(),
            0,
            0};
  }

  // Checkpoint: items in insertion order and the limiter's counts. The config is the
  // program's: load() keeps this table's and re-inserts the items into its selectors.
  template <class Ar>
  void save(Ar& ar) const {
    std::vector<std::pair<item_key, const stored*>> order;
    order.reserve(items_.size());
    for (const auto& [k, v] : items_) order.emplace_back(k, &v);
    std::sort(order.begin(), order.end(),
              [](const auto& a, const auto& b) { return a.second->seq < b.second->seq; });
    ar(name_, limiter_.inserts(), limiter_.samples(), limiter_.deletes(), next_key_,
       static_cast<std::uint64_t>(order.size()));
    for (const auto& [k, v] : order) ar(k, v->priority, v->times_sampled, v->data);
  }
  template <class Ar>
  void load(Ar& ar) {
    std::string name;
    ar(name);
    if (name != name_)
      throw std::runtime_error(message(": checkpoint holds table ").append(name));
    load_after_name(ar);
  }
  // The rest of a record whose name the caller has read.
  template <class Ar>
  void load_after_name(Ar& ar) {
    std::int64_t inserts = 0, samples = 0, deletes = 0;
    std::uint64_t n = 0;
    ar(inserts, samples, deletes, next_key_, n);
    items_.clear();
    sampler_ = make_selector(config_.sampler);
    remover_ = make_selector(config_.remover);
    for (std::uint64_t i = 0; i < n; ++i) {
      item_key k = 0;
      stored s;
      ar(k, s.priority, s.times_sampled, s.data);
      s.seq = next_seq_++;
      // A smaller max_size than when saved keeps the newest items.
      if (items_.size() >= config_.max_size) {
        item_key victim = remover_->select(rng_).key;
        items_.erase(victim);
        sampler_->erase(victim);
        remover_->erase(victim);
      }
      items_.emplace(k, std::move(s));
      sampler_->insert(k, items_.at(k).priority);
      remover_->insert(k, items_.at(k).priority);
    }
    // The table holds inserts - deletes items.
    limiter_.restore(inserts, samples, inserts - static_cast<std::int64_t>(items_.size()));
    (void)deletes;
  }

 private:
  // Built by appending: g++ 12 at -O3 warns (-Wrestrict) on "literal" + std::string.
  std::string message(std::string_view what) const {
    std::string m = "store::table ";
    m.append(name_).append(what);
    return m;
  }

  struct stored {
    double priority = 0;
    std::uint32_t times_sampled = 0;
    std::uint64_t seq = 0;  // insertion order
    tlaunch::bytes data;
  };

  table_config config_;
  std::string name_;
  std::unique_ptr<selector> sampler_, remover_;
  rate_limiter limiter_;
  random_engine rng_;
  std::unordered_map<item_key, stored> items_;
  item_key next_key_ = 1;
  std::uint64_t next_seq_ = 0;
};

}  // namespace tlaunch::store
