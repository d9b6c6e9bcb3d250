// Latency samples, their summary, and the ways the benchmarks print them: a table
// that sets every tlaunch figure beside its baseline, a log-scale text histogram,
// and JSON for machines. Standalone: no tlaunch or Asio headers.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tlaunch::bench {

using bench_clock = std::chrono::steady_clock;

inline std::uint64_t elapsed_ns(bench_clock::time_point since) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(bench_clock::now() - since).count());
}

// What a set of samples says; times in nanoseconds.
struct summary {
  std::size_t count = 0;
  double mean_ns = 0;
  std::uint64_t min_ns = 0, p50_ns = 0, p90_ns = 0, p99_ns = 0, p999_ns = 0, max_ns = 0;
  double wall_seconds = 0;    // the whole run, for the rates
  std::uint64_t bytes = 0;    // bytes moved per direction, for MB/s
  double calls_per_second() const { return wall_seconds > 0 ? double(count) / wall_seconds : 0; }
  double mb_per_second() const { return wall_seconds > 0 ? double(bytes) / 1e6 / wall_seconds : 0; }
};

// Records one latency sample per call, then summarizes them (nearest-rank percentiles).
class latency_recorder {
 public:
  void reserve(std::size_t n) { samples_.reserve(n); }
  // Room for n more samples; grows at least twofold, so runs added one after
  // another (turns of a round) do not copy the samples each time.
  void reserve_more(std::size_t n) {
    if (samples_.capacity() < samples_.size() + n)
      samples_.reserve(std::max(samples_.size() + n, 2 * samples_.size()));
  }
  void add(std::uint64_t ns) { samples_.push_back(ns); }
  void clear() { samples_.clear(); }
  std::size_t size() const { return samples_.size(); }
  const std::vector<std::uint64_t>& samples() const { return samples_; }

  // wall_seconds and bytes only feed the rates; they are not derived from the samples
  // because pipelined calls overlap.
  summary summarize(double wall_seconds, std::uint64_t bytes = 0) const {
    summary s;
    s.count = samples_.size();
    s.wall_seconds = wall_seconds;
    s.bytes = bytes;
    if (samples_.empty()) return s;
    std::vector<std::uint64_t> sorted = samples_;
    std::sort(sorted.begin(), sorted.end());
    auto rank = [&](double q) {
      auto i = static_cast<std::size_t>(std::ceil(q * double(sorted.size())));
      return sorted[std::clamp<std::size_t>(i, 1, sorted.size()) - 1];
    };
    double total = 0;
    for (auto v : sorted) total += double(v);
    s.mean_ns = total / double(sorted.size());
    s.min_ns = sorted.front();
    s.p50_ns = rank(0.50);
    s.p90_ns = rank(0.90);
    s.p99_ns = rank(0.99);
    s.p999_ns = rank(0.999);
    s.max_ns = sorted.back();
    return s;
  }

 private:
  std::vector<std::uint64_t> samples_;
};

// "812 ns", "26.4 us", "3.10 ms".
inline std::string format_ns(double ns) {
  char buf[32];
  if (ns < 1e3)
    std::snprintf(buf, sizeof buf, "%.0f ns", ns);
  else if (ns < 1e6)
    std::snprintf(buf, sizeof buf, "%.1f us", ns / 1e3);
  else if (ns < 1e9)
    std::snprintf(buf, sizeof buf, "%.2f ms", ns / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.2f s", ns / 1e9);
  return buf;
}

// A log-scale histogram: four buckets per power of two, empty ends trimmed.
// Bucket i holds the samples in [from_ns, next bucket's from_ns).
struct histogram_bucket {
  double from_ns;
  std::size_t count;
};
inline std::vector<histogram_bucket> log_histogram(const std::vector<std::uint64_t>& samples) {
  std::vector<histogram_bucket> out;
  if (samples.empty()) return out;
  constexpr int per_octave = 4;
  auto bucket_of = [](std::uint64_t ns) {
    return static_cast<int>(std::floor(std::log2(double(std::max<std::uint64_t>(ns, 1))) * per_octave));
  };
  auto [lo_it, hi_it] = std::minmax_element(samples.begin(), samples.end());
  int lo = bucket_of(*lo_it), hi = bucket_of(*hi_it);
  for (int b = lo; b <= hi; ++b) out.push_back({std::exp2(double(b) / per_octave), 0});
  for (auto v : samples) ++out[static_cast<std::size_t>(bucket_of(v) - lo)].count;
  return out;
}

inline std::string text_histogram(const std::vector<std::uint64_t>& samples, int width = 50) {
  if (samples.empty()) return "  (no samples)\n";
  auto buckets = log_histogram(samples);
  std::size_t peak = 0;
  for (const auto& b : buckets) peak = std::max(peak, b.count);
  std::string out;
  char line[160];
  for (const auto& b : buckets) {
    int bar = static_cast<int>(std::lround(double(b.count) * width / double(peak)));
    if (b.count > 0 && bar == 0) bar = 1;  // a rare outlier still shows
    std::snprintf(line, sizeof line, "  >= %10s |%-*s %zu (%.2f%%)\n", format_ns(b.from_ns).c_str(),
                  width, std::string(static_cast<std::size_t>(bar), '#').c_str(), b.count,
                  100.0 * double(b.count) / double(samples.size()));
    out += line;
  }
  return out;
}

// One figure of the table: tlaunch's value beside the baseline's and the target ratio.
struct comparison {
  std::string scenario;  // "sequential 8 B", "pipelined x64", ...
  std::string metric;    // "p50", "calls/s", "MB/s"
  bool is_time = true;   // value in ns (lower is better) or a rate (higher is better)
  double value = 0;
  std::optional<double> baseline{};
  std::string baseline_name = "asio";
  // The ratio value/baseline the figure should stay within: at most this for times,
  // at least this for rates.
  std::optional<double> target_ratio{};
  // An absolute target (ns for times) when there is no baseline to compare with.
  std::optional<double> target_value{};
  // Set for a figure taken in rounds that alternate tlaunch and the baseline:
  // the median over rounds of each round's ratio to the round beside it. It is
  // then the ratio, and value/baseline are the median rounds' figures.
  std::optional<double> paired_ratio{};

  std::optional<double> ratio() const {
    if (paired_ratio) return paired_ratio;
    if (!baseline || *baseline == 0) return std::nullopt;
    return value / *baseline;
  }
  std::optional<bool> meets_target() const {
    if (target_ratio && ratio())
      return is_time ? *ratio() <= *target_ratio : *ratio() >= *target_ratio;
    if (target_value) return is_time ? value <= *target_value : value >= *target_value;
    return std::nullopt;
  }
};

// The median of some values (0 when there are none).
inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The median of t[i] / b[i] over rounds (pairs with b[i] == 0 are skipped):
// a burst of noise that slows a few rounds of one side moves it much less
// than it moves the ratio of the totals.
inline std::optional<double> median_paired_ratio(const std::vector<double>& t,
                                                 const std::vector<double>& b) {
  std::vector<double> r;
  for (std::size_t i = 0; i < t.size() && i < b.size(); ++i)
    if (b[i] > 0) r.push_back(t[i] / b[i]);
  if (r.empty()) return std::nullopt;
  return median_of(std::move(r));
}

inline std::string format_value(const comparison& c, double v) {
  if (c.is_time) return format_ns(v);
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f" : "%.2f", v);
  return buf;
}

inline std::string format_table(const std::vector<comparison>& rows) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-26s %-8s %12s %12s %8s  %-14s\n", "scenario", "metric", "tlaunch",
                "baseline", "ratio", "target");
  out += line;
  out += std::string(86, '-') + "\n";
  for (const auto& c : rows) {
    std::string base = c.baseline ? format_value(c, *c.baseline) : "-";
    std::string ratio = "-";
    if (auto r = c.ratio()) {
      char b[16];
      std::snprintf(b, sizeof b, "%.2fx", *r);
      ratio = b;
    }
    std::string target;
    if (c.target_ratio) {
      char b[32];
      std::snprintf(b, sizeof b, "%s %.2fx", c.is_time ? "<=" : ">=", *c.target_ratio);
      target = b;
    } else if (c.target_value) {
      target = std::string(c.is_time ? "<= " : ">= ") + format_value(c, *c.target_value);
    }
    if (auto ok = c.meets_target()) target += *ok ? "  met" : "  MISSED";
    std::snprintf(line, sizeof line, "%-26s %-8s %12s %12s %8s  %-14s\n", c.scenario.c_str(),
                  c.metric.c_str(), format_value(c, c.value).c_str(), base.c_str(), ratio.c_str(),
                  target.c_str());
    out += line;
  }
  return out;
}

// ----- JSON ---------------------------------------------------------------------

inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", ch);
          out += b;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

inline std::string to_json(const summary& s) {
  std::string o = "{";
  o += "\"count\":" + std::to_string(s.count);
  o += ",\"mean_ns\":" + json_number(s.mean_ns);
  o += ",\"min_ns\":" + std::to_string(s.min_ns);
  o += ",\"p50_ns\":" + std::to_string(s.p50_ns);
  o += ",\"p90_ns\":" + std::to_string(s.p90_ns);
  o += ",\"p99_ns\":" + std::to_string(s.p99_ns);
  o += ",\"p999_ns\":" + std::to_string(s.p999_ns);
  o += ",\"max_ns\":" + std::to_string(s.max_ns);
  o += ",\"wall_seconds\":" + json_number(s.wall_seconds);
  o += ",\"calls_per_second\":" + json_number(s.calls_per_second());
  o += ",\"bytes\":" + std::to_string(s.bytes);
  o += ",\"mb_per_second\":" + json_number(s.mb_per_second());
  return o + "}";
}

inline std::string to_json(const comparison& c) {
  std::string o = "{";
  o += "\"scenario\":" + json_string(c.scenario);
  o += ",\"metric\":" + json_string(c.metric);
  o += ",\"unit\":" + json_string(c.is_time ? "ns" : (c.metric == "MB/s" ? "MB/s" : "1/s"));
  o += ",\"value\":" + json_number(c.value);
  o += ",\"baseline_name\":" + json_string(c.baseline_name);
  o += ",\"baseline\":" + (c.baseline ? json_number(*c.baseline) : "null");
  auto r = c.ratio();
  o += ",\"ratio\":" + (r ? json_number(*r) : "null");
  o += ",\"ratio_of\":" + json_string(c.paired_ratio ? "median_of_rounds" : "totals");
  o += ",\"target_ratio\":" + (c.target_ratio ? json_number(*c.target_ratio) : "null");
  o += ",\"target_value\":" + (c.target_value ? json_number(*c.target_value) : "null");
  auto ok = c.meets_target();
  o += ",\"meets_target\":" + std::string(ok ? (*ok ? "true" : "false") : "null");
  return o + "}";
}

// [{"from_ns":..,"count":..},...]
inline std::string to_json(const std::vector<histogram_bucket>& h) {
  std::string o = "[";
  for (std::size_t i = 0; i < h.size(); ++i)
    o += std::string(i ? "," : "") + "{\"from_ns\":" + json_number(h[i].from_ns) +
         ",\"count\":" + std::to_string(h[i].count) + "}";
  return o + "]";
}

// A named summary, e.g. {"tlaunch sequential", summary}.
using named_summary = std::pair<std::string, summary>;
using named_histogram = std::pair<std::string, std::vector<histogram_bucket>>;

// The whole report: {"config":{...},"results":{name:summary,...},"comparisons":[...],
// "histograms":{name:[bucket,...],...}}. config holds already-formatted JSON values.
inline std::string to_json(const std::vector<std::pair<std::string, std::string>>& config,
                           const std::vector<named_summary>& results,
                           const std::vector<comparison>& rows,
                           const std::vector<named_histogram>& histograms = {}) {
  // Appended piece by piece: g++ 12 -O3 flags `"," + std::string&&` as an overlapping copy
  // (a false -Wrestrict) once this is inlined into the benchmark's main file.
  std::string o = "{\"config\":{";
  for (std::size_t i = 0; i < config.size(); ++i) {
    if (i) o += ',';
    o += json_string(config[i].first);
    o += ':';
    o += config[i].second;
  }
  o += "},\"results\":{";
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (i) o += ',';
    o += json_string(results[i].first);
    o += ':';
    o += to_json(results[i].second);
  }
  o += "},\"comparisons\":[";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i) o += ',';
    o += to_json(rows[i]);
  }
  o += "],\"histograms\":{";
  for (std::size_t i = 0; i < histograms.size(); ++i) {
    if (i) o += ',';
    o += json_string(histograms[i].first);
    o += ':';
    o += to_json(histograms[i].second);
  }
  return o + "}}\n";
}

}  // namespace tlaunch::bench
