// The coordinator's process table (launch/process/coordinator.hpp): run() starts a process for each
// slot (a colocation group's for its leader), judges each exit, and restarts a failed
// instance within its restart policy's budget after the backoff; the tmux terminal's windows.
// Compiled once in the library (tlaunch/impl/src/launch_process.hpp), inline when header-only.
#pragma once

#include "../coordinator.hpp"

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_PROCESS)
namespace tlaunch::launch {

TLAUNCH_DECL int coordinator::run(const std::vector<placement>& places, const spawn_fn& spawn) {
  port_ = acceptor_.local_endpoint().port();
  spawn_ = &spawn;
  started_at_ = std::chrono::steady_clock::now();
  if (signals_) signals_->async_wait([this](std::error_code ec, int sig) { on_signal(ec, sig); });
  secret_line_ = tlaunch::detail::to_hex(secret_) + "\n";
  for (const auto& p : places) {
    auto& s = slots_[p.flat];
    s.where = p.host.empty() ? s.id : s.id + "@" + p.host;
    s.place = p;
  }
  // A group's process is named by its members ("learner/0+replay/0"): its output,
  // its failures.
  for (auto& s : slots_) {
    if (s.members.size() < 2) continue;
    std::string ids;
    for (std::uint32_t m : s.members) ids.append(ids.empty() ? "" : "+").append(slots_[m].id);
    s.where = s.place.host.empty() ? ids : ids + "@" + s.place.host;
  }
  if (opt_.terminal == "tmux") open_terminal(places);
  start_observing();
  for (const auto& p : places) {
    auto& s = slots_[p.flat];
    if (s.leader != p.flat) continue;  // started with its group
    if (s.dormant) continue;            // an elastic node's replica, started by a resize
    try {
      start_process(s);
    } catch (const std::exception& e) {
      s.exited = true;
      fail(s.where, std::string("cannot start: ") + e.what(), fault::exit_code);
      break;
    }
  }
  start_timer_.expires_after(opt_.start_timeout);
  start_timer_.async_wait([this](std::error_code ec) {
    if (ec || directory_sent_ || life_.stopping()) return;
    std::string missing;
    for (auto& s : slots_)
      if (s.address.empty() && !s.dormant) missing += (missing.empty() ? "" : ", ") + s.where;
    fail("launcher",
         "these nodes did not register within " +
             std::to_string(opt_.start_timeout.count() / 1000.0) + " s: " + missing,
         fault::error);
  });
  if (alive_ == 0) finish_if_done();
  io_.run();  // one thread: every state change below happens here
  while (!resizes_.empty()) {  // asked for as the program stopped
    auto done = std::move(resizes_.front().done);
    resizes_.pop_front();
    if (done) done("resize: the program has stopped");
  }
  for (auto& s : slots_) {
    s.proc.reset();
    s.lost_timer.reset();
    s.restart_timer.reset();
  }
  life_.stopped();
  finish_trace();
  report();
  if (terminal_) {
    terminal_->stop_watching();
    // The windows stay readable until the user closes the session, unless --terminal-close.
    if (opt_.terminal_close) terminal_->close();
    terminal_->release();
  }
  return life_.exit_code();
}

TLAUNCH_DECL void coordinator::start_process(slot& s) {
  std::string role;
  for (std::uint32_t m : s.members) role.append(role.empty() ? "" : ",").append(slots_[m].id);
  std::vector<std::string> tail = {"--tlaunch-role=" + role};
  if (s.incarnation > 0) tail.push_back("--tlaunch-incarnation=" + std::to_string(s.incarnation));
  // Set as an option (tlaunch::start) rather than a flag: the node processes need it too.
  if (opt_.tls && std::find(opt_.passthrough.begin(), opt_.passthrough.end(), "--tls") ==
                      opt_.passthrough.end())
    tail.push_back("--tls");
  tail.insert(tail.end(), opt_.passthrough.begin(), opt_.passthrough.end());
  child_callbacks cb;
  std::uint32_t flat = s.place.flat, gen = s.gen;
  cb.on_line = [this, flat](stream st, std::string_view line) {
    out_.print(slots_[flat].where, st, line);
    if (terminal_) terminal_->line(slots_[flat].where, line);
  };
  cb.on_exit = [this, flat, gen](const exit_status& st) {
    asio::post(io_, [this, flat, gen, st] { on_exit(flat, gen, st); });
  };
  s.proc = (*spawn_)(s.place, port_, tail, std::move(cb));
  s.proc->write_stdin(secret_line_);
  ++alive_;
}

TLAUNCH_DECL void coordinator::failed(slot& member, const std::string& why, fault f, bool kill) {
  slot& s = slots_[member.leader];
  if (life_.stopping()) return fail(s.where, why, f);
  if (s.replacing) return;
  auto now = std::chrono::steady_clock::now();
  for (std::uint32_t m : s.members) {
    restart_budget& b = slots_[m].budget;
    if (b.allows(now)) continue;
    std::string spent;
    std::string who = s.members.size() > 1 ? slots_[m].id + " " : "";
    if (b.max() > 0)
      spent = fmt::format("; {}restarted {} time{}{}, the limit of its restart policy", who,
                          b.count(), b.count() == 1 ? "" : "s", within(b));
    else if (s.members.size() > 1)
      spent = fmt::format("; {}has no restart policy", who);
    if (s.members.size() > 1) spent += " (a colocation group restarts only as a whole)";
    return fail(s.where, why + spent, f);
  }
  s.replacing = true;
  s.replace_reason = why;
  if (s.exited) return schedule_restart(s);
  if (kill) {
    s.killed = true;
    s.proc->kill();
  } else {
    send_stop(s);
  }
}

TLAUNCH_DECL void coordinator::schedule_restart(slot& s) {
  auto now = std::chrono::steady_clock::now();
  auto wait = s.budget.take(now);
  for (std::uint32_t m : s.members) {
    slot& x = slots_[m];
    x.ended_at = now;
    if (m == s.leader) continue;
    wait = std::max(wait, x.budget.take(now));
    if (x.conn) x.conn->close("its node is being restarted");
    x.conn.reset();
    if (!x.address.empty()) {
      x.address.clear();
      --registered_;
    }
    x.lost_timer.reset();
  }
  if (external_restarts_) wait = std::chrono::milliseconds(0);
  out_.print("launcher", stream::err,
             fmt::format("node {} failed: {}; restart {} of at most {}{}, {}", s.where,
                         s.replace_reason, s.budget.count(), s.budget.max(), within(s.budget),
                         external_restarts_ ? std::string("awaiting its new process")
                                            : fmt::format("in {} ms", wait.count())));
  if (s.conn) s.conn->close("its node is being restarted");
  s.conn.reset();
  if (!s.address.empty()) {
    s.address.clear();
    --registered_;
  }
  // Its old address goes: calls to it fail as unavailable at once, saying why.
  if (directory_sent_) send_addresses();
  s.lost_timer.reset();
  s.restart_timer = std::make_unique<asio::steady_timer>(io_, wait);
  s.restart_timer->async_wait([this, &s, gen = s.gen](std::error_code ec) {
    if (ec || gen != s.gen || life_.stopping()) return;
    restart(s);
  });
}

TLAUNCH_DECL void coordinator::restart(slot& s) {
  for (std::uint32_t m : s.members) {
    slot& x = slots_[m];
    if (m != s.leader) ++x.gen;  // a member's old connection timers are stale
    x.exited = x.replacing = x.killed = x.reported = x.stop_sent = x.stdin_closed = false;
  }
  ++s.gen;
  ++s.incarnation;
  s.exited = s.replacing = s.killed = s.reported = s.stop_sent = s.stdin_closed = false;
  s.replace_reason.clear();
  s.metrics.reset();  // the new process counts from zero
  s.metrics_before.reset();
  if (terminal_) terminal_->line(s.where, "--- restarted ---");
  try {
    start_process(s);
  } catch (const std::exception& e) {
    s.exited = true;
    fail(s.where, std::string("cannot restart: ") + e.what(), fault::exit_code);
    return finish_if_done();
  }
  // A restarted process that never registers is a failure like any other.
  s.lost_timer = std::make_unique<asio::steady_timer>(io_, opt_.start_timeout);
  s.lost_timer->async_wait([this, &s, gen = s.gen](std::error_code ec) {
    if (!ec && gen == s.gen && !life_.stopping() && !s.exited &&
        std::any_of(s.members.begin(), s.members.end(),
                    [this](std::uint32_t m) { return slots_[m].address.empty(); }))
      failed(s,
             fmt::format("restarted, but did not register within {} s",
                         static_cast<double>(opt_.start_timeout.count()) / 1000.0),
             fault::error, /*kill=*/true);
  });
}

TLAUNCH_DECL void coordinator::open_terminal(const std::vector<placement>& places) {
  terminal_ = std::make_unique<tmux_terminal>(fmt::format("tlaunch-{}", ::getpid()));
  try {
    for (const auto& p : places) {
      const auto& s = slots_[p.flat];
      if (s.leader != p.flat) continue;
      terminal_->add_window(s.where, s.where.substr(0, s.where.find('@')));
    }
  } catch (...) {
    terminal_->close();  // no session with some of the windows
    throw;
  }
  out_.print("launcher", stream::err,
             fmt::format("tmux session {}, one window per node: tmux attach -t {}",
                         terminal_->name(), terminal_->name()));
  terminal_->watch([this] {
    asio::post(io_, [this] {
      if (life_.stopping()) return;
      out_.print("launcher", stream::err,
                 fmt::format("tmux session {} closed: stopping every node", terminal_->name()));
      life_.interrupted(SIGTERM);
      begin_stop("its tmux session was closed");
    });
  });
}

TLAUNCH_DECL void coordinator::on_exit(std::uint32_t flat, std::uint32_t gen, const exit_status& st, bool judge_now) {
  auto& s = slots_[flat];
  if (s.exited || gen != s.gen) return;
  bool reported = false, connected = false;
  for (std::uint32_t m : s.members) {
    reported = reported || slots_[m].reported;
    connected = connected || slots_[m].conn != nullptr;
  }
  if (!judge_now && life_.stopping() && !s.killed && !reported && connected &&
      plain_code_1(st)) {
    // Exit code 1 while stopping: the run() failure behind it, if the node reported one
    // (judged then: a failure the stop caused is none), is on its connection, which
    // closes after the report. Its exit status can come first (relayed by an ssh
    // agent): judge once the connections have closed, or a second later.
    s.held_exit = st;
    s.exit_timer = std::make_unique<asio::steady_timer>(io_, std::chrono::seconds(1));
    s.exit_timer->async_wait([this, flat, gen](std::error_code ec) {
      if (!ec) judge_held_exit(flat, gen);
    });
    return;
  }
  s.held_exit.reset();
  if (s.exit_timer) s.exit_timer->cancel();
  s.exited = true;
  for (std::uint32_t m : s.members) slots_[m].exited = true;
  --alive_;
  release_held(s);
  if (s.retiring) {
    // Removed by a resize (coordinator/resize.hpp): not a failure, never restarted. Its
    // run() body, if any, was ended by the removal.
    if (!st.ok())
      out_.print("launcher", stream::err,
                 fmt::format("node {} ended while being removed: {}", s.where, st.describe()));
    if (s.has_run && !s.done) {
      s.done = true;
      if (--runs_left_ == 0 && !life_.stopping()) begin_stop("every run() body finished");
    }
    if (terminal_) terminal_->line(s.where, "--- removed by a resize ---");
    advance_resize();
    return finish_if_done();
  }
  bool counted = false;  // this exit is a failure of the program
  if (!life_.stopping()) {
    counted = true;
    std::string why =
        st.ok() ? std::string("exited before the program stopped") : st.describe();
    if (s.replacing) {
      s.replace_reason += " (" + why + ")";
      schedule_restart(s);
    } else {
      failed(s, why, fault_of(st));
    }
  } else if (!st.ok() && !s.killed && !(reported && plain_code_1(st))) {
    // A node that fails while stopping is still a failure worth reporting; a run()
    // failure it reported was judged when the report came.
    fail(s.where, st.describe() + " while stopping", fault_of(st));
    counted = true;
  }
  if (terminal_)
    terminal_->line(s.where, tmux_terminal::exit_line(st, life_.stopping() && !counted && !s.killed));
  advance_resize();  // a resize waits for no process that ended
  finish_if_done();
}

TLAUNCH_DECL void coordinator::judge_held_exit(std::uint32_t flat, std::uint32_t gen) {
  auto& s = slots_[flat];
  if (gen != s.gen || !s.held_exit) return;
  exit_status st = *s.held_exit;
  on_exit(flat, gen, st, /*judge_now=*/true);
}

TLAUNCH_DECL fault coordinator::fault_of(const exit_status& st) {
  if (!st.unknown.empty()) return fault::lost;
  if (st.signal != 0 || !st.signal_name.empty()) {
    bool stop = st.signal != 0 ? stop_signal(st.signal) : stop_signal(st.signal_name);
    return stop ? fault::lost : fault::signal;
  }
  return fault::exit_code;
}

}  // namespace tlaunch::launch
#endif
