// rpc::connection (connection.hpp), its members for --tls: the connector's ClientHello;
// the reader's side (ciphertext drives the TLS handshake, then records are opened into the
// frame reader and their frames handled as connection_read.hpp handles plaintext); the
// write loop under TLS, which seals what the writer gathered and writes the records; a
// peer that does not run TLS when this process does: refused in plaintext with a reason it
// can read (acceptor), or the connection closed saying so (connector).
#pragma once

#include "connection.hpp"

#if TLAUNCH_HEADER_DEFINITIONS
#include <algorithm>
#include <vector>

#include "tls.hpp"

namespace tlaunch::rpc {

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

}  // namespace tlaunch::rpc

#endif
