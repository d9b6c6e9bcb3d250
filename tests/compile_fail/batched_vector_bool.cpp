// Filter::keep is listed as batched and returns std::vector<bool>, whose elements cannot be
// moved out one per call. The call site reads one bool per request: the only error is
// tlaunch's, naming the method (no "cannot convert 'std::vector<bool>' to 'bool'" first).
// expect-first-gcc: use of deleted function 'void tlaunch::detail::batched_method_has_the_wrong_signature\(\) \[with auto Method = &Filter::keep\]'
// expect-first-clang: static_assert failed due to requirement 'batched_method_takes_a_vector_and_returns_a_vector<&Filter::keep>' "tlaunch: a batched method takes one std::vector<T> or std::span<T> of requests
// expect-only-error
#include "common.hpp"

struct Filter {
  std::vector<bool> keep(std::vector<int> xs) {
    std::vector<bool> out;
    for (int x : xs) out.push_back(x > 0);
    return out;
  }
  using rpc = tlaunch::methods<tlaunch::batched<&Filter::keep>>;
};

struct Client {
  tlaunch::handle<Filter> filter;
  asio::awaitable<void> run(tlaunch::context&) {
    bool kept = co_await filter.call<&Filter::keep>(3);
    (void)kept;
  }
};

constexpr auto program = tlaunch::program(tlaunch::node<"filter", Filter>(),
                                          tlaunch::node<"client", Client>(tlaunch::ref<"filter">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
