// Selectors of a data-store table: which item a sample returns (the sampler) and
// which item makes room when the table is full (the remover).
//
// A selector holds only keys and priorities; the table owns the items. Every kind
// costs O(log n) or less per insert, update, erase and select: uniform and FIFO/LIFO
// O(1), prioritized a sum tree, the heaps an ordered set.
#pragma once

#include <cmath>
#include <cstdint>
#include <iterator>
#include <list>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace tlaunch::store {

using item_key = std::uint64_t;
using random_engine = std::mt19937_64;

enum class selector_kind : std::uint8_t { uniform, prioritized, fifo, lifo, max_heap, min_heap };

// What a table config names; a literal type, so it can be a node's constructor argument.
struct selector_spec {
  selector_kind kind = selector_kind::uniform;
  double exponent = 1.0;  // prioritized only: an item is picked with probability ∝ priority^exponent
};

constexpr selector_spec uniform() { return {selector_kind::uniform, 1.0}; }
constexpr selector_spec prioritized(double exponent) { return {selector_kind::prioritized, exponent}; }
constexpr selector_spec fifo() { return {selector_kind::fifo, 1.0}; }
constexpr selector_spec lifo() { return {selector_kind::lifo, 1.0}; }
// Highest (lowest) priority first; among equal priorities, the one inserted or
// updated least recently.
constexpr selector_spec max_heap() { return {selector_kind::max_heap, 1.0}; }
constexpr selector_spec min_heap() { return {selector_kind::min_heap, 1.0}; }

struct selection {
  item_key key = 0;
  double probability = 1.0;  // of picking this item at this select (1 for the ordered kinds)
};

class selector {
 public:
  virtual ~selector() = default;
  // Keys are unique: the table never inserts a key twice without erasing it.
  virtual void insert(item_key key, double priority) = 0;
  virtual void update(item_key key, double priority) = 0;
  virtual void erase(item_key key) = 0;
  // Requires size() > 0.
  virtual selection select(random_engine& rng) = 0;
  virtual std::size_t size() const = 0;
};

namespace detail {

// Keys in a dense vector, so that a random index picks one; erase swaps with the last.
class dense_keys {
 public:
  std::size_t add(item_key k) {
    pos_.emplace(k, keys_.size());
    keys_.push_back(k);
    return keys_.size() - 1;
  }
  // Removes k; returns {slot it was in, slot moved into it (== slot when none)}.
  std::pair<std::size_t, std::size_t> remove(item_key k) {
    auto it = pos_.find(k);
    if (it == pos_.end()) throw std::out_of_range("selector: no such key");
    std::size_t slot = it->second, last = keys_.size() - 1;
    pos_.erase(it);
    if (slot != last) {
      keys_[slot] = keys_[last];
      pos_[keys_[slot]] = slot;
    }
    keys_.pop_back();
    return {slot, last};
  }
  std::size_t slot_of(item_key k) const {
    auto it = pos_.find(k);
    if (it == pos_.end()) throw std::out_of_range("selector: no such key");
    return it->second;
  }
  item_key operator[](std::size_t i) const { return keys_[i]; }
  std::size_t size() const { return keys_.size(); }

 private:
  std::vector<item_key> keys_;
  std::unordered_map<item_key, std::size_t> pos_;
};

}  // namespace detail

class uniform_selector final : public selector {
 public:
  void insert(item_key key, double) override { keys_.add(key); }
  void update(item_key key, double) override { (void)keys_.slot_of(key); }
  void erase(item_key key) override { keys_.remove(key); }
  selection select(random_engine& rng) override {
    std::uniform_int_distribution<std::size_t> pick(0, keys_.size() - 1);
    return {keys_[pick(rng)], 1.0 / static_cast<double>(keys_.size())};
  }
  std::size_t size() const override { return keys_.size(); }

 private:
  detail::dense_keys keys_;
};

// A sum tree over priority^exponent: leaves are slots of the dense key vector, each
// inner node the sum of its children (recomputed, not adjusted, so no drift).
class prioritized_selector final : public selector {
 public:
  explicit prioritized_selector(double exponent) : exponent_(exponent) {
    if (!(exponent >= 0)) throw std::invalid_argument("prioritized selector: exponent < 0");
  }
  void insert(item_key key, double priority) override {
    std::size_t slot = keys_.add(key);
    if (slot >= capacity_) grow();
    set(slot, weight(priority));
  }
  void update(item_key key, double priority) override { set(keys_.slot_of(key), weight(priority)); }
  void erase(item_key key) override {
    auto [slot, last] = keys_.remove(key);
    if (slot != last) set(slot, tree_[capacity_ + last]);
    set(last, 0.0);
  }
  selection select(random_engine& rng) override {
    double total = tree_[1];
    std::size_t n = keys_.size();
    if (!(total > 0)) {  // every priority 0: uniform, as Reverb does
      std::uniform_int_distribution<std::size_t> pick(0, n - 1);
      return {keys_[pick(rng)], 1.0 / static_cast<double>(n)};
    }
    double u = std::uniform_real_distribution<double>(0.0, total)(rng);
    std::size_t node = 1;
    while (node < capacity_) {
      std::size_t left = 2 * node;
      if (u < tree_[left] || tree_[left + 1] <= 0) {
        node = left;
      } else {
        u -= tree_[left];
        node = left + 1;
      }
    }
    std::size_t slot = node - capacity_;
    if (slot >= n) slot = n - 1;  // rounding at the right edge
    return {keys_[slot], tree_[capacity_ + slot] / total};
  }
  std::size_t size() const override { return keys_.size(); }

 private:
  double weight(double priority) const {
    if (!(priority >= 0)) throw std::invalid_argument("prioritized selector: priority < 0 or NaN");
    return exponent_ == 1.0 ? priority : std::pow(priority, exponent_);
  }
  void set(std::size_t slot, double w) {
    std::size_t i = capacity_ + slot;
    tree_[i] = w;
    for (i /= 2; i >= 1; i /= 2) tree_[i] = tree_[2 * i] + tree_[2 * i + 1];
  }
  void grow() {
    std::size_t cap = capacity_ * 2;
    std::vector<double> t(2 * cap, 0.0);
    for (std::size_t s = 0; s < capacity_; ++s) t[cap + s] = tree_[capacity_ + s];
    for (std::size_t i = cap - 1; i >= 1; --i) t[i] = t[2 * i] + t[2 * i + 1];
    tree_ = std::move(t);
    capacity_ = cap;
  }

  double exponent_;
  detail::dense_keys keys_;
  std::size_t capacity_ = 1;
  std::vector<double> tree_ = std::vector<double>(2, 0.0);
};

// Insertion order: FIFO selects the oldest, LIFO the newest; updates keep the order.
class order_selector final : public selector {
 public:
  explicit order_selector(bool newest_first) : newest_first_(newest_first) {}
  void insert(item_key key, double) override {
    order_.push_back(key);
    pos_.emplace(key, std::prev(order_.end()));
  }
  void update(item_key key, double) override { (void)find(key); }
  void erase(item_key key) override {
    auto it = find(key);
    order_.erase(it->second);
    pos_.erase(it);
  }
  selection select(random_engine&) override {
    return {newest_first_ ? order_.back() : order_.front(), 1.0};
  }
  std::size_t size() const override { return order_.size(); }

 private:
  auto find(item_key key) -> std::unordered_map<item_key, std::list<item_key>::iterator>::iterator {
    auto it = pos_.find(key);
    if (it == pos_.end()) throw std::out_of_range("selector: no such key");
    return it;
  }
  bool newest_first_;
  std::list<item_key> order_;
  std::unordered_map<item_key, std::list<item_key>::iterator> pos_;
};

// Priority order; ties go to the item inserted or updated least recently.
class heap_selector final : public selector {
 public:
  explicit heap_selector(bool max_first) : max_first_(max_first) {}
  void insert(item_key key, double priority) override {
    auto [it, ok] = set_.insert(entry{max_first_ ? -priority : priority, seq_++, key});
    pos_.emplace(key, it);
  }
  void update(item_key key, double priority) override {
    auto p = find(key);
    set_.erase(p->second);
    p->second = set_.insert(entry{max_first_ ? -priority : priority, seq_++, key}).first;
  }
  void erase(item_key key) override {
    auto p = find(key);
    set_.erase(p->second);
    pos_.erase(p);
  }
  selection select(random_engine&) override { return {set_.begin()->key, 1.0}; }
  std::size_t size() const override { return set_.size(); }

 private:
  struct entry {
    double rank;  // priority, negated for a max-heap
    std::uint64_t seq;
    item_key key;
    bool operator<(const entry& o) const { return std::tie(rank, seq) < std::tie(o.rank, o.seq); }
  };
  using position_map = std::unordered_map<item_key, std::set<entry>::iterator>;
  position_map::iterator find(item_key key) {
    auto it = pos_.find(key);
    if (it == pos_.end()) throw std::out_of_range("selector: no such key");
    return it;
  }
  bool max_first_;
  std::uint64_t seq_ = 0;
  std::set<entry> set_;
  position_map pos_;
};

inline std::unique_ptr<selector> make_selector(const selector_spec& s) {
  switch (s.kind) {
    case selector_kind::uniform: return std::make_unique<uniform_selector>();
    case selector_kind::prioritized: return std::make_unique<prioritized_selector>(s.exponent);
    case selector_kind::fifo: return std::make_unique<order_selector>(false);
    case selector_kind::lifo: return std::make_unique<order_selector>(true);
    case selector_kind::max_heap: return std::make_unique<heap_selector>(true);
    case selector_kind::min_heap: return std::make_unique<heap_selector>(false);
  }
  throw std::invalid_argument("selector: unknown kind");
}

}  // namespace tlaunch::store
