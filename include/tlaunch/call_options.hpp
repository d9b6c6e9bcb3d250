// What a caller can say of one call: h.call<&S::m>(tlaunch::call_options{.timeout = 2s}, ...).
// A header of the vocabulary layer (docs/ARCHITECTURE.md), below the rpc layer that
// reads it.
#pragma once

#include <chrono>

namespace tlaunch {

// Per-call options.
struct call_options {
  // 0: no deadline. Over the wire, the call fails with tlaunch::timeout when no
  // reply came in time (the remote method may still run to completion).
  std::chrono::milliseconds timeout{0};
};

}  // namespace tlaunch
