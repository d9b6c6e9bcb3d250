// The launch secret: random bytes from the kernel, and their hex form (how the
// launcher hands them to a node process on stdin).
#pragma once

#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace tlaunch::detail {

// 32 bytes from getrandom(2); blocks only until the kernel's pool is first seeded.
inline std::array<std::uint8_t, 32> random_secret() {
  std::array<std::uint8_t, 32> s{};
  std::size_t got = 0;
  while (got < s.size()) {
    ssize_t n = ::getrandom(s.data() + got, s.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(),
                              "cannot draw the launch secret from the kernel (getrandom)");
    }
    got += static_cast<std::size_t>(n);
  }
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
