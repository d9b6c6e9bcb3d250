// A colocation group names "countr", which is not a node of the program.
// expect-first-gcc: use of deleted function 'void tlaunch::detail::colocate_names_no_node\(\) \[with .*Member = .*{{countr}}\]'
// expect-first-clang: static_assert failed due to requirement 'colocate_names_a_node<.*tlaunch::detail::spelled<{{countr}}>>' "tlaunch::program::colocate<...>: a member names no node of the program
// expect-only-error
#include "common.hpp"

constexpr auto program = tlaunch::program(tlaunch::node<"counter", Counter>(),
                                          tlaunch::node<"producer", Producer>(
                                              tlaunch::ref<"counter">))
                             .colocate<"producer", "countr">();

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
