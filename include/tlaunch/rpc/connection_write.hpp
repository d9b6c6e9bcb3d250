// rpc::connection (connection.hpp), its members that send: calls registered with their ids
// (call_table.hpp), one at a time or a batch's under one lock; replies and control frames
// queued (frame_writer.hpp), and a peer that leaves too much unread closed; the write
// loop, which takes whatever is queued and writes it in one gather write, tried without
// blocking first, then through the reactor. Under TLS the loop is connection_tls.hpp's.
// Also the functions connection_api.hpp declares for the call path.
#pragma once

#include "connection.hpp"

#if TLAUNCH_HEADER_DEFINITIONS
#include <asio/post.hpp>

namespace tlaunch::rpc {

TLAUNCH_DECL std::uint64_t connection::start_call(wire::frame_buffer&& f, wire::frame_header h,
                                                  std::shared_ptr<pending_call> p) {
  if (cfg_->trace) [[unlikely]]
    if (auto span = trace_call(h, *p)) {
      add_trace_trailer(f, h, *span);
      p->trace = std::move(span);
    }
  return register_call(h, std::move(p), [&](const wire::frame_header& sealed) {
    f.seal(sealed);
    out_.push(std::move(f));
  });
}

TLAUNCH_DECL std::uint64_t connection::start_call(std::span<char> frame, wire::frame_header h,
                                                  std::shared_ptr<pending_call> p) {
  if (cfg_->trace) [[unlikely]]
    if (auto span = trace_call(h, *p)) return start_traced_call(frame, h, std::move(p), std::move(span));
  return register_call(h, std::move(p), [&](const wire::frame_header& sealed) {
    seal_small(frame, sealed);
    out_.push_bytes(frame);
  });
}

TLAUNCH_DECL std::uint64_t connection::start_traced_call(std::span<char> frame,
                                                         wire::frame_header h,
                                                         std::shared_ptr<pending_call> p,
                                                         std::unique_ptr<client_span> span) {
  // The trailer needs a frame that can grow.
  wire::frame_buffer f(frame.size());
  f.append(frame.data() + wire::header_size, frame.size() - wire::header_size);
  add_trace_trailer(f, h, *span);
  p->trace = std::move(span);
  return register_call(h, std::move(p), [&](const wire::frame_header& sealed) {
    f.seal(sealed);
    out_.push(std::move(f));
  });
}

TLAUNCH_DECL void connection::start_call_batched(std::span<char> frame, wire::frame_header h,
                                                 std::shared_ptr<pending_call> p) {
  if (cfg_->trace) [[unlikely]]
    if (auto span = trace_call(h, *p)) {  // a traced call goes alone, with its trailer
      start_traced_call(frame, h, std::move(p), std::move(span));
      return;
    }
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
  const std::int64_t now = metrics_now();
  for (auto& p : pendings) {
    char* f = frames.data() + at;
    const auto* bytes = reinterpret_cast<const unsigned char*>(f);
    const std::uint64_t id = calls_.next_id();
    wire::store_call_id(f, id);
    const std::size_t size = wire::header_size + wire::detail::get32(bytes);
    at += size;
    auto* call = static_cast<pending_call*>(p.get());
    count_call_locked(*call, wire::detail::get32(bytes + 8), wire::detail::get64(bytes + 24), size,
                      now);
    calls_.insert(id, std::static_pointer_cast<pending_call>(std::move(p)));
  }
  out_.push_bytes(frames.first(at));
  kick_locked(lk);
}

TLAUNCH_DECL std::shared_ptr<pending_call> connection::abandon_call(std::uint64_t call_id) {
  std::unique_lock lk(mu_);
  auto p = calls_.take(call_id);
  if (!p) return nullptr;
  count_end_locked(*p, call_outcome::abandoned, 0, 0);
  if (!closed_) {
    auto f = wire::make_small_frame();
    seal_small(f.span(), {.type = wire::kind::cancel, .call_id = call_id});
    out_.push_bytes(f.span());
    kick_locked(lk);
  }
  return p;
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

TLAUNCH_DECL std::size_t connection::running_count() const {
  std::lock_guard lk(mu_);
  return calls_.running_count();
}

TLAUNCH_DECL void connection::begin_served_span(const served_span& s) {
  std::lock_guard lk(mu_);
  if (closed_) return;
  served_spans_[s.call_id] = s;
  traced_served_.store(static_cast<std::uint32_t>(served_spans_.size()), std::memory_order_relaxed);
}

TLAUNCH_DECL void connection::end_served_span(wire::kind type, std::uint64_t id, std::size_t bytes,
                                              char first) {
  if (type != wire::kind::reply && type != wire::kind::error_reply) return;
  served_span s;
  {
    std::lock_guard lk(mu_);
    auto it = served_spans_.find(id);
    if (it == served_spans_.end()) return;
    s = it->second;
    served_spans_.erase(it);
    traced_served_.store(static_cast<std::uint32_t>(served_spans_.size()), std::memory_order_relaxed);
  }
  call_outcome o = call_outcome::reply;
  if (type == wire::kind::error_reply)
    o = first == static_cast<char>(wire::error_code::remote_exception)    ? call_outcome::remote_error
        : first == static_cast<char>(wire::error_code::deadline_exceeded) ? call_outcome::timeout
                                                                          : call_outcome::bad_call;
  cfg_->trace->end_served(s, o, bytes);
}

TLAUNCH_DECL void connection::send(wire::frame_buffer&& f) {
  if (traced_served_.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    const auto b = f.bytes();
    const auto h = wire::load_header(b.data());
    end_served_span(h.type, h.call_id, wire::header_size + f.payload_size(),
                    b.size() > wire::header_size ? b[wire::header_size] : 0);
  }
  std::unique_lock lk(mu_);
  if (closed_) return;
  out_.push(std::move(f));
  if (close_if_unread_locked(lk)) [[unlikely]]
    return;
  kick_locked(lk);
}

TLAUNCH_DECL void connection::send_reply(std::span<char> frame, wire::frame_header h) {
  if (traced_served_.load(std::memory_order_relaxed) != 0) [[unlikely]]
    end_served_span(h.type, h.call_id, frame.size(),
                    frame.size() > wire::header_size ? frame[wire::header_size] : 0);
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

TLAUNCH_DECL void connection::send_bytes(std::span<const char> bytes) {
  std::unique_lock lk(mu_);
  if (closed_) return;
  out_.push_bytes(bytes);
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

TLAUNCH_DECL std::uint64_t connection::unsent_bytes() const {
  std::lock_guard lk(mu_);
  return closed_ ? 0 : pre_.pushed() + out_.pushed() - writer_.written();
}

TLAUNCH_DECL bool connection::flushed() const {
  std::lock_guard lk(mu_);
  return closed_ || (!writing_ && pre_.empty() && out_.empty());
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
