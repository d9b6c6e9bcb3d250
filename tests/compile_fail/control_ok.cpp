// Control: a correct program compiles, so a failing case fails for its own reason.
// expect: compiles
#include "common.hpp"

constexpr auto program = tlaunch::program(
    tlaunch::node<"counter", Counter>(),
    tlaunch::node<"producer", Producer>(tlaunch::ref<"counter">).replicas(2));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
