// Bad bytes sent to a live node process: garbage, a truncated frame, an
// oversized length, hellos that are malformed, from another binary or protocol
// version, or without the launch secret, and a call before the handshake. Each
// connection is closed (with a refusal where the protocol has one) and logged;
// the node keeps serving, which a good call from another node shows afterwards.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <tlaunch/detail/build_id.hpp>
#include <tlaunch/detail/secret.hpp>
#include <tlaunch/wire/codec.hpp>
#include <tlaunch/wire/frame.hpp>
#include <tlaunch/wire/hello.hpp>

#include "../common/process.hpp"

namespace it = tlaunch::integration;
namespace wire = tlaunch::wire;
using it::process;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& s, std::string_view needle) {
  return s.find(needle) != std::string::npos;
}

// A raw TCP client with a receive timeout, so that a node that does not answer fails the test.
class raw_client {
 public:
  explicit raw_client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    timeval tv{3, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~raw_client() { ::close(fd_); }

  void send(std::span<const char> b) {
    while (!b.empty()) {
      ssize_t n = ::send(fd_, b.data(), b.size(), MSG_NOSIGNAL);
      if (n <= 0) return;  // the node may close before everything is written
      b = b.subspan(static_cast<std::size_t>(n));
    }
  }
  void send(const std::string& s) { send(std::span<const char>(s.data(), s.size())); }
  void send(wire::frame_buffer& f) { send(f.bytes()); }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

  // The next whole frame, or nothing on EOF, reset or timeout.
  std::optional<std::pair<wire::frame_header, std::string>> read_frame() {
    char h[wire::header_size];
    if (!read_exact(h, sizeof h)) return std::nullopt;
    auto check = wire::decode_header(h, 1u << 20);
    if (!check.problem.empty()) return std::nullopt;
    std::string payload(check.header.size, '\0');
    if (!read_exact(payload.data(), payload.size())) return std::nullopt;
    return std::pair{check.header, payload};
  }

  // True when the peer closes the connection (EOF or reset) within the timeout.
  bool closed_by_peer() {
    char buf[4096];
    for (;;) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET || errno == EPIPE;
    }
  }

 private:
  bool read_exact(char* p, std::size_t n) {
    while (n > 0) {
      ssize_t r = ::recv(fd_, p, n, 0);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<std::size_t>(r);
    }
    return true;
  }
  int fd_ = -1;
};

// Expects a refuse frame whose reason contains `why`, then the close.
void expect_refusal(raw_client& c, std::string_view why) {
  auto f = c.read_frame();
  REQUIRE(f.has_value());
  CHECK(f->first.type == wire::kind::refuse);
  std::string reason;
  wire::deserialize_from(std::span<const char>(f->second.data(), f->second.size()), reason);
  CAPTURE(reason);
  CHECK(has(reason, why));
  CHECK(c.closed_by_peer());
}

wire::hello our_hello(const std::string& build_id) {
  wire::hello h;
  auto n = tlaunch::detail::random_secret();
  std::copy_n(n.begin(), h.nonce.size(), h.nonce.begin());
  h.build_id = build_id;
  h.name = "intruder";
  return h;
}

// Sends a good hello and returns the node's reply hello.
wire::hello handshake_start(raw_client& c, const std::string& build_id) {
  wire::frame_buffer f;
  wire::encode_hello(f, our_hello(build_id));
  c.send(f);
  auto r = c.read_frame();
  REQUIRE(r.has_value());
  REQUIRE(r->first.type == wire::kind::hello);
  std::string problem;
  auto h = wire::decode_hello(std::span<const char>(r->second.data(), r->second.size()), problem);
  CAPTURE(problem);
  REQUIRE(h.has_value());
  return *h;
}

}  // namespace

TEST_SUITE("wire_input") {
  TEST_CASE("bad input to a live node closes that connection and the node keeps serving") {
    auto marker = it::unique_marker("wire");
    auto go = std::filesystem::temp_directory_path() / (marker + ".go");
    process p({TLAUNCH_FAULTY_EXE, "--launch=local_mp", "--max-frame=65536", "--", "probe",
               go.string(), marker});
    REQUIRE(p.wait_for_output("ready pid=", 20s, 2));
    auto target = it::node_pids(marker, "target/0");
    REQUIRE(target.size() == 1);
    // A socket the launcher holds too is not the node's own (should one ever be inherited).
    int port = it::listen_port(target[0], p.pid());
    CAPTURE(p.all());
    REQUIRE(port > 0);
    const std::string build_id = tlaunch::detail::file_build_id(TLAUNCH_FAULTY_EXE);

    {
      INFO("garbage: an HTTP request");
      raw_client c(port);
      c.send(std::string("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n"));
      CHECK(c.closed_by_peer());
    }
    {
      INFO("a hello frame whose payload has no magic");
      raw_client c(port);
      wire::frame_buffer f;
      std::string junk(60, 'x');
      f.append(junk.data(), junk.size());
      f.seal({.type = wire::kind::hello});
      c.send(f);
      expect_refusal(c, "bad magic");
    }
    {
      INFO("a truncated frame: the header promises more than ever comes");
      raw_client c(port);
      wire::frame_buffer f;
      f.append("0123456789", 10);
      f.seal({.type = wire::kind::hello});
      auto b = f.bytes();
      std::vector<char> bytes(b.begin(), b.end());
      wire::detail::put32(reinterpret_cast<unsigned char*>(bytes.data()), 1000);
      c.send(std::span<const char>(bytes.data(), bytes.size()));
      c.shutdown_write();
      CHECK(c.closed_by_peer());
    }
    {
      INFO("a truncated hello: a whole frame, but the hello's fields are cut short");
      raw_client c(port);
      wire::frame_buffer whole;
      wire::encode_hello(whole, our_hello(build_id));
      wire::frame_buffer f;
      auto b = whole.bytes();
      f.append(b.data() + wire::header_size, whole.payload_size() - 5);
      f.seal({.type = wire::kind::hello});
      c.send(f);
      expect_refusal(c, "truncated hello");
    }
    {
      INFO("an oversized length (--max-frame=65536)");
      raw_client c(port);
      unsigned char h[wire::header_size];
      wire::encode_header({.size = 65537, .type = wire::kind::call}, h);
      c.send(std::span<const char>(reinterpret_cast<const char*>(h), sizeof h));
      CHECK(c.closed_by_peer());
    }
    {
      INFO("a hello from another protocol version");
      raw_client c(port);
      auto h = our_hello(build_id);
      h.version = 9;
      wire::frame_buffer f;
      wire::encode_hello(f, h);
      c.send(f);
      expect_refusal(c, "protocol version 9");
    }
    {
      INFO("a hello from a different binary");
      raw_client c(port);
      wire::frame_buffer f;
      wire::encode_hello(f, our_hello("0123456789abcdef"));
      c.send(f);
      expect_refusal(c, "different binary");
    }
    {
      INFO("a good hello, then a wrong proof of the launch secret");
      raw_client c(port);
      auto reply = handshake_start(c, build_id);
      CHECK(reply.is_reply);
      CHECK(reply.name == "target/0");
      CHECK(reply.build_id == build_id);
      CHECK(has(reply.listen_address, ":" + std::to_string(port)));
      wire::frame_buffer f;
      std::array<std::uint8_t, 32> wrong{};
      f.append(wrong.data(), wrong.size());
      f.seal({.type = wire::kind::auth});
      c.send(f);
      expect_refusal(c, "wrong launch secret");
    }
    {
      INFO("a call before the handshake completed: refused before any method runs");
      raw_client c(port);
      handshake_start(c, build_id);
      wire::frame_buffer f;
      wire::serialize_into(f, std::int64_t{1});
      f.seal({.type = wire::kind::call, .target = 0, .call_id = 1, .method = 1});
      c.send(f);
      expect_refusal(c, "frame before the hello exchange completed");
    }

    // The node is still there and serves a good call from another node.
    CHECK(it::alive(target[0]));
    { std::ofstream(go.string()) << "go\n"; }
    int code = p.wait_or_kill(20s);
    CAPTURE(p.all());
    std::filesystem::remove(go);
    CHECK(code == 0);
    CHECK(has(p.out(), "[worker/0] good call after bad input: 42\n"));
    // Each closed connection left a reason in the launcher's output, under the node's name.
    const std::string err = p.err();
    CHECK(has(err, "[target/0] "));
    CHECK(has(err, "malformed frame: unknown frame kind"));
    CHECK(has(err, "not a tlaunch peer (bad magic)"));
    CHECK(has(err, "truncated hello"));
    CHECK(has(err, "frame of 65537 bytes exceeds the maximum of 65536"));
    CHECK(has(err, "protocol version 9, this binary speaks 1"));
    CHECK(has(err, "different binary: peer build-id 0123456789abcdef"));
    CHECK(has(err, "wrong launch secret"));
    CHECK(has(err, "frame before the hello exchange completed"));
    CHECK(it::node_pids(marker).empty());
  }
}
