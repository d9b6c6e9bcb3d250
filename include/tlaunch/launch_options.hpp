// What a launch from inside a program (tlaunch::start, tlaunch::testing::test_launch) can
// be told: the user's settings of the command line's flags, as typed fields. The flags
// that only a launcher passes to its node processes, a cluster's hosts and ssh's
// settings are tlaunch::main's alone.
//
//   tlaunch::launch_options o;
//   o.launch = tlaunch::launcher::local_mp;
//   o.replicas["worker"] = 4;             // as --replicas worker=4
//   o.grace = std::chrono::seconds(3);    // as --grace=3
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tlaunch {

// The launchers a program can start from inside itself: every node in this process
// (local_mt) or a process per node (local_mp). Others (ssh, slurm, k8s) run through
// tlaunch::main and its --launch flag.
enum class launcher { local_mt, local_mp };

// Colors of the [node/i] prefixes (--color): automatic colors a terminal's output only.
enum class output_color { automatic, always, never };

// The settings a launch shares with the command line; each field names its flag.
struct launch_settings {
  // --replicas NAME=N: a node's replica count, replacing the program's.
  std::map<std::string, std::uint32_t> replicas;
  // --restart NAME=N: a node's max_restarts (restart_policy), replacing the program's.
  std::map<std::string, std::uint32_t> restart;
  // --colocate A,B[,...] (one group per entry; "node" or "node/INDEX") and --no-colocate
  // (drop the program's groups).
  std::vector<std::string> colocate;
  bool no_colocate = false;
  // --grace: what nodes get to stop before they are killed; --start-timeout: for every
  // node to register.
  std::chrono::milliseconds grace{5000};
  std::chrono::milliseconds start_timeout{60000};
  // --log-dir: every node's output is also written to DIR/<node>.<i>.log.
  std::string log_dir;
  output_color color = output_color::automatic;
  // --threads: io threads per process; 0: 2 for local_mt, 1 per node process.
  unsigned threads = 0;
  // --busy-poll: io threads and connections poll this long before they sleep.
  std::chrono::microseconds busy_poll{0};
  // --force-wire: under local_mt, calls between nodes go over loopback TCP.
  bool force_wire = false;
  // --max-frame: the largest frame a connection accepts.
  std::uint32_t max_frame = 256u << 20;
  // --handshake-timeout and --max-unauthenticated: peers that have not authenticated,
  // their deadline and their number.
  std::chrono::milliseconds handshake_timeout{5000};
  std::uint32_t max_unauthenticated = 256;
  // --heartbeat: every connection's heartbeat interval (0: off); a peer silent for three
  // intervals is gone.
  std::chrono::milliseconds heartbeat{0};
  // --liveness: TCP keepalive probes every interval on every connection, which fails when
  // its peer's host has acknowledged nothing for two intervals; a node process stopped
  // (SIGSTOP) that long is killed as failed. 0: kernel defaults, no kill.
  std::chrono::milliseconds liveness{1000};
  // --tls: TLS 1.3 on every connection between processes, keyed from the launch secret.
  bool tls = false;
  // --env NAME:KEY=VALUE: node name -> its variables, in order ("{index}" in a value
  // becomes the replica's index).
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> env;
  // --state-dir=DIR: nodes with state write their snapshots under DIR on their host, and a
  // restarted instance loads its latest; resume (--resume=DIR): a new launch loads every
  // node's latest snapshot there; snapshot_every (--snapshot-every): the period of every
  // node with state (negative: each node's own .snapshot(...)). docs/guide/state.md.
  std::string state_dir;
  bool resume = false;
  std::chrono::milliseconds snapshot_every{-1};
  // What ctx.args() returns (the command line's arguments after `--`).
  std::vector<std::string> user_args;
};

// tlaunch::start's options: the settings and the launcher.
struct launch_options : launch_settings {
  tlaunch::launcher launch = tlaunch::launcher::local_mt;
};

}  // namespace tlaunch
