// Node "producer" refers to "countr", which is not in the program.
// expect-first-gcc: use of deleted function 'void tlaunch::detail::ref_names_no_node\(\) \[with .*Node = .*{{producer}}; .*Target = .*{{countr}}\]'
// expect-first-clang: static_assert failed due to requirement 'ref_names_a_node<.*tlaunch::detail::spelled<{{producer}}>, tlaunch::detail::spelled<{{countr}}>>' "tlaunch::program: ref<\\"...\\"> names a node that is not in the program"
// expect-only-error
#include "common.hpp"

constexpr auto program = tlaunch::program(
    tlaunch::node<"counter", Counter>(),
    tlaunch::node<"producer", Producer>(tlaunch::ref<"countr">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
