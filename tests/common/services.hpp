// Service types and arguments shared by test programs and tests:
//  - counted: an argument that counts how often it is serialized;
//  - Echo: a service that doubles a number at once (twice) or answers after 2 s (later),
//    and echo_program, a program of one Echo node named "echo".
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include <tlaunch/tlaunch.hpp>

namespace tlaunch::test_support {

// An argument that counts, in the caller's counter, how often it is serialized: a call
// over the wire serializes it once, a direct call within a process never.
struct counted {
  std::int64_t value = 0;
  std::atomic<int>* saves = nullptr;  // the caller's; not sent
  template <class A>
  void save(A& a) const {
    if (saves) ++*saves;
    a(value);
  }
  template <class A>
  void load(A& a) {
    a(value);
  }
};

struct Echo {
  int twice(int x) const { return 2 * x; }
  asio::awaitable<int> later(int x) {  // answers after 2 s
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::seconds(2));
    co_await t.async_wait(asio::use_awaitable);
    co_return x;
  }
  using rpc = tlaunch::methods<&Echo::twice, &Echo::later>;
};
inline constexpr auto echo_program = tlaunch::program(tlaunch::node<"echo", Echo>());

}  // namespace tlaunch::test_support
