// A watch over a node process that a cluster manager started (a task of --launch=slurm's
// srun step, with --tlaunch-watch). Under local_mp the launcher, and under ssh the host's
// agent, kill a node process stopped (SIGSTOP, SIGTSTP) for two --liveness intervals: its
// kernel goes on acknowledging TCP, so nothing else notices that it stopped answering.
// Next to a Slurm task there is no tlaunch process to do that, so such a process forks
// first thing: the child goes on as the node; the parent waits for it, passes on the
// signals it gets, kills it once it has been stopped that long (saying so on stderr), and
// ends as the child ended: the same exit code, or death by the same signal.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>

#include "local_child.hpp"

namespace tlaunch::launch {

// Call while the process is one thread. In the child, and when there is nothing to do
// (limit 0) or fork fails: nullopt, go on as the node. In the parent, once the child has
// ended: its exit code; a child killed by a signal kills the parent with it (no return).
inline std::optional<int> watch_node_process(std::chrono::milliseconds limit) {
  if (limit.count() <= 0) return std::nullopt;
  static constexpr int passed_on[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT};
  sigset_t set, old;
  ::sigemptyset(&set);
  for (int s : passed_on) ::sigaddset(&set, s);
  ::sigaddset(&set, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &set, &old);
  const pid_t parent = ::getpid();
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    return std::nullopt;
  }
  if (pid == 0) {
    // The child: it dies with its watch (kill -9 of it, or of the whole step).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(128 + SIGKILL);
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    return std::nullopt;
  }

  using clock = std::chrono::steady_clock;
  constexpr auto tick = std::chrono::milliseconds(100);
  clock::time_point stopped_since{}, last_look = clock::now();
  bool killed = false;
  siginfo_t end{};
  for (;;) {
    timespec ts{0, static_cast<long>(std::chrono::nanoseconds(tick).count())};
    siginfo_t got{};
    int s = ::sigtimedwait(&set, &got, &ts);
    if (s > 0 && s != SIGCHLD) ::kill(pid, s);
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG) == 0 && info.si_pid == pid) {
      end = info;
      break;
    }
    const int stop_signal = detail::stop_signal_of(pid);
    const auto now = clock::now();
    // A gap in looking (this process was stopped too, as in a suspended Slurm job, or not
    // scheduled): what was seen before it says nothing about now.
    if (now - last_look > 10 * tick) stopped_since = {};
    last_look = now;
    if (stop_signal == 0) {
      stopped_since = {};
      continue;
    }
    if (stopped_since == clock::time_point{}) stopped_since = now;
    if (!killed && now - stopped_since >= limit) {
      std::fprintf(stderr, "tlaunch: node process %s; killed\n",
                   detail::stopped_cause(stop_signal, limit).c_str());
      std::fflush(stderr);
      ::kill(pid, SIGKILL);
      killed = true;
    }
  }
  if (end.si_code == CLD_EXITED) return end.si_status;
  // Killed by a signal: so is this process, without a second core file.
  const int sig = end.si_status;
  rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  ::signal(sig, SIG_DFL);
  sigset_t only;
  ::sigemptyset(&only);
  ::sigaddset(&only, sig);
  ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
  ::kill(::getpid(), sig);
  ::_exit(128 + sig);  // a signal whose default is to be ignored
}

}  // namespace tlaunch::launch
