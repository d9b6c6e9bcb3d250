// What the launcher says while it copies its binary to a host: on a terminal, a line at
// most every half second with the bytes copied, the rate and the time left; in every case
// one line when the copy is done, with its size, time and rate.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <fmt/format.h>

namespace tlaunch::ssh {

// Sizes as people read them: bytes, KiB or MiB with one decimal.
inline std::string human_bytes(double n) {
  if (n < 1024) return fmt::format("{:.0f} B", n);
  if (n < 1024.0 * 1024) return fmt::format("{:.1f} KiB", n / 1024);
  if (n < 1024.0 * 1024 * 1024) return fmt::format("{:.1f} MiB", n / (1024.0 * 1024));
  return fmt::format("{:.2f} GiB", n / (1024.0 * 1024 * 1024));
}

// Fed the progress calls of binary_cache::upload for one host, with the time of each call.
class upload_progress {
 public:
  using clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds interval{500};

  upload_progress(std::string host, bool terminal) : host_(std::move(host)), terminal_(terminal) {}

  // The line to print now, if any. A cached binary reports only (total, total), without a
  // (0, total) first: that is no copy, and gets no line here.
  std::optional<std::string> update(std::uint64_t done, std::uint64_t total, clock::time_point now) {
    if (done == 0 && !copying_) {
      copying_ = true;
      start_ = last_ = now;
      return std::nullopt;
    }
    if (!copying_) return std::nullopt;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
    if (done >= total) {
      if (finished_) return std::nullopt;
      finished_ = true;
      return fmt::format("uploaded {} to {} in {:.1f} s ({}/s)", human_bytes(double(total)),
                         host_, secs, human_bytes(rate));
    }
    if (!terminal_ || now - last_ < interval) return std::nullopt;
    last_ = now;
    std::string left = "?";
    if (rate > 0) left = fmt::format("{:.0f} s", static_cast<double>(total - done) / rate);
    return fmt::format("uploading to {}: {} of {} ({}%), {}/s, about {} left", host_,
                       human_bytes(double(done)), human_bytes(double(total)),
                       done * 100 / total, human_bytes(rate), left);
  }

  bool copied() const { return copying_; }

 private:
  std::string host_;
  bool terminal_;
  bool copying_ = false, finished_ = false;
  clock::time_point start_{}, last_{};
};

}  // namespace tlaunch::ssh
