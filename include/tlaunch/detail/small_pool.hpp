// Per-thread free lists for the small objects every call allocates (future
// states, pending calls, dispatch batches). A burst of calls frees dozens of
// them at once, far more than malloc's per-thread cache keeps, and the rest took
// malloc's slow path in every pipelined profile.
//
// Blocks come in 64-byte size classes up to 2 KiB; a block may be freed on any
// thread (it joins that thread's list). Each list keeps at most 128 KiB.
#pragma once

#include <cstddef>
#include <new>

namespace tlaunch::detail {

class small_pool {
 public:
  static constexpr std::size_t step = 64, classes = 32, keep_bytes = 128 * 1024;
  static constexpr std::size_t max_size = step * classes;

  static void* allocate(std::size_t n) {
    std::size_t c = size_class(n);
    if (c < classes)
      if (small_pool* p = local()) {
        list& l = p->lists_[c];
        if (node* b = l.head) {
          l.head = b->next;
          --l.count;
          return b;
        }
      }
    return ::operator new(c < classes ? (c + 1) * step : n);
  }

  static void deallocate(void* b, std::size_t n) noexcept {
    std::size_t c = size_class(n);
    if (c < classes)
      if (small_pool* p = local()) {
        list& l = p->lists_[c];
        if (l.count < keep_bytes / ((c + 1) * step)) {
          l.head = ::new (b) node{l.head};
          ++l.count;
          return;
        }
      }
    ::operator delete(b);
  }

  small_pool(const small_pool&) = delete;
  small_pool& operator=(const small_pool&) = delete;

 private:
  struct node {
    node* next;
  };
  struct list {
    node* head = nullptr;
    std::size_t count = 0;
  };

  small_pool() = default;
  ~small_pool() {
    gone() = true;  // blocks freed later in this thread's exit go back to the heap
    for (auto& l : lists_)
      while (node* b = l.head) {
        l.head = b->next;
        ::operator delete(b);
      }
  }

  static std::size_t size_class(std::size_t n) noexcept { return n == 0 ? 0 : (n - 1) / step; }
  static bool& gone() noexcept {
    thread_local bool g = false;
    return g;
  }
  static small_pool* local() noexcept {
    if (gone()) return nullptr;
    thread_local small_pool p;
    return &p;
  }

  list lists_[classes];
};

// A standard allocator over small_pool (for std::allocate_shared).
template <class T>
struct pool_allocator {
  using value_type = T;
  pool_allocator() noexcept = default;
  template <class U>
  pool_allocator(const pool_allocator<U>&) noexcept {}
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
  T* allocate(std::size_t n) { return static_cast<T*>(small_pool::allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { small_pool::deallocate(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const pool_allocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace tlaunch::detail
