// Constexpr FNV-1a: method ids on the wire are hashes of names, never addresses.
#pragma once

#include <cstdint>
#include <string_view>

namespace tlaunch::detail {

constexpr std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 0xcbf29ce484222325ull) {
  for (char c : s) {
    h ^= static_cast<std::uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace tlaunch::detail
