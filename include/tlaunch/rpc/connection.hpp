// One multiplexed TCP connection between two tlaunch processes.
//
// Either side may call the other: calls are matched to replies by id, any
// number are in flight. Writes are batched: whatever is queued goes out in one
// gather write, tried without blocking first; reads take everything that has
// arrived and parse every complete frame before going back to the kernel.
// The first frames are the hello exchange (wire/hello.hpp); until it completes
// nothing else is sent, and nothing else is accepted.
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
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

#include "../detail/buffer_pool.hpp"
#include "../detail/fast_mutex.hpp"
#include "../detail/id_map.hpp"
#include "../detail/io_thread.hpp"
#include "../detail/secret.hpp"
#include "../wire/codec.hpp"
#include "batch.hpp"
#include "../wire/frame.hpp"
#include "../wire/hello.hpp"

namespace tlaunch::rpc {

class connection;

// Reads of this process that found their bytes by polling (connection::poll_read),
// not through the reactor: the tests check that busy polling takes that path.
inline std::atomic<std::uint64_t> polled_reads{0};

// What every connection of a process shares: who we are and what we accept.
struct connection_config {
  std::vector<std::uint8_t> secret;
  std::string build_id;
  std::string listen_address;  // ours, announced in the hello
  std::string name;            // ours, for the peer's messages
  std::uint32_t max_frame = wire::default_max_frame;
  // One thread runs the io_context: a read's work may run at once, on it.
  bool single_io_thread = false;
  // The process's busy polling in microseconds (runtime::set_busy_poll), or none.
  // While it is on, a connection waiting for bytes retries a non-blocking read in
  // handlers of its own for that long after its last bytes, instead of leaving the
  // wait to the reactor (see connection::read_more).
  const std::atomic<std::int64_t>* busy_poll_us = nullptr;
};

// The owner of the connections (the runtime or the coordinator).
class connection_sink {
 public:
  virtual ~connection_sink() = default;
  // A call frame arrived (reader thread); payload is only valid during the call.
  // c is alive at least until the read's batch has run (batch_collector::keeps).
  virtual void on_call(connection& c, const wire::frame_header& h,
                       std::span<const char> payload) = 0;
  // A control frame (coordinator protocol) arrived.
  virtual void on_control(const std::shared_ptr<connection>& c, const wire::frame_header& h,
                          std::span<const char> payload) = 0;
  // The hello exchange completed; peer_listen is the address the peer serves on.
  virtual void on_ready(const std::shared_ptr<connection>&) {}
  virtual void on_closed(const std::shared_ptr<connection>& c, const std::string& reason) = 0;
  virtual void on_cancel(const std::shared_ptr<connection>&, std::uint64_t /*call_id*/) {}
  virtual void log(const std::string& message) = 0;
};

// A call waiting for its reply. complete() or fail() is called exactly once.
class pending_call {
 public:
  virtual ~pending_call() = default;
  // Reply or error_reply, on the reader's thread; payload valid only during the call.
  virtual void complete(const wire::frame_header& h, std::span<const char> payload) = 0;
  // The connection closed or was refused before the reply came.
  virtual void fail_unavailable(const std::string& why) = 0;
};

class connection : public std::enable_shared_from_this<connection> {
 public:
  using tcp = asio::ip::tcp;
  enum class side { connector, acceptor };

  // Starts connecting to "host:port"; calls may be queued at once.
  static std::shared_ptr<connection> connect(asio::io_context& io, const std::string& address,
                                             std::shared_ptr<const connection_config> cfg,
                                             connection_sink* sink) {
    auto c = std::shared_ptr<connection>(new connection(tcp::socket(io), side::connector, std::move(cfg), sink));
    c->peer_address_ = address;
    c->start_connect(address);
    return c;
  }

  // Takes an accepted socket and waits for the peer's hello.
  static std::shared_ptr<connection> accept(tcp::socket s,
                                            std::shared_ptr<const connection_config> cfg,
                                            connection_sink* sink) {
    auto c = std::shared_ptr<connection>(new connection(std::move(s), side::acceptor, std::move(cfg), sink));
    std::error_code ec;
    auto ep = c->socket_.remote_endpoint(ec);
    if (!ec) c->peer_address_ = ep.address().to_string() + ":" + std::to_string(ep.port());
    c->configure_socket();
    c->start_read();
    return c;
  }

  ~connection() { delete_buffer(); }

  // The peer's listen address as it announced it (acceptor) or as dialled (connector).
  std::string peer_listen_address() const {
    std::lock_guard lk(mu_);
    return peer_listen_.empty() ? peer_address_ : peer_listen_;
  }
  std::string peer_name() const {
    std::lock_guard lk(mu_);
    return peer_name_.empty() ? peer_address_ : peer_name_;
  }
  std::string peer_address() const { return peer_address_; }
  // Our address on this connection, as the peer sees it.
  std::string local_ip() const {
    std::error_code ec;
    auto ep = socket_.local_endpoint(ec);
    return ec ? std::string() : ep.address().to_string();
  }
  bool closed() const { return closed_seen_.load(std::memory_order_acquire); }
  bool ready() const {
    std::lock_guard lk(mu_);
    return ready_;
  }

  // Registers a pending call and queues its frame; the frame's call id is set here.
  // If the connection is closed, the call fails at once.
  std::uint64_t start_call(wire::frame_buffer&& f, wire::frame_header h,
                           std::shared_ptr<pending_call> p) {
    return register_call(h, std::move(p), [&](const wire::frame_header& sealed) {
      f.seal(sealed);
      enqueue_locked(std::move(f));
    });
  }

  // The same for a frame built on the stack (wire::make_small_frame): header
  // room, then the payload. It is sealed here and copied into the write queue.
  std::uint64_t start_call(std::span<char> frame, wire::frame_header h,
                           std::shared_ptr<pending_call> p) {
    return register_call(h, std::move(p), [&](const wire::frame_header& sealed) {
      seal_small(frame, sealed);
      enqueue_bytes_locked(frame);
    });
  }

  // Forgets a pending call (deadline or cancellation) and tells the peer.
  // Returns the pending call if it was still waiting.
  std::shared_ptr<pending_call> abandon_call(std::uint64_t call_id) {
    std::unique_lock lk(mu_);
    auto taken = pending_.take(call_id);
    if (!taken) return nullptr;
    auto p = std::move(*taken);
    if (!closed_) {
      auto f = wire::make_small_frame();
      seal_small(f.span(), {.type = wire::kind::cancel, .call_id = call_id});
      enqueue_bytes_locked(f.span());
      kick_locked(lk);
    }
    return p;
  }

  // Queues a frame (reply, control). Dropped if the connection is closed.
  void send(wire::frame_buffer&& f) {
    std::unique_lock lk(mu_);
    if (closed_) return;
    enqueue_locked(std::move(f));
    kick_locked(lk);
  }

  // A reply built on the stack. While a batch of work runs on this thread
  // (deferred_writes::scope), its replies to this connection are gathered and
  // queued together when it ends, under one lock; replies may leave in any
  // order relative to other frames.
  void send_reply(std::span<char> frame, wire::frame_header h) {
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

  // A call built on the stack whose id the caller does not need (no deadline,
  // no cancellation). While a batch of work runs on this thread, the batch's
  // calls to this connection are gathered in order and registered together
  // when it ends, under one lock; any other call to this connection from this
  // thread first flushes them, so calls still leave in the order they were made.
  void start_call_batched(std::span<char> frame, wire::frame_header h,
                          std::shared_ptr<pending_call> p) {
    seal_small(frame, h);  // the call id is set when the batch registers it
    std::shared_ptr<void> extra = std::move(p);
    if (deferred_writes::stage(
            &pending_, [this] { return std::shared_ptr<void>(shared_from_this()); },
            [](const std::shared_ptr<void>& who, std::span<char> bytes,
               std::span<std::shared_ptr<void>> pendings) {
              static_cast<connection*>(who.get())->register_calls(bytes, pendings);
            },
            frame, &extra))
      return;
    start_call(frame, h, std::static_pointer_cast<pending_call>(std::move(extra)));
  }

  // Closes with a reason; pending calls fail as unavailable.
  void close(const std::string& reason) {
    std::unique_lock lk(mu_);
    close_locked(lk, reason);
  }

  // A coroutine method serving call_id of this connection; a cancel frame for
  // it runs `cancel`. Unregistered when the method completes.
  void register_running(std::uint64_t call_id, std::function<void()> cancel) {
    std::lock_guard lk(mu_);
    running_[call_id] = std::move(cancel);
  }
  void unregister_running(std::uint64_t call_id) {
    std::lock_guard lk(mu_);
    running_.erase(call_id);
  }

  std::size_t pending_count() const {
    std::lock_guard lk(mu_);
    return pending_.size();
  }

 private:
  connection(tcp::socket s, side sd, std::shared_ptr<const connection_config> cfg,
             connection_sink* sink)
      : socket_(std::move(s)), side_(sd), cfg_(std::move(cfg)), sink_(sink) {
    auto n = tlaunch::detail::random_secret();
    std::memcpy(my_nonce_.data(), n.data(), my_nonce_.size());
  }

  // ----- connect and hello ---------------------------------------------------

  void start_connect(const std::string& address) {
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
          asio::async_connect(self->socket_, results,
                              [self, address](std::error_code ec, const tcp::endpoint&) {
                                if (ec)
                                  return self->close("cannot connect to " + address + ": " +
                                                     ec.message());
                                self->configure_socket();
                                {
                                  std::lock_guard lk(self->mu_);
                                  self->connected_ = true;
                                }
                                self->send_hello(false, {});
                                self->start_read();
                              });
        });
  }

  void configure_socket() {
    std::error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);
    socket_.set_option(asio::socket_base::keep_alive(true), ec);
    int fd = socket_.native_handle();
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // never inherited by node processes
    int idle = 10, intvl = 5, cnt = 3;
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    socket_.non_blocking(true, ec);
  }

  void send_hello(bool reply, const std::array<std::uint8_t, 16>& peer_nonce) {
    wire::hello h;
    h.is_reply = reply;
    h.nonce = my_nonce_;
    h.build_id = cfg_->build_id;
    h.listen_address = cfg_->listen_address;
    h.name = cfg_->name;
    if (reply) h.proof = wire::secret_proof(cfg_->secret, "acceptor", peer_nonce, my_nonce_);
    wire::frame_buffer f;
    wire::encode_hello(f, h);
    send_handshake(std::move(f));
  }

  void send_handshake(wire::frame_buffer&& f) {
    std::unique_lock lk(mu_);
    if (closed_) return;
    pre_.push_back(f.release());
    kick_locked(lk);
  }

  // Sends a refusal, then closes.
  void refuse(const std::string& reason) {
    sink_->log("refusing connection from " + peer_address_ + ": " + reason);
    wire::frame_buffer f;
    wire::serialize_into(f, reason);
    f.seal({.type = wire::kind::refuse});
    std::unique_lock lk(mu_);
    if (closed_) return;
    if (!writing_) {  // best effort: the reason reaches the peer before the close
      std::error_code ec;
      auto b = f.bytes();
      socket_.write_some(asio::buffer(b.data(), b.size()), ec);
    }
    close_locked(lk, "refused: " + reason);
  }

  // Handles hello/auth/refuse; returns false if the connection was closed.
  bool handle_handshake(const wire::frame_header& h, std::span<const char> payload) {
    if (h.type == wire::kind::refuse) {
      std::string reason;
      try {
        wire::deserialize_from(payload, reason);
      } catch (...) {
        reason = "(unreadable reason)";
      }
      close(peer_address_ + " refused the connection: " + reason);
      return false;
    }
    if (side_ == side::acceptor && state_ == hs::await_auth && h.type == wire::kind::auth) {
      auto expect = wire::secret_proof(cfg_->secret, "connector", my_nonce_, peer_nonce_);
      if (payload.size() != expect.size() ||
          !tlaunch::detail::constant_time_equal(
              std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(payload.data()),
                                            payload.size()),
              std::span<const std::uint8_t>(expect))) {
        refuse("wrong launch secret");
        return false;
      }
      become_ready();
      return true;
    }
    if (h.type != wire::kind::hello || state_ != hs::await_hello) {
      refuse("frame before the hello exchange completed");
      return false;
    }
    std::string problem;
    auto hello = wire::decode_hello(payload, problem);
    if (!hello) {
      refuse(problem);
      return false;
    }
    if (hello->build_id != cfg_->build_id) {
      refuse("different binary: peer build-id " + hello->build_id + ", ours " + cfg_->build_id +
             " (every node must run the same binary)");
      return false;
    }
    {
      std::lock_guard lk(mu_);
      peer_listen_ = hello->listen_address;
      peer_name_ = hello->name;
    }
    peer_nonce_ = hello->nonce;
    if (side_ == side::acceptor) {
      if (hello->is_reply) {
        refuse("unexpected hello reply");
        return false;
      }
      send_hello(true, peer_nonce_);
      state_ = hs::await_auth;
      return true;
    }
    // Connector: check the acceptor's proof, answer with ours, then go.
    auto expect = wire::secret_proof(cfg_->secret, "acceptor", my_nonce_, peer_nonce_);
    if (!hello->is_reply || !tlaunch::detail::constant_time_equal(
                                std::span<const std::uint8_t>(hello->proof),
                                std::span<const std::uint8_t>(expect))) {
      refuse("peer does not hold the launch secret");
      return false;
    }
    auto proof = wire::secret_proof(cfg_->secret, "connector", peer_nonce_, my_nonce_);
    wire::frame_buffer f;
    f.append(proof.data(), proof.size());
    f.seal({.type = wire::kind::auth});
    send_handshake(std::move(f));
    become_ready();
    return true;
  }

  void become_ready() {
    state_ = hs::ready;
    {
      std::unique_lock lk(mu_);
      ready_ = true;
      kick_locked(lk);
    }
    sink_->on_ready(shared_from_this());
  }

  // ----- writing ---------------------------------------------------------------

  // Starts the writer if it is idle and there is something it may send. On an
  // io thread the write is posted, so every frame queued by the running handler
  // (a burst of async calls, the replies of one read) goes out in one write;
  // from any other thread it is written at once.
  void kick_locked(std::unique_lock<tlaunch::detail::fast_mutex>& lk) {
    if (writing_ || closed_ || (pre_.empty() && (out_.empty() || !ready_))) return;
    if (side_ == side::connector && !connected_) return;
    writing_ = true;
    lk.unlock();
    if (tlaunch::detail::current_runtime_thread == nullptr) return write_loop();
    // On the only io thread, a batch of work that is running writes when it is
    // done (the posted write would have waited for it anyway).
    if (single_io_thread() &&
        deferred_writes::defer(shared_from_this(), [](const std::shared_ptr<void>& self) {
          static_cast<connection*>(self.get())->write_loop();
        }))
      return;
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->write_loop(); });
  }

  // Under the lock: gives the call its id, registers it and queues its frame
  // with enqueue(header), or fails it when the connection is closed.
  template <class Enqueue>
  std::uint64_t register_call(wire::frame_header h, std::shared_ptr<pending_call> p,
                              Enqueue&& enqueue) {
    deferred_writes::flush_key(&pending_);  // calls this thread batched go first
    std::unique_lock lk(mu_);
    if (closed_) {
      std::string why = close_reason_;
      lk.unlock();
      p->fail_unavailable(why);
      return 0;
    }
    h.call_id = next_call_id_++;
    enqueue(h);
    pending_.insert(h.call_id, std::move(p));
    kick_locked(lk);
    return h.call_id;
  }

  // Registers a batch's calls (frames side by side, each with its pending
  // call) under one lock: ids in order, written into the frames, which are
  // queued as one piece. When the connection is closed they fail at once.
  void register_calls(std::span<char> frames, std::span<std::shared_ptr<void>> pendings) {
    std::unique_lock lk(mu_);
    if (closed_) {
      std::string why = close_reason_;
      lk.unlock();
      for (auto& p : pendings) static_cast<pending_call*>(p.get())->fail_unavailable(why);
      return;
    }
    std::size_t at = 0;
    for (auto& p : pendings) {
      char* f = frames.data() + at;
      const std::uint64_t id = next_call_id_++;
      wire::store_call_id(f, id);
      at += wire::header_size + wire::detail::get32(reinterpret_cast<const unsigned char*>(f));
      pending_.insert(id, std::static_pointer_cast<pending_call>(std::move(p)));
    }
    enqueue_bytes_locked(frames.first(at));
    kick_locked(lk);
  }

  static constexpr std::size_t small_frame = 2048, merged_limit = 8 * 1024;

  // Queues whole frames' bytes by copying them; dropped if closed.
  void send_bytes(std::span<const char> bytes) {
    std::unique_lock lk(mu_);
    if (closed_) return;
    enqueue_bytes_locked(bytes);
    kick_locked(lk);
  }

  static void seal_small(std::span<char> frame, wire::frame_header h) {
    h.size = static_cast<std::uint32_t>(frame.size() - wire::header_size);
    wire::encode_header(h, frame.data());
  }

  // Appends a small frame's bytes to the last queued frame when it has room.
  bool append_to_tail_locked(std::span<const char> bytes) {
    if (out_.empty()) return false;
    auto& tail = out_.back();
    if (!tail.externals.empty() || tail.inline_bytes.size() + bytes.size() > merged_limit)
      return false;
    std::size_t used = tail.inline_bytes.size();
    tail.inline_bytes.resize(used + bytes.size());
    std::memcpy(tail.inline_bytes.data() + used, bytes.data(), bytes.size());
    return true;
  }

  // Queues a frame for the writer. A small frame after another small one is
  // appended to that one's bytes: a burst of calls or replies then reaches the
  // writer as one piece, not one object per frame, and its buffer is reused
  // at once.
  void enqueue_locked(wire::frame_buffer&& f) {
    auto bytes = f.bytes();
    if (!f.has_externals() && bytes.size() <= small_frame && append_to_tail_locked(bytes)) {
      wire::recycle(f.release());
      return;
    }
    out_.push_back(f.release());
  }

  // Queues a copy of a small frame's bytes (a frame built on the stack).
  void enqueue_bytes_locked(std::span<const char> bytes) {
    if (append_to_tail_locked(bytes)) return;
    wire::outgoing_frame f{wire::detail::take_spare_buffer(), {}};
    f.inline_bytes.resize(bytes.size());
    std::memcpy(f.inline_bytes.data(), bytes.data(), bytes.size());
    out_.push_back(std::move(f));
  }

  // Moves everything sendable into the batch; false when there is nothing.
  bool refill_batch_locked() {
    for (auto& b : pre_) batch_.push_back(std::move(b));
    pre_.clear();
    if (ready_) {
      for (auto& b : out_) batch_.push_back(std::move(b));
      out_.clear();
    }
    batch_index_ = 0;
    batch_offset_ = 0;
    return !batch_.empty();
  }

  void write_loop() {
    for (;;) {
      if (batch_index_ >= batch_.size()) {
        for (auto& f : batch_) wire::recycle(std::move(f));
        batch_.clear();
        std::unique_lock lk(mu_);
        if (closed_ || !refill_batch_locked()) {
          writing_ = false;
          batch_.clear();
          if (closed_) finish_close_locked(lk);
          return;
        }
      }
      build_gather();
      std::error_code ec;
      std::size_t n = socket_.write_some(gather_, ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) {
        socket_.async_write_some(gather_, [self = shared_from_this()](std::error_code ec,
                                                                      std::size_t n) {
          if (ec) return self->write_failed(ec);
          self->advance(n);
          self->write_loop();
        });
        return;
      }
      if (ec) return write_failed(ec);
      advance(n);
    }
  }

  // The next write's buffers. Small pieces (most frames) are copied side by
  // side into one buffer: the kernel copies one long piece much faster than
  // many short ones. Large pieces are written from where they are.
  void build_gather() {
    static constexpr std::size_t max_pieces = 64, small_piece = 2048;
    if (coalesce_.capacity() < coalesce_capacity) coalesce_.reserve(coalesce_capacity);
    gather_.clear();
    coalesce_.clear();
    const char* run = nullptr;  // start of the coalesced piece that gather_.back() is
    for (std::size_t i = batch_index_; i < batch_.size() && gather_.size() < max_pieces; ++i) {
      bool full = false;
      batch_[i].for_each_piece(i == batch_index_ ? batch_offset_ : 0,
                               [&](const char* p, std::size_t n) {
                                 if (n == 0) return true;
                                 if (n <= small_piece &&
                                     coalesce_.size() + n <= coalesce_.capacity()) {
                                   std::size_t used = coalesce_.size();
                                   coalesce_.resize(used + n);  // within capacity: no move
                                   char* at = coalesce_.data() + used;
                                   std::memcpy(at, p, n);
                                   if (run && !gather_.empty() &&
                                       static_cast<const char*>(gather_.back().data()) == run)
                                     gather_.back() = asio::const_buffer(
                                         run, gather_.back().size() + n);
                                   else {
                                     run = at;
                                     gather_.emplace_back(at, n);
                                   }
                                   return gather_.size() < max_pieces;
                                 }
                                 if (n <= small_piece) {  // no room left: next write
                                   full = true;
                                   return false;
                                 }
                                 run = nullptr;
                                 gather_.emplace_back(p, n);
                                 return gather_.size() < max_pieces;
                               });
      if (full) break;
    }
  }

  void advance(std::size_t n) {
    while (n > 0 && batch_index_ < batch_.size()) {
      std::size_t left = batch_[batch_index_].size() - batch_offset_;
      if (n >= left) {
        n -= left;
        ++batch_index_;
        batch_offset_ = 0;
      } else {
        batch_offset_ += n;
        n = 0;
      }
    }
  }

  void write_failed(std::error_code ec) {
    std::unique_lock lk(mu_);
    writing_ = false;
    batch_.clear();
    close_locked(lk, "write to " + peer_name_locked() + " failed: " + ec.message());
  }

  // ----- reading -----------------------------------------------------------------

  static constexpr std::size_t page = 4096;
  static constexpr std::size_t initial_buffer = 64 * 1024;

  void delete_buffer() {
    if (buf_) std::free(buf_);
    buf_ = nullptr;
  }

  // Makes room for `need` contiguous bytes from begin_, page-aligned allocation.
  void reserve_frame(std::size_t need) {
    if (cap_ - begin_ >= need) return;
    std::size_t have = end_ - begin_;
    if (cap_ >= need && begin_ > 0) {
      std::memmove(buf_, buf_ + begin_, have);
    } else {
      std::size_t ncap = std::max(need, cap_ * 2);
      ncap = (ncap + page - 1) / page * page;
      char* nb = static_cast<char*>(std::aligned_alloc(page, ncap));
      if (!nb) throw std::bad_alloc();
      if (have) std::memcpy(nb, buf_ + begin_, have);
      delete_buffer();
      buf_ = nb;
      cap_ = ncap;
    }
    begin_ = 0;
    end_ = have;
  }

  void start_read() {
    {
      std::lock_guard lk(mu_);
      if (closed_) return;
      reading_ = true;
    }
    if (!buf_) reserve_frame(initial_buffer);
    read_more();
  }

  // Where the next read goes.
  asio::mutable_buffer read_buffer() {
    if (big_) return asio::buffer(big_.get() + big_fill_, big_total_ - big_fill_);
    if (end_ == cap_) reserve_frame(std::max<std::size_t>(end_ - begin_ + page, initial_buffer));
    return asio::buffer(buf_ + end_, cap_ - end_);
  }

  std::int64_t busy_poll_us() const {
    return cfg_->busy_poll_us ? cfg_->busy_poll_us->load(std::memory_order_relaxed) : 0;
  }

  void read_more() {
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

  void async_read() {
    socket_.async_read_some(read_buffer(), [self = std::shared_ptr<void>(shared_from_this())](
                                               std::error_code ec, std::size_t n) mutable {
      static_cast<connection*>(self.get())->on_read(std::move(self), ec, n);
    });
  }

  // A handler of the polling read: a few non-blocking reads, then other handlers
  // (and the reactor) get a turn before the next. When nothing came for as long as
  // the process polls (read again each turn, so a change counts at once), the wait
  // goes to the reactor. since: when the previous read ended.
  void poll_read(std::shared_ptr<void> self, std::chrono::steady_clock::time_point since) {
    static constexpr int reads_per_turn = 4;
    for (int i = 0; i < reads_per_turn; ++i) {
      std::error_code ec;
      std::size_t n = socket_.read_some(read_buffer(), ec);  // the socket is non-blocking
      if (ec != asio::error::would_block && ec != asio::error::try_again) {
        if (!ec) polled_reads.fetch_add(1, std::memory_order_relaxed);
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

  // A large frame gets a page-aligned buffer of its own that the kernel reads
  // into directly; payload views (tlaunch::bytes) may keep it after the frame.
  void start_big_frame(std::size_t total) {
    big_ = tlaunch::detail::buffer_pool::instance().get(total);
    char* p = big_.get();
    big_total_ = total;
    big_fill_ = end_ - begin_;
    std::memcpy(p, buf_ + begin_, big_fill_);
    begin_ = end_ = 0;
  }

  // Returns false when the connection must stop reading.
  bool finish_big_frame() {
    wire::frame_header header = wire::load_header(big_.get());  // checked when it began
    std::shared_ptr<const void> owner = std::move(big_);
    big_.reset();
    header.payload_owner = &owner;
    return handle_frame(header, {static_cast<const char*>(owner.get()) + wire::header_size,
                                 header.size});
  }

  // self: this connection, kept by the read that completed.
  void on_read(std::shared_ptr<void> self, std::error_code ec, std::size_t n) {
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

  // On the only thread that runs this io_context.
  bool single_io_thread() const {
    return cfg_->single_io_thread && tlaunch::detail::current_runtime_thread != nullptr;
  }

  // Returns whether to read on.
  bool handle_read(std::error_code ec, std::size_t n) {
    if (ec) {
      read_stopped(ec == asio::error::eof ? "closed by " + peer_name()
                                                       : "read from " + peer_name() +
                                                             " failed: " + ec.message());
      return false;
    }
    if (big_) {
      big_fill_ += n;
      if (big_fill_ < big_total_) return true;
      if (!finish_big_frame()) {
        read_stopped("");
        return false;
      }
      return after_frames();
    }
    end_ += n;
    // Replies in a row are completed together: their pending calls are taken
    // under one lock. They are completed before any other frame is handled and
    // before the buffer may move, so order and payloads stay as they were.
    reply_run replies;
    // A read that left room took everything the kernel had; one that filled
    // the buffer is parsed first and continued by the next read.
    while (end_ - begin_ >= wire::header_size) {
      // Until the peer has proven the secret, it gets no large buffers.
      const std::uint32_t limit =
          state_ == hs::ready ? cfg_->max_frame : std::min<std::uint32_t>(cfg_->max_frame, 64 * 1024);
      const wire::frame_header header = wire::load_header(buf_ + begin_);
      if (!wire::header_ok(header, limit)) [[unlikely]] {
        auto problem = wire::header_problem(header, limit);
        sink_->log("closing connection from " + peer_name() + ": malformed frame: " + problem);
        read_stopped("malformed frame: " + problem);
        return false;
      }
      std::size_t total = wire::header_size + header.size;
      if (end_ - begin_ < total) {
        complete_replies(replies);
        if (state_ == hs::ready && header.size >= wire::external_threshold)
          start_big_frame(total);
        else
          reserve_frame(total);
        break;
      }
      std::span<const char> payload(buf_ + begin_ + wire::header_size, header.size);
      begin_ += total;
      if (state_ == hs::ready) {
        if (header.type == wire::kind::reply || header.type == wire::kind::error_reply) {
          replies.frames[replies.count++] = {header, payload};
          if (replies.count == reply_run::capacity) complete_replies(replies);
          continue;
        }
        if (header.type == wire::kind::call) {  // the common frame: straight to the sink
          if (replies.count) complete_replies(replies);
          sink_->on_call(*this, header, payload);
          continue;
        }
      }
      complete_replies(replies);
      if (!handle_frame(header, payload)) {
        read_stopped("");
        return false;
      }
    }
    complete_replies(replies);
    return after_frames();
  }

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
  void complete_replies(reply_run& run) {
    if (run.count == 0) return;
    std::shared_ptr<pending_call> taken[reply_run::capacity];
    {
      std::lock_guard lk(mu_);
      for (std::size_t i = 0; i < run.count; ++i)
        if (auto p = pending_.take(run.frames[i].header.call_id)) taken[i] = std::move(*p);
    }
    std::size_t n = std::exchange(run.count, 0);
    for (std::size_t i = 0; i < n; ++i)
      if (taken[i]) taken[i]->complete(run.frames[i].header, run.frames[i].payload);
  }

  // Returns whether to read on.
  bool after_frames() {
    if (begin_ == end_) begin_ = end_ = 0;
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

  // Returns false when the connection must stop reading.
  bool handle_frame(const wire::frame_header& h, std::span<const char> payload) {
    if (state_ != hs::ready) return handle_handshake(h, payload);
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
          auto it = running_.find(h.call_id);
          if (it != running_.end()) {
            cancel = std::move(it->second);
            running_.erase(it);
          }
        }
        if (cancel) cancel();
        sink_->on_cancel(shared_from_this(), h.call_id);
        return true;
      }
      case wire::kind::refuse:
        return handle_handshake(h, payload);
      case wire::kind::hello:
      case wire::kind::auth:
        sink_->log("closing connection from " + peer_name() + ": handshake frame after handshake");
        close("protocol error: handshake frame after handshake");
        return false;
      default:
        sink_->on_control(shared_from_this(), h, payload);
        return true;
    }
  }

  void read_stopped(const std::string& reason) {
    std::unique_lock lk(mu_);
    reading_ = false;
    close_locked(lk, reason.empty() ? close_reason_ : reason);
  }

  // ----- closing -----------------------------------------------------------------

  std::string peer_name_locked() const { return peer_name_.empty() ? peer_address_ : peer_name_; }

  void close_locked(std::unique_lock<tlaunch::detail::fast_mutex>& lk, const std::string& reason) {
    if (closed_) {
      finish_close_locked(lk);
      return;
    }
    closed_ = true;
    closed_seen_.store(true, std::memory_order_release);
    close_reason_ = reason;
    auto pending = pending_.drain();
    pre_.clear();
    out_.clear();
    // Wakes a pending read; the socket itself is closed once no operation uses it.
    ::shutdown(socket_.native_handle(), SHUT_RDWR);
    finish_close_locked(lk);
    lk.unlock();
    for (auto& p : pending) p->fail_unavailable(reason);
    sink_->on_closed(shared_from_this(), reason);
    lk.lock();
  }

  void finish_close_locked(std::unique_lock<tlaunch::detail::fast_mutex>&) {
    if (!closed_ || reading_ || writing_ || socket_closed_) return;
    socket_closed_ = true;
    std::error_code ec;
    socket_.close(ec);
  }

  enum class hs { await_hello, await_auth, ready };

  tcp::socket socket_;
  side side_;
  std::shared_ptr<const connection_config> cfg_;
  connection_sink* sink_;
  std::string peer_address_;

  mutable tlaunch::detail::fast_mutex mu_;
  bool closed_ = false, ready_ = false, writing_ = false, reading_ = false;
  bool connected_ = false, socket_closed_ = false;
  std::atomic<bool> closed_seen_{false};  // closed_, readable without the lock
  std::string close_reason_ = "connection closed";
  std::string peer_listen_, peer_name_;
  std::vector<wire::outgoing_frame> pre_, out_;
  tlaunch::detail::seq_id_map<std::shared_ptr<pending_call>> pending_{256};
  std::unordered_map<std::uint64_t, std::function<void()>> running_;  // served coroutines
  std::uint64_t next_call_id_ = 1;

  // Writer-only state (one writer at a time, guarded by writing_).
  std::vector<wire::outgoing_frame> batch_;
  std::size_t batch_index_ = 0, batch_offset_ = 0;
  std::vector<asio::const_buffer> gather_;
  static constexpr std::size_t coalesce_capacity = 64 * 1024;
  wire::byte_vector coalesce_;  // small pieces of the write in flight, side by side

  // Reader-only state (one read in flight).
  batch_collector read_batch_;
  char* buf_ = nullptr;
  std::size_t cap_ = 0, begin_ = 0, end_ = 0;
  std::shared_ptr<char> big_;  // the large frame being read, if any
  std::size_t big_total_ = 0, big_fill_ = 0;
  hs state_ = hs::await_hello;
  std::array<std::uint8_t, 16> my_nonce_{}, peer_nonce_{};
};

}  // namespace tlaunch::rpc
