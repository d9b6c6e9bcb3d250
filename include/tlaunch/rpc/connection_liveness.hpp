// rpc::connection (connection.hpp), its members that notice a peer that is gone: the
// handshake deadline (acceptor) and the connect deadline (connector); the socket options
// (TCP keepalive probes every --liveness interval; TCP_USER_TIMEOUT of three heartbeat
// intervals, with heartbeats only); the liveness check, which reads TCP_INFO every quarter
// interval and closes a connection whose peer's host acknowledged nothing for two; the
// heartbeats, a ping every interval, the connection closed after three without a byte.
#pragma once

#include "connection.hpp"

#if TLAUNCH_HEADER_DEFINITIONS
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstdio>

namespace tlaunch::rpc {

TLAUNCH_DECL void connection::arm_handshake_deadline() {
  const auto limit = cfg_->handshake_timeout;
  if (limit.count() <= 0) return;
  std::lock_guard lk(mu_);
  if (closed_ || ready_) return;
  deadline_armed_ = true;
  handshake_deadline_.expires_after(limit);
  handshake_deadline_.async_wait([weak = weak_from_this(), limit](std::error_code ec) {
    if (ec) return;
    auto self = weak.lock();
    if (!self) return;
    {
      std::lock_guard lk(self->mu_);
      if (self->closed_ || self->ready_) return;
    }
    std::string secs = fmt_seconds(limit);
    self->log_bad_peer("handshake deadline", "closing connection from " + self->peer_address_ +
                                                 ": no complete hello exchange within " + secs);
    self->close("the hello exchange with " + self->peer_address_ + " did not complete within " +
                secs);
  });
}

TLAUNCH_DECL void connection::arm_connect_deadline(const std::string& address) {
  const auto limit = cfg_->heartbeat.count() > 0 ? cfg_->heartbeat * silent_intervals
                                                 : cfg_->liveness * 3 / 2;
  if (limit.count() <= 0) return;
  std::lock_guard lk(mu_);
  if (closed_ || connected_) return;
  deadline_armed_ = true;
  handshake_deadline_.expires_after(limit);
  handshake_deadline_.async_wait([weak = weak_from_this(), limit, address](std::error_code ec) {
    if (ec) return;
    auto self = weak.lock();
    if (!self) return;
    {
      std::lock_guard lk(self->mu_);
      if (self->closed_ || self->connected_) return;
    }
    std::string why = "cannot connect to ";
    why.append(address).append(": no answer within ").append(fmt_seconds(limit));
    self->close(why);
  });
}

TLAUNCH_DECL std::string connection::fmt_seconds(std::chrono::milliseconds d) {
  auto ms = d.count();
  std::string s = std::to_string(ms / 1000);
  if (ms % 1000) {
    char frac[8];
    std::snprintf(frac, sizeof frac, ".%03d", static_cast<int>(ms % 1000));
    s += frac;
    while (s.back() == '0') s.pop_back();
  }
  return s + " s";
}

TLAUNCH_DECL void connection::configure_socket() {
  std::error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);
  socket_.set_option(asio::socket_base::keep_alive(true), ec);
  int fd = socket_.native_handle();
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // never inherited by node processes
  int idle = 10, intvl = 5, cnt = 3;
  if (cfg_->liveness.count() > 0) {
    // A probe every interval once idle (whole seconds: the kernel's unit). The kernel
    // itself ends an idle connection after two unanswered probes, should liveness_tick
    // be late (its io thread busy).
    idle = intvl = static_cast<int>(std::max<std::int64_t>(1, (cfg_->liveness.count() + 999) / 1000));
    cnt = liveness_intervals;
  }
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  if (cfg_->heartbeat.count() > 0) {
    // Data the peer does not acknowledge for as long fails the connection too.
    unsigned user_timeout = static_cast<unsigned>(cfg_->heartbeat.count() * silent_intervals);
    ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
  }
  socket_.non_blocking(true, ec);
  std::lock_guard lk(mu_);
  arm_liveness_locked();
}

TLAUNCH_DECL void connection::arm_liveness_locked() {
  const auto interval = cfg_->liveness;
  if (interval.count() <= 0 || closed_) return;
  liveness_armed_ = true;
  liveness_.expires_after(std::max(interval / 4, std::chrono::milliseconds(25)));
  liveness_.async_wait([weak = weak_from_this()](std::error_code ec) {
    if (ec) return;
    if (auto self = weak.lock()) self->liveness_tick();
  });
}

TLAUNCH_DECL void connection::liveness_tick() {
  const auto limit = cfg_->liveness * liveness_intervals;
  tcp_info ti{};
  socklen_t len = sizeof ti;
  {
    std::lock_guard lk(mu_);
    liveness_armed_ = false;
    if (closed_) return;  // the socket stays open until closed_ is set
    if (::getsockopt(socket_.native_handle(), IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        ti.tcpi_state != TCP_ESTABLISHED || (ti.tcpi_unacked == 0 && ti.tcpi_probes == 0) ||
        std::min(ti.tcpi_last_ack_recv, ti.tcpi_last_data_recv) <
            static_cast<std::uint32_t>(limit.count())) {
      arm_liveness_locked();
      return;
    }
  }
  went_silent_.store(true, std::memory_order_release);
  close(unacknowledged_reason(limit));
}

TLAUNCH_DECL std::string connection::unacknowledged_reason(std::chrono::milliseconds limit) const {
  std::string why = "no answer from " + peer_name() + "'s host";
  if (limit.count() > 0) why += " for " + fmt_seconds(limit);
  return why + ": host down or network cut";
}

TLAUNCH_DECL void connection::arm_heartbeat_locked() {
  const auto interval = cfg_->heartbeat;
  if (interval.count() <= 0 || closed_) return;
  heartbeat_armed_ = true;
  heartbeat_.expires_after(interval);
  heartbeat_.async_wait([weak = weak_from_this()](std::error_code ec) {
    if (ec) return;
    if (auto self = weak.lock()) self->heartbeat_tick();
  });
}

TLAUNCH_DECL void connection::heartbeat_tick() {
  const auto reads = reads_.load(std::memory_order_relaxed);
  silent_ticks_ = reads == reads_at_tick_ ? silent_ticks_ + 1 : 0;
  reads_at_tick_ = reads;
  if (silent_ticks_ >= silent_intervals) {
    went_silent_.store(true, std::memory_order_release);
    close("no bytes from " + peer_name() + " for " +
          fmt_seconds(cfg_->heartbeat * silent_intervals) + ": it stopped answering");
    return;
  }
  auto f = wire::make_small_frame();
  seal_small(f.span(), {.type = wire::kind::ping});
  std::unique_lock lk(mu_);
  if (closed_) return;
  out_.push_bytes(f.span());
  kick_locked(lk);  // may unlock
  if (!lk.owns_lock()) lk.lock();
  arm_heartbeat_locked();
}

}  // namespace tlaunch::rpc

#endif
