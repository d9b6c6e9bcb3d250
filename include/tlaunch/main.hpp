// tlaunch::main: one entry point that is the launcher and every node.
#pragma once

#include "program.hpp"
#include "program_view.hpp"

#if defined(TLAUNCH_SEPARATE_COMPILATION)
#if !defined(ASIO_SEPARATE_COMPILATION)
#error "TLAUNCH_SEPARATE_COMPILATION needs ASIO_SEPARATE_COMPILATION too (impl/src.hpp compiles both)"
#endif
namespace tlaunch::launch {
// Compiled once, with the launch layer, where tlaunch/impl/src.hpp is included.
int run_main(const tlaunch::detail::program_view& p, int argc, const char* const* argv);
}  // namespace tlaunch::launch
#else
#include "impl/run_main.hpp"
#endif

namespace tlaunch {

// Parses the command line, then runs the program with the launcher --launch names
// (launch/registry.hpp), or as one node when started with --tlaunch-role. Returns the process exit code:
// 0 when the program stopped normally, 1 when a node failed, 2 on bad usage.
template <class... Nodes>
int main(const program_t<Nodes...>& p, int argc, const char* const* argv) {
  return launch::run_main(p, argc, argv);
}

template <class... Nodes>
int main(const program_t<Nodes...>& p, int argc, char** argv) {
  return tlaunch::main(p, argc, const_cast<const char* const*>(argv));
}

}  // namespace tlaunch
