// detail/crypto.hpp against published vectors, and the hello proof it computes.
#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include <tlaunch/detail/crypto.hpp>
#include <tlaunch/detail/secret.hpp>
#include <tlaunch/wire/hello.hpp>

namespace {

std::span<const std::uint8_t> bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}
std::string hex(std::span<const std::uint8_t> s) { return tlaunch::detail::to_hex(s); }
std::vector<std::uint8_t> unhex(std::string_view s) { return tlaunch::detail::from_hex(s).value(); }

}  // namespace

TEST_SUITE("crypto") {
  TEST_CASE("SHA-256 matches the FIPS 180-2 vectors") {
    using tlaunch::detail::sha256;
    CHECK(hex(sha256(bytes(""))) ==
          "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(hex(sha256(bytes("abc"))) ==
          "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(hex(sha256(bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))) ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    std::string million(1000000, 'a');
    CHECK(hex(sha256(bytes(million))) ==
          "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }

  TEST_CASE("padding edges: 55, 56, 63 and 64 bytes") {
    // Reference digests from sha256sum.
    using tlaunch::detail::sha256;
    CHECK(hex(sha256(bytes(std::string(55, 'a')))) ==
          "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    CHECK(hex(sha256(bytes(std::string(56, 'a')))) ==
          "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
    CHECK(hex(sha256(bytes(std::string(63, 'a')))) ==
          "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34");
    CHECK(hex(sha256(bytes(std::string(64, 'a')))) ==
          "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
  }

  TEST_CASE("incremental updates in any split give the one-shot digest") {
    std::string msg;
    for (int i = 0; i < 300; ++i) msg += static_cast<char>('a' + i % 26);
    auto whole = tlaunch::detail::sha256(bytes(msg));
    for (std::size_t step : {1u, 3u, 63u, 64u, 65u, 200u}) {
      CAPTURE(step);
      tlaunch::detail::sha256_hasher h;
      for (std::size_t at = 0; at < msg.size(); at += step)
        h.update(bytes(std::string_view(msg).substr(at, step)));
      CHECK(h.finish() == whole);
    }
  }

  TEST_CASE("HMAC-SHA256 matches RFC 4231") {
    using tlaunch::detail::hmac_sha256;
    // Test case 1
    CHECK(hex(hmac_sha256(unhex("0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b"), bytes("Hi There"))) ==
          "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    // Test case 2: a key shorter than the block
    CHECK(hex(hmac_sha256(bytes("Jefe"), bytes("what do ya want for nothing?"))) ==
          "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    // Test case 3
    CHECK(hex(hmac_sha256(std::vector<std::uint8_t>(20, 0xaa),
                          std::vector<std::uint8_t>(50, 0xdd))) ==
          "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    // Test case 6: a key longer than the block is hashed first
    CHECK(hex(hmac_sha256(std::vector<std::uint8_t>(131, 0xaa),
                          bytes("Test Using Larger Than Block-Size Key - Hash Key First"))) ==
          "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    // Test case 7
    CHECK(hex(hmac_sha256(
              std::vector<std::uint8_t>(131, 0xaa),
              bytes("This is a test using a larger than block-size key and a larger than "
                    "block-size data. The key needs to be hashed before being used by the "
                    "HMAC algorithm."))) ==
          "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
  }

  TEST_CASE("constant_time_equal compares contents and lengths") {
    using tlaunch::detail::constant_time_equal;
    std::vector<std::uint8_t> a{1, 2, 3, 4}, b{1, 2, 3, 4}, c{1, 2, 3, 5}, d{0, 2, 3, 4};
    CHECK(constant_time_equal(a, b));
    CHECK_FALSE(constant_time_equal(a, c));
    CHECK_FALSE(constant_time_equal(a, d));
    CHECK_FALSE(constant_time_equal(a, std::span(a).first(3)));
    CHECK(constant_time_equal(std::span<const std::uint8_t>{}, std::span<const std::uint8_t>{}));
  }

  TEST_CASE("HMAC-SHA256 with an empty key and message") {
    CHECK(hex(tlaunch::detail::hmac_sha256({}, {})) ==
          "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
  }

  TEST_CASE("the hello's proof of the secret keeps its bytes on the wire") {
    // HMAC(secret, label | first nonce | second nonce), as Python's hmac module and the
    // hand-written SHA-256 this replaced both compute it.
    std::vector<std::uint8_t> secret;
    std::array<std::uint8_t, 16> a{}, b{};
    for (int i = 0; i < 32; ++i) secret.push_back(static_cast<std::uint8_t>(i));
    for (int i = 0; i < 16; ++i) {
      a[i] = static_cast<std::uint8_t>(i);
      b[i] = static_cast<std::uint8_t>(100 + i);
    }
    CHECK(hex(tlaunch::wire::secret_proof(secret, "acceptor", a, b)) ==
          "a0faa3f3d83d232b5f1d04b7575ef104c5a321a6b7c8139385b0b875bd37ab46");
    CHECK(hex(tlaunch::wire::secret_proof(secret, "connector", b, a)) ==
          "332ba9fcdd6a6327cdabefeed6c50454657657ee0a9b1c16ac24b8112887c378");
  }

  TEST_CASE("random_bytes fills the whole buffer, differently each time") {
    std::array<std::uint8_t, 64> x{}, y{};
    tlaunch::detail::random_bytes(x);
    tlaunch::detail::random_bytes(y);
    CHECK(x != y);
    // All 64 bytes written: zero in each of the last 8 has odds 2^-64.
    CHECK(std::any_of(x.end() - 8, x.end(), [](std::uint8_t v) { return v != 0; }));
    tlaunch::detail::random_bytes({});  // nothing to draw is not an error
    auto s1 = tlaunch::detail::random_secret(), s2 = tlaunch::detail::random_secret();
    CHECK(s1 != s2);
  }
}
