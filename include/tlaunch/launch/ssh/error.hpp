// The error of everything that goes wrong with an SSH host.
#pragma once

#include <string>
#include <utility>

#include "../../error.hpp"
#include "host_spec.hpp"

namespace tlaunch::ssh {

// what() is "ssh user@host:port: <what happened>".
class error : public tlaunch::error {
 public:
  error(host_spec host, const std::string& what)
      : tlaunch::error("ssh " + host.display() + ": " + what), host_(std::move(host)) {}
  const host_spec& host() const noexcept { return host_; }

 private:
  host_spec host_;
};

}  // namespace tlaunch::ssh
