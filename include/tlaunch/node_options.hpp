// What a program says of a node besides its type and arguments, in its node<...>() entry:
// how a failed instance is restarted (.restart(...)), when it is snapshotted (.snapshot(...))
// and the resources it asks for (.resources(...)). A header of the vocabulary layer (docs/ARCHITECTURE.md): the
// runtime and the launchers read these.
#pragma once

#include <chrono>
#include <cstdint>

namespace tlaunch {

// How a launcher of node processes restarts a failed instance of a node (each replica
// counts its own restarts); the launch layer's coordinator applies it, local_mt ignores it.
struct restart_policy {
  std::uint32_t max_restarts = 0;           // 0: never; a failure stops the program
  std::chrono::milliseconds window{60000};  // restarts counted over this long (0: ever)
  // Wait before a restart; doubles with each earlier restart still in the window
  // (at most 10 s, or backoff itself when longer).
  std::chrono::milliseconds backoff{100};
};

// When a node with state (tlaunch/state.hpp) is snapshotted under --state-dir
// (node<...>().snapshot(...); docs/guide/state.md). Snapshots are also taken on demand
// (ctx.snapshot()) and when the node's process stops gracefully.
struct snapshot_policy {
  std::chrono::milliseconds every{0};  // 0: no periodic snapshots (--snapshot-every overrides)
  std::uint32_t keep = 3;              // snapshots kept per instance, the newest (at least 1)
};

// Resource hints of a node (node<...>().resources(...)); 0: no hint.
struct node_resources {
  std::uint32_t cpus = 0;
  std::uint32_t gpus = 0;
  std::uint64_t memory_mb = 0;
  bool any() const noexcept { return cpus != 0 || gpus != 0 || memory_mb != 0; }
  bool operator==(const node_resources&) const = default;
};

}  // namespace tlaunch
