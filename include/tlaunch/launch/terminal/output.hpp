// The launcher's terminal: every node's lines with a colored [node/i] prefix,
// whole lines only, optionally copied to per-node files, and the last lines of
// each node kept for the failure report.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/color.h>
#include <fmt/format.h>

#include "../../launch_options.hpp"
#include "../process/child.hpp"

namespace tlaunch::launch {

using color_mode = tlaunch::output_color;

// Thread-safe: one mutex around each line, so lines of different nodes never
// interleave. Colors are on when the target (stdout for a node's stdout lines,
// stderr for its stderr lines) is a terminal, unless the mode forces them.
class output_printer {
 public:
  // log_dir: when not empty, every node's lines are also copied to a file there
  // (created on demand, with the directory). keep_lines: lines kept per node for last_lines().
  explicit output_printer(color_mode c = color_mode::automatic, std::string log_dir = {},
                          std::FILE* out = stdout, std::FILE* err = stderr,
                          std::size_t keep_lines = 20)
      : out_(out), err_(err), log_dir_(std::move(log_dir)), keep_(keep_lines) {
    color_out_ = c == color_mode::always || (c == color_mode::automatic && ::isatty(::fileno(out)));
    color_err_ = c == color_mode::always || (c == color_mode::automatic && ::isatty(::fileno(err)));
  }

  // Prints "[who] line" to stdout or stderr; who is "worker/3" or "worker/3@host".
  void print(std::string_view who, stream s, std::string_view line) {
    std::lock_guard lk(mu_);
    std::FILE* f = s == stream::out ? out_ : err_;
    bool color = s == stream::out ? color_out_ : color_err_;
    std::string text;
    if (color)
      text = fmt::format("{} {}\n", fmt::styled(fmt::format("[{}]", who), fmt::fg(color_of(who))),
                         line);
    else
      text = fmt::format("[{}] {}\n", who, line);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fflush(f);
    auto& kept = last_[std::string(who)];
    kept.emplace_back(line);
    if (kept.size() > keep_) kept.pop_front();
    if (!log_dir_.empty()) log_to_file(who, line);
    if (observer_) observer_(who, line);
  }

  // Called with every line printed, under the printer's lock (it must not print); null: none.
  void observe(std::function<void(std::string_view who, std::string_view line)> f) {
    std::lock_guard lk(mu_);
    observer_ = std::move(f);
  }

  // The last keep_lines lines (both streams) printed for `who`, oldest first.
  std::vector<std::string> last_lines(std::string_view who) const {
    std::lock_guard lk(mu_);
    auto it = last_.find(std::string(who));
    if (it == last_.end()) return {};
    return {it->second.begin(), it->second.end()};
  }

 private:
  // The color of a node: every replica of "worker" shares one, and it is the same
  // in every run (FNV-1a, not std::hash, whose value the standard leaves open).
  static fmt::color color_of(std::string_view who) {
    static constexpr fmt::color palette[] = {fmt::color::cyan,        fmt::color::gold,
                                             fmt::color::lime_green,  fmt::color::orchid,
                                             fmt::color::orange,      fmt::color::deep_sky_blue,
                                             fmt::color::light_coral, fmt::color::spring_green};
    auto name = who.substr(0, std::min(who.find('/'), who.find('@')));
    std::uint32_t h = 2166136261u;
    for (unsigned char c : name) h = (h ^ c) * 16777619u;
    return palette[h % std::size(palette)];
  }

  // <log_dir>/worker.3.log for "worker/3" and "worker/3@host": both streams of a
  // node in one file, opened (and truncated) on its first line of this run.
  void log_to_file(std::string_view who, std::string_view line) {
    std::string name(who.substr(0, who.find('@')));
    for (auto& c : name)
      if (c == '/') c = '.';
    auto& f = files_[name];
    if (!f) {
      std::string path = log_dir_ + "/" + name + ".log";
      std::error_code ec;
      std::filesystem::create_directories(log_dir_, ec);
      f = std::make_unique<std::ofstream>(path, std::ios::trunc);
      if (!*f) {
        std::string why = ec ? ec.message() : std::string(std::strerror(errno));
        std::string warn = fmt::format(
            "[launcher] cannot write the log file {} ({}); {} is only printed\n", path, why, who);
        std::fwrite(warn.data(), 1, warn.size(), err_);
        std::fflush(err_);
      }
    }
    if (*f) {
      *f << line << '\n';
      f->flush();
    }
  }

  mutable std::mutex mu_;
  std::FILE* out_;
  std::FILE* err_;
  bool color_out_ = false, color_err_ = false;
  std::string log_dir_;
  std::size_t keep_;
  std::map<std::string, std::deque<std::string>> last_;
  std::map<std::string, std::unique_ptr<std::ofstream>> files_;
  std::function<void(std::string_view, std::string_view)> observer_;
};

}  // namespace tlaunch::launch
