// The accept loop of a listener (a node's runtime, the launcher's coordinator):
// it never stops on an error. A failed accept (out of descriptors, out of
// memory, a connection aborted in the backlog) is logged, rate-limited, and
// accepting resumes after a short backoff; the pending connections wait in the
// kernel's backlog meanwhile. Only closing the acceptor ends the loop.
#pragma once

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <system_error>

#include "../detail/log_limiter.hpp"

namespace tlaunch::rpc {

class accept_loop {
 public:
  using tcp = asio::ip::tcp;
  static constexpr std::chrono::milliseconds first_backoff{20}, max_backoff{1000};

  // `on_accept` takes each accepted socket (close-on-exec already); `log`
  // prints a line. Both run on the acceptor's executor.
  accept_loop(tcp::acceptor& acceptor, std::function<void(tcp::socket)> on_accept,
              std::function<void(const std::string&)> log,
              std::shared_ptr<tlaunch::detail::log_limiter> limiter)
      : acceptor_(acceptor),
        backoff_timer_(acceptor.get_executor()),
        on_accept_(std::move(on_accept)),
        log_(std::move(log)),
        limiter_(limiter ? std::move(limiter)
                         : std::make_shared<tlaunch::detail::log_limiter>()) {}

  void start() { next(); }

  // Stops a pending backoff; the owner closes the acceptor (on its executor).
  void stop() {
    stopped_ = true;
    backoff_timer_.cancel();
  }

  // Accept errors so far (tests).
  std::uint64_t errors() const { return errors_.load(); }

 private:
  void next() {
    acceptor_.async_accept([this](std::error_code ec, tcp::socket s) {
      if (stopped_ || !acceptor_.is_open() || ec == asio::error::operation_aborted) return;
      if (ec) return failed(ec);
      backoff_ = first_backoff;
      // Asio opens sockets without close-on-exec: node processes started
      // later would otherwise inherit them.
      ::fcntl(s.native_handle(), F_SETFD, FD_CLOEXEC);
      on_accept_(std::move(s));
      next();
    });
  }

  void failed(std::error_code ec) {
    ++errors_;
    if (auto line = limiter_->admit(
            "accept: " + ec.message(),
            "accept failed: " + ec.message() + "; accepting again in " +
                std::to_string(backoff_.count()) + " ms"))
      log_(*line);
    backoff_timer_.expires_after(backoff_);
    backoff_ = std::min(backoff_ * 2, max_backoff);
    backoff_timer_.async_wait([this](std::error_code tec) {
      if (tec || stopped_ || !acceptor_.is_open()) return;
      next();
    });
  }

  tcp::acceptor& acceptor_;
  asio::steady_timer backoff_timer_;
  std::function<void(tcp::socket)> on_accept_;
  std::function<void(const std::string&)> log_;
  std::shared_ptr<tlaunch::detail::log_limiter> limiter_;
  std::chrono::milliseconds backoff_ = first_backoff;
  std::atomic<bool> stopped_{false};  // stop() may run on another io thread
  std::atomic<std::uint64_t> errors_{0};
};

}  // namespace tlaunch::rpc
