// The one thread that calls into a libssh session. libssh sessions are not thread-safe, so
// after login one loop per session makes every libssh call for it; other threads post work
// to it (and wait for it when they need a result), so any thread may use the session.
#pragma once

#include <libssh/callbacks.h>
#include <libssh/libssh.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "error.hpp"
#include "host_spec.hpp"

namespace tlaunch::ssh {

// Each turn runs the posted tasks, then hooks.turn(), then waits in poll(2) on the session's
// socket and an eventfd that post() writes, so posted work never waits for network traffic.
class io_loop {
 public:
  // What the session's users do on the loop's thread; each hook may be empty.
  struct hooks {
    // Moves work forward after the tasks ran; true if anything happened (the loop then
    // polls without waiting). Not called once the connection is lost.
    std::function<bool()> turn;
    // Longest wait for the next turn, in ms (1000 when empty).
    std::function<int()> wait_ms;
    // The connection died; reason is libssh's account of it. Tasks still run afterwards.
    std::function<void(const std::string& reason)> lost;
    // The loop ends: release everything that uses the session, which is freed next.
    std::function<void()> stopped;
  };

  // Starts the thread, which owns s from then on (it disconnects and frees it at the end).
  static std::shared_ptr<io_loop> start(host_spec host, ssh_session s, hooks h) {
    std::shared_ptr<io_loop> loop(new io_loop(std::move(host), s, std::move(h)));
    loop->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (loop->wake_fd_ < 0) loop->fail("cannot create an eventfd: " + std::string(std::strerror(errno)));
    // thread_id_ must be set before anyone can post: on_io_thread() reads it
    auto started = std::make_shared<std::promise<void>>();
    auto ready = started->get_future();
    live_threads& live = live_threads::get();  // constructed after libcrypto's exit handler
    live.enter();
    loop->thread_ = std::thread([self = loop, started, &live]() mutable {
      self->thread_id_ = std::this_thread::get_id();
      started->set_value();
      self->run();
      self.reset();
      live.leave();
    });
    ready.wait();
    return loop;
  }

  io_loop(const io_loop&) = delete;
  io_loop& operator=(const io_loop&) = delete;
  ~io_loop() {
    if (ssh_ != nullptr) session_free_now();  // the thread never ran
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  const host_spec& host() const { return host_; }
  [[noreturn]] void fail(const std::string& what) const { throw error(host_, what); }

  bool on_io_thread() const { return std::this_thread::get_id() == thread_id_; }

  // Queues f for the loop's thread; false once the loop is stopping.
  bool post(std::function<void()> f) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return false;
      tasks_.push_back(std::move(f));
    }
    wake();
    return true;
  }

  // Runs f on the loop's thread and returns its result (or rethrows what it threw); runs it
  // at once when called there. Throws ssh::error once the loop is stopping.
  template <class F>
  auto call(F f) -> std::invoke_result_t<F&> {
    using result = std::invoke_result_t<F&>;
    if (on_io_thread()) return f();
    auto task = std::make_shared<std::packaged_task<result()>>(std::move(f));
    auto fut = task->get_future();
    if (!post([task] { (*task)(); })) fail("the session is closed");
    return fut.get();
  }

  // Only on the loop's thread: the session, and whether its connection is gone.
  ssh_session session() const { return ssh_; }
  bool lost() const { return lost_; }
  const std::string& lost_reason() const { return lost_reason_; }

  // Makes the loop end after the tasks queued so far; later posts are refused.
  void request_stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake();
  }

  // request_stop(), then waits for the thread; from the loop's own thread (a callback that
  // drops the last user), hands it to the registry instead, which joins it at exit: it holds
  // its own reference and ends by itself.
  void stop_and_join() {
    request_stop();
    if (on_io_thread()) {
      live_threads::get().adopt(std::move(thread_));
    } else if (thread_.joinable()) {
      thread_.join();
    }
  }

 private:
  // Loop threads still running. A loop whose last user let go on its own thread is detached
  // and ends by itself; if main() returns meanwhile, libcrypto's exit handler would free
  // what that thread's ssh_free() (and its thread-exit cleanup) still uses. The registry is
  // a function-local static made after libssh initialised libcrypto, so its destructor runs
  // first: it waits (at most 10 s) for every loop to finish, then joins those threads.
  class live_threads {
   public:
    static live_threads& get() {
      static live_threads instance;
      return instance;
    }
    void enter() {
      std::lock_guard lock(mu_);
      ++count_;
    }
    void leave() {
      std::lock_guard lock(mu_);
      if (--count_ == 0) cv_.notify_all();
    }
    void adopt(std::thread t) {
      std::lock_guard lock(mu_);
      orphans_.push_back(std::move(t));
    }
    ~live_threads() {
      std::unique_lock lock(mu_);
      bool done = cv_.wait_for(lock, std::chrono::seconds(10), [this] { return count_ == 0; });
      for (auto& t : orphans_) {
        if (done) t.join();  // only thread-exit cleanup is left
        else t.detach();     // a loop still stuck in the network: exit anyway
      }
    }

   private:
    live_threads() = default;
    std::mutex mu_;
    std::condition_variable cv_;
    int count_ = 0;
    std::vector<std::thread> orphans_;
  };

  io_loop(host_spec host, ssh_session s, hooks h)
      : host_(std::move(host)), ssh_(s), hooks_(std::move(h)) {}

  void wake() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
  }
  void drain_wake() {
    std::uint64_t v;
    while (::read(wake_fd_, &v, sizeof v) > 0) {
    }
  }
  static int on_wake(socket_t, int, void* self) {
    static_cast<io_loop*>(self)->drain_wake();
    return 0;
  }

  void connection_lost(const std::string& why) {
    lost_ = true;
    lost_reason_ = why.empty() ? "unknown error" : why;
    if (hooks_.lost) hooks_.lost(lost_reason_);
    ssh_event_remove_session(event_, ssh_);
  }

  void session_free_now() {
    if (ssh_is_connected(ssh_)) ssh_disconnect(ssh_);
    ssh_free(ssh_);
    ssh_ = nullptr;
  }

  void run() {
    event_ = ssh_event_new();
    ssh_event_add_session(event_, ssh_);
    ssh_event_add_fd(event_, wake_fd_, POLLIN, &io_loop::on_wake, this);
    for (;;) {
      std::deque<std::function<void()>> tasks;
      bool stop;
      {
        std::lock_guard lock(mu_);
        tasks.swap(tasks_);
        stop = stopping_;
      }
      for (auto& t : tasks) t();
      if (stop) break;
      bool progress = !tasks.empty();
      if (!lost_) {
        if (hooks_.turn) progress |= hooks_.turn();
        if (!ssh_is_connected(ssh_)) connection_lost(ssh_get_error(ssh_));
      }
      int timeout = progress ? 0 : hooks_.wait_ms ? hooks_.wait_ms() : 1000;
      if (!lost_) {
        ssh_event_dopoll(event_, timeout);
        if (!ssh_is_connected(ssh_)) connection_lost(ssh_get_error(ssh_));
      } else {
        pollfd p{wake_fd_, POLLIN, 0};
        ::poll(&p, 1, timeout);
        drain_wake();
      }
    }
    // Nobody holds the loop any more: let the users let go of the session, then close it.
    if (hooks_.stopped) hooks_.stopped();
    ssh_event_remove_fd(event_, wake_fd_);
    if (!lost_) ssh_event_remove_session(event_, ssh_);
    ssh_event_free(event_);
    event_ = nullptr;
    session_free_now();
  }

  host_spec host_;
  ssh_session ssh_;
  hooks hooks_;
  int wake_fd_ = -1;
  std::thread thread_;
  std::thread::id thread_id_;
  std::mutex mu_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  ssh_event event_ = nullptr;
  bool lost_ = false;
  std::string lost_reason_;
};

// Held by everything that uses a loop (a session, each child started from it): when the
// last holder goes, the loop stops.
class io_loop_owner {
 public:
  explicit io_loop_owner(std::shared_ptr<io_loop> l) : loop_(std::move(l)) {}
  io_loop_owner(const io_loop_owner&) = delete;
  io_loop_owner& operator=(const io_loop_owner&) = delete;
  ~io_loop_owner() { loop_->stop_and_join(); }

  io_loop& loop() const { return *loop_; }

 private:
  std::shared_ptr<io_loop> loop_;
};

}  // namespace tlaunch::ssh
