// A launch for unit tests: runs a program in this process (local_mt, or over
// loopback TCP with force_wire) on background threads and hands the test typed
// handles to its nodes, to call with sync() from the test's own thread.
//
//   tlaunch::testing::test_launch t(program);
//   auto counter = t.get<"counter">();
//   CHECK(counter.sync<&Counter::add>(2) == 2);
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "launch/flags.hpp"
#include "launch/local_mt.hpp"
#include "launch/plan.hpp"
#include "launch/terminal/output.hpp"
#include "program.hpp"

namespace tlaunch::testing {

template <class... Nodes>
class test_launch {
 public:
  // s: the launch's settings (launch_options.hpp), a tlaunch::launch_options too (its
  // launcher is local_mt here, always).
  explicit test_launch(const program_t<Nodes...>& p, const launch_settings& s = {})
      : program_(p), out_(launch::color_mode::never, s.log_dir) {
    static_cast<launch_settings&>(opt_) = s;
    thread_ = std::thread([this] {
      int code = 1;
      try {
        launch::run_hooks hooks;
        hooks.started = [this](tlaunch::rpc::runtime& rt) {
          std::lock_guard lk(mu_);
          rt_ = &rt;
          cv_.notify_all();
        };
        hooks.publish_stop = [this](std::function<void()> stop) {
          std::lock_guard lk(mu_);
          stop_ = std::move(stop);
        };
        code = launch::run_local_mt(launch::plan_launch(program_, opt_), out_, hooks);
      } catch (...) {
        std::lock_guard lk(mu_);
        error_ = std::current_exception();
      }
      std::lock_guard lk(mu_);
      exit_code_ = code;
      finished_ = true;
      rt_ = nullptr;
      cv_.notify_all();
    });
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return rt_ != nullptr || finished_; });
    if (error_) {
      // The launch refused to start (bad options): no destructor runs after a throwing
      // constructor, so the thread is joined here, not left joinable (std::terminate).
      lk.unlock();
      thread_.join();
      std::rethrow_exception(error_);
    }
  }
  ~test_launch() {
    stop();
    if (thread_.joinable()) thread_.join();
  }

  // The handle of replica `replica` of node Name, typed by the node's class.
  template <detail::fixed_string Name>
  auto get(std::uint32_t replica = 0) {
    constexpr std::size_t idx = tlaunch::detail::node_index<Name, Nodes...>::value;
    static_assert(idx < sizeof...(Nodes), "tlaunch::testing: no node of that name in the program");
    using T = typename std::tuple_element_t<idx, std::tuple<Nodes...>>::type;
    std::lock_guard lk(mu_);
    if (!rt_) throw std::logic_error("tlaunch::testing: the program is not running");
    const auto& n = rt_->nodes()[idx];
    if (replica >= n.replicas) throw std::out_of_range("tlaunch::testing: no such replica");
    return tlaunch::detail::handle_access::make<T>(rt_, n.first + replica);
  }

  // Stops the program as ctx.stop_program() would.
  void stop() {
    // Under the lock: the launch unpublishes its stop function before it returns.
    std::lock_guard lk(mu_);
    if (stop_) stop_();
  }
  // Waits for the program to end (by itself or after stop()); its exit code.
  int wait() {
    if (thread_.joinable()) thread_.join();
    if (error_) std::rethrow_exception(error_);
    return exit_code_;
  }
  bool finished() const {
    std::lock_guard lk(mu_);
    return finished_;
  }

 private:
  program_t<Nodes...> program_;
  launch::options opt_;
  launch::output_printer out_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  tlaunch::rpc::runtime* rt_ = nullptr;
  std::function<void()> stop_;
  bool finished_ = false;
  int exit_code_ = 0;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace tlaunch::testing
