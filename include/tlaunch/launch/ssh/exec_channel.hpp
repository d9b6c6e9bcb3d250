// Processes started on a host through SSH exec channels: their output split into lines,
// their stdin, kill and exit status, and what they report when the connection dies.
#pragma once

#include <libssh/callbacks.h>
#include <libssh/libssh.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../detail/line_splitter.hpp"
#include "../process/child.hpp"
#include "error.hpp"
#include "host_spec.hpp"
#include "io_loop.hpp"

namespace tlaunch::ssh {

// Quotes s for a POSIX shell (the remote login shell runs exec commands).
inline std::string shell_quote(std::string_view s) {
  if (!s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
        return std::isalnum(c) || std::strchr("@%+=:,./-_", c) != nullptr;
      })) {
    return std::string(s);
  }
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// State of one exec channel; touched only on the session's I/O thread (except `running`).
struct channel_state {
  ssh_channel channel = nullptr;
  std::string command;
  launch::child_callbacks cb;
  bool detached = false;  // the child handle is gone: no more callbacks
  tlaunch::detail::line_splitter out_lines, err_lines;
  std::string out_buf, err_buf;  // filled by libssh's data callback, split outside libssh
  std::string stdin_pending;
  bool close_stdin = false, eof_sent = false;
  bool remote_eof = false, remote_closed = false;
  bool got_exit = false;
  launch::exit_status status;
  bool kill_requested = false, kill_sent = false;
  std::chrono::steady_clock::time_point kill_deadline;
  bool done = false;
  std::atomic<bool> running{true};
  ssh_channel_callbacks_struct callbacks{};
};

// The exec channels of one session. Only the thread that polls the session calls it:
// pump() after each poll moves stdin, kill and exit forward and delivers output lines.
// Callbacks run inside pump(), connection_lost() and close_all(); the exit callback comes
// once, after every output line.
class exec_channels {
 public:
  // A process that ignores stdin EOF after kill() has this long before its channel is closed.
  static constexpr auto kill_grace = std::chrono::seconds(2);

  explicit exec_channels(host_spec host) : host_(std::move(host)) {}
  exec_channels(const exec_channels&) = delete;
  exec_channels& operator=(const exec_channels&) = delete;

  // Runs command through the remote login shell (no pty: stdout and stderr stay apart);
  // throws ssh::error when the channel cannot be opened or the command not started.
  std::shared_ptr<channel_state> open(ssh_session ssh, const std::string& command,
                                      launch::child_callbacks cb) {
    auto st = std::make_shared<channel_state>();
    st->command = command;
    st->cb = std::move(cb);
    st->channel = ssh_channel_new(ssh);
    if (st->channel == nullptr) fail("cannot create a channel: " + std::string(ssh_get_error(ssh)));
    if (ssh_channel_open_session(st->channel) != SSH_OK) {
      std::string why = ssh_get_error(ssh);
      ssh_channel_free(st->channel);
      fail("cannot open a session channel (sshd MaxSessions reached?): " + why);
    }
    install_callbacks(*st);
    if (ssh_channel_request_exec(st->channel, command.c_str()) != SSH_OK) {
      std::string why = ssh_get_error(ssh);
      ssh_channel_close(st->channel);
      ssh_channel_free(st->channel);
      fail("cannot start `" + command + "`: " + why);
    }
    channels_.push_back(st);
    return st;
  }

  // Moves every channel forward; true if anything happened. Finished channels are dropped.
  bool pump() {
    bool progress = false;
    for (std::size_t i = 0; i < channels_.size(); ++i) {
      auto keep = channels_[i];  // a callback may drop the child's handle
      progress |= pump(*keep);
    }
    std::erase_if(channels_, [](auto& st) { return st->done; });
    return progress;
  }

  // How long the poll may wait: not past a kill's grace period.
  int wait_ms() const {
    int t = 1000;
    auto now = std::chrono::steady_clock::now();
    for (auto& st : channels_) {
      if (st->kill_sent && !st->done) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(st->kill_deadline - now);
        t = std::min<int>(t, static_cast<int>(std::max<long long>(left.count() + 1, 0)));
      }
    }
    return t;
  }

  // The connection died: each running process exits with code 255 (like ssh(1)), after an
  // "ssh: connection to ... lost" line on stderr.
  void connection_lost(const std::string& reason) {
    lost_ = true;
    for (auto& st : channels_) {
      if (st->done) continue;
      st->status = {};
      st->status.code = 255;
      st->status.unknown = "ssh connection to " + host_.display() + " lost (" + reason + ")";
      finish(*st, "ssh: connection to " + host_.display() + " lost: " + reason);
    }
    channels_.clear();
  }

  // Closes every channel without calling back: nobody holds a child any more.
  void close_all() {
    for (auto& st : channels_) {
      st->detached = true;
      if (!st->done) finish(*st);
    }
    channels_.clear();
  }

  // Channels open (not finished yet).
  std::size_t size() const { return channels_.size(); }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw error(host_, what); }

  void install_callbacks(channel_state& st) {
    auto& c = st.callbacks;
    c.userdata = &st;
    c.channel_data_function = [](ssh_session, ssh_channel, void* data, uint32_t len,
                                 int is_stderr, void* u) -> int {
      auto* s = static_cast<channel_state*>(u);
      (is_stderr ? s->err_buf : s->out_buf).append(static_cast<const char*>(data), len);
      return static_cast<int>(len);
    };
    c.channel_eof_function = [](ssh_session, ssh_channel, void* u) {
      static_cast<channel_state*>(u)->remote_eof = true;
    };
    c.channel_close_function = [](ssh_session, ssh_channel, void* u) {
      static_cast<channel_state*>(u)->remote_closed = true;
    };
    c.channel_exit_status_function = [](ssh_session, ssh_channel, int code, void* u) {
      auto* s = static_cast<channel_state*>(u);
      s->got_exit = true;
      s->status.code = code;
    };
    c.channel_exit_signal_function = [](ssh_session, ssh_channel, const char* sig, int,
                                        const char*, const char*, void* u) {
      auto* s = static_cast<channel_state*>(u);
      s->got_exit = true;
      s->status.code = -1;
      s->status.signal_name = sig != nullptr ? sig : "?";
    };
    ssh_callbacks_init(&c);
    ssh_set_channel_callbacks(st.channel, &c);
  }

  static auto line_sink(channel_state& st, launch::stream which) {
    return [&st, which](std::string_view line) {
      if (!st.detached && st.cb.on_line) st.cb.on_line(which, line);
    };
  }

  void deliver(channel_state& st) {
    if (!st.out_buf.empty()) {
      std::string data;
      data.swap(st.out_buf);
      st.out_lines.feed(data, line_sink(st, launch::stream::out));
    }
    if (!st.err_buf.empty()) {
      std::string data;
      data.swap(st.err_buf);
      st.err_lines.feed(data, line_sink(st, launch::stream::err));
    }
  }

  void finish(channel_state& st, const std::string& note = {}) {
    deliver(st);
    st.out_lines.finish(line_sink(st, launch::stream::out));
    st.err_lines.finish(line_sink(st, launch::stream::err));
    if (!note.empty() && !st.detached && st.cb.on_line) st.cb.on_line(launch::stream::err, note);
    if (st.channel != nullptr) {
      ssh_remove_channel_callbacks(st.channel, &st.callbacks);
      if (!lost_) ssh_channel_close(st.channel);
      ssh_channel_free(st.channel);
      st.channel = nullptr;
    }
    st.done = true;
    st.running = false;
    if (!st.detached && st.cb.on_exit) {
      auto on_exit = std::move(st.cb.on_exit);
      on_exit(st.status);
    }
    st.cb = {};
  }

  // Moves stdin, kill and exit forward for one channel; true if anything happened.
  bool pump(channel_state& st) {
    bool progress = false;
    if (st.done) return false;
    if (!st.stdin_pending.empty() && !st.eof_sent && !st.remote_closed) {
      // never more than the window: a full window would block the whole I/O thread
      std::size_t room = std::min<std::size_t>(ssh_channel_window_size(st.channel), 32 * 1024);
      if (room > 0) {
        std::size_t n = std::min(room, st.stdin_pending.size());
        int w = ssh_channel_write(st.channel, st.stdin_pending.data(), static_cast<uint32_t>(n));
        if (w > 0) {
          st.stdin_pending.erase(0, static_cast<std::size_t>(w));
          progress = true;
        }
      }
    }
    if (st.close_stdin && st.stdin_pending.empty() && !st.eof_sent && !st.remote_closed) {
      ssh_channel_send_eof(st.channel);
      st.eof_sent = true;
      progress = true;
    }
    if (st.kill_requested && !st.kill_sent) {
      ssh_channel_request_send_signal(st.channel, "KILL");
      st.stdin_pending.clear();
      if (!st.eof_sent && !st.remote_closed) ssh_channel_send_eof(st.channel);
      st.eof_sent = true;
      st.kill_sent = true;
      st.kill_deadline = std::chrono::steady_clock::now() + kill_grace;
      progress = true;
    }
    if (!st.out_buf.empty() || !st.err_buf.empty()) {
      deliver(st);
      progress = true;
    }
    if (st.remote_closed || (st.remote_eof && st.got_exit)) {
      if (!st.got_exit) st.status.code = -1;
      finish(st, st.got_exit ? std::string()
                             : "ssh: " + host_.display() + " closed the channel without an exit status");
      return true;
    }
    if (st.detached) {  // nobody listens: end it now
      finish(st);
      return true;
    }
    if (st.kill_sent && std::chrono::steady_clock::now() >= st.kill_deadline) {
      st.status.code = -1;
      st.status.unknown = "ignored stdin EOF after kill(); its channel was closed and it may "
                          "still be running";
      finish(st, "ssh: closed the channel to " + host_.display() +
                     " after kill(); the process ignored stdin EOF and may still be running");
      return true;
    }
    return progress;
  }

  host_spec host_;
  std::vector<std::shared_ptr<channel_state>> channels_;
  bool lost_ = false;
};

// A process at the other end of an exec channel, driven through the session's I/O loop;
// the child keeps the loop running while it exists.
class remote_child final : public launch::child {
 public:
  remote_child(std::shared_ptr<io_loop_owner> o, std::shared_ptr<channel_state> st)
      : owner_(std::move(o)), st_(std::move(st)) {}
  ~remote_child() override {
    auto st = st_;
    auto forget = [st] { st->detached = true; };
    try {
      owner_->loop().call(forget);  // once this returns, no callback of ours runs again
    } catch (...) {
    }
  }
  void write_stdin(std::string_view data) override {
    owner_->loop().post([st = st_, d = std::string(data)] {
      if (!st->close_stdin) st->stdin_pending += d;
    });
  }
  void close_stdin() override {
    owner_->loop().post([st = st_] { st->close_stdin = true; });
  }
  void kill() override {
    owner_->loop().post([st = st_] { st->kill_requested = true; });
  }
  bool running() const override { return st_->running; }
  std::string host() const override { return owner_->loop().host().host; }
  long pid() const override { return -1; }

 private:
  std::shared_ptr<io_loop_owner> owner_;
  std::shared_ptr<channel_state> st_;
};

}  // namespace tlaunch::ssh
