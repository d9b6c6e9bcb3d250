// Producer takes a tlaunch::handle<Counter>, but the program runs 4 replicas of "counter".
// The error is where the program is defined (a constant expression), naming both nodes
// and what to take instead. clang's first line names the program; its next line, the rest.
// expect-first-gcc: call to non-'constexpr' function 'void tlaunch::detail::node_takes_a_handle_to_a_replicated_node\(\) \[with .*Node = .*\{"producer"\}; .*Replicated = .*\{"counter"\}; TakeInstead = tlaunch::handles<Counter>\]'
// expect-first-clang: constexpr variable 'program' must be initialized by a constant expression
// expect-line-clang: note: non-constexpr function 'node_takes_a_handle_to_a_replicated_node<.*, tlaunch::handles<Counter>, tlaunch::detail::spelled<{{producer}}>, tlaunch::detail::spelled<{{counter}}>>' cannot be used in a constant expression
// expect-only-error
#include "common.hpp"

constexpr auto program = tlaunch::program(
    tlaunch::node<"counter", Counter>().replicas(4),
    tlaunch::node<"producer", Producer>(tlaunch::ref<"counter">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
