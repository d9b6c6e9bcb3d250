// The node side of a multi-process launch: this binary started with
// --tlaunch-role=name/i (or name/i,other/j,...: a colocation group, every instance in
// this process, each registered on a coordinator connection of its own). It reads the launch secret from stdin, serves on port 0
// of the address it reaches the coordinator from, registers, waits for the
// directory, runs, and stops when told, when stdin closes, or when the
// coordinator connection drops.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <asio/ip/tcp.hpp>
#include <asio/ip/udp.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "../../rpc/connection.hpp"
#include "../../rpc/runtime.hpp"
#include "../../rpc/snapshots.hpp"
#include "../../detail/secret.hpp"
#include "../../program_view.hpp"
#include "../../wire/codec.hpp"
#include "../decl.hpp"
#include "../entry_points.hpp"
#include "../flags.hpp"
#include "../lifecycle.hpp"
#include "../node_env.hpp"
#include "../cluster/slurm_task.hpp"

namespace tlaunch::launch {

namespace detail {

// Reads one line from fd 0 without reading past it.
inline std::string read_stdin_line() {
  std::string line;
  char c;
  while (true) {
    ssize_t n = ::read(0, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || c == '\n') break;
    line += c;
    if (line.size() > 4096) break;
  }
  return line;
}

// The local IP this host uses to reach `address` ("host:port"): a UDP socket
// connected there, no packet sent.
inline std::string local_ip_towards(const std::string& address) {
  auto colon = address.rfind(':');
  std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  asio::io_context io;
  asio::ip::udp::resolver r(io);
  auto results = r.resolve(host, port);
  asio::ip::udp::socket s(io);
  s.connect(*results.begin());
  return s.local_endpoint().address().to_string();
}

inline void send_control(rpc::connection& c, wire::kind k, const auto&... fields) {
  wire::frame_buffer f;
  wire::serialize_into(f, fields...);
  f.seal({.type = k});
  c.send(std::move(f));
}

}  // namespace detail

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_NODE)
TLAUNCH_DECL int run_node_process(const tlaunch::detail::program_view& p,
                                  const options& given) {
  options o = given;
  // The program as this process's flags resolve it (--replicas; the launcher checked the
  // rest before it started this process).
  std::vector<tlaunch::rpc::node_info> nodes;
  try {
    nodes = p.describe(o.replicas);
    if (o.role == "slurm")  // a task of --launch=slurm's step: the role is its rank
      o.role = slurm_task_role(nodes, colocation_groups(nodes, p.colocated(), o));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tlaunch: %s\n", e.what());
    return 2;
  }
  // name/index of each instance this process hosts
  std::vector<std::pair<std::string, std::uint32_t>> roles;
  for (const auto& r : detail::split(o.role, ',')) {
    auto slash = r.rfind('/');
    try {
      if (slash == std::string::npos) throw std::invalid_argument("no /");
      roles.emplace_back(r.substr(0, slash),
                         static_cast<std::uint32_t>(std::stoul(r.substr(slash + 1))));
    } catch (...) {
      std::fprintf(stderr, "tlaunch: --tlaunch-role=%s is not NAME/INDEX[,NAME/INDEX...]\n",
                   o.role.c_str());
      return 2;
    }
  }
  auto secret = tlaunch::detail::from_hex(detail::read_stdin_line());
  if (!secret || secret->empty()) {
    std::fprintf(stderr,
                 "tlaunch: node %s expects the launch secret on stdin; node processes are "
                 "started by the launcher, not by hand\n",
                 o.role.c_str());
    return 2;
  }

  std::vector<std::uint32_t> flats;  // in the role's order; the first one is the leader
  for (const auto& [name, index] : roles) {
    bool found = false;
    std::uint32_t at = 0;
    for (auto& n : nodes) {
      if (n.name == name && index < n.replicas) {
        flats.push_back(at + index);
        found = true;
        // Before any thread of this process starts; in a group, a later member's value of
        // a key wins.
        apply_node_env(n, o, index);
      }
      at += n.replicas;
    }
    if (!found) {
      std::fprintf(stderr, "tlaunch: role %s/%u is not a node instance of this program\n",
                   name.c_str(), index);
      return 2;
    }
  }

  auto rt_options = runtime_options_of(o, 1);
  if (o.trace_sample) rt_options.trace_sample = *o.trace_sample;  // the launcher's --trace
  tlaunch::rpc::runtime rt(nodes, std::move(rt_options), *secret, o.role);

  std::mutex out_mu;
  rt.log_line = [&](const rpc::instance&, std::string_view line) {
    std::lock_guard lk(out_mu);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  };

  try {
    rt.listen(detail::local_ip_towards(o.coordinator));
    p.host(rt, [&](std::uint32_t f) {
      return std::find(flats.begin(), flats.end(), f) != flats.end();
    });
    // Before it registers: no peer can call an instance before its state is back.
    rt.restore_states(o.incarnation);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tlaunch: node %s cannot start: %s\n", o.role.c_str(), e.what());
    return 2;
  }

  // ctx.resize's requests waiting for the coordinator's reply, by id. When the process
  // stops first, they are refused.
  std::mutex resize_mu;
  std::map<std::uint64_t, std::function<void(std::string)>> resizes;
  std::uint64_t resize_ids = 0;

  // A resize that removes this process's replica: its wait for the calls being served.
  std::thread retirer;

  // This process's lifecycle; `mu` guards its changes for `cv`, and run_over.
  lifecycle life;
  std::mutex mu;
  std::condition_variable cv;
  std::size_t runs_left = 0;  // run() bodies not over yet
  for (std::uint32_t f : flats)
    if (rt.hosted(f)->start_run) ++runs_left;
  bool run_over = runs_left == 0;
  bool runs_started = false;  // the directory came and run() bodies were started
  int own_exit_code = 0;  // 3: lost the coordinator, 4: did not stop within the grace period
  // The coordinator's word on the stop came (its stop frame, or its connection closed):
  // a stop begun by EOF on stdin waits for it (briefly) before it closes connections.
  bool coordinator_spoke = false;

  auto begin_stop = [&](const std::string& why) {
    {
      std::lock_guard lk(mu);
      if (!life.begin_stop(why)) return;
      // A stop before the directory came: no run() body started, none to wait for.
      if (!runs_started) run_over = true;
    }
    rt.stop_instances();
    cv.notify_all();
    std::map<std::uint64_t, std::function<void(std::string)>> refused;
    {
      std::lock_guard lk(resize_mu);
      refused.swap(resizes);
    }
    for (auto& [id, done] : refused) done("the program is stopping");
    // A body that ignores cancellation does not keep the process alive.
    std::thread([g = o.grace] {
      std::this_thread::sleep_for(g + std::chrono::seconds(2));
      std::fflush(stdout);
      ::_exit(4);
    }).detach();
  };

  // One coordinator connection per hosted instance: the coordinator knows an instance by
  // the connection it registered on. The first one's directory is the one taken.
  std::vector<std::shared_ptr<rpc::connection>> coords;
  for (std::size_t i = 0; i < flats.size(); ++i) coords.push_back(rt.connect(o.coordinator));
  auto coord = coords.front();
  // The process as the launcher names it: its instances, joined by '+'.
  std::string process_name;
  for (std::uint32_t f : flats) process_name += (process_name.empty() ? "" : "+") + rt.instance_id(f);
  auto coord_of = [&](std::uint32_t f) -> rpc::connection& {
    return *coords[static_cast<std::size_t>(std::find(flats.begin(), flats.end(), f) -
                                            flats.begin())];
  };
  // Whether a connection is one of this process's to the coordinator: only those are heard.
  auto from_coordinator = [&](const std::shared_ptr<rpc::connection>& c) {
    return std::find(coords.begin(), coords.end(), c) != coords.end();
  };
  rt.control = [&](const std::shared_ptr<rpc::connection>& c, const wire::frame_header& h,
                   std::span<const char> payload) {
    if (h.type == wire::kind::directory) {
      if (c != coord) return;  // the same directory, sent to each instance's connection
      // Every instance's address, each node's running count, the membership epoch.
      std::vector<std::string> addrs;
      std::vector<std::uint32_t> counts;
      std::uint64_t epoch = 0;
      try {
        wire::deserialize_from(payload, addrs, counts, epoch);
      } catch (const std::exception& e) {
        rt.log(std::string("bad directory from the coordinator: ") + e.what());
        return begin_stop("bad directory");
      }
      bool update = false;
      {
        std::lock_guard lk(mu);
        if (life.stopping()) return;
        // A later directory says where a restarted instance now is, or a resize's change.
        update = runs_started;
        runs_started = true;
      }
      // New replicas' addresses before the counts that make them members; a removed
      // replica's address goes in a later directory, once it stopped.
      if (update) {
        rt.update_directory(std::move(addrs));
        rt.update_membership(counts, epoch);
      } else {
        rt.set_directory(std::move(addrs));
        rt.update_membership(counts, epoch);
        rt.start_runs();
        if (auto* s = rt.snapshots()) s->start();
      }
      detail::send_control(*coord, wire::kind::membership_ack, epoch);
    } else if (h.type == wire::kind::resize_reply) {
      if (!from_coordinator(c)) return;
      std::uint64_t id = 0;
      std::string refused;
      try {
        wire::deserialize_from(payload, id, refused);
      } catch (const std::exception&) {
        return;
      }
      std::function<void(std::string)> done;
      {
        std::lock_guard lk(resize_mu);
        if (auto it = resizes.find(id); it != resizes.end()) {
          done = std::move(it->second);
          resizes.erase(it);
        }
      }
      if (done) done(std::move(refused));
    } else if (h.type == wire::kind::metrics_request) {
      // The launcher gathers its --metrics: this process's counts, on the connection asked.
      if (!from_coordinator(c)) return;
      wire::frame_buffer f;
      wire::serialize_into(f, rt.sample_metrics(process_name));
      f.seal({.type = wire::kind::metrics});
      c->send(std::move(f));
    } else if (h.type == wire::kind::clock_probe) {
      // --trace: the launcher measures this process's clock against its own.
      if (!from_coordinator(c)) return;
      std::int64_t sent = 0;
      try {
        wire::deserialize_from(payload, sent);
      } catch (const std::exception&) {
        return;
      }
      detail::send_control(*c, wire::kind::clock_reply, sent, rpc::trace_wall_now());
    } else if (h.type == wire::kind::stop) {
      // Only the coordinator stops a node: a peer's stop frame is ignored.
      if (!from_coordinator(c)) return;
      // 1: the program stops (not only this process, to be restarted). Peers hear it from
      // this process before any of its connections closes: their calls to it that fail
      // from now on were ended by the stop (tlaunch::stopping), even when their own stop
      // message comes later.
      // 2: a resize removes this process's replica, as of membership epoch `epoch`.
      std::uint8_t program = 0;
      std::uint64_t epoch = 0;
      try {
        if (payload.size() > 1)
          wire::deserialize_from(payload, program, epoch);
        else
          wire::deserialize_from(payload, program);
      } catch (const std::exception&) {
        program = 0;
      }
      if (program == 1) rt.announce_stop();
      if (program == 2) {
        // It finishes the calls it is serving first (off the io threads: it waits for them).
        // Under `mu`: the thread's begin_stop, and so the final join, come after this.
        std::lock_guard lk(mu);
        if (retirer.joinable()) return;  // the same stop, again
        retirer = std::thread([&rt, &begin_stop, epoch, grace = o.grace] {
          const std::string missing = rt.retire(epoch, grace / 2);
          if (!missing.empty())
            rt.log("removed by a resize; after " + std::to_string((grace / 2).count()) +
                   " ms, still " + missing + "; stopping now");
          begin_stop("removed by a resize");
        });
        return;
      }
      {
        std::lock_guard lk(mu);
        coordinator_spoke = true;
      }
      begin_stop("stopped by the coordinator");
      cv.notify_all();
    }
  };
  rt.closed = [&](const std::shared_ptr<rpc::connection>& c, const std::string& reason) {
    if (!from_coordinator(c)) return;
    {
      std::lock_guard lk(mu);
      coordinator_spoke = true;
    }
    cv.notify_all();
    if (!life.stopping()) {
      std::fprintf(stderr, "tlaunch: node %s lost its coordinator (%s); stopping\n",
                   o.role.c_str(), reason.c_str());
      {
        std::lock_guard lk(mu);
        own_exit_code = 3;
      }
      begin_stop("coordinator lost");
    }
  };
  rt.stop_program = [&] { detail::send_control(*coord, wire::kind::stop_request); };
  rt.resize = [&](const std::string& node, std::uint32_t n, std::function<void(std::string)> done) {
    std::uint64_t id;
    {
      std::lock_guard lk(resize_mu);
      id = ++resize_ids;
      resizes.emplace(id, std::move(done));
    }
    detail::send_control(*coord, wire::kind::resize_request, id, node, n);
  };
  rt.run_finished = [&](rpc::instance& i, std::exception_ptr e) {
    // A run() that ends once this process is stopping was ended by the stop. So is one
    // that ends with a call error once a peer said the program is stopping (a call to it
    // then ends with tlaunch::stopping): it is over, not failed. Before that, its error
    // goes to the coordinator, which judges it: the program's stop may have begun
    // elsewhere, and then a call error is one the stop caused.
    const bool by_stop = e && !life.stopping() && !rt.stop_requested() &&
                         rt.program_stopping() && fault_of(e) == fault::call_error;
    if (by_stop) {
      detail::send_control(coord_of(i.flat_id), wire::kind::node_done);
    } else if (e && !life.stopping() && !rt.stop_requested()) {
      std::string msg = rpc::detail::exception_message(e);
      fault f = fault_of(e);
      detail::send_control(coord_of(i.flat_id), wire::kind::node_failed, msg,
                           static_cast<std::uint8_t>(f));
      std::fprintf(stderr, "tlaunch: node %s: run() ended with an error: %s\n", i.id().c_str(),
                   msg.c_str());
      std::lock_guard lk(mu);
      life.fail(i.id(), msg, f, /*stop=*/false);
    } else if (!e) {
      detail::send_control(coord_of(i.flat_id), wire::kind::node_done);
    }
    {
      std::lock_guard lk(mu);
      run_over = --runs_left == 0;
    }
    cv.notify_all();
  };
  for (std::size_t i = 0; i < flats.size(); ++i)
    detail::send_control(*coords[i], wire::kind::reg, flats[i], rt.listen_address(),
                         static_cast<std::int64_t>(::getpid()));

  // EOF on stdin: the launcher is gone or wants us gone. The reader thread
  // outlives this function, so it reaches begin_stop through a relay we clear.
  struct relay {
    std::mutex mu;
    std::function<void(const std::string&)> f;
  };
  auto stdin_relay = std::make_shared<relay>();
  stdin_relay->f = begin_stop;
  std::thread([stdin_relay] {
    char buf[256];
    while (true) {
      ssize_t n = ::read(0, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
    }
    std::lock_guard lk(stdin_relay->mu);
    if (stdin_relay->f) stdin_relay->f("stdin closed");
  }).detach();

  asio::signal_set signals(rt.io, SIGINT, SIGTERM);
  signals.async_wait([&](std::error_code ec, int sig) {
    if (ec) return;
    // The launcher sees this process end by itself: its last output names the signal.
    std::fprintf(stderr, "tlaunch: %s received: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    begin_stop("signal");
  });

  // --trace: the spans recorded go to the launcher every 200 ms, and the last ones before
  // the connections close.
  std::shared_ptr<rpc::trace_recorder> recorder = rt.traces();
  auto send_spans = [&] {
    if (!recorder || recorder->empty()) return;
    detail::send_control(*coord, wire::kind::trace_spans, recorder->take());
  };
  // On a strand of its own: the timer is re-armed and cancelled from any io thread.
  asio::steady_timer trace_timer(asio::make_strand(rt.io));
  std::function<void()> arm_trace_timer = [&] {
    trace_timer.expires_after(std::chrono::milliseconds(200));
    trace_timer.async_wait([&](std::error_code ec) {
      if (ec) return;
      send_spans();
      arm_trace_timer();
    });
  };
  if (recorder) asio::post(trace_timer.get_executor(), arm_trace_timer);

  rt.start_threads();
  // The most each of the waits before the connections close may take: a small part of
  // the grace period, which the launcher enforces.
  const auto short_wait = std::min<std::chrono::milliseconds>(o.grace / 4, std::chrono::seconds(1));
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return life.stopping(); });
    cv.wait_for(lk, o.grace, [&] { return run_over; });
    if (!run_over) {
      std::fprintf(stderr, "tlaunch: node %s did not stop within the grace period\n",
                   o.role.c_str());
      if (own_exit_code == 0 && life.exit_code() == 0) own_exit_code = 4;
    } else if (life.stop_reason() == "stdin closed") {
      // EOF on stdin comes with the coordinator's stop frame, often first: the frame says
      // whether the program stops, which peers are told before connections close.
      cv.wait_for(lk, short_wait, [&] { return coordinator_spoke; });
    }
  }
  if (run_over) {
    // A graceful stop: each instance with state writes its snapshot (not after a failure
    // of this process's own, whose state may be what failed).
    if (auto* s = rt.snapshots()) {
      s->stop();
      bool failed;
      {
        std::lock_guard lk(mu);
        failed = life.exit_code() != 0 || own_exit_code != 0;
      }
      if (!failed) s->write_all();
    }
    send_spans();
    // What is queued (the stopping frame to peers, node_done to the coordinator, the last
    // spans) goes out before the connections close, which drops it.
    rt.drain_writes(short_wait, coords);
  }
  // On an io thread, where the signal set and the timer are used; its error stays there too.
  asio::post(rt.io, [&signals] {
    std::error_code ec;
    signals.cancel(ec);
  });
  asio::post(trace_timer.get_executor(), [&trace_timer] { trace_timer.cancel(); });
  std::fflush(stdout);
  int code;
  {
    std::lock_guard lk(mu);
    code = life.exit_code() ? life.exit_code() : own_exit_code;
    life.stopped();
  }
  if (!run_over) ::_exit(code);
  {
    std::lock_guard lk(stdin_relay->mu);
    stdin_relay->f = nullptr;
  }
  if (retirer.joinable()) retirer.join();
  rt.shutdown();
  return code;
}
#endif

}  // namespace tlaunch::launch
