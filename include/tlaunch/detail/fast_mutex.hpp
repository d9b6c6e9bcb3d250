// A mutex for short critical sections that are almost never contended (a
// connection's queues and pending calls): one atomic exchange to lock and one
// to unlock, a short spin, then a futex wait. pthread_mutex_lock/unlock cost
// several times the instructions for the same uncontended case.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

namespace tlaunch::detail {

class fast_mutex {
 public:
  fast_mutex() = default;
  fast_mutex(const fast_mutex&) = delete;
  fast_mutex& operator=(const fast_mutex&) = delete;

  void lock() noexcept {
    int free = 0;
    if (state_.compare_exchange_strong(free, locked, std::memory_order_acquire,
                                       std::memory_order_relaxed)) [[likely]]
      return;
    lock_contended();
  }
  bool try_lock() noexcept {
    int free = 0;
    return state_.compare_exchange_strong(free, locked, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }
  void unlock() noexcept {
    if (state_.exchange(0, std::memory_order_release) == contended) [[unlikely]]
      futex(FUTEX_WAKE_PRIVATE, 1);
  }

 private:
  static constexpr int locked = 1, contended = 2;  // 0: free

  void lock_contended() noexcept {
    for (int i = 0; i < 100; ++i) {  // the holder is likely to be done in a moment
      int free = 0;
      if (state_.load(std::memory_order_relaxed) == 0 &&
          state_.compare_exchange_weak(free, locked, std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    // Marked contended, so the holder's unlock wakes a sleeper.
    while (state_.exchange(contended, std::memory_order_acquire) != 0)
      futex(FUTEX_WAIT_PRIVATE, contended);
  }

  void futex(int op, int value) noexcept {
    ::syscall(SYS_futex, reinterpret_cast<int*>(&state_), op, value, nullptr, nullptr, 0);
  }

  static_assert(sizeof(std::atomic<int>) == sizeof(int) && std::atomic<int>::is_always_lock_free);
  std::atomic<int> state_{0};
};

}  // namespace tlaunch::detail
