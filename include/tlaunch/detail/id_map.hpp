// A hash map from nonzero 64-bit ids to values, stored flat: open addressing
// with linear probing and backward-shift deletion (no tombstones), so a
// connection's pending calls cost no allocation per call once it has grown.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace tlaunch::detail {

template <class T>
class id_map {
 public:
  explicit id_map(std::size_t capacity = 64) { rehash(round_up(capacity)); }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

  // Inserts or replaces the value of id (id != 0).
  void insert(std::uint64_t id, T value) {
    if ((size_ + 1) * 4 > slots_.size() * 3) rehash(slots_.size() * 2);
    std::size_t i = find_slot(id);
    if (slots_[i].id == 0) {
      slots_[i].id = id;
      ++size_;
    }
    slots_[i].value = std::move(value);
  }

  bool contains(std::uint64_t id) const { return slots_[find_slot(id)].id != 0; }

  // Removes id and returns its value, if it was there.
  std::optional<T> take(std::uint64_t id) {
    std::size_t i = find_slot(id);
    if (slots_[i].id == 0) return std::nullopt;
    std::optional<T> out(std::move(slots_[i].value));
    erase_at(i);
    return out;
  }

  // Calls f(id, value&) for every entry.
  template <class F>
  void for_each(F&& f) {
    for (auto& s : slots_)
      if (s.id != 0) f(s.id, s.value);
  }

  // Removes every entry, handing the values to the caller.
  std::vector<T> drain() {
    std::vector<T> out;
    out.reserve(size_);
    for (auto& s : slots_)
      if (s.id != 0) {
        out.push_back(std::move(s.value));
        s = slot{};
      }
    size_ = 0;
    return out;
  }

 private:
  struct slot {
    std::uint64_t id = 0;
    T value{};
  };

  static std::size_t round_up(std::size_t n) {
    std::size_t c = 8;
    while (c < n) c *= 2;
    return c;
  }
  // Ids are mostly consecutive; the multiplier spreads them over the table.
  std::size_t home(std::uint64_t id) const {
    return static_cast<std::size_t>((id * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  // The slot holding id, or the empty slot where it would go.
  std::size_t find_slot(std::uint64_t id) const {
    std::size_t mask = slots_.size() - 1;
    for (std::size_t i = home(id);; i = (i + 1) & mask)
      if (slots_[i].id == id || slots_[i].id == 0) return i;
  }
  void erase_at(std::size_t i) {
    std::size_t mask = slots_.size() - 1;
    slots_[i] = slot{};
    --size_;
    // Move back every later entry of the run that could live closer to home.
    for (std::size_t j = (i + 1) & mask; slots_[j].id != 0; j = (j + 1) & mask) {
      std::size_t h = home(slots_[j].id);
      // j may move to i when h is not cyclically in (i, j].
      bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
      if (stays) continue;
      slots_[i] = std::move(slots_[j]);
      slots_[j] = slot{};
      i = j;
    }
  }
  void rehash(std::size_t capacity) {
    std::vector<slot> old = std::move(slots_);
    slots_.assign(capacity, slot{});
    shift_ = 64;
    for (std::size_t c = capacity; c > 1; c /= 2) --shift_;
    size_ = 0;
    for (auto& s : old)
      if (s.id != 0) {
        std::size_t i = find_slot(s.id);
        slots_[i] = std::move(s);
        ++size_;
      }
  }

  std::vector<slot> slots_;
  std::size_t size_ = 0;
  unsigned shift_ = 64;
};

// For ids handed out in increasing order, most of them short-lived (a
// connection's call ids): a direct-mapped ring indexed by the id's low bits,
// so a call in a window of consecutive ids is found without hashing or
// probing. An id whose ring slot still holds an older id (a call that takes
// long) goes to an id_map beside it. The ring doubles, up to a limit, when
// that map holds more than a quarter of the ring's size.
template <class T>
class seq_id_map {
 public:
  explicit seq_id_map(std::size_t ring = 256, std::size_t max_ring = 1u << 16)
      : max_ring_(max_ring) {
    std::size_t c = 8;
    while (c < ring) c *= 2;
    ring_.resize(c);
  }

  std::size_t size() const noexcept { return in_ring_ + spill_.size(); }
  bool empty() const noexcept { return size() == 0; }

  // Inserts or replaces the value of id (id != 0).
  void insert(std::uint64_t id, T value) {
    slot& s = ring_[id & (ring_.size() - 1)];
    if (s.id == id) {
      s.value = std::move(value);
      return;
    }
    if (s.id == 0 && (spill_.empty() || !spill_.contains(id))) {
      s.id = id;
      s.value = std::move(value);
      ++in_ring_;
      return;
    }
    spill_.insert(id, std::move(value));
    if (spill_.size() * 4 > ring_.size() && ring_.size() < max_ring_) grow();
  }

  bool contains(std::uint64_t id) const {
    return ring_[id & (ring_.size() - 1)].id == id || (!spill_.empty() && spill_.contains(id));
  }

  // Removes id and returns its value, if it was there.
  std::optional<T> take(std::uint64_t id) {
    slot& s = ring_[id & (ring_.size() - 1)];
    if (s.id == id) {
      std::optional<T> out(std::move(s.value));
      s.value = T{};
      s.id = 0;
      --in_ring_;
      return out;
    }
    if (spill_.empty()) return std::nullopt;
    return spill_.take(id);
  }

  // Calls f(id, value&) for every entry.
  template <class F>
  void for_each(F&& f) {
    for (auto& s : ring_)
      if (s.id != 0) f(s.id, s.value);
    spill_.for_each(f);
  }

  // Removes every entry, handing the values to the caller.
  std::vector<T> drain() {
    std::vector<T> out = spill_.drain();
    for (auto& s : ring_)
      if (s.id != 0) {
        out.push_back(std::move(s.value));
        s = slot{};
      }
    in_ring_ = 0;
    return out;
  }

  std::size_t ring_size() const noexcept { return ring_.size(); }

 private:
  struct slot {
    std::uint64_t id = 0;
    T value{};
  };

  void grow() {
    std::vector<slot> old = std::move(ring_);
    ring_.clear();
    ring_.resize(old.size() * 2);
    std::vector<std::pair<std::uint64_t, T>> moved;
    moved.reserve(in_ring_ + spill_.size());
    for (auto& s : old)
      if (s.id != 0) moved.emplace_back(s.id, std::move(s.value));
    spill_.for_each([&](std::uint64_t id, T& v) { moved.emplace_back(id, std::move(v)); });
    spill_.drain();
    in_ring_ = 0;
    for (auto& [id, v] : moved) {
      slot& s = ring_[id & (ring_.size() - 1)];
      if (s.id == 0) {
        s.id = id;
        s.value = std::move(v);
        ++in_ring_;
      } else {
        spill_.insert(id, std::move(v));
      }
    }
  }

  std::vector<slot> ring_;
  std::size_t in_ring_ = 0;
  std::size_t max_ring_;
  id_map<T> spill_{16};
};

}  // namespace tlaunch::detail
