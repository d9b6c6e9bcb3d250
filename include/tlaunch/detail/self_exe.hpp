// The path of the running binary: what a launcher starts again as a node.
#pragma once

#include <unistd.h>

#include <climits>
#include <stdexcept>
#include <string>

namespace tlaunch::detail {

// Throws Error when /proc/self/exe cannot be read (launchers pass launch_error, which
// main() reports with exit code 2; detail/ cannot name it).
template <class Error = std::runtime_error>
std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error("cannot find this binary's path (/proc/self/exe)");
  return std::string(buf, static_cast<std::size_t>(n));
}

}  // namespace tlaunch::detail
