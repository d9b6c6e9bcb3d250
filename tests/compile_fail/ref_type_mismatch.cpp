// Node "producer" takes a handle<Counter>, but its ref names "other", an Other.
// expect-message: takes a handle of another service type than the node its ref
// expect-line: ref_handle_type_must_match<.*{{producer}}.*{{other}}
// expect-line: ref_handle_type_must_match<.*, Counter, Other,
#include "common.hpp"

struct Other {
  int ping() { return 1; }
  using rpc = tlaunch::methods<&Other::ping>;
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"counter", Counter>(),
    tlaunch::node<"other", Other>(),
    tlaunch::node<"producer", Producer>(tlaunch::ref<"other">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
