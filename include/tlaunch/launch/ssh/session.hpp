// One SSH connection to a host, for the ssh launcher: connect with host-key checking and key
// authentication, copy the binary into a per-build-id cache by SFTP, start node processes.
//
// The pieces, each in ssh/: host_spec.hpp (where to log in), connect.hpp (host keys and
// authentication), io_loop.hpp (the one thread that calls into libssh), exec_channel.hpp
// (processes on the host), binary_cache.hpp (the SFTP copy). This header ties them: a
// session is one logged-in connection whose I/O loop runs its exec channels and its cache,
// and any thread may use a session and the children started from it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../process/child.hpp"
#include "binary_cache.hpp"
#include "connect.hpp"
#include "error.hpp"
#include "exec_channel.hpp"
#include "host_spec.hpp"
#include "io_loop.hpp"
#include "options.hpp"

namespace tlaunch::ssh {

namespace detail {

// What a session's I/O loop works on besides the session itself.
struct session_state {
  session_state(host_spec h, session_options o, ssh_session s)
      : host(std::move(h)), options(std::move(o)), channels(host), cache(s, host, options.cache_dir, options.cache_keep) {}
  host_spec host;
  session_options options;
  std::string local_addr;
  exec_channels channels;
  binary_cache cache;
  std::atomic<bool> last_skipped{false};
  // Written and read only on the loop's thread (inside loop calls).
  std::vector<std::string> last_removed;
  std::string last_prune_error;
};

}  // namespace detail

class session {
 public:
  // Connects, checks the host key against known_hosts and authenticates; throws ssh::error.
  static session connect(const host_spec& host, const session_options& options = {});

  session(session&&) noexcept = default;
  session& operator=(session&&) noexcept = default;
  session(const session&) = delete;
  session& operator=(const session&) = delete;
  // Closes the connection once the children started from it are gone too.
  ~session() = default;

  const host_spec& host() const;
  // Our end of the connection (numeric): an address the host can reach us at.
  std::string local_address() const;

  // Copies local_path to <cache_dir>/<build_id>/<basename> on the host (0755) and returns the
  // remote absolute path. Skipped when a file of the same size is already there; written under
  // a temporary name and renamed, so a crash never leaves a truncated binary under the final
  // name. progress(done, total) is called from the session's I/O thread and must not throw.
  std::string upload_cached(
      const std::string& local_path, const std::string& build_id,
      std::function<void(std::uint64_t done, std::uint64_t total)> progress = {});
  // Whether the last upload_cached() that returned found the file already there.
  bool last_upload_skipped() const;
  // The older builds the last upload_cached() removed from the host's cache
  // (session_options::cache_keep), and why removing stopped early ("" if it did not).
  std::pair<std::vector<std::string>, std::string> last_upload_pruned() const;

  // Runs command through the remote login shell (no pty: stdout and stderr stay apart).
  // cb is called from the session's I/O thread. kill() cannot signal as root (sshd refuses
  // signal requests without privilege separation): it sends KILL (honoured for other users),
  // closes stdin, and closes the channel if the process has not exited 2 s later.
  // If the connection dies, each running child reports an "ssh: connection to ... lost" line
  // on stderr and exits with code 255 (like ssh(1)).
  launch::child_ptr exec(const std::string& command, launch::child_callbacks cb);

  // The command's output and exit status, for short setup commands (mkdir, rm, uname).
  // Waits for the command on the calling thread: never call it from a child's callback.
  struct output {
    std::string out, err;
    launch::exit_status status;
  };
  output run(const std::string& command);

 private:
  session(std::shared_ptr<detail::session_state> state, std::shared_ptr<io_loop_owner> loop)
      : state_(std::move(state)), loop_(std::move(loop)) {}
  detail::session_state& state() const;
  io_loop& loop() const;

  std::shared_ptr<detail::session_state> state_;
  // Last, so it goes first: the loop's thread still uses the state while it stops.
  std::shared_ptr<io_loop_owner> loop_;
};

// ---------------------------------------------------------------------------------------------
// Implementation

inline session session::connect(const host_spec& host, const session_options& options) {
  session_ptr s = login(host, options);
  auto state = std::make_shared<detail::session_state>(host, options, s.get());
  state->local_addr = socket_local_address(ssh_get_fd(s.get()));
  io_loop::hooks h;
  h.turn = [state] { return state->channels.pump(); };
  h.wait_ms = [state] { return state->channels.wait_ms(); };
  h.lost = [state](const std::string& why) { state->channels.connection_lost(why); };
  h.stopped = [state] {
    state->channels.close_all();
    state->cache.close();
  };
  auto loop = io_loop::start(host, s.release(), std::move(h));
  return session(std::move(state), std::make_shared<io_loop_owner>(std::move(loop)));
}

inline detail::session_state& session::state() const {
  if (!state_) throw std::logic_error("tlaunch::ssh::session used after being moved from");
  return *state_;
}
inline io_loop& session::loop() const {
  if (!loop_) throw std::logic_error("tlaunch::ssh::session used after being moved from");
  return loop_->loop();
}

inline const host_spec& session::host() const { return state().host; }
inline std::string session::local_address() const { return state().local_addr; }
inline bool session::last_upload_skipped() const { return state().last_skipped; }

inline std::string session::upload_cached(
    const std::string& local_path, const std::string& build_id,
    std::function<void(std::uint64_t, std::uint64_t)> progress) {
  auto& l = loop();
  auto& st = state();
  return l.call([&l, &st, &local_path, &build_id, &progress] {
    if (l.lost()) l.fail("connection lost: " + l.lost_reason());
    auto r = st.cache.upload(local_path, build_id, progress);
    st.last_skipped = r.skipped;
    st.last_removed = std::move(r.removed);
    st.last_prune_error = std::move(r.prune_error);
    return r.path;
  });
}

inline std::pair<std::vector<std::string>, std::string> session::last_upload_pruned() const {
  auto& st = state();
  return loop().call([&st] { return std::make_pair(st.last_removed, st.last_prune_error); });
}

inline launch::child_ptr session::exec(const std::string& command, launch::child_callbacks cb) {
  auto& l = loop();
  auto& st = state();
  auto channel = l.call([&l, &st, &command, &cb] {
    if (l.lost()) l.fail("connection lost: " + l.lost_reason());
    return st.channels.open(l.session(), command, std::move(cb));
  });
  return std::make_unique<remote_child>(loop_, std::move(channel));
}

inline session::output session::run(const std::string& command) {
  struct shared {
    std::mutex mu;
    output result;
    std::promise<void> done;
  };
  auto sh = std::make_shared<shared>();
  launch::child_callbacks cb;
  cb.on_line = [sh](launch::stream s, std::string_view line) {
    std::lock_guard lock(sh->mu);
    auto& into = s == launch::stream::out ? sh->result.out : sh->result.err;
    into.append(line).push_back('\n');
  };
  cb.on_exit = [sh](const launch::exit_status& st) {
    {
      std::lock_guard lock(sh->mu);
      sh->result.status = st;
    }
    sh->done.set_value();
  };
  auto fut = sh->done.get_future();
  auto child = exec(command, std::move(cb));
  child->close_stdin();
  fut.wait();
  std::lock_guard lock(sh->mu);
  return sh->result;
}

}  // namespace tlaunch::ssh
