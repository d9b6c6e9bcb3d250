// The coordinator's stop (launch/process/coordinator.hpp): a failure that counts, stop_program(),
// the end of every run() body or a signal begin the program's stop; every node is told to
// stop once, the grace period runs, what is left is killed, and the launcher ends with the
// first failure's report.
// Compiled once in the library (tlaunch/impl/src/launch_process.hpp), inline when header-only.
#pragma once

#include "../coordinator.hpp"

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_PROCESS)
namespace tlaunch::launch {

TLAUNCH_DECL void coordinator::request_stop(const std::string& why) {
  asio::post(io_, [this, why] {
    if (!life_.stopping()) begin_stop(why);
  });
}

TLAUNCH_DECL void coordinator::fail(const std::string& where, const std::string& why, fault f) {
  bool first = !life_.stopping();
  if (!life_.fail(where, why, f)) return;
  // Named at once: stopping may take the grace period, or for a host cut off its SSH
  // session's timeout; report() repeats it at the end with the node's last lines.
  if (first)
    out_.print("launcher", stream::err,
               fmt::format("node {} failed: {}; stopping every node", where, why));
  stop_all();
}

TLAUNCH_DECL void coordinator::send_stop(slot& s) {
  if (s.held && !s.exited && !s.reported && !s.done) {
    // Tests only: this node's stop waits until it reports or a few seconds pass.
    if (!s.hold_timer) {
      s.hold_timer = std::make_unique<asio::steady_timer>(io_, std::chrono::seconds(5));
      s.hold_timer->async_wait([this, &s](std::error_code ec) {
        if (!ec) release_held(s);
      });
    }
    return;
  }
  // Each once: the stop frame once the instance has a connection (one that registers
  // after the stop began gets it then), its process's stdin at once.
  if (s.conn && !s.stop_sent) {
    s.stop_sent = true;
    // 1: the program stops, 0: only this process does (it is to be restarted).
    wire::frame_buffer f;
    wire::serialize_into(f, static_cast<std::uint8_t>(life_.stopping() ? 1 : 0));
    f.seal({.type = wire::kind::stop});
    s.conn->send(std::move(f));
  }
  if (s.proc && !s.exited && !s.stdin_closed) {
    s.stdin_closed = true;
    s.proc->close_stdin();
  }
}

TLAUNCH_DECL void coordinator::release_held(slot& s) {
  if (!s.held) return;
  s.held = false;
  if (s.hold_timer) s.hold_timer->cancel();
  if (life_.stopping()) send_stop(s);
}

TLAUNCH_DECL void coordinator::begin_stop(const std::string& why) {
  life_.begin_stop(why);
  stop_all();
}

TLAUNCH_DECL void coordinator::stop_all() {
  if (stop_all_done_) return;
  stop_all_done_ = true;
  start_timer_.cancel();
  for (auto& s : slots_) send_stop(s);
  grace_timer_.expires_after(opt_.grace + std::chrono::milliseconds(500));
  grace_timer_.async_wait([this](std::error_code ec) {
    if (ec) return;
    for (auto& s : slots_)
      if (s.proc && !s.exited) {
        out_.print(s.where, stream::err,
                   "did not stop within the grace period; killing it");
        if (terminal_)
          terminal_->line(s.where, "--- did not stop within the grace period; killing it ---");
        s.killed = true;
        s.proc->kill();
        // A node that had to be killed failed to stop, whoever's timer ran out first:
        // its own (it exits with code 4) or this one.
        life_.fail(s.where, "did not stop within the grace period; killed",
                   fault::grace_overrun);
      }
  });
  finish_if_done();
}

TLAUNCH_DECL void coordinator::finish_if_done() {
  if (!life_.stopping() || alive_ > 0) return;
  // Every process has exited, but what one sent last (its last spans, a report) may still
  // be unread on its connection, which it closed as it exited: read up to that close
  // (on_closed comes here again), for at most a second.
  const auto now = std::chrono::steady_clock::now();
  if (!unread_until_) unread_until_ = now + std::chrono::seconds(1);
  if (now < *unread_until_ &&
      std::any_of(slots_.begin(), slots_.end(), [](const slot& s) { return s.conn != nullptr; })) {
    unread_timer_.expires_at(*unread_until_);
    unread_timer_.async_wait([this](std::error_code ec) {
      if (!ec) finish_if_done();
    });
    return;
  }
  unread_timer_.cancel();
  stopped_after_ = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - life_.stop_began());
  grace_timer_.cancel();
  start_timer_.cancel();
  std::error_code ec;
  if (signals_) signals_->cancel(ec);
  acceptor_.close(ec);
  for (auto& s : slots_)
    if (s.conn) s.conn->close("program stopped");
  io_.stop();
}

TLAUNCH_DECL void coordinator::on_signal(std::error_code ec, int sig) {
  if (ec) return;
  if (life_.stopping()) {
    // A signal cuts the stop short (Ctrl-C twice, or once while a stop_program() or a
    // failure waits out the grace period): the launcher exits 128 + sig, as local_mt
    // does, unless a failure came first; not 0 with nodes that had to be killed.
    out_.print("launcher", stream::err,
               fmt::format("{} while stopping: killing every node now",
                           sig == SIGINT ? "interrupted" : "terminated"));
    life_.interrupted(sig);
    for (auto& s : slots_)
      if (s.proc && !s.exited) s.proc->kill();
  } else {
    out_.print("launcher", stream::err,
               sig == SIGINT ? "interrupted: stopping every node" : "terminated: stopping every node");
    life_.interrupted(sig);
    begin_stop(sig == SIGINT ? "interrupted" : "terminated");
  }
  signals_->async_wait([this](std::error_code ec, int sig) { on_signal(ec, sig); });
}

TLAUNCH_DECL void coordinator::report() {
  auto f = life_.failure();
  if (!f) return;
  out_.print("launcher", stream::err, "node " + f->where + " failed: " + f->why);
  auto lines = out_.last_lines(f->where);
  if (!lines.empty()) {
    out_.print("launcher", stream::err, "last output of " + f->where + ":");
    for (auto& l : lines) out_.print("launcher", stream::err, "  " + l);
  }
}

}  // namespace tlaunch::launch
#endif
