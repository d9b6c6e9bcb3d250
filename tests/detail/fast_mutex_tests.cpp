// The connection's mutex: mutual exclusion under contention (also checked by
// TSan on the plain counter), try_lock, and a waiter that sleeps until unlock.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <tlaunch/detail/fast_mutex.hpp>
#include <vector>

using namespace std::chrono_literals;
using tlaunch::detail::fast_mutex;

TEST_SUITE("fast_mutex") {
  TEST_CASE("threads that all increment under the lock lose no increment") {
    fast_mutex mu;
    long counter = 0;  // plain: only the mutex orders the threads
    int inside = 0, most_inside = 0;
    constexpr int threads = 4, each = 50000;
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&] {
        for (int i = 0; i < each; ++i) {
          std::lock_guard lk(mu);
          most_inside = std::max(most_inside, ++inside);
          ++counter;
          --inside;
        }
      });
    for (auto& t : ts) t.join();
    CHECK(counter == long{threads} * each);
    CHECK(most_inside == 1);
  }

  TEST_CASE("try_lock fails while held and succeeds once released") {
    fast_mutex mu;
    REQUIRE(mu.try_lock());
    bool other = true;
    std::thread([&] { other = mu.try_lock(); }).join();
    CHECK_FALSE(other);
    mu.unlock();
    std::thread([&] {
      other = mu.try_lock();
      if (other) mu.unlock();
    }).join();
    CHECK(other);
  }

  TEST_CASE("a thread that finds it held sleeps until it is released") {
    fast_mutex mu;
    std::atomic<bool> got{false};
    mu.lock();
    std::thread waiter([&] {
      std::lock_guard lk(mu);  // spins briefly, then waits in the kernel
      got = true;
    });
    std::this_thread::sleep_for(50ms);
    CHECK_FALSE(got.load());
    mu.unlock();
    waiter.join();
    CHECK(got.load());
    // And the mutex is free again afterwards.
    CHECK(mu.try_lock());
    mu.unlock();
  }
}
