// Two nodes named "counter".
// expect-message: two nodes have the same name
// expect-line: node_name_must_be_unique<.*{{counter}}
#include "common.hpp"

constexpr auto program = tlaunch::program(
    tlaunch::node<"counter", Counter>(),
    tlaunch::node<"counter", Counter>());

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
