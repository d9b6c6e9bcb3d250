// Two nodes named "counter".
// expect-first-gcc: use of deleted function 'void tlaunch::detail::two_nodes_have_the_same_name\(\) \[with .*Node = .*{{counter}}; long unsigned int Count = 2\]'
// expect-first-clang: static_assert failed due to requirement 'node_name_is_unique<.*, 2UL, tlaunch::detail::spelled<{{counter}}>>' "tlaunch::program: two nodes have the same name"
// expect-only-error
#include "common.hpp"

constexpr auto program = tlaunch::program(
    tlaunch::node<"counter", Counter>(),
    tlaunch::node<"counter", Counter>());

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
