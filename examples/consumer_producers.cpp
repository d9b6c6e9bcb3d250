// Launchpad's consumer/producers example: N producers (3 by default) each
// compute a value for a context they are given; one consumer asks every
// producer at once, logs what each returned and the sum, and stops the program.
//   ./consumer_producers
//   ./consumer_producers --launch=local_mp --replicas producer=8
#include <tlaunch/tlaunch.hpp>

#include <numeric>
#include <vector>

struct Producer {  // a service the consumer calls, with a body that reports at the end
  int calls = 0;
  std::int64_t produced = 0;
  std::int64_t work(int context) {
    ++calls;
    produced += std::int64_t{context} * context;
    return std::int64_t{context} * context;
  }
  asio::awaitable<void> run(tlaunch::context& ctx) {
    co_await ctx.stopped();  // work() is served meanwhile, on this node's strand
    ctx.log("served {} calls, produced {}", calls, produced);
  }
  using rpc = tlaunch::methods<&Producer::work>;
};

struct Consumer {  // a node with a body
  tlaunch::handles<Producer> producers;
  asio::awaitable<void> run(tlaunch::context& ctx) {
    // One call per producer, all in flight together; context i goes to producer i.
    std::vector<tlaunch::future<std::int64_t>> pending;
    for (std::size_t i = 0; i < producers.size(); ++i)
      pending.push_back(producers[i].async<&Producer::work>(static_cast<int>(i + 1)));
    std::vector<std::int64_t> results;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      results.push_back(co_await pending[i].async_wait());
      ctx.log("{} returned {}", producers[i].id(), results.back());
    }
    // The same with broadcast: every producer gets the same context.
    auto same = co_await producers.broadcast<&Producer::work>(10);
    ctx.log("broadcast work(10) to {} producers: {}", same.size(),
            std::accumulate(same.begin(), same.end(), std::int64_t{0}));
    ctx.log("sum of {} results: {}", results.size(),
            std::accumulate(results.begin(), results.end(), std::int64_t{0}));
    ctx.stop_program();
  }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"producer", Producer>().replicas(3),
    tlaunch::node<"consumer", Consumer>(tlaunch::ref<"producer">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
