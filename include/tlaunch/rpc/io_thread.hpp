// Which runtime's io pool the current thread belongs to (null: a plain thread).
// Set by runtime::start_threads; read by connections to tell io threads apart.
#pragma once

namespace tlaunch::rpc {

inline thread_local const void* current_runtime_thread = nullptr;
// Which thread of that pool (0 to threads - 1).
inline thread_local unsigned current_io_index = 0;

}  // namespace tlaunch::rpc
