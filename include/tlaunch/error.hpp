// The errors tlaunch throws to a caller. The call errors (remote_error,
// unavailable and its stopping, timeout, cancelled) are defined by the rpc layer.
#pragma once

#include "rpc/errors.hpp"

namespace tlaunch {

// Bad command line or program description found at launch time.
class launch_error : public error {
 public:
  using error::error;
};

}  // namespace tlaunch
