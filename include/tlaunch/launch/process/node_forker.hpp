// Node processes forked from a copy of the binary made at start-up, instead of executed.
//
// Executing the binary for every node costs each one the kernel's exec, the dynamic
// loader's relocations of the whole library chain (libssh, libcrypto, krb5, ...) and the
// libraries' own initialisation: tens of milliseconds of CPU per node. tlaunch::main, as
// launcher of local_mp, instead forks a "node forker" first thing,
// while the process is still one thread: a small process that waits on a socket. For each
// node it receives the node's argv and its stdin, stdout, stderr and status-pipe ends
// (SCM_RIGHTS), and clones itself with CLONE_PARENT: the node is the launcher's own
// child, which waits for it, signals its process group and sees its exit
// status exactly as for an executed node. The node then runs tlaunch::main with that argv,
// as the executed binary would have, and writes its argv over its own command line so
// that `ps` shows `<binary> --tlaunch-coordinator=... --tlaunch-role=name/i ...` as before.
//
// What differs from exec: code of the program's main() before it calls tlaunch::main
// does not run again in the node (the node starts from the state the launcher had then);
// a command line longer than the launcher's argv and environment together is cut short
// in `ps`. `--exec-nodes` keeps exec, and so do ThreadSanitizer builds (it does not
// follow a raw clone).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio_ext.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../../detail/crypto.hpp"
#include "../../detail/sanitizers.hpp"
#include "child.hpp"
#include "../decl.hpp"
#include "local_child.hpp"

extern "C" char** environ;

namespace tlaunch::launch {

namespace detail {

// The memory the kernel shows as the command line: argv's strings, and the environment's
// right after them (readable again once the environment is copied elsewhere).
struct title_area {
  char* begin = nullptr;
  std::size_t size = 0;
};

inline title_area find_title_area() {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream fields(stat.substr(close + 2));
  std::vector<unsigned long long> f;  // f[0] is field 3 (the state letter reads as 0)
  std::string w;
  while (fields >> w) f.push_back(std::strtoull(w.c_str(), nullptr, 10));
  if (f.size() < 49) return {};
  unsigned long long arg_start = f[45], arg_end = f[46], env_start = f[47], env_end = f[48];
  if (arg_start == 0 || arg_end <= arg_start) return {};
  unsigned long long end = env_start == arg_end && env_end > env_start ? env_end : arg_end;
  return {reinterpret_cast<char*>(arg_start), static_cast<std::size_t>(end - arg_start)};
}

// Moves the environment's strings (and the names glibc keeps into argv[0]) out of the
// title area, then writes `title` there.
inline void set_title(const title_area& a, const std::string& title) {
  if (a.begin == nullptr || a.size < 2) return;
  char* lo = a.begin;
  char* hi = a.begin + a.size;
  for (char** e = environ; e && *e; ++e)
    if (*e >= lo && *e < hi) *e = ::strdup(*e);
  if (program_invocation_name >= lo && program_invocation_name < hi) {
    program_invocation_name = ::strdup(program_invocation_name);
    const char* slash = std::strrchr(program_invocation_name, '/');
    program_invocation_short_name = const_cast<char*>(slash ? slash + 1 : program_invocation_name);
  }
  std::size_t n = std::min(title.size(), a.size - 1);
  std::memcpy(lo, title.data(), n);
  std::memset(lo + n, 0, a.size - n);
}

constexpr std::size_t max_message = 60000;  // argv bytes; a longer one is executed

}  // namespace detail

class node_forker {
 public:
  // Runs a node: tlaunch::main with the node's argv; returns its exit code.
  using node_main = std::function<int(const std::vector<std::string>&)>;

  // Whether node processes can be forked in this build.
  static constexpr bool supported() { return !tlaunch::detail::thread_sanitizer; }


  // The forker of this process, or null (not started, or it is gone: nodes are executed).
  static node_forker* current() {
    node_forker* f = slot();
    return f != nullptr && f->owner_ == ::getpid() ? f : nullptr;
  }

  // Forks the forker from the calling thread, which should be the process's only one and
  // must outlive the nodes (their parent-death signal follows it: the main thread). The
  // forker serves while the returned object lives (this process's current() meanwhile);
  // null when it cannot start: nodes are then executed.
  static std::unique_ptr<node_forker> start(node_main run) {
    if (!supported() || current() != nullptr) return nullptr;
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return nullptr;
    const pid_t launcher = ::getpid();
    std::fflush(stdout);
    std::fflush(stderr);
    pid_t pid = ::fork();
    if (pid < 0) {
      ::close(sv[0]);
      ::close(sv[1]);
      return nullptr;
    }
    if (pid == 0) {
      ::close(sv[0]);
      serve(sv[1], launcher, run);
    }
    ::close(sv[1]);
    std::unique_ptr<node_forker> f(new node_forker(sv[0], pid));
    slot() = f.get();
    return f;
  }

  // The forker sees EOF and exits; it is reaped here.
  ~node_forker() {
    if (slot() == this) slot() = nullptr;
    {
      std::lock_guard lk(mu_);
      if (sock_ >= 0) ::close(std::exchange(sock_, -1));
    }
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  node_forker(const node_forker&) = delete;
  node_forker& operator=(const node_forker&) = delete;

  // Starts a node: `argv` (argv[0] the binary, shown in `ps`) run by the forker's node_main,
  // with fds = {stdin, stdout, stderr, status pipe}. The pid, or -errno.
  pid_t spawn(const std::vector<std::string>& argv, const int (&fds)[4]) {
    std::string payload;
    for (auto& a : argv) payload.append(a).push_back('\0');
    if (payload.size() > detail::max_message) return -E2BIG;
    std::lock_guard lk(mu_);
    if (sock_ < 0) return -EPIPE;
    iovec iov{payload.data(), payload.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * 4);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * 4);
    ssize_t n;
    do n = ::sendmsg(sock_, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    int reply = 0;
    if (n == static_cast<ssize_t>(payload.size())) {
      do n = ::recv(sock_, &reply, sizeof reply, 0);
      while (n < 0 && errno == EINTR);
      if (n == sizeof reply) return reply;
    }
    // The forker is gone (or garbled): from now on nodes are executed.
    ::close(std::exchange(sock_, -1));
    return -EPIPE;
  }

  bool alive() {
    std::lock_guard lk(mu_);
    return sock_ >= 0;
  }

 private:
  node_forker(int sock, pid_t pid) : sock_(sock), pid_(pid), owner_(::getpid()) {}

  static node_forker*& slot() {
    static node_forker* f = nullptr;
    return f;
  }

  // The forker's loop: one node per message, until the launcher's end closes.
  [[noreturn]] static void serve(int sock, pid_t launcher, const node_main& run) {
    ::setpgid(0, 0);  // the terminal's Ctrl-C is for the launcher
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher) ::_exit(0);
    // Nothing of the launcher's is the forker's to keep: what an exec would close, and the
    // terminal (nodes get pipes as their 0, 1 and 2).
    detail::close_cloexec_fds(sock);
    int null = ::open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
    if (null > 2) ::close(null);
    auto area = detail::find_title_area();
    std::string exe = program_invocation_name;
    detail::set_title(area, exe + " (tlaunch node forker)");
    // Once here rather than in every node: libcrypto sets up its algorithms on first use
    // (a node's hello needs HMAC and random nonces). Its random generator reseeds itself
    // in a process whose pid differs from the one that seeded it, so nodes share no state.
    try {
      std::uint8_t bytes[16];
      tlaunch::detail::random_bytes(bytes);
      tlaunch::detail::hmac_sha256(bytes, bytes);
    } catch (const std::exception&) {
    }
    std::vector<char> buf(detail::max_message + 1);
    for (;;) {
      iovec iov{buf.data(), buf.size()};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ::_exit(0);  // the launcher is done (or gone)
      std::vector<int> fds;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
          std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
          const auto* data = reinterpret_cast<const int*>(CMSG_DATA(c));
          fds.insert(fds.end(), data, data + k);
        }
      std::vector<std::string> argv;
      for (std::size_t at = 0; at < static_cast<std::size_t>(n);) {
        const char* s = buf.data() + at;
        std::size_t len = ::strnlen(s, static_cast<std::size_t>(n) - at);
        argv.emplace_back(s, len);
        at += len + 1;
      }
      int reply = -EINVAL;
      if (fds.size() == 4 && !argv.empty() && (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0) {
        // A fork whose parent is the launcher: it waits for the node and gets its status.
        long pid = ::syscall(SYS_clone, CLONE_PARENT | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
        if (pid == 0) run_node(launcher, fds, argv, area, run);
        reply = pid < 0 ? -errno : static_cast<int>(pid);
      }
      for (int fd : fds) ::close(fd);
      ssize_t w;
      do w = ::send(sock, &reply, sizeof reply, MSG_NOSIGNAL);
      while (w < 0 && errno == EINTR);
      if (w != sizeof reply) ::_exit(0);
    }
  }

  // In the node: what local_child's executed path does before exec (signals, process
  // group, parent-death signal, stdio), then tlaunch::main.
  [[noreturn]] static void run_node(pid_t launcher, const std::vector<int>& fds,
                                    const std::vector<std::string>& argv,
                                    const detail::title_area& area, const node_main& run) {
    detail::become_node_process(launcher, fds[0], fds[1], fds[2]);
    // The status pipe and the forker's socket among them: the launcher sees the setup done.
    detail::close_cloexec_fds();
    std::string title;
    for (auto& a : argv) {
      if (!title.empty()) title.push_back(' ');
      title += a;
    }
    detail::set_title(area, title);
    detail::run_node_and_exit([&] { return run(argv); });
  }

  std::mutex mu_;
  int sock_ = -1;
  pid_t pid_ = -1;
  pid_t owner_ = -1;
};

// Starts `argv` as a node process: forked by this process's node forker when it has one,
// else executed (start_local_child).
TLAUNCH_DECL child_ptr start_node_child(const std::vector<std::string>& argv, child_callbacks cb,
                                        const local_child_options& opt = {});

// Compiled once in the library's process part (tlaunch/impl/src/launch_process.hpp).
#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_PROCESS)
TLAUNCH_DECL child_ptr start_node_child(const std::vector<std::string>& argv, child_callbacks cb,
                                        const local_child_options& opt) {
  if (node_forker* f = node_forker::current(); f != nullptr && f->alive() && !argv.empty()) {
    pid_t result = 0;
    try {
      return std::make_unique<local_child>(
          argv[0],
          [f, &argv, &result](const int (&fds)[4]) { return result = f->spawn(argv, fds); },
          cb, opt);
    } catch (const std::exception&) {
      // A forker that is gone, or an argv too long for it: execute. Else fork failed.
      if (f->alive() && result != -E2BIG) throw;
    }
  }
  return start_local_child(argv, std::move(cb), opt);
}

#endif

}  // namespace tlaunch::launch
