// rpc::connection (connection.hpp), its members that open and close it: connect (resolve,
// then the TCP connect) and accept (counted against the process's cap on connections that
// have not authenticated); the hello exchange (handshake.hpp) up to ready, or a refusal
// with its reason; the close, which fails the calls still waiting and closes the socket
// once neither a read nor the writer uses it.
#pragma once

#include "connection.hpp"

#if TLAUNCH_HEADER_DEFINITIONS
#include <sys/socket.h>

#include <asio/connect.hpp>
#include <asio/post.hpp>
#include <cstring>

#include "../detail/secret.hpp"
#include "tls.hpp"

namespace tlaunch::rpc {

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

TLAUNCH_DECL void connection::log_bad_peer(const connection_config& cfg, connection_sink& sink,
                                           std::string_view reason, const std::string& line) {
  if (!cfg.bad_peer_log) return sink.log(line);
  if (auto l = cfg.bad_peer_log->admit(reason, line)) sink.log(*l);
}

TLAUNCH_DECL void connection::log_bad_peer(std::string_view reason, const std::string& line) {
  log_bad_peer(*cfg_, *sink_, reason, line);
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
    if (!closed_ && !metrics_) metrics_ = cfg_->metrics->open_link();
    end_unauthenticated_locked();
    arm_heartbeat_locked();
    kick_locked(lk);
  }
  sink_->on_ready(shared_from_this());
}

TLAUNCH_DECL void connection::close(const std::string& reason) {
  std::unique_lock lk(mu_);
  close_locked(lk, reason);
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
  for (auto& p : pending) count_end_locked(*p, call_outcome::unavailable, 0, 0);
  for (const auto& [id, sp] : served_spans_) cfg_->trace->end_served(sp, call_outcome::unavailable, 0);
  served_spans_.clear();
  traced_served_.store(0, std::memory_order_relaxed);
  if (metrics_) cfg_->metrics->link_closed(metrics_);
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

TLAUNCH_DECL void connection::finish_close_locked(std::unique_lock<tlaunch::detail::fast_mutex>&) {
  if (!closed_ || reading_ || writing_ || socket_closed_) return;
  socket_closed_ = true;
  std::error_code ec;
  socket_.close(ec);
}

}  // namespace tlaunch::rpc

#endif
