// Node "labeler" is given a std::string in the program's constexpr description: a short
// one, which g++ would otherwise accept (stored inline) while rejecting a longer one. The
// error names the node, the argument's position and its type; g++'s note beside it says
// what to pass instead. clang 14 with libstdc++ 12 cannot build a std::string in a constant
// expression at all, so there the string itself fails first (its note names basic_string);
// where it can, the note names tlaunch's check and the node, as for std::vector.
// expect-first-gcc: call to non-'constexpr' function 'void tlaunch::detail::constexpr_node_argument_is_a_std_string_or_vector\(\) \[with .*Node = .*{{labeler}}; long unsigned int Argument = 0; Type = std::.*basic_string<char>\]'
// expect-line-gcc: tlaunch::node: a constexpr program's node arguments are constants; pass a string literal or std::string_view
// expect-first-clang: constexpr variable 'program' must be initialized by a constant expression
// expect-line-clang: note: (non-constexpr function 'constexpr_node_argument_is_a_std_string_or_vector<.*, 0UL, std::.*basic_string<char>, tlaunch::detail::spelled<{{labeler}}>>'|.*basic_string)
// expect-only-error
#include <string>

#include "common.hpp"

struct Labeler {
  std::string label;
  std::string get() const { return label; }
  using rpc = tlaunch::methods<&Labeler::get>;
};

constexpr auto program = tlaunch::program(tlaunch::node<"counter", Counter>(),
                                          tlaunch::node<"labeler", Labeler>(std::string("ab")));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
