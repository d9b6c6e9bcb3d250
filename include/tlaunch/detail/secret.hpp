// The launch secret: random bytes, and their hex form (how the
// launcher hands them to a node process on stdin).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "crypto.hpp"

namespace tlaunch::detail {

// 32 bytes from libcrypto's CSPRNG.
inline std::array<std::uint8_t, 32> random_secret() {
  std::array<std::uint8_t, 32> s{};
  random_bytes(s);
  return s;
}

inline std::string to_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::uint8_t b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

// The bytes of an even-length string of hex digits (either case); nullopt for
// anything else, so a garbled secret line is refused rather than misread.
inline std::optional<std::vector<std::uint8_t>> from_hex(std::string_view s) {
  if (s.size() % 2 != 0) return std::nullopt;
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<std::uint8_t> out;
  out.reserve(s.size() / 2);
  for (std::size_t i = 0; i < s.size(); i += 2) {
    int hi = val(s[i]), lo = val(s[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<std::uint8_t>(hi * 16 + lo));
  }
  return out;
}

}  // namespace tlaunch::detail
