// One lifecycle for a program and for each of its processes: starting, running,
// stopping (with a grace period), stopped, and the exit status that follows.
// local_mt, every node process and the coordinator keep their state in one of
// these, so what counts as a failure is decided in one place:
//
// - before the stop, every failure counts, and the first one begins the stop;
// - once the stop has begun (anywhere: stop_program(), every run() over, a
//   signal, a failure), errors the stop causes are not failures: a run() that
//   ends with a call error (a peer that already stopped is unavailable, or
//   tlaunch::stopping when it said so first, a call cancelled or timed out, a method
//   that threw because its node was stopping),
//   a process ended by SIGINT, SIGTERM, SIGHUP, SIGPIPE or a kill of the launcher's;
// - a real failure during the stop still counts: any other exception from
//   run(), a crash (SIGSEGV, SIGABRT, ...), an exit code of the process's own,
//   a node that did not stop within the grace period.
//
// The first failure that counts is the one reported; its exit code is 1.
//
// Restarts (a node's restart_policy, under launchers of node processes): before the
// stop, a failure of an instance whose budget (restart_budget) allows one more restart
// does not count: the instance is restarted instead (a process still running, hung or
// cut off, is killed first). Once the budget is spent, the failure counts as above,
// naming the restarts. Once the stop has begun nothing is restarted.
#pragma once

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "../error.hpp"

namespace tlaunch::launch {

// What ended a node, as far as the failure rule goes.
enum class fault {
  call_error,    // run() ended with a tlaunch::call_error (unavailable, cancelled, ...)
  error,         // run() ended with any other exception
  exit_code,     // the process exited with a code of its own
  signal,        // the process was ended by a signal (see stop_signal)
  lost,          // the process's connection or host went away
  grace_overrun  // it did not stop within the grace period
};

inline const char* to_string(fault f) {
  switch (f) {
    case fault::call_error: return "call_error";
    case fault::error: return "error";
    case fault::exit_code: return "exit_code";
    case fault::signal: return "signal";
    case fault::lost: return "lost";
    case fault::grace_overrun: return "grace_overrun";
  }
  return "?";
}

// The fault of an exception that ended a run() body.
inline fault fault_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const tlaunch::call_error&) {
    return fault::call_error;
  } catch (...) {
    return fault::error;
  }
}

// Signals a stop sends or causes (a terminal's Ctrl-C reaches every process of its
// group; a closed pipe or session hangs up), as opposed to a crash.
inline bool stop_signal(int sig) {
  return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGPIPE || sig == SIGKILL;
}
inline bool stop_signal(std::string_view name) {
  return name == "INT" || name == "TERM" || name == "HUP" || name == "PIPE" || name == "KILL";
}

struct failure_report {
  std::string where;  // "worker/3" or "worker/3@h1"
  std::string why;
};

class lifecycle {
 public:
  enum class phase { starting, running, stopping, stopped };

  // Whether a fault counts as a failure; `stopping` says whether the stop had begun
  // when it was seen.
  static bool counts(fault f, bool stopping) {
    if (!stopping) return true;
    return f != fault::call_error && f != fault::lost;
  }

  phase current() const {
    std::lock_guard lk(mu_);
    return phase_;
  }
  bool stopping() const {
    std::lock_guard lk(mu_);
    return phase_ == phase::stopping || phase_ == phase::stopped;
  }
  void running() {
    std::lock_guard lk(mu_);
    if (phase_ == phase::starting) phase_ = phase::running;
  }
  // Begins the stop; true for the call that began it.
  bool begin_stop(std::string why) {
    std::lock_guard lk(mu_);
    if (phase_ == phase::stopping || phase_ == phase::stopped) return false;
    phase_ = phase::stopping;
    stop_reason_ = std::move(why);
    stop_began_ = std::chrono::steady_clock::now();
    return true;
  }
  void stopped() {
    std::lock_guard lk(mu_);
    phase_ = phase::stopped;
  }

  // A node failed with `f`. Returns true when it counts (see the rule above); the
  // first that counts is kept as the program's failure and, with `stop` (a launcher's
  // view), begins the stop. A node process passes false: it keeps serving until the
  // launcher, which judges its report, tells it to stop.
  bool fail(std::string where, std::string why, fault f, bool stop = true) {
    std::lock_guard lk(mu_);
    bool was_stopping = phase_ == phase::stopping || phase_ == phase::stopped;
    if (!counts(f, was_stopping)) return false;
    if (!failure_) {
      failure_ = failure_report{std::move(where), std::move(why)};
      exit_code_ = 1;
    }
    if (!was_stopping && stop) {
      phase_ = phase::stopping;
      stop_reason_ = "node " + failure_->where + " failed";
      stop_began_ = std::chrono::steady_clock::now();
    }
    return true;
  }

  // A signal asks the program to stop: its exit code is 128 + sig unless a failure came
  // first. The caller begins the stop.
  void interrupted(int sig) {
    std::lock_guard lk(mu_);
    if (exit_code_ == 0) exit_code_ = 128 + sig;
  }

  int exit_code() const {
    std::lock_guard lk(mu_);
    return exit_code_;
  }
  std::optional<failure_report> failure() const {
    std::lock_guard lk(mu_);
    return failure_;
  }
  std::string stop_reason() const {
    std::lock_guard lk(mu_);
    return stop_reason_;
  }
  std::chrono::steady_clock::time_point stop_began() const {
    std::lock_guard lk(mu_);
    return stop_began_;
  }

 private:
  mutable std::mutex mu_;
  phase phase_ = phase::starting;
  std::string stop_reason_;
  std::optional<failure_report> failure_;
  int exit_code_ = 0;
  std::chrono::steady_clock::time_point stop_began_{};
};

// The restarts of one node instance against its policy: at most `max` within any
// `window` (0: ever), each after a backoff that doubles with every earlier restart
// still in the window. Used on one thread (the coordinator's).
class restart_budget {
 public:
  using clock = std::chrono::steady_clock;

  restart_budget() = default;
  restart_budget(std::uint32_t max, std::chrono::milliseconds window,
                 std::chrono::milliseconds backoff)
      : max_(max), window_(window), backoff_(backoff) {}

  // Whether one more restart is allowed at `now`.
  bool allows(clock::time_point now) {
    forget(now);
    return max_ > 0 && times_.size() < max_;
  }
  // Records a restart at `now`; returns the wait before it.
  std::chrono::milliseconds take(clock::time_point now) {
    forget(now);
    auto cap = std::max<std::chrono::milliseconds>(backoff_, std::chrono::seconds(10));
    auto wait = backoff_;
    for (std::size_t i = 0; i < times_.size() && wait < cap; ++i) wait *= 2;
    times_.push_back(now);
    return std::min(wait, cap);
  }
  // Restarts within the window (as of the last allows() or take()).
  std::size_t count() const { return times_.size(); }
  std::uint32_t max() const { return max_; }
  std::chrono::milliseconds window() const { return window_; }

 private:
  void forget(clock::time_point now) {
    if (window_.count() == 0) return;
    while (!times_.empty() && now - times_.front() >= window_) times_.pop_front();
  }

  std::uint32_t max_ = 0;
  std::chrono::milliseconds window_{0}, backoff_{0};
  std::deque<clock::time_point> times_;
};

}  // namespace tlaunch::launch
