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
// (launch/terminal/tmux.hpp), a restarted process's to the window of the one it replaces.
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
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../../detail/build_id.hpp"
#include "../../rpc/accept_loop.hpp"
#include "../../rpc/connection.hpp"
#include "../../rpc/runtime.hpp"
#include "../../rpc/tls.hpp"
#include "../../detail/secret.hpp"
#include "../../wire/codec.hpp"
#include "child.hpp"
#include "../colocation.hpp"
#include "../decl.hpp"
#include "../flags.hpp"
#include "../lifecycle.hpp"
#include "../terminal/output.hpp"
#include "../placement.hpp"
#include "../plan.hpp"
#include "../terminal/tmux.hpp"
#include "../observe/trace_file.hpp"

namespace tlaunch::launch {

namespace observe {
class http_endpoint;
struct http_response;
}

// Starts the node process for `p` with the arguments `argv_tail` (the role and
// the passthrough flags) plus --tlaunch-coordinator=<an address of this machine
// that p.host reaches>:coordinator_port. Called on the coordinator's thread.
using spawn_fn = std::function<child_ptr(const placement& p, std::uint16_t coordinator_port,
                                         const std::vector<std::string>& argv_tail,
                                         child_callbacks cb)>;

namespace detail {
// The seam of the tests of a stop that reaches one node late (tests/launch/stop_race.cpp),
// called in the launcher's process before the launch: the coordinators made after it send
// these instances ("worker/1") their stop only once they report (run() over or failed)
// or exit, or after 5 s. Nothing else calls it.
struct coordinator_test_access {
  TLAUNCH_DECL static void hold_stop(std::vector<std::string> instances);
  TLAUNCH_DECL static std::vector<std::string> held();

 private:
  TLAUNCH_DECL static std::vector<std::string>& list();
};
}  // namespace detail

class coordinator final : public rpc::connection_sink {
 public:
  // nodes: the plan's (launch/plan.hpp), restart policies as the options say.
  coordinator(std::vector<tlaunch::rpc::node_info> nodes, const options& o,
              output_printer& out);
  ~coordinator() override;

  // The launch secret, when it was chosen before the launch (--launch=k8s writes it into
  // a Secret); call before listen().
  void use_secret(std::vector<std::uint8_t> secret);

  // Listens on bind_ip:port (0: any free port); returns the port.
  std::uint16_t listen(const std::string& bind_ip, std::uint16_t port = 0);

  // Processes are started again by the platform, not by spawn (a k8s pod's container,
  // which the kubelet restarts): a failure the policy allows is announced and the
  // instance's registration awaited at once, without the backoff (the platform has its own).
  void external_restarts() { external_restarts_ = true; }

  // One process for each group, which its first instance's place and spawn stand for;
  // call before run().
  void colocate(const std::vector<colocation_group>& groups);

  // Runs the program to its end; returns the launcher's exit code.
  int run(const std::vector<placement>& places, const spawn_fn& spawn);

  std::chrono::milliseconds time_to_registered() const { return registered_after_; }
  // When run() started the nodes.
  std::chrono::steady_clock::time_point run_started() const { return started_at_; }

  // connection_sink: the node processes' connections.
  void on_call(rpc::connection& c, const wire::frame_header& h,
               std::span<const char>) override;
  void on_control(const std::shared_ptr<rpc::connection>& c, const wire::frame_header& h,
                  std::span<const char> payload) override;
  void on_closed(const std::shared_ptr<rpc::connection>& c, const std::string& reason) override;
  void log(const std::string& m) override { out_.print("launcher", stream::err, m); }
  // Rate-limited, as every line about peers that misbehave (docs/guide/faults.md).
  void log_bad_peer(std::string_view reason, const std::string& line);

  int exit_code() const { return life_.exit_code(); }
  std::optional<failure_report> failure() const { return life_.failure(); }

  // Begins the program's stop as stop_program() does; from any thread, while run() runs.
  void request_stop(const std::string& why);

  // Makes elastic node `node` run n replicas (docs/guide/elastic.md); from any thread.
  // `done` gets "" once every process knows the new set (new replicas registered, removed
  // ones stopped after serving what they had), or why it was refused; on the coordinator's
  // thread. Resizes are done one after the other, in the order asked.
  void resize(const std::string& node, std::uint32_t n, std::function<void(std::string)> done);

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
    bool held = false;      // coordinator_test_access::hold_stop: its stop waits (tests only)
    bool stop_sent = false;     // the stop frame, on conn
    bool stdin_closed = false;  // proc's stdin, the stop without a connection
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
    std::uint32_t incarnation = 0;  // restarts of its process so far (the leader's slot)
    bool replacing = false;
    std::string replace_reason;
    std::unique_ptr<asio::steady_timer> restart_timer;  // the backoff
    std::chrono::steady_clock::time_point ended_at;
    // --metrics, --dashboard: the process's last sample (a leader's slot), kept until it
    // restarts; its pid as it registered.
    std::shared_ptr<const rpc::metrics_sample> metrics, metrics_before;
    std::chrono::steady_clock::time_point metrics_at, metrics_before_at;
    std::int64_t pid = 0;
    // --trace: its process's clock against the launcher's (probed when it registers).
    observe::clock_estimate clock;
    // Elastic nodes: a replica that does not run now (beyond its node's running count),
    // one a resize is removing, and the last directory epoch its process applied.
    bool dormant = false, retiring = false;
    bool added = false;  // started by a resize, not registered yet
    std::uint64_t acked = 0;
    // The epoch of the last directory sent to this process (0 since it registered): one
    // that has not been sent a resize's directory is not waited for (it gets a later one).
    std::uint64_t sent_epoch = 0;
  };
  // Elastic nodes (coordinator/resize.hpp): each node's running count, the directory's
  // epoch, and the resizes asked for, done one at a time.
  struct resize_op {
    std::uint32_t node = 0, from = 0, to = 0;
    enum class stage { begin, growing, growing_acks, shrinking_acks, retiring } at = stage::begin;
    std::uint64_t epoch = 0;
    std::chrono::steady_clock::time_point began;
    std::function<void(std::string)> done;
  };
  std::vector<std::uint32_t> running_;
  std::uint64_t epoch_ = 0;
  std::deque<resize_op> resizes_;
  bool advancing_ = false;
  // Bounds each wait of the first resize (resize_timer_, declared after io_).
  void arm_resize_timer(std::uint64_t epoch);
  // Moves the first resize on as far as it can go now; called after each event it waits for.
  void advance_resize();
  // Every process running now applied the directory of `epoch`.
  bool all_acked(std::uint64_t epoch) const;
  // Slots that count now: all but an elastic node's dormant replicas.
  std::size_t active_slots() const;
  void on_resize_request(const std::shared_ptr<rpc::connection>& c, std::uint64_t id,
                         const std::string& node, std::uint32_t n);
  // Why resizing `node` to n is refused ("" when it is not); `index`: the node's.
  std::string resize_refusal(const std::string& node, std::uint32_t n, std::uint32_t& index) const;
  // The dashboard's POST /api/resize?node=NAME&replicas=N (its token required).
  observe::http_response resize_by_post(std::string_view path, std::string_view query);
  // The dashboard's history: each method's calls per second and p99 (seconds; < 0: no call
  // ended) over each second, summed over the edges that call it, the last 120 seconds.
  struct method_point {
    double t, rate, p99;
  };
  std::map<std::string, std::deque<method_point>> method_history_;
  void record_history();

  // --metrics and --dashboard (coordinator/observe.hpp): the endpoints, and a request for
  // a sample to every process each second.
  void start_observing();
  std::unique_ptr<observe::http_endpoint> open_endpoint(
      const std::string& flag, const std::string& address,
      std::function<observe::http_response(std::string_view)> handler);
  void ask_metrics();
  std::uint32_t metrics_tick_ = 0;  // ask_metrics's turns (a tenth of the processes each)
  std::string metrics_text() const;
  std::string dashboard_state() const;
  std::string endpoint_token_;  // "" until an endpoint off loopback (or a POST) needs one
  // --endpoint-token, or one derived from the launch secret (the same all launch long).
  std::string derived_endpoint_token();
  // --trace=FILE (coordinator/observe.hpp): the file; the clock probes of a process that
  // registered (five, one after the other); a process's spans; the file's end.
  std::unique_ptr<observe::trace_file> trace_;
  void probe_clock(slot& s);
  void on_clock_reply(const std::shared_ptr<rpc::connection>& c, std::int64_t sent,
                      std::int64_t node_now, std::int64_t now);
  void on_trace_spans(const std::shared_ptr<rpc::connection>& c, const rpc::trace_batch& b);
  void finish_trace();
  struct event {
    double t;  // seconds since run() started
    std::string text;
  };
  mutable std::mutex events_mu_;  // the printer's observer adds from any thread
  std::deque<event> events_;      // the launcher's lines, the last 200

  // Starts (again) the process of s; throws when it cannot be started.
  void start_process(slot& s);

  // s failed before the stop (lifecycle.hpp): restarted when its budget allows (a process
  // still running is stopped, or with `kill` killed, and restarted once it exits); else
  // the failure counts, naming the restarts it had.
  // A member of a colocation group fails its group: restarted when every member's budget
  // allows, else the group's failure.
  void failed(slot& member, const std::string& why, fault f, bool kill = false);

  static std::string within(const restart_budget& b) {
    if (b.window().count() == 0) return "";
    return fmt::format(" within {} s", static_cast<double>(b.window().count()) / 1000.0);
  }

  // s's process ended and it is to be restarted: after its backoff, a fresh process.
  void schedule_restart(slot& s);

  void restart(slot& s);

  // --terminal=tmux: the session, with a window for every process (named by its
  // instances, without the host), made before any starts; its close stops the program as
  // SIGTERM does. Throws launch_error when tmux cannot make it.
  void open_terminal(const std::vector<placement>& places);

  // Never stops on an error (rpc/accept_loop.hpp); sockets are close-on-exec.
  void accept_next();

  void on_control_frame(const std::shared_ptr<rpc::connection>& c, wire::kind type,
                        std::uint32_t flat, const std::string& address, std::int64_t pid,
                        const std::string& text,
                        fault f);

  // Also once a restarted instance registers: the nodes that run already take it as
  // an update (rpc::runtime::update_directory).
  void send_directory();

  // The directory to every registered node; "" for an instance being restarted.
  void send_addresses();

  // A node failed (see lifecycle.hpp for what counts); a failure that counts stops the
  // program, if it is not stopping already.
  void fail(const std::string& where, const std::string& why, fault f);

  void send_stop(slot& s);

  void release_held(slot& s);

  void begin_stop(const std::string& why);

  // Tells every node to stop, once; the grace period starts now.
  void stop_all();

  static bool plain_code_1(const exit_status& st) {
    return st.code == 1 && st.signal == 0 && st.signal_name.empty() && st.unknown.empty();
  }

  // judge_now: the exit is judged even if a member's connection is still open.
  void on_exit(std::uint32_t flat, std::uint32_t gen, const exit_status& st, bool judge_now = false);

  void judge_held_exit(std::uint32_t flat, std::uint32_t gen);

  static fault fault_of(const exit_status& st);

  void finish_if_done();

  void on_signal(std::error_code ec, int sig);

  void report();

  std::vector<tlaunch::rpc::node_info> nodes_;
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
  asio::steady_timer metrics_timer_{io_};
  // A resize's bound on each of its waits (acknowledgements, removed replicas' exits):
  // what has not come by then is failed, as a process that stopped answering.
  asio::steady_timer resize_timer_{io_};
  // finish_if_done's wait for the connections of exited processes to be read to their end.
  asio::steady_timer unread_timer_{io_};
  std::optional<std::chrono::steady_clock::time_point> unread_until_;
  std::unique_ptr<observe::http_endpoint> metrics_http_, dashboard_http_;

 public:
  std::chrono::milliseconds time_to_stop() const { return stopped_after_; }
};

}  // namespace tlaunch::launch

// The members' definitions, by job.
#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_PROCESS)
#include "coordinator/control.hpp"
#include "coordinator/observe.hpp"
#include "coordinator/processes.hpp"
#include "coordinator/resize.hpp"
#include "coordinator/stop.hpp"
#endif
