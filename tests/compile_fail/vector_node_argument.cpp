// Node "shaped" is given a std::vector in the program's constexpr description (empty, which
// g++ would otherwise accept). The error names the node with either compiler.
// expect-first-gcc: call to non-'constexpr' function 'void tlaunch::detail::constexpr_node_argument_is_a_std_string_or_vector\(\) \[with .*Node = .*{{shaped}}; long unsigned int Argument = 1; Type = std::vector<int>\]'
// expect-line-gcc: tlaunch::node: a constexpr program's node arguments are constants; pass a string literal or std::string_view, a std::array
// expect-first-clang: constexpr variable 'program' must be initialized by a constant expression
// expect-line-clang: note: non-constexpr function 'constexpr_node_argument_is_a_std_string_or_vector<.*, 1UL, std::vector<int>, tlaunch::detail::spelled<{{shaped}}>>' cannot be used in a constant expression
// expect-only-error
#include <vector>

#include "common.hpp"

struct Shaped {
  int rank;
  std::vector<int> shape;
  std::size_t size() const { return shape.size(); }
  using rpc = tlaunch::methods<&Shaped::size>;
};

constexpr auto program = tlaunch::program(tlaunch::node<"counter", Counter>(),
                                          tlaunch::node<"shaped", Shaped>(0, std::vector<int>{}));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
