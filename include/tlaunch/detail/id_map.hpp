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

}  // namespace tlaunch::detail
