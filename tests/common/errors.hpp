// message_of<E>(f): the message of the E that f throws, or nothing when f returns; for
// tests that check what an error says (a test that needs the error fails when there is none).
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace tlaunch::test_support {

template <class E, class F>
std::optional<std::string> message_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const E& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

}  // namespace tlaunch::test_support
