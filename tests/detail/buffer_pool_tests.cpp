#include <malloc.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <tlaunch/detail/buffer_pool.hpp>

using tlaunch::detail::buffer_pool;

// The pool is one per process: each test first takes out whatever earlier ones
// left in it (see drained), so what it keeps and reuses is the test's alone.

// Sanitizers replace glibc's malloc, so mallinfo2() says nothing of the pool there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TLAUNCH_TEST_GLIBC_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TLAUNCH_TEST_GLIBC_MALLOC 0
#endif
#endif
#ifndef TLAUNCH_TEST_GLIBC_MALLOC
#define TLAUNCH_TEST_GLIBC_MALLOC 1
#endif

namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;

std::uintptr_t address(const std::shared_ptr<char>& p) {
  return reinterpret_cast<std::uintptr_t>(p.get());
}

// Holds every buffer the pool keeps (and fresh ones for the classes that keep
// fewer), so the pool is empty, byte budget included, while it lives. A class
// keeps no more buffers than the budget holds.
struct drained {
  std::vector<std::shared_ptr<char>> held;
  drained() {
    for (std::size_t c = 64 * KiB; c <= buffer_pool::largest_kept; c *= 2)
      for (std::size_t i = 0;
           i < std::min(buffer_pool::keep_per_class, buffer_pool::most_bytes_kept / c); ++i)
        held.push_back(buffer_pool::instance().get(c));
  }
};

}  // namespace

TEST_SUITE("buffer_pool") {
  TEST_CASE("a buffer is page-aligned and holds the bytes asked for") {
    auto& pool = buffer_pool::instance();
    CHECK(&pool == &buffer_pool::instance());
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, 64 * KiB, 64 * KiB + 1, 300 * KiB}) {
      CAPTURE(n);
      auto b = pool.get(n);
      REQUIRE(b);
      CHECK(address(b) % buffer_pool::page == 0);
      std::memset(b.get(), 0x5a, n);  // ASan checks the buffer is that large
      // Every buffer holds at least the smallest class.
      std::memset(b.get(), 0x5a, 64 * KiB);
    }
  }

  TEST_CASE("a released buffer comes back for any size of its class") {
    drained empty;
    auto& pool = buffer_pool::instance();
    // 512 KiB class: 256 KiB + 1 .. 512 KiB.
    auto a = pool.get(300 * KiB);
    const char* where = a.get();
    std::memset(a.get(), 1, 300 * KiB);
    a.reset();
    auto b = pool.get(512 * KiB);
    CHECK(b.get() == where);
    std::memset(b.get(), 2, 512 * KiB);
    b.reset();
    auto c = pool.get(256 * KiB + 1);
    CHECK(c.get() == where);
    // A smaller class never gets it (it is still kept in the pool).
    auto d = pool.get(300 * KiB);
    auto e = pool.get(256 * KiB);
    CHECK(d.get() != where);
    CHECK(e.get() != where);
  }

  TEST_CASE("the buffer goes back only when its last owner lets go") {
    drained empty;
    auto& pool = buffer_pool::instance();
    auto a = pool.get(2 * MiB);
    auto copy = a;
    const char* where = a.get();
    a.reset();
    auto other = pool.get(2 * MiB);  // `copy` still owns the first one
    CHECK(other.get() != where);
    std::memset(copy.get(), 3, 2 * MiB);
    copy.reset();
    auto again = pool.get(2 * MiB);
    CHECK(again.get() == where);
  }

  TEST_CASE("a class keeps keep_per_class buffers, the latest released first") {
    drained empty;
    auto& pool = buffer_pool::instance();
    const std::size_t n = 4 * MiB;  // a class no other test uses
    std::vector<std::shared_ptr<char>> held;
    for (std::size_t i = 0; i < buffer_pool::keep_per_class + 2; ++i) held.push_back(pool.get(n));
    std::vector<const char*> released;
    for (auto& b : held) released.push_back(b.get());
    for (auto& b : held) b.reset();  // the last two find the class full
    std::vector<std::shared_ptr<char>> again;
    for (std::size_t i = 0; i < buffer_pool::keep_per_class; ++i) again.push_back(pool.get(n));
    for (std::size_t i = 0; i < buffer_pool::keep_per_class; ++i) {
      CAPTURE(i);
      CHECK(again[i].get() == released[buffer_pool::keep_per_class - 1 - i]);
    }
  }

  TEST_CASE("a buffer released on another thread is reused") {
    drained empty;
    auto& pool = buffer_pool::instance();
    auto a = pool.get(1 * MiB);
    const char* where = a.get();
    std::thread([b = std::move(a)]() mutable { b.reset(); }).join();
    CHECK(pool.get(1 * MiB).get() == where);
  }

  TEST_CASE("the largest class kept is largest_kept") {
    drained empty;
    auto& pool = buffer_pool::instance();
    auto a = pool.get(buffer_pool::largest_kept);
    const char* where = a.get();
    a.reset();
    auto b = pool.get(buffer_pool::largest_kept - 1);
    CHECK(b.get() == where);
  }

#if TLAUNCH_TEST_GLIBC_MALLOC
  // What is not kept is freed: glibc serves buffers this large with mmap and
  // unmaps them on free, which mallinfo2().hblkhd (bytes mapped) shows.
  TEST_CASE("buffers above largest_kept, or past most_bytes_kept, are freed") {
    drained empty;
    auto& pool = buffer_pool::instance();
    {
      auto huge = pool.get(buffer_pool::largest_kept + 1);  // the 128 MiB class
      auto mapped = mallinfo2().hblkhd;
      huge.reset();
      CHECK(mapped - mallinfo2().hblkhd >= 2 * buffer_pool::largest_kept);
    }
    {
      // One 64 MiB buffer fills the byte budget; a 32 MiB one then is freed.
      auto full = pool.get(buffer_pool::most_bytes_kept);
      auto half = pool.get(32 * MiB);
      full.reset();
      auto mapped = mallinfo2().hblkhd;
      half.reset();
      CHECK(mapped - mallinfo2().hblkhd >= 32 * MiB);
      // The 64 MiB one is still kept.
      auto mapped_before_get = mallinfo2().hblkhd;
      auto back = pool.get(buffer_pool::most_bytes_kept);
      CHECK(mallinfo2().hblkhd == mapped_before_get);
    }
  }
#endif
}
