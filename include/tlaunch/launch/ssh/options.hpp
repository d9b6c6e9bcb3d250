// How the ssh launcher connects to a host and where it keeps the binary there.
#pragma once

#include <string>

namespace tlaunch::ssh {

struct session_options {
  std::string identity;     // private key file (--ssh-identity); "" = ssh-agent, then ~/.ssh/id_*
  bool accept_new = false;  // record an unknown host key instead of refusing the host
  std::string known_hosts;  // "" = ~/.ssh/known_hosts
  int connect_timeout_s = 10;
  // TCP keepalive on the connection without --liveness: a dead link is noticed after
  // about idle + interval * count seconds (libssh alone would block on it forever).
  int keepalive_idle_s = 5;
  int keepalive_interval_s = 2;
  int keepalive_count = 3;
  // --liveness in milliseconds: when above 0 it replaces the three above, as on tlaunch's
  // own connections (keepalive every interval, the connection failed when nothing is
  // acknowledged for two intervals).
  long liveness_ms = 1000;
  // Remote directory holding one folder per build id; relative paths are under the remote
  // home. Worth changing when the home on the hosts is small or shared over NFS.
  std::string cache_dir = ".cache/tlaunch";
  // Builds kept in the cache after an upload, the one just used included (0 keeps all).
  unsigned cache_keep = 3;
};

}  // namespace tlaunch::ssh
