// The smallest tlaunch program: a counter service and four producers that call
// it. Run it in one process (default), one process per node, or on SSH hosts:
//   ./hello_world
//   ./hello_world --launch=local_mp --replicas producer=8
//   ./hello_world --launch=ssh --hosts=h1,h2 --place counter=h1
#include <tlaunch/tlaunch.hpp>

struct Counter {  // a service: a plain class, coroutine or plain methods
  std::int64_t total = 0;
  asio::awaitable<std::int64_t> add(std::int64_t k) { co_return total += k; }
  std::int64_t get() const { return total; }
  using rpc = tlaunch::methods<&Counter::add, &Counter::get>;
};

struct Producer {  // a node with a body
  tlaunch::handle<Counter> counter;
  asio::awaitable<void> run(tlaunch::context& ctx) {
    for (int i = 0; i < 100; ++i) co_await counter.call<&Counter::add>(1);
    ctx.log("added 100, total now {}", co_await counter.call<&Counter::get>());
  }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"counter", Counter>(),
    tlaunch::node<"producer", Producer>(tlaunch::ref<"counter">).replicas(4));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
