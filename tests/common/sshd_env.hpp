// The loopback sshd of tools/sshd-fixture.sh, as its env file (TLAUNCH_SSHD_ENV) describes
// it: the user, port, identity and known-hosts file that reach 127.0.0.2 and 127.0.0.3.
#pragma once

#include <cstdlib>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

namespace tlaunch::integration {

struct sshd_env {
  std::map<std::string, std::string> kv;
  // USER@127.0.0.N:PORT
  std::string host(int n) const {
    return kv.at("USER") + "@127.0.0." + std::to_string(n) + ":" + kv.at("PORT");
  }
  // The flags an ssh launch needs to reach it.
  std::string identity_flag() const { return "--ssh-identity=" + kv.at("IDENTITY"); }
  std::string known_hosts_flag() const { return "--known-hosts=" + kv.at("KNOWN_HOSTS"); }
};

// Throws when TLAUNCH_SSHD_ENV is not set (the test was not run through ctest or the fixture).
inline sshd_env read_sshd_env() {
  const char* path = std::getenv("TLAUNCH_SSHD_ENV");
  if (path == nullptr)
    throw std::runtime_error(
        "TLAUNCH_SSHD_ENV is not set: run through ctest or tools/sshd-fixture.sh run DIR -- "
        "<test binary>");
  sshd_env e;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (auto eq = line.find('='); eq != std::string::npos)
      e.kv[line.substr(0, eq)] = line.substr(eq + 1);
  return e;
}

}  // namespace tlaunch::integration
