#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <tlaunch/detail/small_pool.hpp>

using tlaunch::detail::pool_allocator;
using tlaunch::detail::small_pool;

// The heap calls this thread makes, counted by replacing the global operator
// new and delete: a block the pool reuses or keeps never reaches them.
namespace {
thread_local std::size_t heap_news = 0, heap_deletes = 0;
}

void* operator new(std::size_t n) {
  ++heap_news;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  ++heap_news;
  return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return ::operator new(n, std::nothrow);
}
void operator delete(void* p) noexcept {
  if (p) ++heap_deletes;
  std::free(p);
}
void operator delete[](void* p) noexcept { ::operator delete(p); }
void operator delete(void* p, std::size_t) noexcept { ::operator delete(p); }
void operator delete[](void* p, std::size_t) noexcept { ::operator delete(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { ::operator delete(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { ::operator delete(p); }

namespace {

struct heap_calls {
  std::size_t news = heap_news, deletes = heap_deletes;
  std::size_t new_calls() const { return heap_news - news; }
  std::size_t delete_calls() const { return heap_deletes - deletes; }
};

// How many blocks of a size class the thread's list keeps.
constexpr std::size_t kept_blocks(std::size_t block_size) {
  return small_pool::keep_bytes / block_size;
}

}  // namespace

TEST_SUITE("small_pool") {
  TEST_CASE("a freed block is handed out again for any size of its class, newest first") {
    void* a = small_pool::allocate(100);  // class 65..128
    void* b = small_pool::allocate(128);
    REQUIRE(a != b);
    small_pool::deallocate(a, 100);
    small_pool::deallocate(b, 128);
    heap_calls calls;
    CHECK(small_pool::allocate(65) == b);
    CHECK(small_pool::allocate(120) == a);
    CHECK(calls.new_calls() == 0);
    small_pool::deallocate(a, 120);
    small_pool::deallocate(b, 65);
    CHECK(calls.delete_calls() == 0);
  }

  TEST_CASE("blocks of other classes are not mixed up") {
    void* small = small_pool::allocate(64);
    small_pool::deallocate(small, 64);
    // 65 bytes do not fit a 64-byte block: the kept one must not come back.
    void* bigger = small_pool::allocate(65);
    CHECK(bigger != small);
    CHECK(small_pool::allocate(1) == small);
    small_pool::deallocate(bigger, 65);
    small_pool::deallocate(small, 1);
  }

  TEST_CASE("a new block has the whole size of its class") {
    // allocate(1) then deallocate(.., 64) is how pool_allocator's callers use
    // it; the block must hold 64 bytes (ASan checks the writes).
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{64},
                          std::size_t{65}, std::size_t{1000}, small_pool::max_size}) {
      CAPTURE(n);
      heap_calls calls;
      auto* p = static_cast<unsigned char*>(small_pool::allocate(n));
      std::size_t whole = n == 0 ? small_pool::step
                                 : (n + small_pool::step - 1) / small_pool::step * small_pool::step;
      for (std::size_t i = 0; i < whole; ++i) p[i] = static_cast<unsigned char>(i);
      CHECK(reinterpret_cast<std::uintptr_t>(p) % __STDCPP_DEFAULT_NEW_ALIGNMENT__ == 0);
      small_pool::deallocate(p, whole);
      // Freed as its class's largest size, it is the block allocate(n) gets back.
      CHECK(small_pool::allocate(n) == p);
      small_pool::deallocate(p, n);
      CHECK(calls.delete_calls() == 0);
    }
  }

  TEST_CASE("each class keeps at most keep_bytes; the rest goes back to the heap") {
    for (std::size_t size : {small_pool::step, std::size_t{1024}, small_pool::max_size}) {
      CAPTURE(size);
      const std::size_t keep = kept_blocks(size);
      std::vector<void*> blocks;
      for (std::size_t i = 0; i < keep + 3; ++i) blocks.push_back(small_pool::allocate(size));
      {
        heap_calls calls;
        for (void* p : blocks) small_pool::deallocate(p, size);
        CHECK(calls.delete_calls() == 3);
      }
      // The first `keep` freed blocks are the ones kept, and come back last first.
      std::vector<void*> again;
      again.reserve(keep + 1);  // the vector's own allocation is not counted
      {
        heap_calls calls;
        for (std::size_t i = 0; i < keep; ++i) again.push_back(small_pool::allocate(size));
        CHECK(calls.new_calls() == 0);
        again.push_back(small_pool::allocate(size));
        CHECK(calls.new_calls() == 1);
      }
      CHECK(again.front() == blocks[keep - 1]);
      CHECK(again[keep - 1] == blocks.front());
      for (void* p : again) small_pool::deallocate(p, size);
    }
  }

  TEST_CASE("sizes above max_size bypass the pool") {
    heap_calls calls;
    void* p = small_pool::allocate(small_pool::max_size + 1);
    CHECK(calls.new_calls() == 1);
    small_pool::deallocate(p, small_pool::max_size + 1);
    CHECK(calls.delete_calls() == 1);
  }

  TEST_CASE("a block freed on another thread joins that thread's list") {
    void* p = small_pool::allocate(200);
    void* reused = nullptr;
    std::size_t news = 0;
    std::thread([&] {
      small_pool::deallocate(p, 200);
      heap_calls calls;
      reused = small_pool::allocate(200);
      news = calls.new_calls();
      small_pool::deallocate(reused, 200);
    }).join();  // the thread's list is freed when it exits (LeakSanitizer checks)
    CHECK(reused == p);
    CHECK(news == 0);
  }

  TEST_CASE("a block freed after the thread's pool is gone goes back to the heap") {
    // A thread_local constructed before the pool is destroyed after it and
    // frees its block then: the block must not join the dead pool's list.
    struct late_free {
      void* block = nullptr;
      std::size_t* deletes_seen = nullptr;
      ~late_free() {
        if (!block) return;
        std::size_t before = heap_deletes;
        small_pool::deallocate(block, 64);
        *deletes_seen = heap_deletes - before;
      }
    };
    std::size_t deletes_seen = 99;
    std::thread([&] {
      thread_local late_free holder;  // constructed first
      holder.deletes_seen = &deletes_seen;
      holder.block = small_pool::allocate(64);  // the pool is constructed now
    }).join();
    CHECK(deletes_seen == 1);
  }

  TEST_CASE("pool_allocator: allocate_shared reuses the freed control block") {
    pool_allocator<int> alloc;
    auto first = std::allocate_shared<std::uint64_t>(alloc, 7);
    std::uint64_t* where = first.get();
    first.reset();
    heap_calls calls;
    auto second = std::allocate_shared<std::uint64_t>(alloc, 8);
    CHECK(second.get() == where);
    CHECK(*second == 8);
    CHECK(calls.new_calls() == 0);
    CHECK(pool_allocator<int>{} == pool_allocator<double>{});
  }
}
