// Model::infer is listed as batched but takes one request, not a vector of them.
// expect-first-gcc: use of deleted function 'void tlaunch::detail::batched_method_has_the_wrong_signature\(\) \[with auto Method = &Model::infer\]'
// expect-first-clang: static_assert failed due to requirement 'batched_method_takes_a_vector_and_returns_a_vector<&Model::infer>' "tlaunch: a batched method takes one std::vector<T> or std::span<T> of requests
// expect-line-gcc: = delete; +// tlaunch: a batched method takes one std::vector<T> or std::span<T> of requests
// expect-only-error
#include "common.hpp"

struct Model {
  float infer(std::vector<float> x) { return x.empty() ? 0.0f : x[0]; }
  using rpc = tlaunch::methods<tlaunch::batched<&Model::infer>>;
};

constexpr auto program = tlaunch::program(tlaunch::node<"model", Model>());

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
