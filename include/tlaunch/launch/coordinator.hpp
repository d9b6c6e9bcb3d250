// The launcher side of a multi-process launch. It starts every node process
// (through a spawn function: fork/exec locally, an SSH channel remotely), sends
// each the launch secret on stdin, collects registrations, hands out the
// directory once all are in, and then watches: a failed node, a stop request,
// the end of every run() body, Ctrl-C or SIGTERM stop the whole program with a
// grace period, after which what is left is killed. A failed instance whose node has
// a restart policy is started again instead (lifecycle.hpp: restart_budget); once it
// registers, every process gets the directory again with its new address.
// A colocation group (launch/colocation.hpp) is one process, started for its leader's
// slot; each member registers on a connection of its own, and the group fails, stops
// and restarts as one.
// --terminal=tmux: every process's lines also go to a tmux window of its own
// (launch/tmux_terminal.hpp), a restarted process's to the window of the one it replaces.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <asio/ip/tcp.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../detail/build_id.hpp"
#include "../rpc/accept_loop.hpp"
#include "../rpc/connection.hpp"
#include "../rpc/runtime.hpp"
#include "../rpc/tls.hpp"
#include "../detail/secret.hpp"
#include "../wire/codec.hpp"
#include "child.hpp"
#include "colocation.hpp"
#include "flags.hpp"
#include "lifecycle.hpp"
#include "output.hpp"
#include "placement.hpp"
#include "tmux_terminal.hpp"

namespace tlaunch::launch {

// Starts the node process for `p` with the arguments `argv_tail` (the role and
// the passthrough flags) plus --tlaunch-coordinator=<an address of this machine
// that p.host reaches>:coordinator_port. Called on the coordinator's thread.
using spawn_fn = std::function<child_ptr(const placement& p, std::uint16_t coordinator_port,
                                         const std::vector<std::string>& argv_tail,
                                         child_callbacks cb)>;

class coordinator final : public rpc::connection_sink {
 public:
  coordinator(std::vector<tlaunch::detail::node_info> nodes, const options& o,
              output_printer& out)
      : nodes_(std::move(nodes)), opt_(o), out_(out), acceptor_(io_), grace_timer_(io_),
        start_timer_(io_) {
    // Without handle_signals (tlaunch::start) no signal_set at all: asio restores SIG_DFL,
    // not the caller's handler, when its last one goes.
    if (o.handle_signals) signals_.emplace(io_, SIGINT, SIGTERM);
    auto s = tlaunch::detail::random_secret();
    secret_.assign(s.begin(), s.end());
    auto cfg = std::make_shared<rpc::connection_config>();
    cfg->secret = secret_;
    cfg->build_id = tlaunch::detail::self_build_id();
    cfg->name = "launcher";
    cfg->max_frame = o.max_frame;
    cfg->handshake_timeout = o.handshake_timeout;
    cfg->heartbeat = o.heartbeat;
    cfg->liveness = o.liveness;
    if (o.tls) cfg->tls = std::make_shared<const rpc::tls_context>(cfg->secret);
    // Every node connects at start: they never count against the cap.
    std::size_t instances = 0;
    for (auto& n : nodes_) instances += n.replicas;
    cfg->max_unauthenticated =
        static_cast<std::uint32_t>(std::max<std::size_t>(o.max_unauthenticated, instances + 64));
    cfg_ = cfg;
    apply_restart_flags(nodes_, o);
    for (auto& n : nodes_)
      for (std::uint32_t r = 0; r < n.replicas; ++r) {
        slots_.push_back({});
        slots_.back().budget =
            restart_budget(n.restart.max_restarts, n.restart.window, n.restart.backoff);
        slots_.back().id = std::string(n.name) + "/" + std::to_string(r);
        slots_.back().leader = static_cast<std::uint32_t>(slots_.size() - 1);
        slots_.back().members = {slots_.back().leader};
        slots_.back().has_run = n.has_run;
        slots_.back().held = std::find(o.hold_stop.begin(), o.hold_stop.end(),
                                       slots_.back().id) != o.hold_stop.end();
        if (n.has_run) ++runs_left_;
      }
  }

  // The launch secret, when it was chosen before the launch (--launch=k8s writes it into
  // a Secret); call before listen().
  void use_secret(std::vector<std::uint8_t> secret) {
    secret_ = std::move(secret);
    auto cfg = std::make_shared<rpc::connection_config>(*cfg_);
    cfg->secret = secret_;
    cfg_ = cfg;
  }

  // Listens on bind_ip:port (0: any free port); returns the port.
  std::uint16_t listen(const std::string& bind_ip, std::uint16_t port = 0) {
    asio::ip::tcp::endpoint ep(asio::ip::make_address(bind_ip), port);
    acceptor_.open(ep.protocol());
    // Asio opens sockets without close-on-exec: node processes started later
    // would otherwise inherit the coordinator's listening socket.
    ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    acceptor_.bind(ep);
    acceptor_.listen();
    accept_next();
    return acceptor_.local_endpoint().port();
  }

  // Processes are started again by the platform, not by spawn (a k8s pod's container,
  // which the kubelet restarts): a failure the policy allows is announced and the
  // instance's registration awaited at once, without the backoff (the platform has its own).
  void external_restarts() { external_restarts_ = true; }

  // One process for each group, which its first instance's place and spawn stand for;
  // call before run().
  void colocate(const std::vector<colocation_group>& groups) {
    for (const auto& g : groups) {
      for (std::uint32_t f : g) slots_[f].leader = g[0];
      slots_[g[0]].members = g;
    }
  }

  // Runs the program to its end; returns the launcher's exit code.
  int run(const std::vector<placement>& places, const spawn_fn& spawn) {
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
    for (const auto& p : places) {
      auto& s = slots_[p.flat];
      if (s.leader != p.flat) continue;  // started with its group
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
        if (s.address.empty()) missing += (missing.empty() ? "" : ", ") + s.where;
      fail("launcher",
           "these nodes did not register within " +
               std::to_string(opt_.start_timeout.count() / 1000.0) + " s: " + missing,
           fault::error);
    });
    if (alive_ == 0) finish_if_done();
    io_.run();  // one thread: every state change below happens here
    for (auto& s : slots_) {
      s.proc.reset();
      s.lost_timer.reset();
      s.restart_timer.reset();
    }
    life_.stopped();
    report();
    if (terminal_) {
      terminal_->stop_watching();
      // The windows stay readable until the user closes the session, unless --terminal-close.
      if (opt_.terminal_close) terminal_->close();
      terminal_->release();
    }
    return life_.exit_code();
  }

  std::chrono::milliseconds time_to_registered() const { return registered_after_; }
  // When run() started the nodes.
  std::chrono::steady_clock::time_point run_started() const { return started_at_; }

  // connection_sink: the node processes' connections.
  void on_call(rpc::connection& c, const wire::frame_header& h,
               std::span<const char>) override {
    rpc::reply_error(c, h.call_id, wire::error_code::no_such_node,
                     "the launcher hosts no nodes");
  }
  void on_control(const std::shared_ptr<rpc::connection>& c, const wire::frame_header& h,
                  std::span<const char> payload) override {
    // Runs on the io threads; state changes go through one post each.
    std::string text;
    std::uint32_t flat = 0;
    std::string address;
    std::int64_t pid = 0;
    std::uint8_t f = 0;
    try {
      if (h.type == wire::kind::reg) wire::deserialize_from(payload, flat, address, pid);
      if (h.type == wire::kind::node_failed) {
        wire::deserialize_from(payload, text, f);
        if (f > static_cast<std::uint8_t>(fault::grace_overrun))
          throw std::runtime_error("unknown fault " + std::to_string(f));
      }
    } catch (const std::exception& e) {
      std::string why = std::string("malformed control frame: ") + e.what();
      log_bad_peer("malformed control frame", "closing connection from " + c->peer_name() + ": " + why);
      c->close(why);
      return;
    }
    asio::post(io_, [this, c, type = h.type, flat, address, pid, text, f] {
      on_control_frame(c, type, flat, address, pid, text, static_cast<fault>(f));
    });
  }
  void on_closed(const std::shared_ptr<rpc::connection>& c, const std::string& reason) override {
    asio::post(io_, [this, c, reason] {
      for (auto& s : slots_)
        if (s.conn == c) {
          s.conn.reset();
          // A child seen only through its connection (a k8s pod) ends with it.
          if (s.proc && !s.exited) s.proc->connection_closed();
          // An exit status that waited for this connection's last frames (see on_exit).
          if (auto& leader = slots_[s.leader]; leader.held_exit) {
            bool open = false;
            for (std::uint32_t m : leader.members) open = open || slots_[m].conn != nullptr;
            if (!open) judge_held_exit(s.leader, leader.gen);
          }
          if (life_.stopping() || s.exited || s.replacing) continue;
          // A process that dies closes its connection before its exit status is
          // known; wait a moment for that status, which says why (signal, code).
          // One still running then (hung, cut off) is killed if it is restarted. A
          // connection the heartbeat closed has a silent peer, not an exited one: no
          // status is coming, so it fails at once.
          const auto wait = c->went_silent() ? std::chrono::seconds(0) : std::chrono::seconds(1);
          s.lost_timer = std::make_unique<asio::steady_timer>(io_, wait);
          s.lost_timer->async_wait([this, &s, gen = s.gen, reason](std::error_code ec) {
            if (!ec && gen == s.gen && !life_.stopping() && !s.exited)
              failed(s, "lost its connection: " + reason, fault::lost, /*kill=*/true);
          });
        }
    });
  }
  void log(const std::string& m) override { out_.print("launcher", stream::err, m); }
  // Rate-limited, as every line about peers that misbehave (docs/guide/faults.md).
  void log_bad_peer(std::string_view reason, const std::string& line) {
    if (auto l = cfg_->bad_peer_log->admit(reason, line)) log(*l);
  }

  int exit_code() const { return life_.exit_code(); }
  std::optional<failure_report> failure() const { return life_.failure(); }

  // Begins the program's stop as stop_program() does; from any thread, while run() runs.
  void request_stop(const std::string& why) {
    asio::post(io_, [this, why] {
      if (!life_.stopping()) begin_stop(why);
    });
  }

 private:
  struct slot {
    std::string id, where;
    bool has_run = false;
    // Colocation: the slot whose process hosts this instance (itself when alone), and
    // in that slot, every instance of the process (itself first).
    std::uint32_t leader = 0;
    std::vector<std::uint32_t> members;
    child_ptr proc;
    std::shared_ptr<rpc::connection> conn;
    std::string address;
    bool done = false, exited = false;
    bool reported = false;  // sent node_failed: its exit code 1 was judged then
    bool killed = false;    // killed by us after the grace period
    bool held = false;      // options::hold_stop: its stop waits (tests only)
    bool stop_sent = false;
    std::unique_ptr<asio::steady_timer> lost_timer;  // see on_closed; a restart's registration
    std::unique_ptr<asio::steady_timer> hold_timer;
    // An exit status waiting for the node's connections to close (see on_exit).
    std::optional<exit_status> held_exit;
    std::unique_ptr<asio::steady_timer> exit_timer;
    // Restarts: where it runs, which start of it this is (callbacks of an earlier
    // process are ignored), its budget, and whether this process is being replaced.
    placement place;
    std::uint32_t gen = 0;
    restart_budget budget;
    bool replacing = false;
    std::string replace_reason;
    std::unique_ptr<asio::steady_timer> restart_timer;  // the backoff
    std::chrono::steady_clock::time_point ended_at;
  };

  // Starts (again) the process of s; throws when it cannot be started.
  void start_process(slot& s) {
    std::string role;
    for (std::uint32_t m : s.members) role.append(role.empty() ? "" : ",").append(slots_[m].id);
    std::vector<std::string> tail = {"--tlaunch-role=" + role};
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

  // s failed before the stop (lifecycle.hpp): restarted when its budget allows (a process
  // still running is stopped, or with `kill` killed, and restarted once it exits); else
  // the failure counts, naming the restarts it had.
  // A member of a colocation group fails its group: restarted when every member's budget
  // allows, else the group's failure.
  void failed(slot& member, const std::string& why, fault f, bool kill = false) {
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

  static std::string within(const restart_budget& b) {
    if (b.window().count() == 0) return "";
    return fmt::format(" within {} s", static_cast<double>(b.window().count()) / 1000.0);
  }

  // s's process ended and it is to be restarted: after its backoff, a fresh process.
  void schedule_restart(slot& s) {
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

  void restart(slot& s) {
    for (std::uint32_t m : s.members) {
      slot& x = slots_[m];
      if (m != s.leader) ++x.gen;  // a member's old connection timers are stale
      x.exited = x.replacing = x.killed = x.reported = x.stop_sent = false;
    }
    ++s.gen;
    s.exited = s.replacing = s.killed = s.reported = s.stop_sent = false;
    s.replace_reason.clear();
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

  // --terminal=tmux: the session, with a window for every process (named by its
  // instances, without the host), made before any starts; its close stops the program as
  // SIGTERM does. Throws launch_error when tmux cannot make it.
  void open_terminal(const std::vector<placement>& places) {
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

  // Never stops on an error (rpc/accept_loop.hpp); sockets are close-on-exec.
  void accept_next() {
    accept_loop_ = std::make_unique<rpc::accept_loop>(
        acceptor_,
        [this](asio::ip::tcp::socket s) {
          // Kept alive by its own read; owned by a slot once registered.
          (void)rpc::connection::accept(std::move(s), cfg_, this);
        },
        [this](const std::string& line) { log(line); }, cfg_->bad_peer_log);
    accept_loop_->start();
  }

  void on_control_frame(const std::shared_ptr<rpc::connection>& c, wire::kind type,
                        std::uint32_t flat, const std::string& address, std::int64_t pid,
                        const std::string& text,
                        fault f) {
    slot* s = nullptr;
    for (auto& x : slots_)
      if (x.conn == c) s = &x;
    if (type == wire::kind::reg) {
      if (flat >= slots_.size() || !slots_[flat].address.empty()) {
        const bool unknown = flat >= slots_.size();
        std::string why = "bad registration for instance #" + std::to_string(flat);
        why += unknown ? ": the program has " + std::to_string(slots_.size()) + " instances"
                       : " (" + slots_[flat].id + "): it is registered already";
        log_bad_peer(unknown ? "registration of an unknown instance" : "second registration",
                     "closing connection from " + c->peer_name() + ": " + why);
        c->close(why);
        return;
      }
      slots_[flat].conn = c;
      slots_[flat].address = address;
      if (auto& leader = slots_[slots_[flat].leader]; leader.proc && !leader.exited)
        leader.proc->registered(static_cast<long>(pid));
      if (life_.stopping()) return send_stop(slots_[flat]);
      if (slots_[flat].gen > 0 && slots_[flat].leader == flat)  // a group: said once
        out_.print("launcher", stream::err,
                   fmt::format("node {} restarted: registered {} ms after its process ended",
                               slots_[flat].where,
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now() - slots_[flat].ended_at)
                                   .count()));
      if (++registered_ == slots_.size()) send_directory();
      return;
    }
    if (!s) return;
    switch (type) {
      case wire::kind::node_done:
        if (s->has_run && !s->done) {
          s->done = true;
          if (--runs_left_ == 0) begin_stop("every run() body finished");
        }
        release_held(*s);
        break;
      case wire::kind::node_failed:
        s->reported = true;
        slots_[s->leader].reported = true;  // the process's exit code 1 was judged now
        failed(*s, slots_[s->leader].members.size() > 1 ? s->id + ": " + text : text, f);
        release_held(*s);
        break;
      case wire::kind::stop_request:
        begin_stop("stop_program() called by " + s->where);
        break;
      default:
        break;
    }
  }

  // Also once a restarted instance registers: the nodes that run already take it as
  // an update (rpc::runtime::update_directory).
  void send_directory() {
    if (!directory_sent_)
      registered_after_ = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - started_at_);
    directory_sent_ = true;
    start_timer_.cancel();
    send_addresses();
    if (runs_left_ == 0 && std::none_of(slots_.begin(), slots_.end(),
                                        [](const slot& s) { return s.has_run; })) {
      // Only services: the program runs until stopped.
    }
  }

  // The directory to every registered node; "" for an instance being restarted.
  void send_addresses() {
    std::vector<std::string> addrs;
    for (auto& s : slots_) addrs.push_back(s.address);
    for (auto& s : slots_) {
      wire::frame_buffer f;
      wire::serialize_into(f, addrs);
      f.seal({.type = wire::kind::directory});
      if (s.conn) s.conn->send(std::move(f));
    }
  }

  // A node failed (see lifecycle.hpp for what counts); a failure that counts stops the
  // program, if it is not stopping already.
  void fail(const std::string& where, const std::string& why, fault f) {
    bool first = !life_.stopping();
    if (!life_.fail(where, why, f)) return;
    // Named at once: stopping may take the grace period, or for a host cut off its SSH
    // session's timeout; report() repeats it at the end with the node's last lines.
    if (first)
      out_.print("launcher", stream::err,
                 fmt::format("node {} failed: {}; stopping every node", where, why));
    stop_all();
  }

  void send_stop(slot& s) {
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
    if (s.stop_sent) return;
    s.stop_sent = true;
    if (s.conn) {
      // 1: the program stops, 0: only this process does (it is to be restarted).
      wire::frame_buffer f;
      wire::serialize_into(f, static_cast<std::uint8_t>(life_.stopping() ? 1 : 0));
      f.seal({.type = wire::kind::stop});
      s.conn->send(std::move(f));
    }
    if (s.proc && !s.exited) s.proc->close_stdin();
  }

  void release_held(slot& s) {
    if (!s.held) return;
    s.held = false;
    if (s.hold_timer) s.hold_timer->cancel();
    if (life_.stopping()) send_stop(s);
  }

  void begin_stop(const std::string& why) {
    life_.begin_stop(why);
    stop_all();
  }

  // Tells every node to stop, once; the grace period starts now.
  void stop_all() {
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

  static bool plain_code_1(const exit_status& st) {
    return st.code == 1 && st.signal == 0 && st.signal_name.empty() && st.unknown.empty();
  }

  // judge_now: the exit is judged even if a member's connection is still open.
  void on_exit(std::uint32_t flat, std::uint32_t gen, const exit_status& st, bool judge_now = false) {
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
    finish_if_done();
  }

  void judge_held_exit(std::uint32_t flat, std::uint32_t gen) {
    auto& s = slots_[flat];
    if (gen != s.gen || !s.held_exit) return;
    exit_status st = *s.held_exit;
    on_exit(flat, gen, st, /*judge_now=*/true);
  }

  static fault fault_of(const exit_status& st) {
    if (!st.unknown.empty()) return fault::lost;
    if (st.signal != 0 || !st.signal_name.empty()) {
      bool stop = st.signal != 0 ? stop_signal(st.signal) : stop_signal(st.signal_name);
      return stop ? fault::lost : fault::signal;
    }
    return fault::exit_code;
  }

  void finish_if_done() {
    if (!life_.stopping() || alive_ > 0) return;
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

  void on_signal(std::error_code ec, int sig) {
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

  void report() {
    auto f = life_.failure();
    if (!f) return;
    out_.print("launcher", stream::err, "node " + f->where + " failed: " + f->why);
    auto lines = out_.last_lines(f->where);
    if (!lines.empty()) {
      out_.print("launcher", stream::err, "last output of " + f->where + ":");
      for (auto& l : lines) out_.print("launcher", stream::err, "  " + l);
    }
  }

  std::vector<tlaunch::detail::node_info> nodes_;
  const options& opt_;
  output_printer& out_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  std::unique_ptr<rpc::accept_loop> accept_loop_;  // made by listen()
  asio::steady_timer grace_timer_, start_timer_;
  std::optional<asio::signal_set> signals_;
  std::vector<std::uint8_t> secret_;
  std::shared_ptr<const rpc::connection_config> cfg_;
  std::vector<slot> slots_;
  const spawn_fn* spawn_ = nullptr;  // run()'s, for restarts
  std::uint16_t port_ = 0;
  std::string secret_line_;
  std::size_t registered_ = 0, alive_ = 0, runs_left_ = 0;
  bool directory_sent_ = false, stop_all_done_ = false, external_restarts_ = false;
  lifecycle life_;
  std::chrono::steady_clock::time_point started_at_;
  std::chrono::milliseconds registered_after_{0}, stopped_after_{0};
  std::unique_ptr<tmux_terminal> terminal_;  // --terminal=tmux

 public:
  std::chrono::milliseconds time_to_stop() const { return stopped_after_; }
};

}  // namespace tlaunch::launch
