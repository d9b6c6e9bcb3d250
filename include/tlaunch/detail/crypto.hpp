// SHA-256, HMAC-SHA256, random bytes and a constant-time compare, from OpenSSL's libcrypto
// (libssh links it already). They serve the hello's proof of the launch secret, the launch
// secret itself and the build id of binaries without a GNU build-id note.
#pragma once

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

namespace tlaunch::detail {

using sha256_digest = std::array<std::uint8_t, 32>;

// "what: <libcrypto's reason>", for a call into libcrypto that failed.
inline std::runtime_error crypto_failure(const std::string& what) {
  unsigned long e = ERR_get_error();
  char reason[256] = "no reason given";
  if (e != 0) ERR_error_string_n(e, reason, sizeof reason);
  ERR_clear_error();
  return std::runtime_error(what + ": " + reason);
}

// Incremental SHA-256: update() any number of times, then finish() once.
class sha256_hasher {
 public:
  sha256_hasher() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
      throw crypto_failure("cannot start a SHA-256 digest");
  }
  void update(std::span<const std::uint8_t> data) {
    if (EVP_DigestUpdate(ctx_.get(), data.data(), data.size()) != 1)
      throw crypto_failure("SHA-256 digest failed");
  }
  // The digest; the hasher is spent afterwards.
  sha256_digest finish() {
    sha256_digest out{};
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), out.data(), &len) != 1 || len != out.size())
      throw crypto_failure("SHA-256 digest failed");
    return out;
  }

 private:
  struct ctx_free {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };
  std::unique_ptr<EVP_MD_CTX, ctx_free> ctx_;
};

inline sha256_digest sha256(std::span<const std::uint8_t> data) {
  sha256_hasher h;
  h.update(data);
  return h.finish();
}

inline sha256_digest hmac_sha256(std::span<const std::uint8_t> key,
                                 std::span<const std::uint8_t> message) {
  // libcrypto reads a null key as "keep the previous key": give an empty one an address.
  static constexpr std::uint8_t no_bytes[1] = {0};
  const void* k = key.empty() ? no_bytes : key.data();
  const std::uint8_t* m = message.empty() ? no_bytes : message.data();
  sha256_digest out{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), k, static_cast<int>(key.size()), m, message.size(), out.data(), &len) ==
          nullptr ||
      len != out.size())
    throw crypto_failure("HMAC-SHA256 failed");
  return out;
}

// Fills out from libcrypto's CSPRNG (seeded from the kernel).
inline void random_bytes(std::span<std::uint8_t> out) {
  if (out.empty()) return;
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1)
    throw crypto_failure("cannot draw random bytes");
}

// Compares without an early exit, so timing does not reveal where they differ.
inline bool constant_time_equal(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace tlaunch::detail
