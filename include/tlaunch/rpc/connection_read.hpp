// rpc::connection (connection.hpp), its members that read: one read at a time, through the
// reactor or, while the process busy-polls, by non-blocking reads in handlers of its own;
// each read takes everything that has arrived, and every complete frame
// (frame_reader.hpp) is dispatched before the next: runs of replies complete their calls
// under one lock, calls go straight to the sink, the rest through handle_frame. Until the
// hello exchange completes, frames are no larger than a hello and go to the handshake.
#pragma once

#include "connection.hpp"

#if TLAUNCH_HEADER_DEFINITIONS
#include <asio/post.hpp>
#include <new>

#include "tls.hpp"

namespace tlaunch::rpc {

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
  read_at_ = metrics_now();  // the served calls' arrival (rpc/metrics.hpp)
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

TLAUNCH_DECL bool connection::finish_big_frame() {
  auto frame = reader_.take_big_frame();
  wire::frame_header header = frame.header;
  header.payload_owner = &frame.owner;
  return handle_frame(header, frame.payload());
}

TLAUNCH_DECL void connection::complete_replies(reply_run& run) {
  if (run.count == 0) return;
  std::shared_ptr<pending_call> taken[reply_run::capacity];
  {
    const std::int64_t now = metrics_now();
    std::lock_guard lk(mu_);
    for (std::size_t i = 0; i < run.count; ++i) {
      const auto& h = run.frames[i].header;
      taken[i] = calls_.take(h.call_id);
      if (taken[i]) count_end_locked(*taken[i], outcome_of(h, run.frames[i].payload), now,
                                     wire::header_size + h.size);
    }
  }
  std::size_t n = std::exchange(run.count, 0);
  for (std::size_t i = 0; i < n; ++i)
    if (taken[i]) taken[i]->complete(run.frames[i].header, run.frames[i].payload);
}

TLAUNCH_DECL call_outcome connection::outcome_of(const wire::frame_header& h,
                                                 std::span<const char> payload) {
  if (h.type == wire::kind::reply) return call_outcome::reply;
  // An error reply's first byte is its code (wire::encode_error).
  const auto code = payload.empty() ? 0 : static_cast<std::uint8_t>(payload[0]);
  if (code == static_cast<std::uint8_t>(wire::error_code::remote_exception))
    return call_outcome::remote_error;
  if (code == static_cast<std::uint8_t>(wire::error_code::deadline_exceeded))
    return call_outcome::timeout;
  return call_outcome::bad_call;
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

}  // namespace tlaunch::rpc

#endif
