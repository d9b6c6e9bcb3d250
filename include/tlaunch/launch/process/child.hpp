// A started node process, local (fork/exec) or remote (an SSH channel).
// The coordinator sees every node process through this one interface.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace tlaunch::launch {

enum class stream { out, err };

// How a node process ended.
struct exit_status {
  int code = 0;             // exit code when exited normally
  int signal = 0;           // signal number when killed by a signal (0 if none or unknown)
  std::string signal_name;  // "KILL", "SEGV", ... (remote processes report names, not numbers)
  // Set when how the process ended is not known (its host's connection was
  // lost, say); says why, and describe() gives it instead of the code.
  std::string unknown;
  // Why the process that started it killed it ("stopped (SIGSTOP) for 2 s: it stopped
  // answering"); describe() gives it before how the process ended.
  std::string cause;
  bool ok() const noexcept {
    return code == 0 && signal == 0 && signal_name.empty() && unknown.empty();
  }
  std::string describe() const {
    if (!unknown.empty()) return unknown;
    if (!cause.empty()) {
      exit_status how = *this;
      how.cause.clear();
      return cause + " (" + how.describe() + ")";
    }
    if (!signal_name.empty()) return "killed by signal SIG" + signal_name;
    if (signal != 0) return "killed by signal " + std::to_string(signal);
    return "exited with code " + std::to_string(code);
  }
};

// Callbacks a child invokes from its own I/O thread.
struct child_callbacks {
  // One complete line at a time, without the trailing '\n' (a final unterminated
  // line is delivered before on_exit).
  std::function<void(stream, std::string_view line)> on_line;
  // Called exactly once, after the last on_line.
  std::function<void(const exit_status&)> on_exit;
};

class child {
 public:
  virtual ~child() = default;
  // Bytes for the process's stdin (the launch secret goes this way).
  virtual void write_stdin(std::string_view data) = 0;
  // EOF on the process's stdin: a tlaunch node takes this as "stop now".
  virtual void close_stdin() = 0;
  // Last resort: SIGKILL locally; remotely, whatever ends the process for sure.
  virtual void kill() = 0;
  virtual bool running() const = 0;
  // "" for a local process, the host (as the user wrote it) for a remote one.
  virtual std::string host() const = 0;
  virtual long pid() const = 0;  // local pid, or the remote pid if known, else -1
  // The process's connection to the coordinator closed: a child that cannot see its
  // process end (a Kubernetes pod) takes this as its end.
  virtual void connection_closed() {}
  // The process registered with the coordinator, giving its pid: a child that cannot
  // signal its process otherwise (a task of an srun step shared with others) kills it so.
  virtual void registered(long /*pid*/) {}
};

using child_ptr = std::unique_ptr<child>;

}  // namespace tlaunch::launch
