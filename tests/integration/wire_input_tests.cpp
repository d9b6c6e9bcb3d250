// Bad bytes sent to a live node process: garbage, a truncated frame, an
// oversized length, hellos that are malformed, from another binary or protocol
// version, or without the launch secret, and a call before the handshake. Each
// connection is closed (with a refusal where the protocol has one) and logged;
// the node keeps serving, which a good call from another node shows afterwards.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <tlaunch/detail/build_id.hpp>
#include <tlaunch/wire/codec.hpp>
#include <tlaunch/wire/frame.hpp>
#include <tlaunch/wire/hello.hpp>

#include "../common/process.hpp"
#include "../common/wire_peer.hpp"

namespace it = tlaunch::integration;
namespace wire = tlaunch::wire;
using it::process;
using tlaunch::test_support::wire_peer;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& s, std::string_view needle) {
  return s.find(needle) != std::string::npos;
}

// A raw peer whose reads give up after 3 s, so that a node that does not answer fails the test.
wire_peer connect_raw(int port) { return wire_peer(port, 0, 3s); }

// Whether the node closes the connection (EOF or reset) within 3 s.
bool closed_by_peer(wire_peer& c) { return c.closed_within(3s); }

// Expects a refuse frame whose reason contains `why`, then the close.
void expect_refusal(wire_peer& c, std::string_view why) {
  auto f = c.read_frame();
  REQUIRE(f.has_value());
  CHECK(f->first.type == wire::kind::refuse);
  std::string reason;
  wire::deserialize_from(std::span<const char>(f->second.data(), f->second.size()), reason);
  CAPTURE(reason);
  CHECK(has(reason, why));
  CHECK(closed_by_peer(c));
}

wire::hello our_hello(const std::string& build_id) {
  return wire_peer::make_hello("intruder", build_id);
}

// Sends a good hello and returns the node's reply hello.
wire::hello handshake_start(wire_peer& c, const std::string& build_id) {
  return c.exchange_hello(our_hello(build_id));
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
      auto c = connect_raw(port);
      c.send(std::string("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n"));
      CHECK(closed_by_peer(c));
    }
    {
      INFO("a hello frame whose payload has no magic");
      auto c = connect_raw(port);
      std::string junk(60, 'x');
      c.send_frame({.type = wire::kind::hello}, junk.data(), junk.size());
      expect_refusal(c, "bad magic");
    }
    {
      INFO("a truncated frame: the header promises more than ever comes");
      auto c = connect_raw(port);
      wire::frame_buffer f;
      f.append("0123456789", 10);
      f.seal({.type = wire::kind::hello});
      auto b = f.bytes();
      std::vector<char> bytes(b.begin(), b.end());
      wire::detail::put32(reinterpret_cast<unsigned char*>(bytes.data()), 1000);
      c.send(std::span<const char>(bytes.data(), bytes.size()));
      c.shutdown_write();
      CHECK(closed_by_peer(c));
    }
    {
      INFO("a truncated hello: a whole frame, but the hello's fields are cut short");
      auto c = connect_raw(port);
      wire::frame_buffer whole;
      wire::encode_hello(whole, our_hello(build_id));
      c.send_frame({.type = wire::kind::hello}, whole.bytes().data() + wire::header_size,
                   whole.payload_size() - 5);
      expect_refusal(c, "truncated hello");
    }
    {
      INFO("an oversized length (--max-frame=65536)");
      auto c = connect_raw(port);
      unsigned char h[wire::header_size];
      wire::encode_header({.size = 65537, .type = wire::kind::call}, h);
      c.send(std::span<const char>(reinterpret_cast<const char*>(h), sizeof h));
      CHECK(closed_by_peer(c));
    }
    {
      INFO("a hello from another protocol version");
      auto c = connect_raw(port);
      auto h = our_hello(build_id);
      h.version = 9;
      wire::frame_buffer f;
      wire::encode_hello(f, h);
      c.send(f);
      expect_refusal(c, "protocol version 9");
    }
    {
      INFO("a hello from a different binary");
      auto c = connect_raw(port);
      wire::frame_buffer f;
      wire::encode_hello(f, our_hello("0123456789abcdef"));
      c.send(f);
      expect_refusal(c, "different binary");
    }
    {
      INFO("a good hello, then a wrong proof of the launch secret");
      auto c = connect_raw(port);
      auto reply = handshake_start(c, build_id);
      CHECK(reply.is_reply);
      CHECK(reply.name == "target/0");
      CHECK(reply.build_id == build_id);
      CHECK(has(reply.listen_address, ":" + std::to_string(port)));
      std::array<std::uint8_t, 32> wrong{};
      c.send_frame({.type = wire::kind::auth}, wrong.data(), wrong.size());
      expect_refusal(c, "wrong launch secret");
    }
    {
      INFO("a call before the handshake completed: refused before any method runs");
      auto c = connect_raw(port);
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
