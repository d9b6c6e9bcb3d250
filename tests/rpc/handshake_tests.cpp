#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <tlaunch/rpc/handshake.hpp>
#include <tlaunch/rpc/tls.hpp>

using tlaunch::rpc::handshake;
using tlaunch::rpc::hello_identity;
namespace wire = tlaunch::wire;

namespace {

hello_identity identity(std::string name, std::string build = "build-1",
                        std::vector<std::uint8_t> secret = {1, 2, 3, 4, 5, 6, 7, 8}) {
  return {std::move(secret), std::move(build), name + ":7000", name};
}

handshake::nonce nonce_of(std::uint8_t seed) {
  handshake::nonce n;
  for (std::size_t i = 0; i < n.size(); ++i) n[i] = static_cast<std::uint8_t>(seed + i);
  return n;
}

// A sealed frame as the peer receives it.
struct received {
  explicit received(const wire::frame_buffer& f) {
    auto b = f.bytes();
    bytes.assign(b.begin(), b.end());
  }
  wire::frame_header header() const { return wire::load_header(bytes.data()); }
  std::span<const char> payload() const {
    return {bytes.data() + wire::header_size, bytes.size() - wire::header_size};
  }
  handshake::step into(handshake& h) const { return h.on_frame(header(), payload()); }
  std::vector<char> bytes;
};

// A frame whose payload is given, with the header saying its real size.
handshake::step feed(handshake& h, wire::kind k, std::span<const char> payload) {
  wire::frame_header hd{.type = k};
  hd.size = static_cast<std::uint32_t>(payload.size());
  return h.on_frame(hd, payload);
}

}  // namespace

TEST_SUITE("handshake") {
  TEST_CASE("a good exchange makes both sides ready and tells each the other's name") {
    auto ci = identity("worker/0"), ai = identity("ps/0");
    handshake connector(handshake::side::connector, ci, nonce_of(1));
    handshake acceptor(handshake::side::acceptor, ai, nonce_of(100));

    auto a1 = received(connector.hello()).into(acceptor);
    CHECK(a1.what == handshake::outcome::wait);
    CHECK(a1.learned_peer);
    CHECK(acceptor.peer_name() == "worker/0");
    CHECK(acceptor.peer_listen() == "worker/0:7000");
    CHECK_FALSE(acceptor.ready());
    REQUIRE(a1.reply);

    auto c1 = received(*a1.reply).into(connector);
    CHECK(c1.what == handshake::outcome::ready);
    CHECK(connector.ready());
    CHECK(connector.peer_name() == "ps/0");
    REQUIRE(c1.reply);
    CHECK(received(*c1.reply).header().type == wire::kind::auth);

    auto a2 = received(*c1.reply).into(acceptor);
    CHECK(a2.what == handshake::outcome::ready);
    CHECK_FALSE(a2.reply);
    CHECK(acceptor.ready());
  }

  TEST_CASE("a hello with the wrong magic is refused") {
    auto ci = identity("worker/0"), ai = identity("ps/0");
    handshake connector(handshake::side::connector, ci, nonce_of(1));
    handshake acceptor(handshake::side::acceptor, ai, nonce_of(100));
    received hello(connector.hello());
    hello.bytes[wire::header_size] = 'X';
    auto s = hello.into(acceptor);
    CHECK(s.what == handshake::outcome::refuse);
    CHECK(s.reason == "not a tlaunch peer (bad magic)");
    CHECK_FALSE(s.reply);
    CHECK_FALSE(acceptor.ready());
  }

  TEST_CASE("a hello of another protocol version is refused, naming both versions") {
    auto ci = identity("worker/0"), ai = identity("ps/0");
    handshake connector(handshake::side::connector, ci, nonce_of(1));
    handshake acceptor(handshake::side::acceptor, ai, nonce_of(100));
    received hello(connector.hello());
    wire::detail::put16(reinterpret_cast<unsigned char*>(hello.bytes.data()) + wire::header_size + 4,
                        wire::protocol_version + 1);
    auto s = hello.into(acceptor);
    CHECK(s.what == handshake::outcome::refuse);
    CHECK(s.reason == "protocol version " + std::to_string(wire::protocol_version + 1) +
                          ", this binary speaks " + std::to_string(wire::protocol_version));
  }

  TEST_CASE("a peer running another binary is refused with both build ids") {
    auto ci = identity("worker/0", "build-1"), ai = identity("ps/0", "build-2");
    handshake connector(handshake::side::connector, ci, nonce_of(1));
    handshake acceptor(handshake::side::acceptor, ai, nonce_of(100));
    auto s = received(connector.hello()).into(acceptor);
    CHECK(s.what == handshake::outcome::refuse);
    CHECK(s.reason.find("different binary: peer build-id build-1, ours build-2") == 0);
  }

  TEST_CASE("an acceptor without the secret is refused by the connector") {
    auto ci = identity("worker/0", "build-1", {1, 2, 3});
    auto ai = identity("ps/0", "build-1", {9, 9, 9});
    handshake connector(handshake::side::connector, ci, nonce_of(1));
    handshake acceptor(handshake::side::acceptor, ai, nonce_of(100));
    auto a1 = received(connector.hello()).into(acceptor);
    REQUIRE(a1.reply);
    auto c1 = received(*a1.reply).into(connector);
    CHECK(c1.what == handshake::outcome::refuse);
    CHECK(c1.reason == "peer does not hold the launch secret");
    CHECK_FALSE(c1.reply);  // no proof of ours goes to a peer that failed its own
    CHECK_FALSE(connector.ready());
  }

  TEST_CASE("a connector whose proof is wrong is refused by the acceptor") {
    auto ci = identity("worker/0"), ai = identity("ps/0");
    handshake connector(handshake::side::connector, ci, nonce_of(1));
    handshake acceptor(handshake::side::acceptor, ai, nonce_of(100));
    auto a1 = received(connector.hello()).into(acceptor);
    REQUIRE(a1.reply);
    auto c1 = received(*a1.reply).into(connector);
    REQUIRE(c1.reply);
    received auth(*c1.reply);
    SUBCASE("one bit flipped") {
      auth.bytes.back() ^= 1;
      auto s = auth.into(acceptor);
      CHECK(s.what == handshake::outcome::refuse);
      CHECK(s.reason == "wrong launch secret");
    }
    SUBCASE("too short") {
      auto s = feed(acceptor, wire::kind::auth, auth.payload().first(31));
      CHECK(s.what == handshake::outcome::refuse);
      CHECK(s.reason == "wrong launch secret");
    }
    CHECK_FALSE(acceptor.ready());
  }

  TEST_CASE("a truncated hello is refused") {
    auto ci = identity("worker/0"), ai = identity("ps/0");
    handshake connector(handshake::side::connector, ci, nonce_of(1));
    received hello(connector.hello());
    auto whole = hello.payload();
    // Every cut after the fixed part names the truncation; a cut inside it is not a hello.
    for (std::size_t n = 0; n < whole.size(); ++n) {
      CAPTURE(n);
      handshake acceptor(handshake::side::acceptor, ai, nonce_of(100));
      auto s = feed(acceptor, wire::kind::hello, whole.first(n));
      CHECK(s.what == handshake::outcome::refuse);
      CHECK(s.reason == (n < 56 ? "not a tlaunch peer (bad magic)" : "truncated hello"));
    }
    handshake acceptor(handshake::side::acceptor, ai, nonce_of(100));
    std::vector<char> longer(whole.begin(), whole.end());
    longer.push_back(0);
    CHECK(feed(acceptor, wire::kind::hello, longer).reason == "trailing bytes after hello");
  }

  TEST_CASE("frames out of turn are refused") {
    auto ci = identity("worker/0"), ai = identity("ps/0");
    SUBCASE("a call before the hello") {
      handshake acceptor(handshake::side::acceptor, ai, nonce_of(100));
      auto s = feed(acceptor, wire::kind::call, {});
      CHECK(s.what == handshake::outcome::refuse);
      CHECK(s.reason == "frame before the hello exchange completed");
    }
    SUBCASE("an auth before the hello") {
      handshake acceptor(handshake::side::acceptor, ai, nonce_of(100));
      std::vector<char> proof(32, 0);
      CHECK(feed(acceptor, wire::kind::auth, proof).reason ==
            "frame before the hello exchange completed");
    }
    SUBCASE("a hello reply sent to an acceptor") {
      handshake other(handshake::side::acceptor, ci, nonce_of(1));
      handshake acceptor(handshake::side::acceptor, ai, nonce_of(100));
      handshake connector(handshake::side::connector, ci, nonce_of(2));
      auto reply = received(connector.hello()).into(other).reply;
      REQUIRE(reply);
      auto s = received(*reply).into(acceptor);
      CHECK(s.what == handshake::outcome::refuse);
      CHECK(s.reason == "unexpected hello reply");
    }
    SUBCASE("a plain hello answering the connector's") {
      handshake connector(handshake::side::connector, ci, nonce_of(1));
      handshake third(handshake::side::connector, ai, nonce_of(3));
      auto s = received(third.hello()).into(connector);
      CHECK(s.what == handshake::outcome::refuse);
      CHECK(s.reason == "peer does not hold the launch secret");
    }
  }

  TEST_CASE("a refusal from the peer ends the exchange with its reason") {
    auto ci = identity("worker/0");
    handshake connector(handshake::side::connector, ci, nonce_of(1));
    auto s = received(handshake::refusal("wrong launch secret")).into(connector);
    CHECK(s.what == handshake::outcome::peer_refused);
    CHECK(s.reason == "wrong launch secret");
    std::vector<char> junk{'\x7f'};
    handshake again(handshake::side::connector, ci, nonce_of(1));
    CHECK(feed(again, wire::kind::refuse, junk).reason == "(unreadable reason)");
  }
}

// TLS under the hello exchange (--tls): the transform of a connection, without a socket.
TEST_SUITE("tls_channel") {
  using tlaunch::rpc::tls_channel;
  using tlaunch::rpc::tls_context;

  // Runs the handshake between two channels, moving records until neither has any.
  bool shake(tls_channel& client, tls_channel& server) {
    std::vector<char> wire;
    if (!client.handshake()) return false;
    for (int round = 0; round < 10 && !(client.open() && server.open()); ++round) {
      wire.clear();
      client.take_output(wire);
      server.feed(wire);
      if (!server.handshake()) return false;
      wire.clear();
      server.take_output(wire);
      client.feed(wire);
      if (!client.handshake()) return false;
    }
    wire.clear();
    client.take_output(wire);  // the client's Finished
    server.feed(wire);
    return server.handshake() && client.open() && server.open();
  }

  std::string open_all(tls_channel& c) {
    std::string out;
    char buf[4096];
    for (long n; (n = c.open_into(buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
    return out;
  }

  TEST_CASE("a frame sealed with the launch's key is not plaintext on the wire and opens on the other side") {
    const std::vector<std::uint8_t> secret(32, 9);
    tls_context ctx(secret);
    tls_channel client(ctx, false), server(ctx, true);
    REQUIRE(shake(client, server));
    CHECK(client.used_psk());
    CHECK(server.used_psk());
    CHECK(client.forward_secret());

    wire::frame_buffer f;
    const std::string marker = "PLAINTEXT-MARKER-a7f3 the payload of a call";
    wire::serialize_into(f, marker);
    f.seal({.type = wire::kind::call, .call_id = 42});
    auto b = f.bytes();
    std::string plain(b.data(), b.size());

    REQUIRE(client.seal({plain.data(), plain.size()}));
    std::vector<char> sealed;
    client.take_output(sealed);
    std::string on_wire(sealed.begin(), sealed.end());
    CHECK(on_wire.size() > plain.size());
    CHECK(on_wire.find("PLAINTEXT-MARKER") == std::string::npos);
    CHECK(tlaunch::rpc::looks_like_tls(sealed) == false);  // a record of data, not a handshake

    server.feed(sealed);
    CHECK(open_all(server) == plain);

    // The other way too, and a record changed on the way is refused.
    REQUIRE(server.seal({marker.data(), marker.size()}));
    sealed.clear();
    server.take_output(sealed);
    sealed[sealed.size() - 3] ^= 1;
    client.feed(sealed);
    char buf[256];
    CHECK(client.open_into(buf) < 0);
    CHECK_FALSE(client.error().empty());
  }

  TEST_CASE("a peer keyed from another launch secret fails the handshake") {
    tls_context mine(std::vector<std::uint8_t>(32, 1)), theirs(std::vector<std::uint8_t>(32, 2));
    tls_channel client(mine, false), server(theirs, true);
    CHECK_FALSE(shake(client, server));
    CHECK_FALSE(server.open());
    CHECK_FALSE(server.error().empty());
  }

  TEST_CASE("a ClientHello looks like TLS; a tlaunch frame does not") {
    tls_context ctx(std::vector<std::uint8_t>(32, 3));
    tls_channel client(ctx, false);
    CHECK(client.handshake());
    std::vector<char> hello;
    client.take_output(hello);
    CHECK(tlaunch::rpc::looks_like_tls(hello));
    auto ci = identity("worker/0");
    handshake h(handshake::side::connector, ci, nonce_of(1));
    auto f = h.hello();
    auto b = f.bytes();
    CHECK_FALSE(tlaunch::rpc::looks_like_tls({b.data(), b.size()}));
  }
}
