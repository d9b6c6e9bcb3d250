// The hello exchange of one connection as a state machine without a socket: fed
// the peer's frames, it says what to send, when the connection is ready, and why
// it must be refused. docs/PROTOCOL.md describes the exchange:
//   connector -> hello;  acceptor -> hello reply with its proof;
//   connector checks it -> auth with its own proof: ready;  acceptor checks that: ready.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../wire/codec.hpp"
#include "../wire/frame.hpp"
#include "../wire/hello.hpp"  // also the constant-time compare

namespace tlaunch::rpc {

// Who this process is in every hello it sends, and what it asks of a peer's.
struct hello_identity {
  std::vector<std::uint8_t> secret;
  std::string build_id;
  std::string listen_address;  // ours, announced in the hello
  std::string name;            // ours, for the peer's messages
};

class handshake {
 public:
  // The largest frame a peer may send before it has proven the secret: a hello
  // with a long host name fits many times over; a peer announcing more is closed.
  static constexpr std::uint32_t max_frame = 4096;
  // Read buffer of a connection until then, in whole pages: a partial frame
  // (header and max_frame) plus a page of room always fit, so it never grows.
  static constexpr std::size_t buffer_size = 12288;
  enum class side { connector, acceptor };
  using nonce = std::array<std::uint8_t, 16>;

  // What the connection does after a frame.
  enum class outcome {
    wait,          // more frames of the exchange are due
    ready,         // calls may flow (after `reply` is sent)
    refuse,        // send a refusal with `reason`, then close
    peer_refused,  // the peer refused us: close with `reason`
  };
  struct step {
    outcome what = outcome::wait;
    std::string reason;
    std::optional<wire::frame_buffer> reply;  // to send before any other frame
    bool learned_peer = false;                // peer_listen() and peer_name() are now known
  };

  // `id` must outlive the handshake (it is the connection's configuration).
  handshake(side s, const hello_identity& id, const nonce& mine)
      : side_(s), id_(id), mine_(mine) {}

  // The connector's opening hello.
  wire::frame_buffer hello() const { return make_hello(false); }

  // Takes one frame of the peer while not ready.
  step on_frame(const wire::frame_header& h, std::span<const char> payload) {
    step s = take(h, payload);
    if (s.what == outcome::ready) state_ = state::ready;
    if (s.what == outcome::refuse || s.what == outcome::peer_refused) state_ = state::failed;
    return s;
  }

  bool ready() const { return state_ == state::ready; }
  // What the peer's hello said ("" before it came).
  const std::string& peer_listen() const { return peer_listen_; }
  const std::string& peer_name() const { return peer_name_; }

  // The reason a refuse frame carries.
  static std::string refusal_reason(std::span<const char> payload) {
    std::string reason;
    try {
      wire::deserialize_from(payload, reason);
    } catch (...) {
      reason = "(unreadable reason)";
    }
    if (reason.empty()) reason = "(no reason given)";  // a message must never end at the colon
    return reason;
  }

  // A refuse frame with that reason.
  static wire::frame_buffer refusal(const std::string& reason) {
    wire::frame_buffer f;
    wire::serialize_into(f, reason);
    f.seal({.type = wire::kind::refuse});
    return f;
  }

 private:
  enum class state { await_hello, await_auth, ready, failed };

  static step refused(std::string why) { return {outcome::refuse, std::move(why), {}, false}; }

  static bool same_proof(std::span<const std::uint8_t> got, std::span<const std::uint8_t> want) {
    return got.size() == want.size() && tlaunch::detail::constant_time_equal(got, want);
  }

  wire::frame_buffer make_hello(bool reply) const {
    wire::hello h;
    h.is_reply = reply;
    h.nonce = mine_;
    h.build_id = id_.build_id;
    h.listen_address = id_.listen_address;
    h.name = id_.name;
    if (reply) h.proof = wire::secret_proof(id_.secret, "acceptor", peer_nonce_, mine_);
    wire::frame_buffer f;
    wire::encode_hello(f, h);
    return f;
  }

  step take(const wire::frame_header& h, std::span<const char> payload) {
    if (h.type == wire::kind::refuse)
      return {outcome::peer_refused, refusal_reason(payload), {}, false};
    if (side_ == side::acceptor && state_ == state::await_auth && h.type == wire::kind::auth) {
      auto expect = wire::secret_proof(id_.secret, "connector", mine_, peer_nonce_);
      if (!same_proof({reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size()},
                      expect))
        return refused("wrong launch secret");
      return {outcome::ready, {}, {}, false};
    }
    if (h.type != wire::kind::hello || state_ != state::await_hello)
      return refused("frame before the hello exchange completed");
    std::string problem;
    auto hello = wire::decode_hello(payload, problem);
    if (!hello) return refused(problem);
    if (hello->build_id != id_.build_id)
      return refused("different binary: peer build-id " + hello->build_id + ", ours " +
                     id_.build_id + " (every node must run the same binary)");
    peer_listen_ = hello->listen_address;
    peer_name_ = hello->name;
    peer_nonce_ = hello->nonce;
    if (side_ == side::acceptor) {
      if (hello->is_reply) return {outcome::refuse, "unexpected hello reply", {}, true};
      state_ = state::await_auth;
      return {outcome::wait, {}, make_hello(true), true};
    }
    // Connector: check the acceptor's proof, answer with ours, then go.
    auto expect = wire::secret_proof(id_.secret, "acceptor", mine_, peer_nonce_);
    if (!hello->is_reply || !same_proof(hello->proof, expect))
      return {outcome::refuse, "peer does not hold the launch secret", {}, true};
    auto proof = wire::secret_proof(id_.secret, "connector", peer_nonce_, mine_);
    wire::frame_buffer f;
    f.append(proof.data(), proof.size());
    f.seal({.type = wire::kind::auth});
    return {outcome::ready, {}, std::move(f), true};
  }

  side side_;
  const hello_identity& id_;
  nonce mine_, peer_nonce_{};
  state state_ = state::await_hello;
  std::string peer_listen_, peer_name_;
};

}  // namespace tlaunch::rpc
