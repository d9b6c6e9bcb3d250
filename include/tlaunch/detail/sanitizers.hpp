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

// AddressSanitizer (g++: __SANITIZE_ADDRESS__). clang 14's allocator is not fork-safe: a
// child forked from a threaded process while another thread holds the allocator's lock
// waits for it forever (its first threads hang in calloc). tlaunch::main's node processes
// are forked by a copy made while the process had one thread, so only tlaunch::start's
// local_mp (forked from the caller) meets it; its tests run outside ASan builds.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool address_sanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool address_sanitizer = true;
#else
inline constexpr bool address_sanitizer = false;
#endif
#else
inline constexpr bool address_sanitizer = false;
#endif

}  // namespace tlaunch::detail
