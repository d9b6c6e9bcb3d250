// Rate limiters of a data-store table, with Reverb's rule: inserts and samples are
// counted, and `inserts * samples_per_insert - samples` must stay within
// [min_diff, max_diff]; no sample before the table holds min_size_to_sample items,
// and inserts never wait until it does. The limiter only answers "may one more go
// now?"; the node makes callers wait (store/data_store.hpp).
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>

namespace tlaunch::store {

// A literal type, so it can be part of a node's constructor argument.
struct rate_limiter_spec {
  double samples_per_insert = 1.0;
  std::int64_t min_size_to_sample = 1;
  double min_diff = -std::numeric_limits<double>::max();
  double max_diff = std::numeric_limits<double>::max();
};

// Sampling waits until the table holds n items; nothing else is limited.
constexpr rate_limiter_spec min_size(std::int64_t n) {
  return {1.0, n, -std::numeric_limits<double>::max(), std::numeric_limits<double>::max()};
}

// About `samples_per_insert` samples per insert once `min_size_to_sample` items were
// inserted: samplers wait when they run ahead by more than `error_buffer` samples,
// inserters when they do.
constexpr rate_limiter_spec sample_to_insert_ratio(double samples_per_insert,
                                                   std::int64_t min_size_to_sample,
                                                   double error_buffer) {
  double offset = samples_per_insert * static_cast<double>(min_size_to_sample);
  return {samples_per_insert, min_size_to_sample, offset - error_buffer, offset + error_buffer};
}

// Reverb's Queue: at most `size` items not yet sampled; a sample waits for one.
// Goes with a FIFO table whose items are sampled once (store::queue_table).
constexpr rate_limiter_spec queue_limiter(std::int64_t size) {
  return {1.0, 1, 0.0, static_cast<double>(size)};
}

class rate_limiter {
 public:
  explicit rate_limiter(const rate_limiter_spec& s) : spec_(s) {
    if (s.samples_per_insert <= 0) throw std::invalid_argument("rate limiter: samples_per_insert <= 0");
    if (s.min_size_to_sample < 1) throw std::invalid_argument("rate limiter: min_size_to_sample < 1");
    if (s.min_diff > s.max_diff) throw std::invalid_argument("rate limiter: min_diff > max_diff");
  }

  // The table holds inserts() - deletes() items.
  bool can_insert() const {
    if (inserts_ + 1 - deletes_ <= spec_.min_size_to_sample) return true;
    double diff = static_cast<double>(inserts_ + 1) * spec_.samples_per_insert -
                  static_cast<double>(samples_);
    return diff <= spec_.max_diff;
  }
  bool can_sample() const {
    if (inserts_ - deletes_ < spec_.min_size_to_sample) return false;
    double diff = static_cast<double>(inserts_) * spec_.samples_per_insert -
                  static_cast<double>(samples_ + 1);
    return diff >= spec_.min_diff;
  }

  void inserted() { ++inserts_; }
  void sampled() { ++samples_; }
  void deleted() { ++deletes_; }

  std::int64_t inserts() const { return inserts_; }
  std::int64_t samples() const { return samples_; }
  std::int64_t deletes() const { return deletes_; }
  const rate_limiter_spec& spec() const { return spec_; }
  // Restores the counts of a checkpoint.
  void restore(std::int64_t inserts, std::int64_t samples, std::int64_t deletes) {
    inserts_ = inserts;
    samples_ = samples;
    deletes_ = deletes;
  }

 private:
  rate_limiter_spec spec_;
  std::int64_t inserts_ = 0, samples_ = 0, deletes_ = 0;
};

}  // namespace tlaunch::store
