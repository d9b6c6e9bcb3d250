// One multiplexed TCP connection between two tlaunch processes: the socket
// (options, resolve and connect, reads, writes, close) and the locking that
// ties together pieces that know nothing of sockets: the hello exchange
// (handshake.hpp), the calls waiting for replies (call_table.hpp), the frame
// queues and gather writes (frame_writer.hpp) and the read buffer cut into
// frames (frame_reader.hpp).
//
// Either side may call the other: calls are matched to replies by id, any
// number are in flight. Writes are batched: whatever is queued goes out in one
// gather write, tried without blocking first; reads take everything that has
// arrived and parse every complete frame before going back to the kernel.
// Until the hello exchange completes nothing else is sent, and nothing else is
// accepted.
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../detail/fast_mutex.hpp"
#include "../detail/log_limiter.hpp"
#include "../detail/secret.hpp"
#include "../wire/codec.hpp"
#include "../wire/frame.hpp"
#include "batch.hpp"
#include "call_table.hpp"
#include "connection_api.hpp"
#include "frame_reader.hpp"
#include "frame_writer.hpp"
#include "handshake.hpp"
#include "io_thread.hpp"

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
  // Once ready, a ping every interval, and the connection closed after three
  // intervals without a byte from the peer (0: off).
  std::chrono::milliseconds heartbeat{0};
  // Liveness without the peer's process (0: off; keepalive after 10 s idle, the old
  // default): TCP keepalive probes every interval on an idle connection, and the
  // connection fails when the peer's host has answered nothing (no ACK, no byte) for
  // liveness_intervals while something waits for its acknowledgement (data in flight or a
  // keepalive probe). The kernel answers for a process that is busy or stopped, and a
  // receiver that does not read keeps acknowledging the sender's window probes: only dead
  // hosts, cut links and partitions are noticed, never a busy process.
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
  // Closed by the heartbeat (the peer sent nothing for silent_intervals) or by the kernel
  // (its host acknowledged nothing for the user timeout): the peer is stopped, hung or cut
  // off, not exited (an exit closes the socket), so no exit status is coming soon.
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

 private:
  connection(tcp::socket s, side sd, std::shared_ptr<const connection_config> cfg,
             connection_sink* sink);

  // Lines about peers that misbehave: one per reason per interval, with a count.
  static void log_bad_peer(const connection_config& cfg, connection_sink& sink,
                           std::string_view reason, const std::string& line);
  void log_bad_peer(std::string_view reason, const std::string& line);
  // After a reply or control frame was queued: closes the connection when the peer
  // has left more than cfg_->unsent_limit() bytes unread (returns true then; lk is
  // released). Without it, a peer that calls and never reads makes us grow without bound.
  bool close_if_unread_locked(std::unique_lock<tlaunch::detail::fast_mutex>& lk);

  // Closes an accepted connection unless its hello exchange completes in time.
  // Only the acceptor's: a connector may wait long and rightly for a busy
  // listener (a launcher still starting nodes answers once it is done). The
  // timer keeps no reference: a connection that goes away cancels it.
  void arm_handshake_deadline();
  static std::string fmt_seconds(std::chrono::milliseconds d);
  // ----- heartbeats -------------------------------------------------------------

  static constexpr int silent_intervals = 3;  // without a byte read: the peer is gone
  static constexpr int liveness_intervals = 2;  // unacknowledged: the peer's host is gone

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

  // Under the lock, when the exchange completed or the connection closed.
  void end_unauthenticated_locked();

  static handshake::nonce fresh_nonce();

  // ----- connect and hello ---------------------------------------------------

  void start_connect(const std::string& address);

  // A TCP connect unanswered for three heartbeat intervals, or without heartbeats for 1.5
  // liveness intervals, is given up (its calls fail as unavailable, the next call dials
  // afresh): a SYN sent into a partition is otherwise retried by the kernel at growing
  // intervals (1, 3, 7, 15 s... after the connect began), and calls would wait that long
  // after the partition heals. Over 1 s: a connect that lost one SYN (retried at 1 s)
  // still succeeds. Uses the acceptor's handshake timer.
  void arm_connect_deadline(const std::string& address);

  // Keepalive and TCP_USER_TIMEOUT (connection_config::liveness, heartbeat).
  void configure_socket();
  // Why the connection failed when its peer's host stopped answering (the liveness check,
  // or ETIMEDOUT from the kernel), naming the peer; `limit` 0 when not known.
  std::string unacknowledged_reason(std::chrono::milliseconds limit) const;

  void send_handshake(wire::frame_buffer&& f);

  // Sends a refusal, then closes. plaintext: outside TLS (to a peer without --tls).
  void refuse(const std::string& reason, bool plaintext = false);

  // A frame of the hello exchange; returns false if the connection was closed.
  bool handle_handshake(const wire::frame_header& h, std::span<const char> payload);

  void become_ready();

  // ----- writing ---------------------------------------------------------------

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
    calls_.insert(h.call_id, std::move(p));
    kick_locked(lk);
    return h.call_id;
  }

  // Registers a batch's calls (frames side by side, each with its pending
  // call) under one lock: ids in order, written into the frames, which are
  // queued as one piece. When the connection is closed they fail at once.
  void register_calls(std::span<char> frames, std::span<std::shared_ptr<void>> pendings);

  // Queues whole frames' bytes by copying them; dropped if closed.
  void send_bytes(std::span<const char> bytes);

  static void seal_small(std::span<char> frame, wire::frame_header h) {
    h.size = static_cast<std::uint32_t>(frame.size() - wire::header_size);
    wire::encode_header(h, frame.data());
  }

  // Moves everything sendable into the writer's batch; false when there is nothing.
  bool refill_batch_locked();

  void write_loop();

  // write_loop under TLS: seals what the writer holds into tls_out_ and writes that.
  void tls_write_loop();

  void write_failed(std::error_code ec);

  // ----- TLS (--tls) -------------------------------------------------------------

  // The connector's ClientHello, once connected.
  void start_tls();

  // Ciphertext arrived in tls_in_: drives the handshake, then opens records into
  // the frame reader and handles their frames. Returns whether to read on.
  bool handle_tls_read(std::size_t n);

  // The first bytes from the peer are not TLS: it runs without --tls.
  void tls_peer_is_plain(std::span<const char> got);

  // Where the next read goes: the frame reader, or under TLS the ciphertext buffer.
  asio::mutable_buffer read_buffer() {
    if (tls_) [[unlikely]]
      return asio::buffer(tls_in_);
    return reader_.prepare();
  }

  // ----- reading -----------------------------------------------------------------

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

  // Completes the collected replies (a reply whose call was abandoned is dropped).
  void complete_replies(reply_run& run);

  // Returns whether to read on.
  bool after_frames();

  // Returns false when the connection must stop reading.
  bool handle_frame(const wire::frame_header& h, std::span<const char> payload);

  void read_stopped(const std::string& reason);

  // ----- closing -----------------------------------------------------------------

  std::string peer_name_locked() const { return peer_name_.empty() ? peer_address_ : peer_name_; }

  // Calls failing on this connection now were ended by the program's stop.
  bool ended_by_stop_locked() const {
    return peer_stopping_ || cfg_->program_stopping->load(std::memory_order_acquire);
  }

  void close_locked(std::unique_lock<tlaunch::detail::fast_mutex>& lk, const std::string& reason);

  void finish_close_locked(std::unique_lock<tlaunch::detail::fast_mutex>&);

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
  bool deadline_armed_ = false;           // handshake_deadline_ waits
  asio::steady_timer handshake_deadline_;
  bool heartbeat_armed_ = false;  // heartbeat_ waits
  asio::steady_timer heartbeat_;
  bool liveness_armed_ = false;  // liveness_ waits
  asio::steady_timer liveness_;
  // Reads so far (reader), and what the heartbeat ticks saw of them (ticks only).
  std::atomic<std::uint64_t> reads_{0};
  std::uint64_t reads_at_tick_ = 0;
  int silent_ticks_ = 0;
  std::atomic<bool> closed_seen_{false};  // closed_, readable without the lock
  std::atomic<bool> went_silent_{false};
  std::string close_reason_ = "connection closed";
  std::string peer_listen_, peer_name_;
  frame_queue pre_, out_;  // handshake frames; everything else (sent once ready)
  call_table calls_;

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

// connection's members that are not templates, defined here: inline in every translation
// unit, or, with TLAUNCH_SEPARATE_COMPILATION, compiled once where tlaunch/impl/src.hpp is
// included (a program's own files then neither parse nor compile them).
#if TLAUNCH_HEADER_DEFINITIONS
// TLS and OpenSSL's headers only where connections are made and run: a program's files see
// the two class names alone.
#include "tls.hpp"

namespace tlaunch::rpc {

TLAUNCH_DECL std::shared_ptr<connection>
connection::connect(asio::io_context& io, const std::string& address,
                    std::shared_ptr<const connection_config> cfg, connection_sink* sink) {
  auto c = std::shared_ptr<connection>(new connection(tcp::socket(io), side::connector, std::move(cfg), sink));
  c->peer_address_ = address;
  c->start_connect(address);
  return c;
}

TLAUNCH_DECL std::shared_ptr<connection>
connection::accept(tcp::socket s, std::shared_ptr<const connection_config> cfg,
                   connection_sink* sink) {
  std::error_code ec;
  auto ep = s.remote_endpoint(ec);
  std::string peer = ec ? std::string("(unknown)")
                        : ep.address().to_string() + ":" + std::to_string(ep.port());
  if (cfg->unauthenticated->fetch_add(1) >= cfg->max_unauthenticated) {
    cfg->unauthenticated->fetch_sub(1);
    log_bad_peer(*cfg, *sink, "too many unauthenticated",
                 "closing connection from " + peer + " at once: " +
                     std::to_string(cfg->max_unauthenticated) +
                     " connections have not completed their hello exchange yet");
    s.close(ec);
    return nullptr;
  }
  auto c = std::shared_ptr<connection>(new connection(std::move(s), side::acceptor, std::move(cfg), sink));
  c->counted_unauthenticated_ = true;
  c->peer_address_ = std::move(peer);
  c->configure_socket();
  c->arm_handshake_deadline();
  c->start_read();
  return c;
}

TLAUNCH_DECL std::string connection::peer_listen_address() const {
  std::lock_guard lk(mu_);
  return peer_listen_.empty() ? peer_address_ : peer_listen_;
}

TLAUNCH_DECL std::string connection::peer_name() const {
  std::lock_guard lk(mu_);
  return peer_name_.empty() ? peer_address_ : peer_name_;
}

TLAUNCH_DECL std::string connection::local_ip() const {
  std::error_code ec;
  auto ep = socket_.local_endpoint(ec);
  return ec ? std::string() : ep.address().to_string();
}

TLAUNCH_DECL bool connection::ready() const {
  std::lock_guard lk(mu_);
  return ready_;
}

TLAUNCH_DECL std::uint64_t connection::start_call(wire::frame_buffer&& f, wire::frame_header h,
                                                  std::shared_ptr<pending_call> p) {
  return register_call(h, std::move(p), [&](const wire::frame_header& sealed) {
    f.seal(sealed);
    out_.push(std::move(f));
  });
}

TLAUNCH_DECL std::uint64_t connection::start_call(std::span<char> frame, wire::frame_header h,
                                                  std::shared_ptr<pending_call> p) {
  return register_call(h, std::move(p), [&](const wire::frame_header& sealed) {
    seal_small(frame, sealed);
    out_.push_bytes(frame);
  });
}

TLAUNCH_DECL std::shared_ptr<pending_call> connection::abandon_call(std::uint64_t call_id) {
  std::unique_lock lk(mu_);
  auto p = calls_.take(call_id);
  if (!p) return nullptr;
  if (!closed_) {
    auto f = wire::make_small_frame();
    seal_small(f.span(), {.type = wire::kind::cancel, .call_id = call_id});
    out_.push_bytes(f.span());
    kick_locked(lk);
  }
  return p;
}

TLAUNCH_DECL void connection::send(wire::frame_buffer&& f) {
  std::unique_lock lk(mu_);
  if (closed_) return;
  out_.push(std::move(f));
  if (close_if_unread_locked(lk)) [[unlikely]]
    return;
  kick_locked(lk);
}

TLAUNCH_DECL bool connection::close_if_unread_locked(
    std::unique_lock<tlaunch::detail::fast_mutex>& lk) {
  const std::uint64_t unsent = pre_.pushed() + out_.pushed() - writer_.written();
  const std::uint64_t limit = cfg_->unsent_limit();
  if (unsent <= limit) [[likely]]
    return false;
  const std::string peer = peer_name_locked();
  std::string why = peer;
  why += " does not read what it is sent: ";
  why += std::to_string(unsent >> 20);
  why += " MiB of frames wait unsent, more than the limit of ";
  why += std::to_string(limit >> 20);
  why += " MiB (4 x --max-frame, at least 64 MiB)";
  close_locked(lk, why);
  lk.unlock();
  log_bad_peer("unread output", "closing connection to " + peer + ": " + why);
  return true;
}

TLAUNCH_DECL void connection::send_reply(std::span<char> frame, wire::frame_header h) {
  seal_small(frame, h);
  if (deferred_writes::stage(
          this, [this] { return std::shared_ptr<void>(shared_from_this()); },
          [](const std::shared_ptr<void>& who, std::span<char> bytes,
             std::span<std::shared_ptr<void>>) {
            static_cast<connection*>(who.get())->send_bytes(bytes);
          },
          frame))
    return;
  send_bytes(frame);
}

TLAUNCH_DECL void connection::start_call_batched(std::span<char> frame, wire::frame_header h,
                                                 std::shared_ptr<pending_call> p) {
  seal_small(frame, h);  // the call id is set when the batch registers it
  std::shared_ptr<void> extra = std::move(p);
  if (deferred_writes::stage(
          &calls_, [this] { return std::shared_ptr<void>(shared_from_this()); },
          [](const std::shared_ptr<void>& who, std::span<char> bytes,
             std::span<std::shared_ptr<void>> pendings) {
            static_cast<connection*>(who.get())->register_calls(bytes, pendings);
          },
          frame, &extra))
    return;
  start_call(frame, h, std::static_pointer_cast<pending_call>(std::move(extra)));
}

TLAUNCH_DECL void connection::close(const std::string& reason) {
  std::unique_lock lk(mu_);
  close_locked(lk, reason);
}

TLAUNCH_DECL void connection::register_running(std::uint64_t call_id,
                                               std::function<void()> cancel) {
  std::lock_guard lk(mu_);
  calls_.add_running(call_id, std::move(cancel));
}

TLAUNCH_DECL void connection::unregister_running(std::uint64_t call_id) {
  std::lock_guard lk(mu_);
  calls_.remove_running(call_id);
}

TLAUNCH_DECL std::size_t connection::pending_count() const {
  std::lock_guard lk(mu_);
  return calls_.size();
}

TLAUNCH_DECL connection::connection(tcp::socket s, side sd,
                                    std::shared_ptr<const connection_config> cfg,
                                    connection_sink* sink)
    : socket_(std::move(s)),
      side_(sd),
      cfg_(std::move(cfg)),
      sink_(sink),
      handshake_deadline_(socket_.get_executor()),
      heartbeat_(socket_.get_executor()),
      liveness_(socket_.get_executor()),
      handshake_(sd, *cfg_, fresh_nonce()) {
  // Until the peer has proven the secret, it gets a small read buffer.
  reader_.set_min_buffer(handshake::buffer_size);
  if (cfg_->tls) {
    tls_ = std::make_unique<tls_channel>(*cfg_->tls, sd == side::acceptor);
    tls_in_.resize(handshake::buffer_size);
  }
}

TLAUNCH_DECL void connection::log_bad_peer(const connection_config& cfg, connection_sink& sink,
                                           std::string_view reason, const std::string& line) {
  if (!cfg.bad_peer_log) return sink.log(line);
  if (auto l = cfg.bad_peer_log->admit(reason, line)) sink.log(*l);
}

TLAUNCH_DECL void connection::log_bad_peer(std::string_view reason, const std::string& line) {
  log_bad_peer(*cfg_, *sink_, reason, line);
}

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

TLAUNCH_DECL void connection::end_unauthenticated_locked() {
  if (deadline_armed_) {
    deadline_armed_ = false;
    handshake_deadline_.cancel();
  }
  if (counted_unauthenticated_) {
    counted_unauthenticated_ = false;
    cfg_->unauthenticated->fetch_sub(1);
  }
}

TLAUNCH_DECL handshake::nonce connection::fresh_nonce() {
  auto n = tlaunch::detail::random_secret();
  handshake::nonce out;
  std::memcpy(out.data(), n.data(), out.size());
  return out;
}

TLAUNCH_DECL void connection::start_connect(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    asio::post(socket_.get_executor(), [self = shared_from_this(), address] {
      self->close("bad address '" + address + "' (want host:port)");
    });
    return;
  }
  std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  auto resolver = std::make_shared<tcp::resolver>(socket_.get_executor());
  resolver->async_resolve(
      host, port,
      [self = shared_from_this(), resolver, address](std::error_code ec,
                                                     tcp::resolver::results_type results) {
        if (ec) return self->close("cannot resolve " + address + ": " + ec.message());
        self->arm_connect_deadline(address);
        asio::async_connect(self->socket_, results,
                            [self, address](std::error_code ec, const tcp::endpoint&) {
                              if (ec)
                                return self->close("cannot connect to " + address + ": " +
                                                   ec.message());
                              self->configure_socket();
                              {
                                std::lock_guard lk(self->mu_);
                                self->connected_ = true;
                                self->end_unauthenticated_locked();  // the connect deadline
                              }
                              if (self->tls_) self->start_tls();
                              self->send_handshake(self->handshake_.hello());
                              self->start_read();
                            });
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

TLAUNCH_DECL std::string connection::unacknowledged_reason(std::chrono::milliseconds limit) const {
  std::string why = "no answer from " + peer_name() + "'s host";
  if (limit.count() > 0) why += " for " + fmt_seconds(limit);
  return why + ": host down or network cut";
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

TLAUNCH_DECL void connection::send_handshake(wire::frame_buffer&& f) {
  std::unique_lock lk(mu_);
  if (closed_) return;
  pre_.push_whole(std::move(f));
  kick_locked(lk);
}

TLAUNCH_DECL void connection::refuse(const std::string& reason, bool plaintext) {
  log_bad_peer("refused: " + reason, "refusing connection from " + peer_address_ + ": " + reason);
  auto f = handshake::refusal(reason);
  std::unique_lock lk(mu_);
  if (closed_) return;
  if (!writing_) {  // best effort: the reason reaches the peer before the close
    std::error_code ec;
    auto b = f.bytes();
    if (tls_ && !plaintext) {
      std::vector<char> sealed;
      {
        std::lock_guard tl(tls_mu_);
        if (tls_->open() && tls_->seal({b.data(), b.size()})) tls_->take_output(sealed);
      }
      if (!sealed.empty()) socket_.write_some(asio::buffer(sealed), ec);
    } else {
      socket_.write_some(asio::buffer(b.data(), b.size()), ec);
    }
  }
  close_locked(lk, "refused: " + reason);
}

TLAUNCH_DECL bool connection::handle_handshake(const wire::frame_header& h,
                                               std::span<const char> payload) {
  auto step = handshake_.on_frame(h, payload);
  if (step.learned_peer) {
    std::lock_guard lk(mu_);
    peer_listen_ = handshake_.peer_listen();
    peer_name_ = handshake_.peer_name();
  }
  switch (step.what) {
    case handshake::outcome::peer_refused:
      close(peer_address_ + " refused the connection: " + step.reason);
      return false;
    case handshake::outcome::refuse:
      refuse(step.reason);
      return false;
    case handshake::outcome::wait:
    case handshake::outcome::ready:
      break;
  }
  if (step.reply) send_handshake(std::move(*step.reply));
  if (step.what == handshake::outcome::ready) {
    reader_.set_min_buffer(frame_reader::initial_buffer);  // the reader's own thread
    if (tls_) tls_in_.resize(frame_reader::initial_buffer * 2);
    become_ready();
  }
  return true;
}

TLAUNCH_DECL void connection::become_ready() {
  {
    std::unique_lock lk(mu_);
    ready_ = true;
    end_unauthenticated_locked();
    arm_heartbeat_locked();
    kick_locked(lk);
  }
  sink_->on_ready(shared_from_this());
}

TLAUNCH_DECL void connection::kick_locked(std::unique_lock<tlaunch::detail::fast_mutex>& lk) {
  if (tls_) [[unlikely]] {
    // Handshake records to send, or plaintext once TLS is open.
    if (writing_ || closed_ ||
        (!tls_flush_ && (!tls_open_ || (pre_.empty() && (out_.empty() || !ready_)))))
      return;
  } else if (writing_ || closed_ || (pre_.empty() && (out_.empty() || !ready_))) {
    return;
  }
  if (side_ == side::connector && !connected_) return;
  writing_ = true;
  lk.unlock();
  if (current_runtime_thread == nullptr) return write_loop();
  // On the only io thread, a batch of work that is running writes when it is
  // done (the posted write would have waited for it anyway).
  if (single_io_thread() &&
      deferred_writes::defer(shared_from_this(), [](const std::shared_ptr<void>& self) {
        static_cast<connection*>(self.get())->write_loop();
      }))
    return;
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->write_loop(); });
}

TLAUNCH_DECL void connection::register_calls(std::span<char> frames,
                                             std::span<std::shared_ptr<void>> pendings) {
  std::unique_lock lk(mu_);
  if (closed_) {
    std::string why = close_reason_;
    bool by_stop = ended_by_stop_locked();
    lk.unlock();
    for (auto& p : pendings) {
      static_cast<pending_call*>(p.get())->fail_closed(why, by_stop);
    }
    return;
  }
  std::size_t at = 0;
  for (auto& p : pendings) {
    char* f = frames.data() + at;
    const std::uint64_t id = calls_.next_id();
    wire::store_call_id(f, id);
    at += wire::header_size + wire::detail::get32(reinterpret_cast<const unsigned char*>(f));
    calls_.insert(id, std::static_pointer_cast<pending_call>(std::move(p)));
  }
  out_.push_bytes(frames.first(at));
  kick_locked(lk);
}

TLAUNCH_DECL void connection::send_bytes(std::span<const char> bytes) {
  std::unique_lock lk(mu_);
  if (closed_) return;
  out_.push_bytes(bytes);
  if (close_if_unread_locked(lk)) [[unlikely]]
    return;
  kick_locked(lk);
}

TLAUNCH_DECL bool connection::refill_batch_locked() {
  writer_.take(pre_);
  if (ready_) writer_.take(out_);
  return !writer_.done();
}

TLAUNCH_DECL void connection::write_loop() {
  if (tls_) [[unlikely]]
    return tls_write_loop();
  for (;;) {
    if (writer_.done()) {
      writer_.recycle_written();
      std::unique_lock lk(mu_);
      if (closed_ || !refill_batch_locked()) {
        writing_ = false;
        writer_.clear();
        if (closed_) finish_close_locked(lk);
        return;
      }
    }
    const auto& gather = writer_.gather();
    std::error_code ec;
    std::size_t n = socket_.write_some(gather, ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      // gather stays valid: the writer is untouched until this completes.
      socket_.async_write_some(gather, [self = shared_from_this()](std::error_code ec,
                                                                   std::size_t n) {
        if (ec) return self->write_failed(ec);
        self->writer_.advance(n);
        self->write_loop();
      });
      return;
    }
    if (ec) return write_failed(ec);
    writer_.advance(n);
  }
}

TLAUNCH_DECL void connection::tls_write_loop() {
  // Plaintext sealed per round: the kernel sends one round while the next is sealed.
  static constexpr std::size_t seal_round = 256 * 1024;
  for (;;) {
    if (tls_out_at_ < tls_out_.size()) {
      auto rest = asio::buffer(tls_out_.data() + tls_out_at_, tls_out_.size() - tls_out_at_);
      std::error_code ec;
      std::size_t n = socket_.write_some(rest, ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) {
        socket_.async_write_some(rest, [self = shared_from_this()](std::error_code ec,
                                                                   std::size_t n) {
          if (ec) return self->write_failed(ec);
          self->tls_out_at_ += n;
          self->tls_write_loop();
        });
        return;
      }
      if (ec) return write_failed(ec);
      tls_out_at_ += n;
      continue;
    }
    tls_out_.clear();
    tls_out_at_ = 0;
    if (!writer_.done()) {
      const auto& gather = writer_.gather();
      std::size_t sealed = 0;
      bool ok = true;
      {
        std::lock_guard tl(tls_mu_);
        for (const auto& b : gather) {
          std::size_t take = std::min(b.size(), seal_round - sealed);
          if (!(ok = tls_->seal({static_cast<const char*>(b.data()), take}))) break;
          sealed += take;
          if (sealed == seal_round) break;
        }
        tls_->take_output(tls_out_);
      }
      if (!ok) {
        std::unique_lock lk(mu_);
        writing_ = false;
        writer_.clear();
        close_locked(lk, "TLS to " + peer_name_locked() + " failed: " + tls_->error());
        return;
      }
      writer_.advance(sealed);
      continue;
    }
    writer_.recycle_written();
    std::unique_lock lk(mu_);
    if (closed_) {
      writing_ = false;
      writer_.clear();
      finish_close_locked(lk);
      return;
    }
    // Under mu_: a reader that leaves records after this sees writing_ false and kicks.
    tls_flush_ = false;
    const bool more = tls_open_ && refill_batch_locked();
    {
      std::lock_guard tl(tls_mu_);
      tls_->take_output(tls_out_);
    }
    if (!more && tls_out_.empty()) {
      writing_ = false;
      writer_.clear();
      return;
    }
  }
}

TLAUNCH_DECL void connection::start_tls() {
  bool ok;
  {
    std::lock_guard tl(tls_mu_);
    ok = tls_->handshake();
  }
  if (!ok) return close("TLS handshake with " + peer_name() + " failed: " + tls_->error());
  std::unique_lock lk(mu_);
  tls_flush_ = true;
  kick_locked(lk);
}

TLAUNCH_DECL void connection::tls_peer_is_plain(std::span<const char> got) {
  if (side_ == side::acceptor) {
    refuse("this process runs with --tls and the peer does not (every process of a launch "
           "must run with --tls, or none)",
           true);
    return;
  }
  // A peer without --tls refuses our ClientHello in a plain frame.
  if (got.size() >= wire::header_size) {
    auto h = wire::load_header(got.data());
    if (h.type == wire::kind::refuse && h.size <= got.size() - wire::header_size)
      return close(peer_address_ + " refused the connection: " +
                   handshake::refusal_reason(got.subspan(wire::header_size, h.size)));
  }
  close(peer_address_ + " does not speak TLS: it runs without --tls and this process with it "
        "(every process of a launch must run with --tls, or none)");
}

TLAUNCH_DECL bool connection::handle_tls_read(std::size_t n) {
  std::span<const char> got(tls_in_.data(), n);
  if (tls_first_read_) {
    tls_first_read_ = false;
    if (!looks_like_tls(got)) [[unlikely]] {
      tls_peer_is_plain(got);
      read_stopped("");
      return false;
    }
  }
  bool ok = true, opened = false, flush = false;
  {
    std::lock_guard tl(tls_mu_);
    tls_->feed(got);
    if (!tls_->open()) {
      ok = tls_->handshake();
      opened = tls_->open();
    }
    flush = tls_->pending_output() > 0;
  }
  if (!ok) {
    std::string why = tls_->error();
    log_bad_peer("TLS handshake failed", "closing connection from " + peer_address_ +
                                             ": TLS handshake failed: " + why);
    read_stopped("TLS handshake with " + peer_name() + " failed: " + why +
                 " (a process without the launch secret, or without --tls?)");
    return false;
  }
  if (flush || opened) {
    std::unique_lock lk(mu_);
    tls_flush_ = tls_flush_ || flush;
    tls_open_ = tls_open_ || opened;
    kick_locked(lk);
  }
  for (;;) {
    auto to = reader_.prepare();
    long m;
    {
      std::lock_guard tl(tls_mu_);
      if (!tls_->open()) return true;
      m = tls_->open_into({static_cast<char*>(to.data()), to.size()});
    }
    if (m == 0) return true;
    if (m < 0) {
      read_stopped("TLS from " + peer_name() + " failed: " + tls_->error());
      return false;
    }
    if (!handle_plain(static_cast<std::size_t>(m))) return false;
  }
}

TLAUNCH_DECL void connection::write_failed(std::error_code ec) {
  if (ec == asio::error::timed_out) {
    went_silent_.store(true, std::memory_order_release);
    std::string why = unacknowledged_reason({});
    std::unique_lock lk(mu_);
    writing_ = false;
    writer_.clear();
    close_locked(lk, why);
    return;
  }
  std::unique_lock lk(mu_);
  writing_ = false;
  writer_.clear();
  close_locked(lk, "write to " + peer_name_locked() + " failed: " + ec.message());
}

TLAUNCH_DECL void connection::start_read() {
  {
    std::lock_guard lk(mu_);
    if (closed_) return;
    reading_ = true;
  }
  read_more();
}

TLAUNCH_DECL void connection::read_more() {
  if (busy_poll_us() > 0) {
    // Polling: the bytes are read as soon as they are there, with one syscall,
    // where the reactor would take two (epoll_wait, then the read) and another
    // read that finds nothing after each message.
    asio::post(socket_.get_executor(),
               [self = std::shared_ptr<void>(shared_from_this()),
                since = std::chrono::steady_clock::now()]() mutable {
                 static_cast<connection*>(self.get())->poll_read(std::move(self), since);
               });
    return;
  }
  async_read();
}

TLAUNCH_DECL void connection::async_read() {
  socket_.async_read_some(read_buffer(), [self = std::shared_ptr<void>(shared_from_this())](
                                             std::error_code ec, std::size_t n) mutable {
    static_cast<connection*>(self.get())->on_read(std::move(self), ec, n);
  });
}

TLAUNCH_DECL void connection::poll_read(std::shared_ptr<void> self,
                                        std::chrono::steady_clock::time_point since) {
  static constexpr int reads_per_turn = 4;
  for (int i = 0; i < reads_per_turn; ++i) {
    std::error_code ec;
    std::size_t n = socket_.read_some(read_buffer(), ec);  // the socket is non-blocking
    if (ec != asio::error::would_block && ec != asio::error::try_again) {
#ifdef TLAUNCH_TEST_COUNTERS
      if (!ec) test_counters::polled_reads.fetch_add(1, std::memory_order_relaxed);
#endif
      on_read(std::move(self), ec, n);
      return;
    }
  }
  const auto spin = busy_poll_us();
  if (spin <= 0 || std::chrono::steady_clock::now() - since >= std::chrono::microseconds(spin)) {
    async_read();
    return;
  }
  asio::post(socket_.get_executor(), [self = std::move(self), since]() mutable {
    static_cast<connection*>(self.get())->poll_read(std::move(self), since);
  });
}

TLAUNCH_DECL bool connection::finish_big_frame() {
  auto frame = reader_.take_big_frame();
  wire::frame_header header = frame.header;
  header.payload_owner = &frame.owner;
  return handle_frame(header, frame.payload());
}

TLAUNCH_DECL void connection::on_read(std::shared_ptr<void> self, std::error_code ec,
                                      std::size_t n) {
  bool more;
  {
    deferred_writes::scope writes;  // what this read causes to be sent, in one write
    {
      // What this read's frames post goes out once per executor, before the
      // next read starts (it may complete on another io thread). Each group
      // keeps the connection, so the calls in it need no reference each.
      batch_collector::scope batch(read_batch_, single_io_thread(), &self);
      more = handle_read(ec, n);
    }
  }
  if (more) read_more();
}

TLAUNCH_DECL bool connection::handle_read(std::error_code ec, std::size_t n) {
  if (ec) {
    if (ec == asio::error::timed_out) {  // keepalive or TCP_USER_TIMEOUT: no status follows
      went_silent_.store(true, std::memory_order_release);
      read_stopped(unacknowledged_reason({}));
      return false;
    }
    std::string why = ec == asio::error::eof
                          ? "closed by " + peer_name()
                          : "read from " + peer_name() + " failed: " + ec.message();
    if (tls_ && !tls_->open()) why += " during the TLS handshake";
    read_stopped(why);
    return false;
  }
  if (tls_) [[unlikely]]
    return handle_tls_read(n);
  return handle_plain(n);
}

TLAUNCH_DECL bool connection::handle_plain(std::size_t n) {
  reader_.commit(n);
  // Only this thread writes it: a plain store, no read-modify-write on every read.
  reads_.store(reads_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (reader_.in_big_frame()) {
    if (!reader_.big_frame_done()) return true;
    if (!finish_big_frame()) {
      read_stopped("");
      return false;
    }
    return after_frames();
  }
  // Replies in a row are completed together: their pending calls are taken
  // under one lock. They are completed before any other frame is handled and
  // before the buffer may move, so order and payloads stay as they were.
  reply_run replies;
  // A read that left room took everything the kernel had; one that filled
  // the buffer is parsed first and continued by the next read.
  frame_reader::frame f;
  for (;;) {
    // Until the peer has proven the secret, its frames are no larger than a hello.
    const bool ready = handshake_.ready();
    const std::uint32_t limit =
        ready ? cfg_->max_frame : std::min<std::uint32_t>(cfg_->max_frame, handshake::max_frame);
    const auto got = reader_.next(limit, f);
    if (got == frame_reader::status::frame) [[likely]] {
      if (ready) {
        if (f.header.type == wire::kind::reply || f.header.type == wire::kind::error_reply) {
          replies.frames[replies.count++] = {f.header, f.payload};
          if (replies.count == reply_run::capacity) complete_replies(replies);
          continue;
        }
        if (f.header.type == wire::kind::call) {  // the common frame: straight to the sink
          if (replies.count) complete_replies(replies);
          sink_->on_call(*this, f.header, f.payload);
          continue;
        }
      }
      complete_replies(replies);
      if (!handle_frame(f.header, f.payload)) {
        read_stopped("");
        return false;
      }
      continue;
    }
    if (got == frame_reader::status::malformed) [[unlikely]] {
      if (!ready && !tls_ && looks_like_tls(reader_.unparsed())) {
        refuse("the peer started a TLS handshake: it runs with --tls and this process does "
               "not (every process of a launch must run with --tls, or none)");
        read_stopped("");
        return false;
      }
      auto problem = reader_.problem(cfg_->max_frame);
      if (problem.empty())  // within max_frame, too large for the hello exchange
        problem = reader_.problem(limit) + " before the hello exchange completed";
      log_bad_peer("malformed: " + problem,
                   "closing connection from " + peer_name() + ": malformed frame: " + problem);
      read_stopped("malformed frame: " + problem);
      return false;
    }
    if (got == frame_reader::status::partial) {
      complete_replies(replies);
      try {
        reader_.make_room(ready);
      } catch (const std::bad_alloc&) {
        // A frame within --max-frame that memory cannot hold (RLIMIT_AS, strict
        // overcommit): that connection goes, not the process.
        std::string problem = "no memory for a frame of " +
                              std::to_string(reader_.partial_frame_size()) + " bytes";
        log_bad_peer("no memory for a frame",
                     "closing connection from " + peer_name() + ": " + problem);
        read_stopped(problem);
        return false;
      }
    }
    break;
  }
  complete_replies(replies);
  return after_frames();
}

TLAUNCH_DECL void connection::complete_replies(reply_run& run) {
  if (run.count == 0) return;
  std::shared_ptr<pending_call> taken[reply_run::capacity];
  {
    std::lock_guard lk(mu_);
    for (std::size_t i = 0; i < run.count; ++i)
      taken[i] = calls_.take(run.frames[i].header.call_id);
  }
  std::size_t n = std::exchange(run.count, 0);
  for (std::size_t i = 0; i < n; ++i)
    if (taken[i]) taken[i]->complete(run.frames[i].header, run.frames[i].payload);
}

TLAUNCH_DECL bool connection::after_frames() {
  reader_.rewind_if_empty();
  {
    std::unique_lock lk(mu_);
    if (closed_) {
      reading_ = false;
      finish_close_locked(lk);
      return false;
    }
  }
  return true;
}

TLAUNCH_DECL bool connection::handle_frame(const wire::frame_header& h,
                                           std::span<const char> payload) {
  if (!handshake_.ready()) return handle_handshake(h, payload);
  switch (h.type) {
    case wire::kind::call:
      sink_->on_call(*this, h, payload);
      return true;
    case wire::kind::reply:
    case wire::kind::error_reply: {  // a large one: the others come in runs
      reply_run one;
      one.frames[one.count++] = {h, payload};
      complete_replies(one);
      return true;
    }
    case wire::kind::cancel: {
      std::function<void()> cancel;
      {
        std::lock_guard lk(mu_);
        cancel = calls_.take_running(h.call_id);
      }
      if (cancel) cancel();
      sink_->on_cancel(shared_from_this(), h.call_id);
      return true;
    }
    case wire::kind::refuse:
      close(peer_address_ + " refused the connection: " + handshake::refusal_reason(payload));
      return false;
    case wire::kind::ping:  // its bytes were counted as they were read
      return true;
    case wire::kind::stopping: {  // the peer stops with the program: so does this process
      std::lock_guard lk(mu_);
      peer_stopping_ = true;
      cfg_->program_stopping->store(true, std::memory_order_release);
      return true;
    }
    case wire::kind::hello:
    case wire::kind::auth:
      log_bad_peer("handshake frame after handshake",
                   "closing connection from " + peer_name() + ": handshake frame after handshake");
      close("protocol error: handshake frame after handshake");
      return false;
    default:
      sink_->on_control(shared_from_this(), h, payload);
      return true;
  }
}

TLAUNCH_DECL void connection::read_stopped(const std::string& reason) {
  std::unique_lock lk(mu_);
  reading_ = false;
  close_locked(lk, reason.empty() ? close_reason_ : reason);
}

TLAUNCH_DECL void connection::close_locked(std::unique_lock<tlaunch::detail::fast_mutex>& lk,
                                           const std::string& reason) {
  if (closed_) {
    finish_close_locked(lk);
    return;
  }
  closed_ = true;
  closed_seen_.store(true, std::memory_order_release);
  close_reason_ = reason;
  end_unauthenticated_locked();
  if (heartbeat_armed_) {
    heartbeat_armed_ = false;
    heartbeat_.cancel();
  }
  if (liveness_armed_) {
    liveness_armed_ = false;
    liveness_.cancel();
  }
  auto pending = calls_.take_all();
  const bool by_stop = ended_by_stop_locked();
  pre_.clear();
  out_.clear();
  // Wakes a pending read; the socket itself is closed once no operation uses it.
  ::shutdown(socket_.native_handle(), SHUT_RDWR);
  finish_close_locked(lk);
  lk.unlock();
  for (auto& p : pending) p->fail_closed(reason, by_stop);
  sink_->on_closed(shared_from_this(), reason);
  lk.lock();
}

TLAUNCH_DECL bool connection::flushed() const {
  std::lock_guard lk(mu_);
  return closed_ || (!writing_ && pre_.empty() && out_.empty());
}

TLAUNCH_DECL void connection::finish_close_locked(std::unique_lock<tlaunch::detail::fast_mutex>&) {
  if (!closed_ || reading_ || writing_ || socket_closed_) return;
  socket_closed_ = true;
  std::error_code ec;
  socket_.close(ec);
}

// connection_api.hpp: the connection's members for the call path.
TLAUNCH_DECL std::uint64_t start_call(connection& c, std::span<char> frame, wire::frame_header h,
                                      std::shared_ptr<pending_call> p) {
  return c.start_call(frame, h, std::move(p));
}
TLAUNCH_DECL std::uint64_t start_call(connection& c, wire::frame_buffer&& f, wire::frame_header h,
                                      std::shared_ptr<pending_call> p) {
  return c.start_call(std::move(f), h, std::move(p));
}
TLAUNCH_DECL void start_call_batched(connection& c, std::span<char> frame, wire::frame_header h,
                                     std::shared_ptr<pending_call> p) {
  c.start_call_batched(frame, h, std::move(p));
}
TLAUNCH_DECL void send(connection& c, wire::frame_buffer&& f) { c.send(std::move(f)); }
TLAUNCH_DECL void send_reply(connection& c, std::span<char> frame, wire::frame_header h) {
  c.send_reply(frame, h);
}
TLAUNCH_DECL void register_running(connection& c, std::uint64_t call_id,
                                   std::function<void()> cancel) {
  c.register_running(call_id, std::move(cancel));
}
TLAUNCH_DECL void unregister_running(connection& c, std::uint64_t call_id) {
  c.unregister_running(call_id);
}
TLAUNCH_DECL std::shared_ptr<connection> shared_of(connection& c) { return c.shared_from_this(); }

}  // namespace tlaunch::rpc

#endif
