// wire_peer: a raw TCP peer for tests that speak frames to a node (or to a launcher's port)
// themselves. It connects to 127.0.0.1:port, sends bytes exactly as given, reads whole
// frames, tells whether the other side closed the connection, and does the hello exchange
// by hand: only the hello (to look at the reply), or all of it with the launch secret.
// frame_of builds one frame's bytes from a header and values.
#pragma once

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <tlaunch/detail/build_id.hpp>
#include <tlaunch/detail/secret.hpp>
#include <tlaunch/wire/codec.hpp>
#include <tlaunch/wire/frame.hpp>
#include <tlaunch/wire/hello.hpp>

namespace tlaunch::test_support {

class wire_peer {
 public:
  using ms = std::chrono::milliseconds;
  using frame = std::pair<wire::frame_header, std::string>;

  // rcvbuf: the socket's SO_RCVBUF (0: the system's); read_timeout: how long read_frame
  // waits for each piece of a frame.
  explicit wire_peer(int port, int rcvbuf = 0, ms read_timeout = ms(5000))
      : read_timeout_(read_timeout) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    if (rcvbuf) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~wire_peer() {
    if (fd_ >= 0) ::close(fd_);
  }
  wire_peer(wire_peer&& o) noexcept
      : fd_(std::exchange(o.fd_, -1)), read_timeout_(o.read_timeout_) {}
  wire_peer(const wire_peer&) = delete;
  wire_peer& operator=(const wire_peer&) = delete;
  wire_peer& operator=(wire_peer&&) = delete;

  int fd() const { return fd_; }

  // Sends what the other side takes; stops when it closes or takes nothing for `stall`.
  // Returns how many bytes went out.
  std::size_t send(std::span<const char> b, ms stall = ms(5000)) {
    std::size_t sent = 0;
    auto until = std::chrono::steady_clock::now() + stall;
    while (!b.empty() && std::chrono::steady_clock::now() < until) {
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      ssize_t n = ::send(fd_, b.data(), b.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (n <= 0) break;  // closed by the other side
      b = b.subspan(static_cast<std::size_t>(n));
      sent += static_cast<std::size_t>(n);
      until = std::chrono::steady_clock::now() + stall;
    }
    return sent;
  }
  std::size_t send(const std::vector<char>& b) { return send(std::span<const char>(b.data(), b.size())); }
  std::size_t send(const std::string& s) { return send(std::span<const char>(s.data(), s.size())); }
  std::size_t send(wire::frame_buffer& f) { return send(f.bytes()); }
  // Sends one frame: header h (its size set to the payload's) and the payload's n bytes as
  // they are.
  std::size_t send_frame(wire::frame_header h, const void* payload, std::size_t n) {
    wire::frame_buffer f;
    f.append(payload, n);
    f.seal(h);
    return send(f);
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

  // The next whole frame, or nothing on EOF, reset, a bad header or read_timeout of silence.
  std::optional<frame> read_frame() {
    char h[wire::header_size];
    if (!read_exact(h, sizeof h)) return std::nullopt;
    auto check = wire::decode_header(h, 1u << 20);
    if (!check.problem.empty()) return std::nullopt;
    std::string payload(check.header.size, '\0');
    if (!read_exact(payload.data(), payload.size())) return std::nullopt;
    return frame{check.header, payload};
  }

  // Whether the other side closed the connection (EOF or reset) within `limit`; what it
  // sends meanwhile is read and dropped.
  bool closed_within(ms limit) {
    pollfd p{fd_, POLLIN, 0};
    auto until = std::chrono::steady_clock::now() + limit;
    char buf[4096];
    while (std::chrono::steady_clock::now() < until) {
      if (::poll(&p, 1, 50) <= 0) continue;
      ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
    }
    return false;
  }

  // A connecting peer's hello: a fresh nonce, `name` and `build_id`.
  static wire::hello make_hello(std::string name, std::string build_id) {
    wire::hello h;
    auto nonce = tlaunch::detail::random_secret();
    std::copy_n(nonce.begin(), h.nonce.size(), h.nonce.begin());
    h.build_id = std::move(build_id);
    h.name = std::move(name);
    return h;
  }

  // Sends `ours` and returns the reply hello; the test fails when none comes.
  wire::hello exchange_hello(const wire::hello& ours) {
    wire::frame_buffer f;
    wire::encode_hello(f, ours);
    send(f);
    auto r = read_frame();
    REQUIRE(r.has_value());
    REQUIRE(r->first.type == wire::kind::hello);
    std::string problem;
    auto h = wire::decode_hello(std::span<const char>(r->second.data(), r->second.size()), problem);
    CAPTURE(problem);
    REQUIRE(h.has_value());
    return *h;
  }

  // The whole hello exchange of a peer named `name` from this binary that holds `secret`:
  // the hello, then the proof of the secret. After it the connection carries calls.
  void authenticate(const std::vector<std::uint8_t>& secret, std::string name = "raw") {
    auto ours = make_hello(std::move(name), tlaunch::detail::self_build_id());
    auto reply = exchange_hello(ours);
    auto proof = wire::secret_proof(secret, "connector", reply.nonce, ours.nonce);
    send_frame({.type = wire::kind::auth}, proof.data(), proof.size());
  }

 private:
  bool read_exact(char* p, std::size_t n) {
    while (n > 0) {
      pollfd q{fd_, POLLIN, 0};
      if (::poll(&q, 1, static_cast<int>(read_timeout_.count())) <= 0) return false;
      ssize_t r = ::recv(fd_, p, n, 0);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<std::size_t>(r);
    }
    return true;
  }

  int fd_ = -1;
  ms read_timeout_;
};

// One frame's bytes: header h and the serialized values.
template <class... V>
std::vector<char> frame_of(wire::frame_header h, const V&... v) {
  wire::frame_buffer f;
  if constexpr (sizeof...(V) > 0) wire::serialize_into(f, v...);
  f.seal(h);
  auto b = f.bytes();
  return {b.begin(), b.end()};
}

}  // namespace tlaunch::test_support
