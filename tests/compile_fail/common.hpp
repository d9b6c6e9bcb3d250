// Services shared by the compile_fail cases; each case breaks exactly one rule.
#pragma once

#include <tlaunch/tlaunch.hpp>

struct Counter {
  std::int64_t total = 0;
  asio::awaitable<std::int64_t> add(std::int64_t k) { co_return total += k; }
  std::int64_t get() const { return total; }
  void reset() { total = 0; }
  using rpc = tlaunch::methods<&Counter::add, &Counter::get>;
};

struct Producer {
  tlaunch::handle<Counter> counter;
  asio::awaitable<void> run(tlaunch::context&) { co_await counter.call<&Counter::add>(1); }
};
