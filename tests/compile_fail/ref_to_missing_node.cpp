// Node "producer" refers to "countr", which is not in the program.
// expect-message: names a node that is not in the program
// expect-line: ref_must_name_a_node<.*{{producer}}.*{{countr}}
#include "common.hpp"

constexpr auto program = tlaunch::program(
    tlaunch::node<"counter", Counter>(),
    tlaunch::node<"producer", Producer>(tlaunch::ref<"countr">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
