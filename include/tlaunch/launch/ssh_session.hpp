// One SSH connection to a host, for the ssh launcher: connect with host-key checking and key
// authentication, copy the binary into a per-build-id cache by SFTP, start node processes.
//
// libssh sessions are not thread-safe, so after connect() one I/O thread per session makes
// every libssh call for it. Public calls from other threads post work to that thread (and wait
// for it when they return a result), so any thread may use a session and its children.
#pragma once

#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <libssh/sftp.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pwd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <tlaunch/detail/line_splitter.hpp>
#include <tlaunch/error.hpp>
#include <tlaunch/launch/child.hpp>

namespace tlaunch::ssh {

// Where to log in: "host", "user@host", "host:2222", "user@host:2222", "[::1]:2222".
struct host_spec {
  std::string user;  // defaults to the local user name
  std::string host;  // as written (name or address)
  int port = 22;

  static host_spec parse(std::string_view text);
  // "user@host", with ":port" when it is not 22.
  std::string display() const {
    std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
    return user + "@" + h + (port == 22 ? "" : ":" + std::to_string(port));
  }
};

struct session_options {
  std::string identity;     // private key file (--ssh-identity); "" = ssh-agent, then ~/.ssh/id_*
  bool accept_new = false;  // record an unknown host key instead of refusing the host
  std::string known_hosts;  // "" = ~/.ssh/known_hosts
  int connect_timeout_s = 10;
  // TCP keepalive on the connection: a dead link is noticed after about
  // idle + interval * count seconds (libssh alone would block on it forever).
  int keepalive_idle_s = 5;
  int keepalive_interval_s = 2;
  int keepalive_count = 3;
  // Remote directory holding one folder per build id; relative paths are under the remote
  // home. Worth changing when the home on the hosts is small or shared over NFS.
  std::string cache_dir = ".cache/tlaunch";
};

// Everything that goes wrong with a host; what() is "ssh user@host:port: <what happened>".
class error : public tlaunch::error {
 public:
  error(host_spec host, const std::string& what)
      : tlaunch::error("ssh " + host.display() + ": " + what), host_(std::move(host)) {}
  const host_spec& host() const noexcept { return host_; }

 private:
  host_spec host_;
};

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

namespace detail {
class io_core;
struct owner;
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
  explicit session(std::shared_ptr<detail::owner> o) : owner_(std::move(o)) {}
  detail::io_core& core() const;
  std::shared_ptr<detail::owner> owner_;
};

// ---------------------------------------------------------------------------------------------
// Implementation

namespace detail {

inline std::string local_user_name() {
  if (const char* u = std::getenv("USER"); u != nullptr && *u != '\0') return u;
  if (const passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_name != nullptr) {
    return pw->pw_name;
  }
  return "root";
}

inline std::string errno_text(int e) { return std::strerror(e); }

inline std::string sftp_error_text(sftp_session sftp) {
  switch (sftp_get_error(sftp)) {
    case SSH_FX_EOF: return "unexpected end of file";
    case SSH_FX_NO_SUCH_FILE: return "no such file or directory";
    case SSH_FX_PERMISSION_DENIED: return "permission denied";
    case SSH_FX_FAILURE: return "failure";
    case SSH_FX_BAD_MESSAGE: return "bad message";
    case SSH_FX_NO_CONNECTION: return "no connection";
    case SSH_FX_CONNECTION_LOST: return "connection lost";
    case SSH_FX_OP_UNSUPPORTED: return "operation not supported";
    case SSH_FX_INVALID_HANDLE: return "invalid handle";
    case SSH_FX_NO_SUCH_PATH: return "no such path";
    case SSH_FX_FILE_ALREADY_EXISTS: return "file already exists";
    case SSH_FX_WRITE_PROTECT: return "file system is read-only";
    case SSH_FX_NO_MEDIA: return "no media";
    default: return "error";
  }
}

// State of one exec channel; touched only on the I/O thread (except `running`).
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

// Owns the libssh session and the I/O thread that alone calls into it.
class io_core {
 public:
  static constexpr std::size_t upload_chunk = 128 * 1024;
  static constexpr auto kill_grace = std::chrono::seconds(2);

  io_core(host_spec h, session_options o, ssh_session s)
      : host(std::move(h)), options(std::move(o)), ssh(s) {}

  ~io_core() {
    if (wake_fd >= 0) ::close(wake_fd);
  }

  host_spec host;
  session_options options;
  ssh_session ssh;
  std::string local_addr;
  std::atomic<bool> last_skipped{false};
  std::thread thread;
  std::thread::id thread_id;

  [[noreturn]] void fail(const std::string& what) const { throw error(host, what); }

  void start(std::shared_ptr<io_core> self) {
    wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd < 0) fail("cannot create an eventfd: " + errno_text(errno));
    // thread_id must be set before anyone can post: on_io_thread() reads it
    auto started = std::make_shared<std::promise<void>>();
    auto ready = started->get_future();
    thread = std::thread([self = std::move(self), started] {
      self->thread_id = std::this_thread::get_id();
      started->set_value();
      self->loop();
    });
    ready.wait();
  }

  bool on_io_thread() const { return std::this_thread::get_id() == thread_id; }

  // Queues f for the I/O thread; false once the thread is stopping.
  bool post(std::function<void()> f) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return false;
      tasks_.push_back(std::move(f));
    }
    wake();
    return true;
  }

  // Runs f on the I/O thread and returns its result (or rethrows what it threw).
  template <class F>
  auto call(F f) -> std::invoke_result_t<F&> {
    using result = std::invoke_result_t<F&>;
    if (on_io_thread()) return f();
    auto task = std::make_shared<std::packaged_task<result()>>(std::move(f));
    auto fut = task->get_future();
    if (!post([task] { (*task)(); })) fail("the session is closed");
    return fut.get();
  }

  void request_stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake();
  }

  // ---- work done on the I/O thread ----

  std::shared_ptr<channel_state> open_exec(const std::string& command, launch::child_callbacks cb) {
    if (lost_) fail("connection lost: " + lost_reason_);
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

  std::string upload(const std::string& local_path, const std::string& build_id,
                     const std::function<void(std::uint64_t, std::uint64_t)>& progress);

 private:
  void wake() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
  }
  void drain_wake() {
    std::uint64_t v;
    while (::read(wake_fd, &v, sizeof v) > 0) {
    }
  }

  static int on_wake(socket_t, int, void* self) {
    static_cast<io_core*>(self)->drain_wake();
    return 0;
  }

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

  void deliver(channel_state& st) {
    auto emit = [&](launch::stream which) {
      return [&st, which](std::string_view line) {
        if (!st.detached && st.cb.on_line) st.cb.on_line(which, line);
      };
    };
    if (!st.out_buf.empty()) {
      std::string data;
      data.swap(st.out_buf);
      st.out_lines.feed(data, emit(launch::stream::out));
    }
    if (!st.err_buf.empty()) {
      std::string data;
      data.swap(st.err_buf);
      st.err_lines.feed(data, emit(launch::stream::err));
    }
  }

  void finish(channel_state& st, const std::string& note = {}) {
    deliver(st);
    auto emit = [&st](launch::stream which) {
      return [&st, which](std::string_view line) {
        if (!st.detached && st.cb.on_line) st.cb.on_line(which, line);
      };
    };
    st.out_lines.finish(emit(launch::stream::out));
    st.err_lines.finish(emit(launch::stream::err));
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
                             : "ssh: " + host.display() + " closed the channel without an exit status");
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
      finish(st, "ssh: closed the channel to " + host.display() +
                     " after kill(); the process ignored stdin EOF and may still be running");
      return true;
    }
    return progress;
  }

  void connection_lost(const std::string& why) {
    lost_ = true;
    lost_reason_ = why.empty() ? "unknown error" : why;
    for (auto& st : channels_) {
      if (st->done) continue;
      st->status = {};
      st->status.code = 255;
      st->status.unknown = "ssh connection to " + host.display() + " lost (" + lost_reason_ + ")";
      finish(*st, "ssh: connection to " + host.display() + " lost: " + lost_reason_);
    }
    channels_.clear();
    if (event_ != nullptr) {
      ssh_event_remove_session(event_, ssh);
    }
  }

  int poll_timeout_ms() const {
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

  void loop() {
    event_ = ssh_event_new();
    ssh_event_add_session(event_, ssh);
    ssh_event_add_fd(event_, wake_fd, POLLIN, &io_core::on_wake, this);
    for (;;) {
      std::deque<std::function<void()>> tasks;
      bool stop;
      {
        std::lock_guard lock(mu_);
        tasks.swap(tasks_);
        stop = stopping_;
      }
      for (auto& t : tasks) t();
      if (stop) break;
      bool progress = !tasks.empty();
      if (!lost_) {
        for (std::size_t i = 0; i < channels_.size(); ++i) {
          auto keep = channels_[i];  // a callback may drop the child's handle
          progress |= pump(*keep);
        }
        std::erase_if(channels_, [](auto& st) { return st->done; });
        if (!ssh_is_connected(ssh)) connection_lost(ssh_get_error(ssh));
      }
      int timeout = progress ? 0 : poll_timeout_ms();
      if (!lost_) {
        ssh_event_dopoll(event_, timeout);
        if (!ssh_is_connected(ssh)) connection_lost(ssh_get_error(ssh));
      } else {
        pollfd p{wake_fd, POLLIN, 0};
        ::poll(&p, 1, timeout);
        drain_wake();
      }
    }
    // Nobody holds the session or a child any more: close everything.
    for (auto& st : channels_) {
      st->detached = true;
      if (!st->done) finish(*st);
    }
    channels_.clear();
    if (sftp_ != nullptr) sftp_free(sftp_);
    ssh_event_remove_fd(event_, wake_fd);
    if (!lost_) ssh_event_remove_session(event_, ssh);
    ssh_event_free(event_);
    if (ssh_is_connected(ssh)) ssh_disconnect(ssh);
    ssh_free(ssh);
    ssh = nullptr;
  }

  sftp_session ensure_sftp();

  int wake_fd = -1;
  std::mutex mu_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  ssh_event event_ = nullptr;
  std::vector<std::shared_ptr<channel_state>> channels_;
  bool lost_ = false;
  std::string lost_reason_;
  sftp_session sftp_ = nullptr;
  std::string remote_home_;
};

// Held by the session and by each child: when the last one goes, the I/O thread stops.
struct owner {
  std::shared_ptr<io_core> core;
  explicit owner(std::shared_ptr<io_core> c) : core(std::move(c)) {}
  owner(const owner&) = delete;
  owner& operator=(const owner&) = delete;
  ~owner() {
    core->request_stop();
    if (core->on_io_thread()) {
      core->thread.detach();  // the thread holds its own reference and ends by itself
    } else if (core->thread.joinable()) {
      core->thread.join();
    }
  }
};

inline sftp_session io_core::ensure_sftp() {
  if (sftp_ != nullptr) return sftp_;
  sftp_session s = sftp_new(ssh);
  if (s == nullptr) fail("cannot start SFTP: " + std::string(ssh_get_error(ssh)));
  if (sftp_init(s) != SSH_OK) {
    std::string why = ssh_get_error(ssh);
    sftp_free(s);
    fail("cannot start SFTP (is the sftp subsystem enabled in sshd_config?): " + why);
  }
  char* home = sftp_canonicalize_path(s, ".");
  if (home == nullptr) {
    std::string why = sftp_error_text(s);
    sftp_free(s);
    fail("cannot find the remote home directory: " + why);
  }
  remote_home_ = home;
  ssh_string_free_char(home);
  sftp_ = s;
  return s;
}

inline std::string io_core::upload(const std::string& local_path, const std::string& build_id,
                                   const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  if (lost_) fail("connection lost: " + lost_reason_);
  if (build_id.empty() || build_id.find('/') != std::string::npos || build_id == "." ||
      build_id == "..") {
    fail("bad build id '" + build_id + "' for the binary cache (must be one path component)");
  }
  int fd = ::open(local_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot read " + local_path + " to upload it: " + errno_text(errno));
  struct fd_closer {
    int fd;
    ~fd_closer() { ::close(fd); }
  } closer{fd};
  struct stat local_st {};
  if (::fstat(fd, &local_st) != 0) fail("cannot stat " + local_path + ": " + errno_text(errno));
  const auto total = static_cast<std::uint64_t>(local_st.st_size);

  sftp_session sftp = ensure_sftp();
  std::string base = options.cache_dir.empty() ? std::string(".cache/tlaunch") : options.cache_dir;
  if (base.front() != '/') base = remote_home_ + "/" + base;
  const std::string dir = base + "/" + build_id;
  std::string name = local_path.substr(local_path.find_last_of('/') + 1);
  if (name.empty()) fail("cannot upload " + local_path + ": it names a directory");
  const std::string remote = dir + "/" + name;

  // mkdir -p
  for (std::size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string part = dir.substr(0, pos);
    if (sftp_attributes a = sftp_stat(sftp, part.c_str()); a != nullptr) {
      bool is_dir = a->type == SSH_FILEXFER_TYPE_DIRECTORY;
      sftp_attributes_free(a);
      if (!is_dir) fail("cannot create the binary cache " + dir + ": " + part + " is not a directory");
      continue;
    }
    if (sftp_mkdir(sftp, part.c_str(), 0755) != 0) {
      if (sftp_attributes a = sftp_stat(sftp, part.c_str()); a != nullptr) {  // made by a racer
        sftp_attributes_free(a);
        continue;
      }
      fail("cannot create directory " + part + " for the binary cache: " + sftp_error_text(sftp));
    }
  }

  auto same_file_there = [&] {
    sftp_attributes a = sftp_stat(sftp, remote.c_str());
    if (a == nullptr) return false;
    bool same = a->type == SSH_FILEXFER_TYPE_REGULAR && a->size == total;
    bool exec = (a->permissions & 0111) == 0111;
    sftp_attributes_free(a);
    if (same && !exec) sftp_chmod(sftp, remote.c_str(), 0755);
    return same;
  };
  if (same_file_there()) {
    last_skipped = true;
    if (progress) progress(total, total);
    return remote;
  }

  std::random_device rd;
  const std::string tmp =
      remote + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
  sftp_file f = sftp_open(sftp, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0700);
  if (f == nullptr) fail("cannot create " + tmp + ": " + sftp_error_text(sftp));
  auto abandon = [&](const std::string& why) {
    sftp_close(f);
    sftp_unlink(sftp, tmp.c_str());
    fail("upload of " + local_path + " to " + remote + " failed: " + why);
  };

  std::vector<char> buf(upload_chunk);
  std::uint64_t done = 0;
  if (progress) progress(0, total);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      abandon("reading the local file: " + errno_text(errno));
    }
    if (n == 0) break;
    ssize_t w = sftp_write(f, buf.data(), static_cast<std::size_t>(n));
    if (w != n) {
      std::string why = sftp_error_text(sftp);
      // SFTP v3 reports a full disk as a bare "failure": ask the file system.
      if (sftp_get_error(sftp) == SSH_FX_FAILURE &&
          sftp_extension_supported(sftp, "statvfs@openssh.com", "2")) {
        if (sftp_statvfs_t v = sftp_statvfs(sftp, dir.c_str()); v != nullptr) {
          std::uint64_t avail = v->f_bavail * v->f_frsize;
          sftp_statvfs_free(v);
          if (avail < total - done) {
            why = "no space left on the host's file system holding " + dir + " (" +
                  std::to_string(avail) + " bytes free, " + std::to_string(total) +
                  " needed; set another cache directory or free space)";
          }
        }
      }
      if (!ssh_is_connected(ssh)) why += " (" + std::string(ssh_get_error(ssh)) + ")";
      abandon(why);
    }
    done += static_cast<std::uint64_t>(n);
    if (progress) progress(done, total);
  }
  if (sftp_close(f) != SSH_OK) {
    std::string why = sftp_error_text(sftp);
    sftp_unlink(sftp, tmp.c_str());
    fail("upload of " + local_path + " to " + remote + " failed on close: " + why);
  }
  if (sftp_chmod(sftp, tmp.c_str(), 0755) != 0) {
    std::string why = sftp_error_text(sftp);
    sftp_unlink(sftp, tmp.c_str());
    fail("cannot make " + tmp + " executable: " + why);
  }
  // SFTP v3 rename refuses an existing target: another upload of the same build may have won.
  if (sftp_rename(sftp, tmp.c_str(), remote.c_str()) != 0) {
    if (!same_file_there()) {
      sftp_unlink(sftp, remote.c_str());
      if (sftp_rename(sftp, tmp.c_str(), remote.c_str()) != 0) {
        std::string why = sftp_error_text(sftp);
        sftp_unlink(sftp, tmp.c_str());
        fail("cannot rename " + tmp + " to " + remote + ": " + why);
      }
    } else {
      sftp_unlink(sftp, tmp.c_str());
    }
  }
  last_skipped = false;
  return remote;
}

// A node process at the other end of an exec channel.
class remote_child final : public launch::child {
 public:
  remote_child(std::shared_ptr<owner> o, std::shared_ptr<channel_state> st)
      : owner_(std::move(o)), st_(std::move(st)) {}
  ~remote_child() override {
    auto st = st_;
    auto forget = [st] { st->detached = true; };
    try {
      owner_->core->call(forget);  // once this returns, no callback of ours runs again
    } catch (...) {
    }
  }
  void write_stdin(std::string_view data) override {
    owner_->core->post([st = st_, d = std::string(data)] {
      if (!st->close_stdin) st->stdin_pending += d;
    });
  }
  void close_stdin() override {
    owner_->core->post([st = st_] { st->close_stdin = true; });
  }
  void kill() override {
    owner_->core->post([st = st_] { st->kill_requested = true; });
  }
  bool running() const override { return st_->running; }
  std::string host() const override { return owner_->core->host.host; }
  long pid() const override { return -1; }

 private:
  std::shared_ptr<owner> owner_;
  std::shared_ptr<channel_state> st_;
};

inline void set_keepalive(int fd, const session_options& o) {
  // libssh blocks forever on a dead link: let the kernel notice it. TCP_USER_TIMEOUT covers
  // the case keepalive does not: data sent but never acknowledged.
  int on = 1, idle = std::max(1, o.keepalive_idle_s), intvl = std::max(1, o.keepalive_interval_s),
      cnt = std::max(1, o.keepalive_count);
  unsigned user_timeout_ms = static_cast<unsigned>(idle + intvl * cnt) * 1000;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

inline std::string socket_local_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
  } else if (ss.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

inline std::string sha256_fingerprint(ssh_session s) {
  ssh_key key = nullptr;
  if (ssh_get_server_publickey(s, &key) != SSH_OK) return "(no host key)";
  unsigned char* hash = nullptr;
  std::size_t hlen = 0;
  std::string out = "(unknown fingerprint)";
  if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &hlen) == SSH_OK) {
    if (char* fp = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hlen)) {
      out = std::string(ssh_key_type_to_char(ssh_key_type(key))) + " key " + fp;
      ssh_string_free_char(fp);
    }
    ssh_clean_pubkey_hash(&hash);
  }
  ssh_key_free(key);
  return out;
}

}  // namespace detail

inline host_spec host_spec::parse(std::string_view text) {
  auto bad = [&](const std::string& why) -> tlaunch::launch_error {
    return tlaunch::launch_error("bad ssh host '" + std::string(text) + "': " + why +
                                 " (expected host, user@host, host:port or user@host:port)");
  };
  host_spec h;
  std::string_view rest = text;
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    h.user = std::string(rest.substr(0, at));
    if (h.user.empty()) throw bad("empty user name before '@'");
    rest.remove_prefix(at + 1);
  } else {
    h.user = detail::local_user_name();
  }
  std::string_view port_text;
  if (!rest.empty() && rest.front() == '[') {  // [v6 address]:port
    auto close = rest.find(']');
    if (close == std::string_view::npos) throw bad("missing ']'");
    h.host = std::string(rest.substr(1, close - 1));
    rest.remove_prefix(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') throw bad("unexpected text after ']'");
      port_text = rest.substr(1);
      if (port_text.empty()) throw bad("empty port after ':'");
    }
  } else if (auto colon = rest.find(':'); colon != std::string_view::npos) {
    if (rest.find(':', colon + 1) != std::string_view::npos) {
      throw bad("an IPv6 address needs brackets, as in [::1]:22");
    }
    h.host = std::string(rest.substr(0, colon));
    port_text = rest.substr(colon + 1);
    if (port_text.empty()) throw bad("empty port after ':'");
  } else {
    h.host = std::string(rest);
  }
  if (h.host.empty()) throw bad("no host name");
  if (h.host.find_first_of(" \t\n/@") != std::string::npos) throw bad("invalid host name");
  if (!port_text.empty()) {
    int port = 0;
    for (char c : port_text) {
      if (c < '0' || c > '9' || port > 65535) throw bad("the port must be a number 1-65535");
      port = port * 10 + (c - '0');
    }
    if (port < 1 || port > 65535) throw bad("the port must be a number 1-65535");
    h.port = port;
  }
  return h;
}

inline session session::connect(const host_spec& host, const session_options& options) {
  auto fail = [&](const std::string& what) -> error { return error(host, what); };
  ssh_session s = ssh_new();
  if (s == nullptr) throw fail("cannot create a libssh session");
  std::unique_ptr<ssh_session_struct, void (*)(ssh_session)> guard(s, [](ssh_session p) {
    if (ssh_is_connected(p)) ssh_disconnect(p);
    ssh_free(p);
  });

  long timeout = options.connect_timeout_s;
  int nodelay = 1;  // synchronous SFTP writes crawl with Nagle on
  ssh_options_set(s, SSH_OPTIONS_HOST, host.host.c_str());
  // ~/.ssh/config first, so what the caller set below wins over it
  ssh_options_parse_config(s, nullptr);
  ssh_options_set(s, SSH_OPTIONS_USER, host.user.c_str());
  unsigned port = static_cast<unsigned>(host.port);
  ssh_options_set(s, SSH_OPTIONS_PORT, &port);
  ssh_options_set(s, SSH_OPTIONS_TIMEOUT, &timeout);
  ssh_options_set(s, SSH_OPTIONS_NODELAY, &nodelay);
  if (!options.known_hosts.empty()) {
    ssh_options_set(s, SSH_OPTIONS_KNOWNHOSTS, options.known_hosts.c_str());
  }

  if (ssh_connect(s) != SSH_OK) throw fail("cannot connect: " + std::string(ssh_get_error(s)));
  detail::set_keepalive(ssh_get_fd(s), options);

  const std::string known =
      options.known_hosts.empty() ? std::string("~/.ssh/known_hosts") : options.known_hosts;
  switch (ssh_session_is_known_server(s)) {
    case SSH_KNOWN_HOSTS_OK:
      break;
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER:
      throw fail("HOST KEY CHANGED: the host now presents " + detail::sha256_fingerprint(s) +
                 ", which does not match " + known +
                 ". Someone may be intercepting the connection, or the host was reinstalled; "
                 "if you trust the new key, remove the old entry (ssh-keygen -R) and retry");
    case SSH_KNOWN_HOSTS_UNKNOWN:
    case SSH_KNOWN_HOSTS_NOT_FOUND:
      if (!options.accept_new) {
        throw fail("host key unknown (" + detail::sha256_fingerprint(s) + " is not in " + known +
                   "); check the fingerprint and pass --ssh-accept-new to record it, or add it "
                   "with ssh-keyscan");
      }
      if (ssh_session_update_known_hosts(s) != SSH_OK) {
        throw fail("cannot record the host key in " + known + ": " + ssh_get_error(s));
      }
      break;
    case SSH_KNOWN_HOSTS_ERROR:
    default:
      throw fail("cannot check the host key against " + known + ": " + ssh_get_error(s));
  }

  int rc;
  std::string how;
  if (!options.identity.empty()) {
    how = "key " + options.identity;
    ssh_key key = nullptr;
    if (ssh_pki_import_privkey_file(options.identity.c_str(), nullptr, nullptr, nullptr, &key) !=
        SSH_OK) {
      throw fail("cannot read the identity file " + options.identity +
                 " (missing, unreadable, or protected by a passphrase: use ssh-agent then)");
    }
    rc = ssh_userauth_publickey(s, nullptr, key);
    ssh_key_free(key);
  } else {
    how = "ssh-agent and ~/.ssh/id_* keys";
    rc = ssh_userauth_publickey_auto(s, nullptr, nullptr);
  }
  if (rc == SSH_AUTH_ERROR) throw fail("authentication failed: " + std::string(ssh_get_error(s)));
  if (rc == SSH_AUTH_PARTIAL) {
    throw fail("the host wants more than a public key to log in " + host.user +
               " (multi-factor authentication is not supported)");
  }
  if (rc != SSH_AUTH_SUCCESS) {
    throw fail("authentication refused for user " + host.user + " with " + how +
               " (is the public key in ~" + host.user + "/.ssh/authorized_keys on the host?)");
  }

  auto core = std::make_shared<detail::io_core>(host, options, s);
  core->local_addr = detail::socket_local_address(ssh_get_fd(s));
  guard.release();  // the I/O thread owns it now
  core->start(core);
  return session(std::make_shared<detail::owner>(std::move(core)));
}

inline detail::io_core& session::core() const {
  if (!owner_) throw std::logic_error("tlaunch::ssh::session used after being moved from");
  return *owner_->core;
}

inline const host_spec& session::host() const { return core().host; }
inline std::string session::local_address() const { return core().local_addr; }
inline bool session::last_upload_skipped() const { return core().last_skipped; }

inline std::string session::upload_cached(
    const std::string& local_path, const std::string& build_id,
    std::function<void(std::uint64_t, std::uint64_t)> progress) {
  auto& c = core();
  return c.call([&c, &local_path, &build_id, &progress] {
    return c.upload(local_path, build_id, progress);
  });
}

inline launch::child_ptr session::exec(const std::string& command, launch::child_callbacks cb) {
  auto& c = core();
  auto st = c.call([&c, &command, &cb] { return c.open_exec(command, std::move(cb)); });
  return std::make_unique<detail::remote_child>(owner_, std::move(st));
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
