// TLS on a connection (--tls), without the socket: a transform that turns the
// plaintext a connection sends into TLS records and the records it reads back into
// plaintext, through OpenSSL memory BIOs. The connection keeps its own socket I/O.
//
// No certificates and no key files: TLS 1.3 with an external pre-shared key
// derived from the launch secret every process of a launch already holds
// (PSK = HMAC-SHA256(secret, "tlaunch tls psk v1")), TLS_AES_128_GCM_SHA256,
// with an (EC)DHE exchange on top (psk_dhe_ke) for forward secrecy. Only a
// holder of the launch secret completes the handshake.
#pragma once

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "../detail/crypto.hpp"

namespace tlaunch::rpc {

// What every TLS connection of a process shares: the SSL_CTX and the key.
class tls_context {
 public:
  static constexpr std::string_view identity = "tlaunch-launch-psk-v1";

  explicit tls_context(std::span<const std::uint8_t> launch_secret) {
    static constexpr std::string_view label = "tlaunch tls psk v1";
    psk_ = tlaunch::detail::hmac_sha256(
        launch_secret, {reinterpret_cast<const std::uint8_t*>(label.data()), label.size()});
    ctx_.reset(SSL_CTX_new(TLS_method()));
    if (!ctx_) throw tlaunch::detail::crypto_failure("cannot create a TLS context");
    SSL_CTX* c = ctx_.get();
    if (SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION) != 1 ||
        SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION) != 1 ||
        SSL_CTX_set_ciphersuites(c, "TLS_AES_128_GCM_SHA256") != 1)
      throw tlaunch::detail::crypto_failure("cannot configure TLS 1.3");
    // No session tickets: every connection uses the external PSK, and a ticket
    // would be one more message in each direction.
    SSL_CTX_set_options(c, SSL_OP_NO_TICKET);
    SSL_CTX_set_num_tickets(c, 0);
    // A write may be given a buffer that moved since it last wanted to write.
    SSL_CTX_set_mode(c, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_app_data(c, this);
    SSL_CTX_set_psk_use_session_callback(c, &use_session);
    SSL_CTX_set_psk_find_session_callback(c, &find_session);
  }
  tls_context(const tls_context&) = delete;
  tls_context& operator=(const tls_context&) = delete;

  SSL_CTX* native() const { return ctx_.get(); }

 private:
  static const tls_context& of(SSL* ssl) {
    return *static_cast<const tls_context*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
  }

  // A session holding the PSK for TLS_AES_128_GCM_SHA256, or null.
  static SSL_SESSION* psk_session(SSL* ssl) {
    static constexpr unsigned char aes128gcm_sha256[2] = {0x13, 0x01};
    const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, aes128gcm_sha256);
    if (!cipher) return nullptr;
    SSL_SESSION* s = SSL_SESSION_new();
    if (!s) return nullptr;
    const auto& psk = of(ssl).psk_;
    if (SSL_SESSION_set1_master_key(s, psk.data(), psk.size()) != 1 ||
        SSL_SESSION_set_cipher(s, cipher) != 1 ||
        SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION) != 1) {
      SSL_SESSION_free(s);
      return nullptr;
    }
    return s;
  }

  // Client: offers the launch PSK.
  static int use_session(SSL* ssl, const EVP_MD* md, const unsigned char** id, std::size_t* idlen,
                         SSL_SESSION** sess) {
    *sess = nullptr;
    if (md != nullptr && md != EVP_sha256()) return 1;  // a second round after a retry: none
    *sess = psk_session(ssl);
    if (!*sess) return 0;
    *id = reinterpret_cast<const unsigned char*>(identity.data());
    *idlen = identity.size();
    return 1;
  }

  // Server: accepts only the launch PSK's identity (a wrong key then fails the
  // handshake's binder check).
  static int find_session(SSL* ssl, const unsigned char* id, std::size_t idlen,
                          SSL_SESSION** sess) {
    *sess = nullptr;
    if (idlen != identity.size() || std::memcmp(id, identity.data(), idlen) != 0) return 1;
    *sess = psk_session(ssl);
    return *sess ? 1 : 0;
  }

  struct ctx_free {
    void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
  };
  tlaunch::detail::sha256_digest psk_{};
  std::unique_ptr<SSL_CTX, ctx_free> ctx_;
};

// The TLS state of one connection. Not thread-safe: the connection serializes
// its reader's and writer's use of it with a mutex.
class tls_channel {
 public:
  // server: the side that accepted the TCP connection.
  tls_channel(const tls_context& ctx, bool server) : ssl_(SSL_new(ctx.native())) {
    if (!ssl_) throw tlaunch::detail::crypto_failure("cannot create a TLS connection");
    BIO* in = BIO_new(BIO_s_mem());
    BIO* out = BIO_new(BIO_s_mem());
    if (!in || !out) {
      BIO_free(in);
      BIO_free(out);
      throw tlaunch::detail::crypto_failure("cannot create TLS buffers");
    }
    BIO_set_mem_eof_return(in, -1);  // empty: "retry", not end of stream
    BIO_set_mem_eof_return(out, -1);
    SSL_set_bio(ssl_.get(), in, out);  // owned by ssl_ now
    in_ = in;
    out_ = out;
    if (server)
      SSL_set_accept_state(ssl_.get());
    else
      SSL_set_connect_state(ssl_.get());
  }

  // The handshake is complete: plaintext may be sealed and opened.
  bool open() const { return open_; }

  // Drives the handshake (the client's first call makes its ClientHello).
  // Returns false on failure (error() says why).
  bool handshake() {
    if (open_) return true;
    ERR_clear_error();
    int r = SSL_do_handshake(ssl_.get());
    if (r == 1) {
      open_ = true;
      return true;
    }
    return retryable(r);
  }

  // Ciphertext read from the peer.
  void feed(std::span<const char> cipher) {
    if (!cipher.empty()) BIO_write(in_, cipher.data(), static_cast<int>(cipher.size()));
  }

  // Plaintext into `to`: bytes written, 0 when more ciphertext is needed, -1 on
  // an error or the peer's close_notify (error() says which).
  long open_into(std::span<char> to) {
    ERR_clear_error();
    std::size_t n = 0;
    int r = SSL_read_ex(ssl_.get(), to.data(), to.size(), &n);
    if (r == 1) return static_cast<long>(n);
    return retryable(r) ? 0 : -1;
  }

  // Seals plaintext into records (taken with take_output); once open.
  bool seal(std::span<const char> plain) {
    ERR_clear_error();
    std::size_t n = 0;
    if (plain.empty()) return true;
    int r = SSL_write_ex(ssl_.get(), plain.data(), plain.size(), &n);
    if (r == 1 && n == plain.size()) return true;
    retryable(r);
    if (error_.empty()) error_ = "TLS write failed";
    return false;
  }

  // Ciphertext waiting to be sent.
  std::size_t pending_output() const { return BIO_ctrl_pending(out_); }

  // Appends the waiting ciphertext to `to`.
  void take_output(std::vector<char>& to) {
    std::size_t n = pending_output();
    if (n == 0) return;
    std::size_t at = to.size();
    to.resize(at + n);
    int got = BIO_read(out_, to.data() + at, static_cast<int>(n));
    to.resize(at + static_cast<std::size_t>(got > 0 ? got : 0));
  }

  // Once open: whether the launch's PSK was used, and with an (EC)DHE exchange
  // (psk_dhe_ke: forward secrecy).
  bool used_psk() const { return SSL_session_reused(ssl_.get()) == 1; }
  bool forward_secret() const { return SSL_get_negotiated_group(ssl_.get()) != 0; }

  // Why the last call failed.
  const std::string& error() const { return error_; }

 private:
  // Whether an SSL call that did not complete only waits for bytes; records the error if not.
  bool retryable(int r) {
    int e = SSL_get_error(ssl_.get(), r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return true;
    if (e == SSL_ERROR_ZERO_RETURN) {
      error_ = "the peer closed TLS";
      return false;
    }
    unsigned long code = ERR_get_error();
    char reason[256] = "unknown TLS error";
    if (code != 0) ERR_error_string_n(code, reason, sizeof reason);
    ERR_clear_error();
    error_ = reason;
    return false;
  }

  struct ssl_free {
    void operator()(SSL* s) const { SSL_free(s); }
  };
  std::unique_ptr<SSL, ssl_free> ssl_;
  BIO* in_ = nullptr;
  BIO* out_ = nullptr;
  bool open_ = false;
  std::string error_;
};

// Whether the first bytes from a peer begin a TLS record (a handshake record:
// content type 22, version 3.x), as a ClientHello does, rather than a frame.
inline bool looks_like_tls(std::span<const char> first) {
  return first.size() >= 2 && static_cast<unsigned char>(first[0]) == 22 &&
         static_cast<unsigned char>(first[1]) == 3;
}

}  // namespace tlaunch::rpc
