// The hello exchange that opens every connection: magic, protocol version,
// build id, and a challenge-response proof of the launch secret.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../detail/crypto.hpp"
#include "codec.hpp"
#include "frame.hpp"

namespace tlaunch::wire {

inline constexpr std::array<char, 4> hello_magic{'T', 'L', 'N', 'C'};

struct hello {
  std::uint16_t version = protocol_version;
  bool is_reply = false;                  // sent by the acceptor
  std::array<std::uint8_t, 16> nonce{};   // fresh per connection and side
  std::array<std::uint8_t, 32> proof{};   // acceptor only: proves it holds the secret
  std::string build_id;                   // the sender binary's GNU build id
  std::string listen_address;             // "host:port" the sender serves on, or ""
  std::string name;                       // "worker/3", "launcher": for messages
};

inline void encode_hello(frame_buffer& b, const hello& h) {
  unsigned char fixed[4 + 2 + 2 + 16 + 32];
  std::memcpy(fixed, hello_magic.data(), 4);
  detail::put16(fixed + 4, h.version);
  detail::put16(fixed + 6, h.is_reply ? 1 : 0);
  std::memcpy(fixed + 8, h.nonce.data(), 16);
  std::memcpy(fixed + 24, h.proof.data(), 32);
  b.append(fixed, sizeof fixed);
  for (const std::string* s : {&h.build_id, &h.listen_address, &h.name}) {
    unsigned char len[2];
    detail::put16(len, static_cast<std::uint16_t>(std::min<std::size_t>(s->size(), 0xffff)));
    b.append(len, 2);
    b.append(s->data(), std::min<std::size_t>(s->size(), 0xffff));
  }
  b.seal({.type = kind::hello});
}

// Returns the hello, or a reason it is not one.
inline std::optional<hello> decode_hello(std::span<const char> p, std::string& problem) {
  auto* u = reinterpret_cast<const unsigned char*>(p.data());
  std::size_t n = p.size(), at = 56;
  if (n < at || std::memcmp(u, hello_magic.data(), 4) != 0) {
    problem = "not a tlaunch peer (bad magic)";
    return std::nullopt;
  }
  hello h;
  h.version = detail::get16(u + 4);
  if (h.version != protocol_version) {
    problem = "protocol version " + std::to_string(h.version) + ", this binary speaks " +
              std::to_string(protocol_version);
    return std::nullopt;
  }
  h.is_reply = (detail::get16(u + 6) & 1) != 0;
  std::memcpy(h.nonce.data(), u + 8, 16);
  std::memcpy(h.proof.data(), u + 24, 32);
  for (std::string* s : {&h.build_id, &h.listen_address, &h.name}) {
    if (at + 2 > n) {
      problem = "truncated hello";
      return std::nullopt;
    }
    std::size_t len = detail::get16(u + at);
    at += 2;
    if (at + len > n) {
      problem = "truncated hello";
      return std::nullopt;
    }
    s->assign(p.data() + at, len);
    at += len;
  }
  if (at != n) {
    problem = "trailing bytes after hello";
    return std::nullopt;
  }
  return h;
}

// HMAC(secret, label | first nonce | second nonce): the acceptor proves with
// ("acceptor", connector's nonce, its own), the connector answers with
// ("connector", acceptor's nonce, its own). The secret itself never travels.
inline std::array<std::uint8_t, 32> secret_proof(std::span<const std::uint8_t> secret,
                                                 std::string_view label,
                                                 std::span<const std::uint8_t, 16> first,
                                                 std::span<const std::uint8_t, 16> second) {
  // Sized once and copied into (vector::insert of the spans, inlined at -O3, gives g++ 12
  // a false -Wstringop-overflow).
  std::vector<std::uint8_t> msg(label.size() + first.size() + second.size());
  std::memcpy(msg.data(), label.data(), label.size());
  std::memcpy(msg.data() + label.size(), first.data(), first.size());
  std::memcpy(msg.data() + label.size() + first.size(), second.data(), second.size());
  return tlaunch::detail::hmac_sha256(secret, msg);
}

}  // namespace tlaunch::wire
