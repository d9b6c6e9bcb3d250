// Which sanitizers this translation unit is built with.
#pragma once

namespace tlaunch::detail {

// ThreadSanitizer (g++ defines __SANITIZE_THREAD__, clang answers __has_feature). It cannot
// follow a fork of a threaded process that starts threads again, so node processes are
// executed, never forked, under it.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool thread_sanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool thread_sanitizer = true;
#else
inline constexpr bool thread_sanitizer = false;
#endif
#else
inline constexpr bool thread_sanitizer = false;
#endif

}  // namespace tlaunch::detail
