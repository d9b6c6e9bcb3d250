// Page-aligned buffers for large frames, reused: a fresh 1 MiB allocation is
// an mmap whose page faults and unmap cost more than the data copy itself.
#pragma once

#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace tlaunch::detail {

class buffer_pool {
 public:
  static constexpr std::size_t page = 4096;
  static constexpr std::size_t keep_per_class = 8;
  static constexpr std::size_t largest_kept = 64u << 20;
  static constexpr std::size_t most_bytes_kept = 64u << 20;  // over all classes

  static buffer_pool& instance() {
    static buffer_pool* p = new buffer_pool;  // never destroyed: buffers may outlive statics
    return *p;
  }

  // A buffer of at least n bytes, returned to the pool when the last owner lets go.
  std::shared_ptr<char> get(std::size_t n) {
    std::size_t cls = size_class(n);
    char* p = nullptr;
    if (cls <= largest_kept) {
      std::lock_guard lk(mu_);
      auto& free = free_[index(cls)];
      if (!free.empty()) {
        p = free.back();
        free.pop_back();
        kept_ -= cls;
      }
    }
    if (!p) p = static_cast<char*>(std::aligned_alloc(page, cls));
    if (!p) throw std::bad_alloc();
    return std::shared_ptr<char>(p, [this, cls](char* q) { put(q, cls); });
  }

 private:
  static std::size_t size_class(std::size_t n) {
    std::size_t c = 64 * 1024;
    while (c < n) c *= 2;
    return c;
  }
  static std::size_t index(std::size_t cls) {
    std::size_t i = 0;
    for (std::size_t c = 64 * 1024; c < cls; c *= 2) ++i;
    return i;
  }
  void put(char* p, std::size_t cls) {
    if (cls <= largest_kept) {
      std::lock_guard lk(mu_);
      auto& free = free_[index(cls)];
      if (free.size() < keep_per_class && kept_ + cls <= most_bytes_kept) {
        free.push_back(p);
        kept_ += cls;
        return;
      }
    }
    std::free(p);
  }

  std::mutex mu_;
  std::vector<char*> free_[16];
  std::size_t kept_ = 0;  // bytes in free_
};

}  // namespace tlaunch::detail
