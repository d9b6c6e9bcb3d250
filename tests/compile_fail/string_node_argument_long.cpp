// Node "labeler" is given a long std::string in the program's constexpr description (on the
// heap: g++ alone says the program "refers to a result of operator new"): the same error as
// for a short one (string_node_argument.cpp), naming the node.
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
                                          tlaunch::node<"labeler", Labeler>(std::string(64, 'x')));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
