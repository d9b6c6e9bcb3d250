// The calls one connection waits for, by id, and the served coroutine methods a
// cancel frame may stop. Not locked: the connection's lock guards it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../detail/id_map.hpp"
#include "../wire/frame.hpp"
#include "trace.hpp"

namespace tlaunch::rpc {

// A call waiting for its reply. complete() or fail_unavailable() is called exactly once.
class pending_call {
 public:
  virtual ~pending_call() = default;
  // Reply or error_reply, on the reader's thread; payload valid only during the call.
  virtual void complete(const wire::frame_header& h, std::span<const char> payload) = 0;
  // The connection closed or was refused before the reply came.
  virtual void fail_unavailable(const std::string& why) = 0;
  // The same, once the peer said it is stopping because the program is (wire::kind::stopping).
  virtual void fail_stopping(const std::string& why) { fail_unavailable(why); }
  // The connection closed: one of the two, whether the program's stop ended it.
  void fail_closed(const std::string& why, bool by_stop) {
    by_stop ? fail_stopping(why) : fail_unavailable(why);
  }

  // For the process's counts (rpc/metrics.hpp): the method's name, set by whoever starts
  // the call; the connection's entry and the call's start, set when it is registered.
  std::string_view method_name;
  void* metrics_entry = nullptr;
  std::int64_t metrics_started = 0;
  // With --trace, when the call belongs to a sampled trace: its span (rpc/trace.hpp).
  std::unique_ptr<client_span> trace;
};

class call_table {
 public:
  // The id the next call gets (ids start at 1 and never repeat on a connection).
  std::uint64_t next_id() { return next_id_++; }
  // Keeps a call under an id from next_id() until its reply or error.
  void insert(std::uint64_t id, std::shared_ptr<pending_call> p) { pending_.insert(id, std::move(p)); }
  // next_id() and insert() in one.
  std::uint64_t add(std::shared_ptr<pending_call> p) {
    const std::uint64_t id = next_id();
    insert(id, std::move(p));
    return id;
  }
  // The call waiting under id, removed: its reply came, or it was abandoned
  // (deadline, cancellation). Null when no call waits under id.
  std::shared_ptr<pending_call> take(std::uint64_t id) {
    if (auto p = pending_.take(id)) return std::move(*p);
    return nullptr;
  }
  // Every waiting call, removed: the connection closed, and each is failed
  // (outside the lock) by the caller.
  std::vector<std::shared_ptr<pending_call>> take_all() { return pending_.drain(); }
  std::size_t size() const { return pending_.size(); }

  // A coroutine method serving the peer's call_id; a cancel frame for it runs `cancel`.
  void add_running(std::uint64_t call_id, std::function<void()> cancel) {
    running_[call_id] = std::move(cancel);
  }
  void remove_running(std::uint64_t call_id) { running_.erase(call_id); }
  std::size_t running_count() const { return running_.size(); }
  // The cancel function of a served call, removed; empty when it is not running.
  std::function<void()> take_running(std::uint64_t call_id) {
    std::function<void()> cancel;
    auto it = running_.find(call_id);
    if (it != running_.end()) {
      cancel = std::move(it->second);
      running_.erase(it);
    }
    return cancel;
  }

 private:
  tlaunch::detail::seq_id_map<std::shared_ptr<pending_call>> pending_{256};
  std::unordered_map<std::uint64_t, std::function<void()>> running_;
  std::uint64_t next_id_ = 1;
};

}  // namespace tlaunch::rpc
