// The coordinator's resizes of elastic nodes (launch/process/coordinator.hpp;
// docs/guide/elastic.md). One at a time, in the order asked:
//
// - growing: each new replica's process is started where the placement put it (as a restart
//   is) and registers; then every process gets the directory with the new running count
//   and acknowledges it (membership_ack), and the resize is done: a broadcast started after
//   it reaches the new replicas.
// - shrinking: every process gets the directory with the smaller count first and
//   acknowledges it; each sent, before its acknowledgement, a fence on each of its peer
//   connections. Then each removed replica is told to go (stop frame, 2): it waits for the
//   fences, answers the calls it was serving, writes its snapshot and exits. Once all have
//   exited, their addresses leave the directory and the resize is done.
//
// Compiled once in the library (tlaunch/impl/src/launch_process.hpp), inline when header-only.
#pragma once

#include "../coordinator.hpp"
#include "../../observe/http_endpoint.hpp"

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_PROCESS)
namespace tlaunch::launch {

TLAUNCH_DECL std::size_t coordinator::active_slots() const {
  return static_cast<std::size_t>(
      std::count_if(slots_.begin(), slots_.end(), [](const slot& s) { return !s.dormant; }));
}

TLAUNCH_DECL bool coordinator::all_acked(std::uint64_t epoch) const {
  for (std::uint32_t f = 0; f < slots_.size(); ++f) {
    const slot& s = slots_[f];
    if (s.leader != f || s.dormant || s.exited || s.replacing || !s.conn) continue;
    if (s.sent_epoch >= epoch && s.acked < epoch) return false;
  }
  return true;
}

TLAUNCH_DECL std::string coordinator::resize_refusal(const std::string& node, std::uint32_t n,
                                                    std::uint32_t& index) const {
  std::string names;
  for (index = 0; index < nodes_.size(); ++index) {
    if (nodes_[index].name == node) break;
    names.append(names.empty() ? "" : ", ").append(nodes_[index].name);
  }
  if (index == nodes_.size())
    return "resize: node '" + node + "' is not in the program (nodes: " + names + ")";
  const auto& info = nodes_[index];
  if (!info.elastic)
    return "resize: node '" + node +
           "' is not elastic (declare it with node<...>(...).elastic(max))";
  if (n > info.replicas)
    return "resize: node '" + node + "' may run at most " + std::to_string(info.replicas) +
           " replicas (its .elastic(" + std::to_string(info.replicas) + ")), not " +
           std::to_string(n);
  if (life_.stopping()) return "resize: node '" + node + "': the program is stopping";
  return "";
}

TLAUNCH_DECL void coordinator::resize(const std::string& node, std::uint32_t n,
                                      std::function<void(std::string)> done) {
  asio::post(io_, [this, node, n, done = std::move(done)]() mutable {
    resize_op r;
    if (auto refused = resize_refusal(node, n, r.node); !refused.empty())
      return done(std::move(refused));
    r.to = n;
    r.done = std::move(done);
    resizes_.push_back(std::move(r));
    advance_resize();
  });
}

TLAUNCH_DECL observe::http_response coordinator::resize_by_post(std::string_view path,
                                                               std::string_view query) {
  auto text = [](int status, std::string body) {
    return observe::http_response{status, "text/plain; charset=utf-8", std::move(body) + "\n"};
  };
  if (path != "/api/resize") return text(404, "not found: " + std::string(path));
  std::string node, count;
  for (std::string_view q = query; !q.empty();) {
    const auto amp = q.find('&');
    const std::string_view kv = q.substr(0, amp);
    if (kv.rfind("node=", 0) == 0) node = kv.substr(5);
    if (kv.rfind("replicas=", 0) == 0) count = kv.substr(9);
    if (amp == std::string_view::npos) break;
    q.remove_prefix(amp + 1);
  }
  if (node.empty() || count.empty() || count.size() > 9 ||
      !std::all_of(count.begin(), count.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return text(400, "POST /api/resize?node=NAME&replicas=N (N a number)");
  const auto n = static_cast<std::uint32_t>(std::stoul(count));
  std::uint32_t index = 0;
  if (auto refused = resize_refusal(node, n, index); !refused.empty()) return text(400, refused);
  out_.print("launcher", stream::err, fmt::format("dashboard: resize of {} to {} asked", node, n));
  resize(node, n, [this](std::string refused) {
    if (!refused.empty()) out_.print("launcher", stream::err, refused);
  });
  return text(202, fmt::format("resizing {} to {} replicas (the launcher says when it is done)",
                               node, n));
}

TLAUNCH_DECL void coordinator::on_resize_request(const std::shared_ptr<rpc::connection>& c,
                                                 std::uint64_t id, const std::string& node,
                                                 std::uint32_t n) {
  // Only a registered node asks.
  if (std::none_of(slots_.begin(), slots_.end(), [&](const slot& s) { return s.conn == c; }))
    return;
  resize(node, n, [c, id](std::string refused) {
    wire::frame_buffer f;
    wire::serialize_into(f, id, refused);
    f.seal({.type = wire::kind::resize_reply});
    c->send(std::move(f));
  });
}

TLAUNCH_DECL void coordinator::arm_resize_timer(std::uint64_t epoch) {
  // Acknowledging takes a process one directory; a removed replica is given the grace
  // period to finish and exit. Either has --start-timeout at least.
  resize_timer_.expires_after(std::max<std::chrono::milliseconds>(opt_.start_timeout,
                                                                   opt_.grace * 2));
  resize_timer_.async_wait([this, epoch](std::error_code ec) {
    if (ec || resizes_.empty() || resizes_.front().epoch != epoch || life_.stopping()) return;
    const resize_op& r = resizes_.front();
    const auto waited = fmt::format(
        "{} s", static_cast<double>(std::max<std::chrono::milliseconds>(opt_.start_timeout,
                                                                        opt_.grace * 2)
                                        .count()) /
                    1000.0);
    if (r.at == resize_op::stage::retiring) {
      // Killed: its exit ends the resize.
      for (auto& s : slots_)
        if (s.retiring && !s.exited && s.proc) {
          out_.print("launcher", stream::err,
                     fmt::format("node {} was removed by a resize but did not exit within {}; "
                                 "killing it",
                                 s.where, waited));
          s.killed = true;
          s.proc->kill();
        }
      return;
    }
    for (std::uint32_t f = 0; f < slots_.size(); ++f) {
      slot& s = slots_[f];
      if (s.leader != f || s.dormant || s.exited || s.replacing || !s.conn ||
          s.sent_epoch < epoch || s.acked >= epoch)
        continue;
      failed(s, fmt::format("did not apply a resize of {} within {}", nodes_[r.node].name, waited),
             fault::error, /*kill=*/true);
    }
    advance_resize();  // what is being restarted is not waited for
  });
}

TLAUNCH_DECL void coordinator::advance_resize() {
  if (advancing_) return;  // called again from within (send_directory)
  advancing_ = true;
  struct reset {
    bool& b;
    ~reset() { b = false; }
  } guard{advancing_};
  using stage = resize_op::stage;
  while (!resizes_.empty()) {
    resize_op& r = resizes_.front();
    const rpc::node_info& info = nodes_[r.node];
    std::uint32_t first = 0;
    for (std::uint32_t i = 0; i < r.node; ++i) first += nodes_[i].replicas;
    auto finish = [&](std::string refused) {
      if (refused.empty())
        out_.print("launcher", stream::err,
                   fmt::format("node {} resized from {} to {} replicas in {} ms", info.name,
                               r.from, r.to,
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now() - r.began)
                                   .count()));
      resize_timer_.cancel();
      auto done = std::move(r.done);
      resizes_.pop_front();
      if (done) done(std::move(refused));
    };
    if (life_.stopping() && r.at != stage::retiring) {
      finish("resize: node '" + std::string(info.name) + "': the program is stopping");
      continue;
    }
    if (!directory_sent_) return;  // started once the program has
    switch (r.at) {
      case stage::begin: {
        r.from = running_[r.node];
        r.began = std::chrono::steady_clock::now();
        if (r.to == r.from) {
          finish("");
          continue;
        }
        if (r.to < r.from) {
          // Nobody calls the removed replicas once this directory is applied everywhere.
          running_[r.node] = r.to;
          send_addresses();
          r.epoch = epoch_;
          r.at = stage::shrinking_acks;
          arm_resize_timer(r.epoch);
          continue;
        }
        r.at = stage::growing;
        std::string cannot;
        for (std::uint32_t i = r.from; i < r.to && cannot.empty(); ++i) {
          slot& s = slots_[first + i];
          if (s.gen > 0 || s.exited) {  // a replica removed before comes back
            ++s.gen;
            ++s.incarnation;
          }
          s.added = true;
          s.dormant = s.exited = s.replacing = s.killed = s.reported = s.stop_sent =
              s.stdin_closed = s.done = s.retiring = false;
          s.acked = 0;
          s.metrics.reset();
          s.metrics_before.reset();
          if (s.has_run) ++runs_left_;
          try {
            start_process(s);
          } catch (const std::exception& e) {
            cannot = s.where + " cannot start: " + e.what();
            s.exited = true;
          }
          // One that never registers fails as a restarted one does.
          s.lost_timer = std::make_unique<asio::steady_timer>(io_, opt_.start_timeout);
          s.lost_timer->async_wait([this, &s, gen = s.gen](std::error_code ec) {
            if (!ec && gen == s.gen && !life_.stopping() && !s.exited && s.address.empty())
              failed(s,
                     fmt::format("added by a resize, but did not register within {} s",
                                 static_cast<double>(opt_.start_timeout.count()) / 1000.0),
                     fault::error, /*kill=*/true);
          });
        }
        if (!cannot.empty()) {
          fail(slots_[first + r.from].where, cannot, fault::exit_code);
          finish("resize: node '" + std::string(info.name) + "': " + cannot);
          continue;
        }
        [[fallthrough]];
      }
      case stage::growing: {
        bool all = true;
        for (std::uint32_t i = r.from; i < r.to; ++i)
          all = all && !slots_[first + i].address.empty();
        if (!all) return;
        running_[r.node] = r.to;
        send_directory();
        r.epoch = epoch_;
        r.at = stage::growing_acks;
        arm_resize_timer(r.epoch);
        [[fallthrough]];
      }
      case stage::growing_acks:
        if (!all_acked(r.epoch)) return;
        finish("");
        continue;
      case stage::shrinking_acks: {
        if (!all_acked(r.epoch)) return;
        for (std::uint32_t i = r.to; i < r.from; ++i) {
          slot& s = slots_[first + i];
          s.retiring = true;
          if (s.exited) continue;
          if (s.conn) {
            wire::frame_buffer f;
            wire::serialize_into(f, static_cast<std::uint8_t>(2), r.epoch);
            f.seal({.type = wire::kind::stop});
            s.conn->send(std::move(f));
            s.stop_sent = true;
          } else if (s.proc) {
            s.proc->kill();  // being restarted, not registered yet: nothing to serve
          }
        }
        r.at = stage::retiring;
        arm_resize_timer(r.epoch);
        [[fallthrough]];
      }
      case stage::retiring: {
        for (std::uint32_t i = r.to; i < r.from; ++i)
          if (!slots_[first + i].exited && slots_[first + i].proc) return;
        for (std::uint32_t i = r.to; i < r.from; ++i) {
          slot& s = slots_[first + i];
          s.dormant = true;
          s.retiring = s.replacing = false;
          s.lost_timer.reset();
          s.restart_timer.reset();
          if (s.conn) s.conn->close("removed by a resize");
          s.conn.reset();
          if (!s.address.empty()) {
            s.address.clear();
            --registered_;
          }
        }
        if (!life_.stopping()) send_addresses();
        finish("");
        continue;
      }
    }
  }
}

}  // namespace tlaunch::launch
#endif
