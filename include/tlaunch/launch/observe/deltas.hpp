// What changed between a process's two last samples (rpc/metrics.hpp): an edge's calls per
// second and the latency buckets of the calls that ended meanwhile, and their p99. The
// dashboard (launch/process/coordinator/observe.hpp) shows these, computed by the launcher,
// so a page opened at any moment has its numbers and its history at once.
#pragma once

#include <cstdint>
#include <vector>

#include "../../rpc/metrics.hpp"

namespace tlaunch::launch::observe {

struct edge_delta {
  double rate = 0;                      // calls per second
  std::vector<std::uint64_t> latency;   // by bucket, of the calls that ended
};

// `now`'s change since `before` (the same process's previous sample, or null), dt seconds
// earlier; an edge new since then counts from zero.
inline edge_delta delta_of(const rpc::call_sample& now, const rpc::metrics_sample* before,
                           double dt) {
  edge_delta d;
  d.latency = now.latency;
  std::uint64_t calls_before = 0;
  if (before)
    for (const auto& b : before->calls)
      if (b.callee == now.callee && b.method == now.method) {
        calls_before = b.calls;
        for (std::size_t i = 0; i < d.latency.size() && i < b.latency.size(); ++i)
          d.latency[i] -= std::min(d.latency[i], b.latency[i]);
        break;
      }
  if (before && dt > 0) d.rate = static_cast<double>(now.calls - std::min(now.calls, calls_before)) / dt;
  else d.latency.assign(now.latency.size(), 0);  // nothing to compare with: no interval
  return d;
}

// The p99 of bucket counts in seconds: the upper bound of the bucket where 99 % of them are
// reached (rpc::latency_bucket); -1 without any, and the last bucket's lower bound for it.
inline double p99_of(const std::vector<std::uint64_t>& buckets) {
  std::uint64_t total = 0;
  for (auto n : buckets) total += n;
  if (total == 0) return -1;
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    seen += buckets[i];
    if (seen * 100 >= total * 99)
      return static_cast<double>(std::uint64_t{1} << (i + 1 < buckets.size() ? i : i - 1)) * 1e-6;
  }
  return -1;
}

}  // namespace tlaunch::launch::observe
