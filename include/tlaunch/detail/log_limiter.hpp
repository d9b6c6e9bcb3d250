// Rate-limits log lines: one line per reason per interval, so that a peer that
// misbehaves in a loop (or a flood of them) cannot fill the log. The first line
// of a reason is printed; the ones that follow within the interval are counted,
// and the next line printed for that reason says how many were suppressed.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tlaunch::detail {

class log_limiter {
 public:
  using clock = std::chrono::steady_clock;
  static constexpr std::size_t max_reasons = 256;  // a bound on the memory peers can make it use

  explicit log_limiter(clock::duration interval = std::chrono::seconds(10)) : interval_(interval) {}

  // The line to print for `reason` now (`line`, with the count of the lines
  // suppressed since the last one printed), or nothing while it is suppressed.
  std::optional<std::string> admit(std::string_view reason, std::string_view line,
                                   clock::time_point now = clock::now()) {
    std::lock_guard lk(mu_);
    auto it = reasons_.find(std::string(reason));
    if (it == reasons_.end()) {
      if (reasons_.size() >= max_reasons) forget_quiet(now);
      if (reasons_.size() >= max_reasons) {
        // Every reason is busy: the extra ones share one entry.
        return admit_locked(reasons_[std::string(overflow_reason)], line, now);
      }
      it = reasons_.emplace(std::string(reason), entry{}).first;
    }
    return admit_locked(it->second, line, now);
  }

  // Lines suppressed and not yet reported, over every reason (tests).
  std::uint64_t suppressed() const {
    std::lock_guard lk(mu_);
    std::uint64_t n = 0;
    for (const auto& [r, e] : reasons_) n += e.suppressed;
    return n;
  }

 private:
  static constexpr std::string_view overflow_reason = "\x01(other reasons)";
  struct entry {
    clock::time_point last{};
    bool printed = false;
    std::uint64_t suppressed = 0;
  };

  std::optional<std::string> admit_locked(entry& e, std::string_view line, clock::time_point now) {
    if (e.printed && now - e.last < interval_) {
      ++e.suppressed;
      return std::nullopt;
    }
    std::string out(line);
    if (e.suppressed > 0) {
      out += " (";
      out += std::to_string(e.suppressed);
      out += e.suppressed == 1 ? " more line like this was" : " more lines like this were";
      out += " suppressed)";
    }
    e.printed = true;
    e.last = now;
    e.suppressed = 0;
    return out;
  }

  // Drops reasons that printed longer than an interval ago and have nothing to report.
  void forget_quiet(clock::time_point now) {
    for (auto it = reasons_.begin(); it != reasons_.end();)
      it = it->second.suppressed == 0 && now - it->second.last >= interval_ ? reasons_.erase(it)
                                                                            : std::next(it);
  }

  clock::duration interval_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, entry> reasons_;
};

}  // namespace tlaunch::detail
