// Node "producer" takes a handle<Counter>, but its ref names "other", an Other.
// expect-first-gcc: use of deleted function 'void tlaunch::detail::ref_takes_a_handle_of_another_type\(\) \[with .*Owner = .*{{producer}}; .*Target = .*{{other}}; Taken = tlaunch::handle<Counter>; TargetType = tlaunch::handle<Other>\]'
// expect-first-clang: static_assert failed due to requirement 'ref_handle_type_matches<.*, tlaunch::handle<Counter>, tlaunch::handle<Other>, tlaunch::detail::spelled<{{producer}}>, tlaunch::detail::spelled<{{other}}>>' "tlaunch::program: a node's constructor takes a handle of another service type
// expect-only-error
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
