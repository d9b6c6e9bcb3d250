// One multiplexed TCP connection between two tlaunch processes. Either side may call the
// other: calls are matched to replies by id, any number are in flight.
//
// What it does, and where (this header declares the class; its members are defined by job
// in the headers below, included at its end):
//   - connection_open.hpp: resolve and connect, or take an accepted socket; the hello
//     exchange (handshake.hpp), after which the connection is ready (until then nothing
//     else is sent, and nothing else is accepted); what a peer that has not authenticated
//     may cost (the process's cap on such accepted connections, small frames and read
//     buffer); the close, which fails the calls still waiting.
//   - connection_liveness.hpp: how a peer that is gone is noticed: the handshake deadline
//     (acceptor) and the connect deadline (connector); socket options (TCP keepalive probes
//     every --liveness interval, and TCP_USER_TIMEOUT only with heartbeats); the liveness
//     check, which reads TCP_INFO and fails a connection whose peer's host acknowledged
//     nothing for two intervals; heartbeats (a ping every interval, the connection closed
//     after three intervals without a byte from the peer).
//   - connection_write.hpp: calls registered with their ids (call_table.hpp), replies and
//     control frames queued (frame_writer.hpp), the cap on what a peer that does not read
//     may leave unsent; the write loop: whatever is queued goes out in one gather write,
//     tried without blocking first.
//   - connection_read.hpp: reads, through the reactor or, with busy polling, by
//     non-blocking reads in handlers of its own; each read takes everything that has
//     arrived and every complete frame (frame_reader.hpp) is dispatched before the next:
//     runs of replies complete their calls under one lock, calls go to the sink.
//   - connection_tls.hpp: with --tls, every byte goes through TLS (tls.hpp) under the hello
//     exchange: the reader opens records into the frame reader, the write loop seals what
//     it gathered; a peer that does not run TLS when this process does (or the reverse)
//     is refused with a reason it can read.
// One mutex (mu_) guards the state they share; one read and one write loop run at a time.
#pragma once

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../detail/fast_mutex.hpp"
#include "../detail/log_limiter.hpp"
#include "../wire/codec.hpp"
#include "../wire/frame.hpp"
#include "read_batch.hpp"
#include "call_table.hpp"
#include "connection_api.hpp"
#include "frame_reader.hpp"
#include "frame_writer.hpp"
#include "handshake.hpp"
#include "io_thread.hpp"
#include "metrics.hpp"
#include "trace.hpp"

namespace tlaunch::rpc {

#ifdef TLAUNCH_TEST_COUNTERS
// Counters that only tests read. They exist when a test defines
// TLAUNCH_TEST_COUNTERS before it includes tlaunch (every translation unit of
// that program must agree); otherwise there is neither the name nor the cost.
namespace test_counters {
// Reads that found their bytes by polling (connection::poll_read), not through
// the reactor: the tests check that busy polling takes that path.
inline std::atomic<std::uint64_t> polled_reads{0};
}  // namespace test_counters
#endif

// What every connection of a process shares: who we are (the hello) and what we accept.
struct connection_config : hello_identity {
  std::uint32_t max_frame = wire::default_max_frame;
  // One thread runs the io_context: a read's work may run at once, on it.
  bool single_io_thread = false;
  // The process's busy polling in microseconds (runtime::set_busy_poll), or none.
  // While it is on, a connection waiting for bytes retries a non-blocking read in
  // handlers of its own for that long after its last bytes, instead of leaving the
  // wait to the reactor (see connection::read_more).
  const std::atomic<std::int64_t>* busy_poll_us = nullptr;

  // What a peer that has not authenticated yet may cost (docs/guide/faults.md, bad peers).
  // The hello exchange must complete within this time (0: no deadline).
  std::chrono::milliseconds handshake_timeout{5000};
  // Accepted connections that have not completed the exchange; more are closed at once.
  std::uint32_t max_unauthenticated = 256;
  // Shared by every copy of this configuration (a process's connections): the
  // count of accepted connections not yet authenticated, and the rate limit of
  // the log lines about bad peers.
  std::shared_ptr<std::atomic<std::uint32_t>> unauthenticated =
      std::make_shared<std::atomic<std::uint32_t>>(0);
  std::shared_ptr<tlaunch::detail::log_limiter> bad_peer_log =
      std::make_shared<tlaunch::detail::log_limiter>();
  // The process's counts of its calls (rpc/metrics.hpp), shared by every copy.
  std::shared_ptr<metrics_registry> metrics = std::make_shared<metrics_registry>();
  // --trace: the process's spans (rpc/trace.hpp), shared by every copy; null: no tracing.
  std::shared_ptr<trace_recorder> trace;
  // Once ready, a ping every interval, and the connection closed after three
  // intervals without a byte from the peer (0: off). With heartbeats, every socket also
  // has a TCP_USER_TIMEOUT of three intervals: data the peer's host does not acknowledge
  // for as long fails the connection.
  std::chrono::milliseconds heartbeat{0};
  // Liveness without the peer's process (0: no check; keepalive probes after 10 s idle,
  // every 5 s, three of them): TCP keepalive probes every interval on an idle connection,
  // and the connection fails when the peer's host has answered nothing (no ACK, no byte)
  // for liveness_intervals while something waits for its acknowledgement (data in flight
  // or a keepalive probe), as TCP_INFO tells. It sets no TCP_USER_TIMEOUT (only heartbeats
  // do). The kernel answers for a process that is busy or stopped, and a receiver that
  // does not read keeps acknowledging the sender's window probes: only dead hosts, cut
  // links and partitions are noticed, never a busy process.
  std::chrono::milliseconds liveness{1000};
  // What a peer that does not read may cost: a connection on which a reply or control
  // frame is queued while more than this many bytes wait unsent is closed: four times
  // max_frame, at least 64 MiB (docs/guide/faults.md, bad peers).
  std::uint64_t unsent_limit() const {
    return std::max<std::uint64_t>(std::uint64_t{64} << 20, std::uint64_t{4} * max_frame);
  }
  // --tls: every connection runs TLS (rpc/tls.hpp) under the hello exchange; null: off.
  // Both sides of a connection must agree; one that does not is refused, named.
  std::shared_ptr<const tls_context> tls;
  // Shared by every copy: this process knows the program is stopping (its own stop
  // came from the coordinator, or a peer said so with wire::kind::stopping). Calls that
  // fail because their connection closed then fail as tlaunch::stopping.
  std::shared_ptr<std::atomic<bool>> program_stopping = std::make_shared<std::atomic<bool>>(false);
};

class connection : public std::enable_shared_from_this<connection> {
 public:
  using tcp = asio::ip::tcp;
  using side = handshake::side;

  // Starts connecting to "host:port"; calls may be queued at once.
  static std::shared_ptr<connection> connect(asio::io_context& io, const std::string& address,
                                             std::shared_ptr<const connection_config> cfg,
                                             connection_sink* sink);

  // Takes an accepted socket and waits for the peer's hello. Returns null (the
  // socket closed, a line logged) when cfg->max_unauthenticated accepted
  // connections are still in their hello exchange.
  static std::shared_ptr<connection> accept(tcp::socket s,
                                            std::shared_ptr<const connection_config> cfg,
                                            connection_sink* sink);

  // The peer's listen address as it announced it (acceptor) or as dialled (connector).
  std::string peer_listen_address() const;
  std::string peer_name() const;
  std::string peer_address() const { return peer_address_; }
  // Our address on this connection, as the peer sees it.
  std::string local_ip() const;
  bool closed() const { return closed_seen_.load(std::memory_order_acquire); }
  // When the frames being handled were read (metrics_now()); on the reader only.
  std::int64_t read_at() const { return read_at_; }
  // Closed by the heartbeat (the peer sent nothing for silent_intervals), by the liveness
  // check (its host acknowledged nothing for liveness_intervals) or by the kernel
  // (ETIMEDOUT: keepalive probes or, with heartbeats, TCP_USER_TIMEOUT): the peer is
  // stopped, hung or cut off, not exited (an exit closes the socket), so no exit status is
  // coming soon.
  bool went_silent() const { return went_silent_.load(std::memory_order_acquire); }
  bool ready() const;

  // Registers a pending call and queues its frame; the frame's call id is set here.
  // If the connection is closed, the call fails at once.
  std::uint64_t start_call(wire::frame_buffer&& f, wire::frame_header h,
                           std::shared_ptr<pending_call> p);

  // The same for a frame built on the stack (wire::make_small_frame): header
  // room, then the payload. It is sealed here and copied into the write queue.
  std::uint64_t start_call(std::span<char> frame, wire::frame_header h,
                           std::shared_ptr<pending_call> p);

  // A traced call arrived (runtime::on_call): its span lasts until its reply is queued.
  void begin_served_span(const served_span& s);

  // Forgets a pending call (deadline or cancellation) and tells the peer.
  // Returns the pending call if it was still waiting.
  std::shared_ptr<pending_call> abandon_call(std::uint64_t call_id);

  // Queues a frame (reply, control). Dropped if the connection is closed.
  void send(wire::frame_buffer&& f);

  // A reply built on the stack. While a batch of work runs on this thread
  // (deferred_writes::scope), its replies to this connection are gathered and
  // queued together when it ends, under one lock; replies may leave in any
  // order relative to other frames.
  void send_reply(std::span<char> frame, wire::frame_header h);

  // A call built on the stack whose id the caller does not need (no deadline,
  // no cancellation). While a batch of work runs on this thread, the batch's
  // calls to this connection are gathered in order and registered together
  // when it ends, under one lock; any other call to this connection from this
  // thread first flushes them, so calls still leave in the order they were made.
  void start_call_batched(std::span<char> frame, wire::frame_header h,
                          std::shared_ptr<pending_call> p);

  // Closes with a reason; pending calls fail as unavailable (as tlaunch::stopping once the
  // peer said it stops with the program, or this process knows the program stops).
  void close(const std::string& reason);

  // Nothing queued or being written (or closed): what was sent has reached the socket.
  bool flushed() const;

  // A coroutine method serving call_id of this connection; a cancel frame for
  // it runs `cancel`. Unregistered when the method completes.
  void register_running(std::uint64_t call_id, std::function<void()> cancel);
  void unregister_running(std::uint64_t call_id);

  std::size_t pending_count() const;
  // Bytes queued and not yet written (0 once closed).
  std::uint64_t unsent_bytes() const;
  // Coroutine and batched calls of the peer's being served now (register_running).
  std::size_t running_count() const;
  // The last membership epoch the peer's fence frame brought (rpc::runtime::retire).
  std::uint64_t fence_epoch() const { return fence_epoch_.load(std::memory_order_acquire); }
  void note_fence(std::uint64_t epoch) {
    std::uint64_t was = fence_epoch_.load(std::memory_order_relaxed);
    while (was < epoch && !fence_epoch_.compare_exchange_weak(was, epoch)) {
    }
  }
  // A connection to the coordinator (rpc::runtime::connect), not to a peer node process:
  // no fence is sent or awaited on it.
  void mark_not_peer() { not_peer_.store(true, std::memory_order_release); }
  bool is_peer() const { return !not_peer_.load(std::memory_order_acquire); }

 private:
  connection(tcp::socket s, side sd, std::shared_ptr<const connection_config> cfg,
             connection_sink* sink);

  // ----- connect, accept, the hello exchange, close (connection_open.hpp) -------------

  // Lines about peers that misbehave: one per reason per interval, with a count.
  static void log_bad_peer(const connection_config& cfg, connection_sink& sink,
                           std::string_view reason, const std::string& line);
  void log_bad_peer(std::string_view reason, const std::string& line);

  static handshake::nonce fresh_nonce();

  void start_connect(const std::string& address);

  // Under the lock, when the exchange completed or the connection closed.
  void end_unauthenticated_locked();

  void send_handshake(wire::frame_buffer&& f);

  // Sends a refusal, then closes. plaintext: outside TLS (to a peer without --tls).
  void refuse(const std::string& reason, bool plaintext = false);

  // A frame of the hello exchange; returns false if the connection was closed.
  bool handle_handshake(const wire::frame_header& h, std::span<const char> payload);

  void become_ready();

  std::string peer_name_locked() const { return peer_name_.empty() ? peer_address_ : peer_name_; }

  // Calls failing on this connection now were ended by the program's stop.
  bool ended_by_stop_locked() const {
    return peer_stopping_ || cfg_->program_stopping->load(std::memory_order_acquire);
  }

  void close_locked(std::unique_lock<tlaunch::detail::fast_mutex>& lk, const std::string& reason);

  // Closes the socket once closed and neither a read nor the writer uses it.
  void finish_close_locked(std::unique_lock<tlaunch::detail::fast_mutex>&);

  // ----- deadlines, heartbeats, liveness (connection_liveness.hpp) --------------------

  static constexpr int silent_intervals = 3;  // without a byte read: the peer is gone
  static constexpr int liveness_intervals = 2;  // unacknowledged: the peer's host is gone

  // Closes an accepted connection unless its hello exchange completes in time.
  // Only the acceptor's: a connector may wait long and rightly for a busy
  // listener (a launcher still starting nodes answers once it is done). The
  // timer keeps no reference: a connection that goes away cancels it.
  void arm_handshake_deadline();

  // A TCP connect unanswered for three heartbeat intervals, or without heartbeats for 1.5
  // liveness intervals, is given up (its calls fail as unavailable, the next call dials
  // afresh): a SYN sent into a partition is otherwise retried by the kernel at growing
  // intervals (1, 3, 7, 15 s... after the connect began), and calls would wait that long
  // after the partition heals. Over 1 s: a connect that lost one SYN (retried at 1 s)
  // still succeeds. Uses the acceptor's handshake timer.
  void arm_connect_deadline(const std::string& address);

  static std::string fmt_seconds(std::chrono::milliseconds d);

  // Once connected or accepted: TCP_NODELAY, close-on-exec, non-blocking; TCP keepalive
  // (connection_config::liveness) and, with heartbeats, TCP_USER_TIMEOUT of
  // silent_intervals heartbeats. Then arms the liveness check.
  void configure_socket();

  // Why the connection failed when its peer's host stopped answering (the liveness check,
  // or ETIMEDOUT from the kernel), naming the peer; `limit` 0 when not known.
  std::string unacknowledged_reason(std::chrono::milliseconds limit) const;

  // Under the lock: the next liveness check (a quarter interval), once connected. The
  // timer keeps no reference.
  void arm_liveness_locked();

  // Reads the kernel's TCP_INFO: closes the connection when the peer's host answered
  // nothing for liveness_intervals while data or a keepalive probe waits for it. Not
  // TCP_USER_TIMEOUT, which also fails a connection whose receiver is busy and lets its
  // window stay closed (the kernel then aborts on window probes that are answered).
  void liveness_tick();

  // Under the lock: the next heartbeat tick. The timer keeps no reference.
  void arm_heartbeat_locked();

  // Sends a ping; closes the connection when nothing came for silent_intervals.
  void heartbeat_tick();

  // ----- calls and writing (connection_write.hpp) -------------------------------------

  // After a reply or control frame was queued: closes the connection when the peer
  // has left more than cfg_->unsent_limit() bytes unread (returns true then; lk is
  // released). Without it, a peer that calls and never reads makes us grow without bound.
  bool close_if_unread_locked(std::unique_lock<tlaunch::detail::fast_mutex>& lk);

  // Starts the writer if it is idle and there is something it may send. On an
  // io thread the write is posted, so every frame queued by the running handler
  // (a burst of async calls, the replies of one read) goes out in one write;
  // from any other thread it is written at once.
  void kick_locked(std::unique_lock<tlaunch::detail::fast_mutex>& lk);

  // Under the lock: gives the call its id, registers it and queues its frame
  // with enqueue(header), or fails it when the connection is closed.
  template <class Enqueue>
  std::uint64_t register_call(wire::frame_header h, std::shared_ptr<pending_call> p,
                              Enqueue&& enqueue) {
    deferred_writes::flush_key(&calls_);  // calls this thread batched go first
    std::unique_lock lk(mu_);
    if (closed_) {
      std::string why = close_reason_;
      bool by_stop = ended_by_stop_locked();
      lk.unlock();
      p->fail_closed(why, by_stop);
      return 0;
    }
    h.call_id = calls_.next_id();
    enqueue(h);
    count_call_locked(*p, h.target, h.method, wire::header_size + h.size, metrics_now());
    calls_.insert(h.call_id, std::move(p));
    kick_locked(lk);
    return h.call_id;
  }

  // Registers a batch's calls (frames side by side, each with its pending
  // call) under one lock: ids in order, written into the frames, which are
  // queued as one piece. When the connection is closed they fail at once.
  void register_calls(std::span<char> frames, std::span<std::shared_ptr<void>> pendings);

  // Under the lock: p, a call to target's method of `bytes` on the wire, counts from now
  // (rpc/metrics.hpp); its end is counted by count_end_locked.
  void count_call_locked(pending_call& p, std::uint32_t target, std::uint64_t method,
                         std::size_t bytes, std::int64_t now) {
    if (!metrics_) metrics_ = cfg_->metrics->open_link();
    call_stats* s = metrics_->calls_to(target, method, p.method_name);
    s->calls.add(1);
    s->bytes_out.add(bytes);
    p.metrics_entry = s;
    p.metrics_started = now;
  }
  static void count_end_locked(pending_call& p, call_outcome o, std::int64_t now,
                               std::size_t reply_bytes) {
    if (p.metrics_entry)
      link_metrics::ended(*static_cast<call_stats*>(p.metrics_entry), o, p.metrics_started, now,
                          reply_bytes);
    if (p.trace) [[unlikely]]
      p.trace->recorder->end_call(*p.trace, o, now ? now : metrics_now(), reply_bytes);
  }

  // --trace: the span of a call about to be sent with header h (null: not traced).
  std::unique_ptr<client_span> trace_call(const wire::frame_header& h, const pending_call& p) {
    return cfg_->trace->begin_call(h.target, p.method_name);
  }
  // A call built on the stack, with its span: copied into a frame with its trailer.
  std::uint64_t start_traced_call(std::span<char> frame, wire::frame_header h,
                                  std::shared_ptr<pending_call> p,
                                  std::unique_ptr<client_span> span);
  // Adds a traced call's trailer to its frame and header.
  static void add_trace_trailer(wire::frame_buffer& f, wire::frame_header& h, client_span& s) {
    char t[trace_trailer_size];
    encode_trace_trailer(t, s.ctx);
    f.append(t, sizeof t);
    h.flags |= wire::flag_traced;
    s.bytes_out = wire::header_size + f.payload_size();
  }
  // A reply or error reply (`type`) to call `id`, of `bytes` (its payload's first byte
  // `first`), is queued: when the call is traced, its served span ends.
  void end_served_span(wire::kind type, std::uint64_t id, std::size_t bytes, char first);

  // Queues whole frames' bytes by copying them; dropped if closed.
  void send_bytes(std::span<const char> bytes);

  static void seal_small(std::span<char> frame, wire::frame_header h) {
    h.size = static_cast<std::uint32_t>(frame.size() - wire::header_size);
    wire::encode_header(h, frame.data());
  }

  // Moves everything sendable into the writer's batch; false when there is nothing.
  bool refill_batch_locked();

  void write_loop();

  void write_failed(std::error_code ec);

  // ----- TLS (connection_tls.hpp) ----------------------------------------------------

  // The connector's ClientHello, once connected.
  void start_tls();

  // Ciphertext arrived in tls_in_: drives the handshake, then opens records into
  // the frame reader and handles their frames. Returns whether to read on.
  bool handle_tls_read(std::size_t n);

  // The first bytes from the peer are not TLS: it runs without --tls.
  void tls_peer_is_plain(std::span<const char> got);

  // write_loop under TLS: seals what the writer holds into tls_out_ and writes that.
  void tls_write_loop();

  // Where the next read goes: the frame reader, or under TLS the ciphertext buffer.
  asio::mutable_buffer read_buffer() {
    if (tls_) [[unlikely]]
      return asio::buffer(tls_in_);
    return reader_.prepare();
  }

  // ----- reading (connection_read.hpp) -----------------------------------------------

  void start_read();

  std::int64_t busy_poll_us() const {
    return cfg_->busy_poll_us ? cfg_->busy_poll_us->load(std::memory_order_relaxed) : 0;
  }

  void read_more();

  void async_read();

  // A handler of the polling read: a few non-blocking reads, then other handlers
  // (and the reactor) get a turn before the next. When nothing came for as long as
  // the process polls (read again each turn, so a change counts at once), the wait
  // goes to the reactor. since: when the previous read ended.
  void poll_read(std::shared_ptr<void> self, std::chrono::steady_clock::time_point since);

  // A large frame, read into a buffer of its own: its payload views may keep
  // that buffer (frame_header::payload_owner) after the frame.
  // Returns false when the connection must stop reading.
  bool finish_big_frame();

  // self: this connection, kept by the read that completed.
  void on_read(std::shared_ptr<void> self, std::error_code ec, std::size_t n);

  // On the only thread that runs this io_context.
  bool single_io_thread() const {
    return cfg_->single_io_thread && current_runtime_thread != nullptr;
  }

  // Returns whether to read on.
  bool handle_read(std::error_code ec, std::size_t n);

  // n bytes of plaintext arrived in the frame reader. Returns whether to read on.
  bool handle_plain(std::size_t n);

  struct reply_run {
    static constexpr std::size_t capacity = 32;
    struct frame {
      wire::frame_header header;
      std::span<const char> payload;
    };
    frame frames[capacity];
    std::size_t count = 0;
  };

  // How the call a reply or error reply ends, ended.
  static call_outcome outcome_of(const wire::frame_header& h, std::span<const char> payload);

  // Completes the collected replies (a reply whose call was abandoned is dropped).
  void complete_replies(reply_run& run);

  // Returns whether to read on.
  bool after_frames();

  // Returns false when the connection must stop reading.
  bool handle_frame(const wire::frame_header& h, std::span<const char> payload);

  void read_stopped(const std::string& reason);

  tcp::socket socket_;
  side side_;
  std::shared_ptr<const connection_config> cfg_;
  connection_sink* sink_;
  std::string peer_address_;

  mutable tlaunch::detail::fast_mutex mu_;
  bool closed_ = false, ready_ = false, writing_ = false, reading_ = false;
  bool connected_ = false, socket_closed_ = false;
  bool counted_unauthenticated_ = false;  // in cfg_->unauthenticated until ready or closed
  bool peer_stopping_ = false;  // the peer sent wire::kind::stopping
  std::atomic<std::uint64_t> fence_epoch_{0};
  std::atomic<bool> not_peer_{false};
  bool deadline_armed_ = false;           // handshake_deadline_ waits
  asio::steady_timer handshake_deadline_;
  bool heartbeat_armed_ = false;  // heartbeat_ waits
  asio::steady_timer heartbeat_;
  bool liveness_armed_ = false;  // liveness_ waits
  asio::steady_timer liveness_;
  // Reads so far (reader), and what the heartbeat ticks saw of them (ticks only).
  std::atomic<std::uint64_t> reads_{0};
  std::uint64_t reads_at_tick_ = 0;
  std::int64_t read_at_ = 0;  // reader only (read_at())
  int silent_ticks_ = 0;
  std::atomic<bool> closed_seen_{false};  // closed_, readable without the lock
  std::atomic<bool> went_silent_{false};
  std::string close_reason_ = "connection closed";
  std::string peer_listen_, peer_name_;
  frame_queue pre_, out_;  // handshake frames; everything else (sent once ready)
  call_table calls_;
  // This connection's counts, in cfg_->metrics: made under the lock by its first call or
  // when it becomes ready (a stranger's connection costs none), read by the reader after.
  std::shared_ptr<link_metrics> metrics_;
  // --trace: the traced calls this connection serves, until their replies (under the lock),
  // and their count, read without it.
  std::unordered_map<std::uint64_t, served_span> served_spans_;  // by call id
  std::atomic<std::uint32_t> traced_served_{0};

  // Writer-only state (one writer at a time, guarded by writing_).
  frame_writer writer_;

  // Reader-only state (one read in flight).
  batch_collector read_batch_;
  frame_reader reader_;
  handshake handshake_;  // also used by the connector before its first read

  // TLS (--tls); all null or empty without it. tls_mu_ serializes the reader's and
  // the writer's use of tls_; tls_open_ and tls_flush_ are under mu_.
  std::unique_ptr<tls_channel> tls_;
  tlaunch::detail::fast_mutex tls_mu_;
  bool tls_open_ = false;   // handshake done: plaintext may be sealed
  bool tls_flush_ = false;  // the reader left handshake records for the writer
  bool tls_first_read_ = true;       // reader-only
  std::vector<char> tls_in_;         // reader-only: ciphertext read
  std::vector<char> tls_out_;        // writer-only: ciphertext to write
  std::size_t tls_out_at_ = 0;       // writer-only: written so far
};

}  // namespace tlaunch::rpc

// connection's members that are not templates, defined by job in the headers below: inline
// in every translation unit, or, with TLAUNCH_SEPARATE_COMPILATION, compiled once where
// tlaunch/impl/src.hpp is included (a program's own files then neither parse nor compile
// them, nor the TLS and OpenSSL headers they include: they see the two class names alone).
#if TLAUNCH_HEADER_DEFINITIONS
#include "connection_open.hpp"
#include "connection_liveness.hpp"
#include "connection_write.hpp"
#include "connection_read.hpp"
#include "connection_tls.hpp"
#endif
