// Which runtime's io pool the current thread belongs to (null: a plain thread).
#pragma once

namespace tlaunch::detail {

inline thread_local const void* current_runtime_thread = nullptr;

}  // namespace tlaunch::detail
