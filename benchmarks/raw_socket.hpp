// The path's floor: the baseline's echo (same message, same bytes) with no event
// loop at all, plain POSIX sockets and one thread per side. A side waiting for bytes
// either blocks in recv(), or, with a spin budget, retries a non-blocking recv() for
// that long first and then blocks. The second is what --busy-poll does for the io
// threads, minus the reactor: Asio learns of new bytes from epoll_wait and then reads
// them, two syscalls where this makes one.
#pragma once

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "baseline.hpp"
#include "stats.hpp"

namespace tlaunch::bench {

namespace raw_detail {

inline std::system_error sys_error(const std::string& what) {
  return std::system_error(errno, std::generic_category(), what);
}

inline void set_no_delay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// One address for a numeric host and port.
struct address {
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family = AF_INET;
};

inline address resolve(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || !res)
    throw std::runtime_error("raw socket echo: cannot resolve '" + host + "': " + ::gai_strerror(rc));
  address a;
  std::memcpy(&a.storage, res->ai_addr, res->ai_addrlen);
  a.length = static_cast<socklen_t>(res->ai_addrlen);
  a.family = res->ai_family;
  ::freeaddrinfo(res);
  return a;
}

// recv() that first spins for spin_us on non-blocking reads (0: blocks at once).
// Returns what recv() returned; errno is set on -1.
inline ssize_t recv_spin(int fd, char* buf, std::size_t n, std::int64_t spin_us) {
  ssize_t r;
  if (spin_us > 0) {
    auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
    do {
      r = ::recv(fd, buf, n, MSG_DONTWAIT);
      if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return r;
    } while (std::chrono::steady_clock::now() < until);
  }
  do r = ::recv(fd, buf, n, 0);
  while (r < 0 && errno == EINTR);
  return r;
}

inline void send_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw sys_error("raw socket echo: send");
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

}  // namespace raw_detail

// Sends back every byte it receives, a thread per connection. Sequential calls get
// each message back in one send, as from the baseline's echo server.
class raw_echo_server {
 public:
  // spin_us: how long a connection's thread spins on non-blocking reads before it
  // blocks (0: it blocks at once).
  explicit raw_echo_server(std::int64_t spin_us = 0) : spin_us_(spin_us) {}
  raw_echo_server(const raw_echo_server&) = delete;
  raw_echo_server& operator=(const raw_echo_server&) = delete;
  ~raw_echo_server() { stop(); }

  // Binds host:port (0: any free port), starts accepting, returns the bound port.
  std::uint16_t start(const std::string& host, std::uint16_t port = 0) {
    auto a = raw_detail::resolve(host, port);
    listen_fd_ = ::socket(a.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw raw_detail::sys_error("raw socket echo: socket");
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a.storage), a.length) != 0 ||
        ::listen(listen_fd_, 16) != 0) {
      auto e = raw_detail::sys_error("raw socket echo: cannot listen on " + host);
      ::close(listen_fd_);
      listen_fd_ = -1;
      throw e;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
    return port_;
  }

  std::uint16_t port() const { return port_; }
  std::size_t connections() const { return accepted_.load(); }

  // Stops accepting and ends every connection; joins the threads.
  void stop() {
    if (listen_fd_ < 0) return;
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
    if (acceptor_.joinable()) acceptor_.join();
    {
      std::lock_guard lock(mu_);
      for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);  // wakes recv()
    }
    for (auto& t : sessions_) t.join();
    sessions_.clear();
    for (int fd : conn_fds_) ::close(fd);
    conn_fds_.clear();
    ::close(listen_fd_);
    listen_fd_ = -1;
  }

 private:
  void accept_loop() {
    while (!stopping_) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // shut down
      }
      raw_detail::set_no_delay(fd);
      std::lock_guard lock(mu_);
      if (stopping_) {
        ::close(fd);
        return;
      }
      conn_fds_.push_back(fd);
      ++accepted_;
      sessions_.emplace_back([this, fd] { session(fd); });
    }
  }

  void session(int fd) {
    std::vector<char> buf(64 * 1024);
    for (;;) {
      ssize_t n = raw_detail::recv_spin(fd, buf.data(), buf.size(), spin_us_);
      if (n <= 0) return;  // closed, or shut down by stop()
      try {
        raw_detail::send_all(fd, buf.data(), static_cast<std::size_t>(n));
      } catch (const std::system_error&) {
        return;  // the peer went away
      }
    }
  }

  std::int64_t spin_us_;
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<std::size_t> accepted_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> conn_fds_;
  std::vector<std::thread> sessions_;
};

// One connection to a raw_echo_server (or any echo of these messages), blocking calls.
class raw_echo_client {
 public:
  raw_echo_client(const std::string& host, std::uint16_t port) : where_(host + ":" + std::to_string(port)) {
    auto a = raw_detail::resolve(host, port);
    fd_ = ::socket(a.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw raw_detail::sys_error("raw socket echo: socket");
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a.storage), a.length) != 0) {
      auto e = raw_detail::sys_error("raw socket echo: cannot connect to " + where_);
      ::close(fd_);
      throw e;
    }
    raw_detail::set_no_delay(fd_);
  }
  raw_echo_client(const raw_echo_client&) = delete;
  raw_echo_client& operator=(const raw_echo_client&) = delete;
  ~raw_echo_client() {
    if (fd_ >= 0) ::close(fd_);
  }

  // One message at a time, the baseline's (32-byte header, then payload_bytes): warmup
  // untimed, then count timed ones added to rec; waits spin_us spinning before it
  // blocks. Returns the timed calls' wall time in seconds. Blocking: run it off the
  // io threads.
  double sequential(std::size_t payload_bytes, std::size_t warmup, std::size_t count,
                    latency_recorder& rec, std::int64_t spin_us = 0) {
    const std::size_t total = echo_header_bytes + payload_bytes;
    std::vector<char> out(total, 'x'), in(total);
    rec.reserve_more(count);
    bench_clock::time_point start{};
    for (std::size_t i = 0; i < warmup + count; ++i) {
      if (i == warmup) start = bench_clock::now();
      const std::uint64_t id = next_id_++;
      auto header = echo_header(static_cast<std::uint32_t>(payload_bytes), id);
      std::memcpy(out.data(), header.data(), header.size());
      auto t0 = bench_clock::now();
      raw_detail::send_all(fd_, out.data(), total);
      for (std::size_t got = 0; got < total;) {
        ssize_t n = raw_detail::recv_spin(fd_, in.data() + got, total - got, spin_us);
        if (n < 0) throw raw_detail::sys_error("raw socket echo: recv from " + where_);
        if (n == 0) throw std::runtime_error("raw socket echo: " + where_ + " closed the connection");
        got += static_cast<std::size_t>(n);
      }
      if (i >= warmup) rec.add(elapsed_ns(t0));
      if (get_le64(in.data() + 16) != id || get_le32(in.data()) != payload_bytes)
        throw std::runtime_error("raw socket echo: reply does not match the request");
    }
    return double(elapsed_ns(start)) / 1e9;
  }

 private:
  std::string where_;
  int fd_ = -1;
  std::uint64_t next_id_ = 0;
};

}  // namespace tlaunch::bench
