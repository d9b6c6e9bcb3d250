// The coordinator's side of the control protocol (launch/process/coordinator.hpp): its setup and
// listening socket, the node processes' connections (accepted, read, closed), their
// registrations, and the directory of addresses it sends once every instance registered and
// again after a restart.
// Compiled once in the library (tlaunch/impl/src/launch_process.hpp), inline when header-only.
#pragma once

#include "../coordinator.hpp"

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_PROCESS)
namespace tlaunch::launch {

namespace detail {
TLAUNCH_DECL std::vector<std::string>& coordinator_test_access::list() {
  static std::vector<std::string> held;
  return held;
}
TLAUNCH_DECL void coordinator_test_access::hold_stop(std::vector<std::string> instances) {
  list() = std::move(instances);
}
TLAUNCH_DECL std::vector<std::string> coordinator_test_access::held() { return list(); }
}  // namespace detail

TLAUNCH_DECL coordinator::coordinator(std::vector<tlaunch::rpc::node_info> nodes, const options& o,
            output_printer& out)
    : nodes_(std::move(nodes)), opt_(o), out_(out), acceptor_(io_), grace_timer_(io_),
      start_timer_(io_) {
  // Without handle_signals (tlaunch::start) no signal_set at all: asio restores SIG_DFL,
  // not the caller's handler, when its last one goes.
  if (o.handle_signals) signals_.emplace(io_, SIGINT, SIGTERM);
  auto s = tlaunch::detail::random_secret();
  secret_.assign(s.begin(), s.end());
  // Every node connects at start: they never count against the cap.
  cfg_ = rpc::make_connection_config(connection_settings_of(o), secret_, "launcher",
                                     rpc::instance_count(nodes_));
  const auto held = detail::coordinator_test_access::held();
  for (auto& n : nodes_) {
    running_.push_back(n.elastic ? n.initial : n.replicas);
    for (std::uint32_t r = 0; r < n.replicas; ++r) {
      slots_.push_back({});
      slots_.back().dormant = n.elastic && r >= n.initial;
      slots_.back().budget =
          restart_budget(n.restart.max_restarts, n.restart.window, n.restart.backoff);
      slots_.back().id = std::string(n.name) + "/" + std::to_string(r);
      slots_.back().leader = static_cast<std::uint32_t>(slots_.size() - 1);
      slots_.back().members = {slots_.back().leader};
      slots_.back().has_run = n.has_run;
      slots_.back().held = std::find(held.begin(), held.end(), slots_.back().id) != held.end();
      if (n.has_run && !slots_.back().dormant) ++runs_left_;
    }
  }
}

TLAUNCH_DECL void coordinator::use_secret(std::vector<std::uint8_t> secret) {
  secret_ = std::move(secret);
  // Made again, TLS's keys too: they come from the secret.
  cfg_ = rpc::make_connection_config(connection_settings_of(opt_), secret_, "launcher",
                                     rpc::instance_count(nodes_));
}

TLAUNCH_DECL std::uint16_t coordinator::listen(const std::string& bind_ip, std::uint16_t port) {
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

TLAUNCH_DECL void coordinator::colocate(const std::vector<colocation_group>& groups) {
  for (const auto& g : groups) {
    for (std::uint32_t f : g) slots_[f].leader = g[0];
    slots_[g[0]].members = g;
  }
}

TLAUNCH_DECL void coordinator::on_call(rpc::connection& c, const wire::frame_header& h,
             std::span<const char>) {
  rpc::reply_error(c, h.call_id, wire::error_code::no_such_node,
                   "the launcher hosts no nodes");
}

TLAUNCH_DECL void coordinator::on_control(const std::shared_ptr<rpc::connection>& c, const wire::frame_header& h,
                std::span<const char> payload) {
  // Runs on the io threads; state changes go through one post each.
  std::string text;
  std::uint32_t flat = 0;
  std::string address;
  std::int64_t pid = 0;
  std::uint8_t f = 0;
  try {
    if (h.type == wire::kind::reg) wire::deserialize_from(payload, flat, address, pid);
    if (h.type == wire::kind::metrics) {
      auto sample = std::make_shared<rpc::metrics_sample>();
      wire::deserialize_from(payload, *sample);
      asio::post(io_, [this, c, sample = std::shared_ptr<const rpc::metrics_sample>(sample)] {
        const auto now = std::chrono::steady_clock::now();
        for (auto& x : slots_)
          if (x.conn == c) {
            x.metrics_before = std::move(x.metrics);
            x.metrics_before_at = x.metrics_at;
            x.metrics = sample;
            x.metrics_at = now;
          }
      });
      return;
    }
    if (h.type == wire::kind::clock_reply) {
      std::int64_t sent = 0, node_now = 0;
      wire::deserialize_from(payload, sent, node_now);
      const std::int64_t now = rpc::trace_wall_now();
      asio::post(io_, [this, c, sent, node_now, now] { on_clock_reply(c, sent, node_now, now); });
      return;
    }
    if (h.type == wire::kind::trace_spans) {
      auto b = std::make_shared<rpc::trace_batch>();
      wire::deserialize_from(payload, *b);
      asio::post(io_, [this, c, b] { on_trace_spans(c, *b); });
      return;
    }
    if (h.type == wire::kind::membership_ack) {
      std::uint64_t epoch = 0;
      wire::deserialize_from(payload, epoch);
      asio::post(io_, [this, c, epoch] {
        for (auto& x : slots_)
          if (x.conn == c) {
            auto& leader = slots_[x.leader];
            leader.acked = std::max(leader.acked, epoch);
          }
        advance_resize();
      });
      return;
    }
    if (h.type == wire::kind::resize_request) {
      std::uint64_t id = 0;
      std::string node;
      std::uint32_t n = 0;
      wire::deserialize_from(payload, id, node, n);
      asio::post(io_, [this, c, id, node, n] { on_resize_request(c, id, node, n); });
      return;
    }
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

TLAUNCH_DECL void coordinator::on_closed(const std::shared_ptr<rpc::connection>& c, const std::string& reason) {
  asio::post(io_, [this, c, reason] {
    // The last close after every process exited ends the run (finish_if_done).
    struct then_finish {
      coordinator* self;
      ~then_finish() {
        if (self->life_.stopping() && self->alive_ == 0) self->finish_if_done();
      }
    } finish_after{this};
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
        if (life_.stopping() || s.exited || s.replacing || slots_[s.leader].retiring) continue;
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

TLAUNCH_DECL void coordinator::log_bad_peer(std::string_view reason, const std::string& line) {
  if (auto l = cfg_->bad_peer_log->admit(reason, line)) log(*l);
}

TLAUNCH_DECL void coordinator::accept_next() {
  accept_loop_ = std::make_unique<rpc::accept_loop>(
      acceptor_,
      [this](asio::ip::tcp::socket s) {
        // Kept alive by its own read; owned by a slot once registered.
        (void)rpc::connection::accept(std::move(s), cfg_, this);
      },
      [this](const std::string& line) { log(line); }, cfg_->bad_peer_log);
  accept_loop_->start();
}

TLAUNCH_DECL void coordinator::on_control_frame(const std::shared_ptr<rpc::connection>& c, wire::kind type,
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
    slots_[flat].sent_epoch = slots_[flat].acked = 0;  // a new process
    slots_[flat].pid = pid;
    if (trace_) probe_clock(slots_[flat]);
    if (auto& leader = slots_[slots_[flat].leader]; leader.proc && !leader.exited)
      leader.proc->registered(static_cast<long>(pid));
    if (life_.stopping()) return send_stop(slots_[flat]);
    if (slots_[flat].gen > 0 && slots_[flat].leader == flat &&
        !std::exchange(slots_[flat].added, false))  // a group: said once
      out_.print("launcher", stream::err,
                 fmt::format("node {} restarted: registered {} ms after its process ended",
                             slots_[flat].where,
                             std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now() - slots_[flat].ended_at)
                                 .count()));
    ++registered_;
    // A replica a resize adds: the resize sends the directory once all of its are in.
    if (!resizes_.empty() && resizes_.front().at == resize_op::stage::growing)
      advance_resize();
    else if (registered_ == active_slots())
      send_directory();
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

TLAUNCH_DECL void coordinator::send_directory() {
  if (!directory_sent_)
    registered_after_ = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started_at_);
  directory_sent_ = true;
  start_timer_.cancel();
  send_addresses();
  advance_resize();  // one asked for before the program had started
}

TLAUNCH_DECL void coordinator::send_addresses() {
  std::vector<std::string> addrs;
  for (auto& s : slots_) addrs.push_back(s.address);
  ++epoch_;
  for (auto& s : slots_) {
    wire::frame_buffer f;
    wire::serialize_into(f, addrs, running_, epoch_);
    f.seal({.type = wire::kind::directory});
    if (!s.conn) continue;
    s.conn->send(std::move(f));
    s.sent_epoch = epoch_;
  }
}

}  // namespace tlaunch::launch
#endif
