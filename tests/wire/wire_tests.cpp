// The wire layer without sockets: headers, payloads, hello, secret proofs.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <sstream>
#include <string>
#include <tlaunch/detail/build_id.hpp>
#include <tlaunch/detail/secret.hpp>
#include <tlaunch/detail/crypto.hpp>
#include <tlaunch/bytes.hpp>
#include <tlaunch/service.hpp>
#include <tlaunch/wire/codec.hpp>
#include <tlaunch/wire/frame.hpp>
#include <tlaunch/wire/hello.hpp>
#include <vector>

namespace {
std::string hex(std::span<const std::uint8_t> s) { return tlaunch::detail::to_hex(s); }
std::span<const std::uint8_t> bytes(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}
struct S {
  int a(int x) { return x; }
  int b(int x) { return x; }
  int b2(long x) { return static_cast<int>(x); }
};
}  // namespace

TEST_SUITE("wire") {
  TEST_CASE("frame header round trip, little endian at fixed offsets") {
    tlaunch::wire::frame_header h{.size = 0x01020304,
                                  .type = tlaunch::wire::kind::call,
                                  .flags = 0,
                                  .target = 7,
                                  .aux = 250,
                                  .call_id = 0x1122334455667788ull,
                                  .method = 42};
    unsigned char buf[tlaunch::wire::header_size];
    tlaunch::wire::encode_header(h, buf);
    CHECK(buf[0] == 0x04);
    CHECK(buf[3] == 0x01);
    CHECK(buf[4] == 4);
    CHECK(buf[16] == 0x88);
    auto d = tlaunch::wire::decode_header(buf, 0x7fffffff);
    CHECK(d.problem.empty());
    CHECK(d.header.call_id == h.call_id);
    CHECK(d.header.target == 7);
    CHECK(d.header.aux == 250);
    CHECK(d.header.method == 42);
  }

  TEST_CASE("bad headers are named") {
    unsigned char buf[tlaunch::wire::header_size] = {};
    tlaunch::wire::frame_header h{.size = 10, .type = tlaunch::wire::kind::reply};
    tlaunch::wire::encode_header(h, buf);
    buf[4] = 99;
    CHECK(tlaunch::wire::decode_header(buf, 100).problem.find("unknown frame kind 99") == 0);
    buf[4] = 5;
    h.size = 5000;
    tlaunch::wire::encode_header(h, buf);
    CHECK(tlaunch::wire::decode_header(buf, 4096).problem.find("exceeds the maximum") !=
          std::string::npos);
  }

  TEST_CASE("payloads round trip and reject garbage") {
    tlaunch::wire::frame_buffer f;
    tlaunch::wire::serialize_into(f, std::string("hello"), 42, std::vector<int>{1, 2, 3});
    auto b = f.bytes().subspan(tlaunch::wire::header_size);
    std::string s;
    int n = 0;
    std::vector<int> v;
    tlaunch::wire::deserialize_from(b, s, n, v);
    CHECK(s == "hello");
    CHECK(n == 42);
    CHECK(v == std::vector<int>{1, 2, 3});
    CHECK_THROWS(tlaunch::wire::deserialize_from(b.subspan(0, 6), s, n, v));  // truncated
    CHECK_THROWS(tlaunch::wire::deserialize_from(b, s));                     // trailing bytes
  }

  TEST_CASE("a size field claiming more than the payload holds is refused before allocating") {
    namespace w = tlaunch::wire;
    // A payload: an 8-byte size field, then `tail` bytes.
    auto claim = [](std::uint64_t n, std::size_t tail) {
      std::vector<char> p(8 + tail, 'x');
      std::memcpy(p.data(), &n, 8);
      return p;
    };
    auto error_of = [](auto&& f) -> std::string {
      try {
        f();
      } catch (const std::exception& e) {
        return e.what();
      }
      return "no error";
    };
    std::string str;
    // 2^40 bytes: cereal's own load would try to allocate a terabyte (bad_alloc).
    auto p = claim(std::uint64_t{1} << 40, 3);
    CHECK(error_of([&] { w::deserialize_from(p, str); }) ==
          "a string claims 1099511627776 elements, but only 3 bytes of the payload are left");
    std::vector<std::int64_t> nums;
    p = claim(3, 16);  // 3 numbers of 8 bytes need 24
    CHECK(error_of([&] { w::deserialize_from(p, nums); }) ==
          "a vector claims 3 elements, but only 16 bytes of the payload are left");
    std::vector<std::string> strs;
    p = claim(std::uint64_t{1} << 50, 7);
    CHECK(error_of([&] { w::deserialize_from(p, strs); }) ==
          "a vector claims 1125899906842624 elements, but only 7 bytes of the payload are left");
    std::vector<bool> flags;
    p = claim(9, 8);
    CHECK(error_of([&] { w::deserialize_from(p, flags); }) ==
          "a vector<bool> claims 9 elements, but only 8 bytes of the payload are left");
    // Claims that fit still read as before.
    w::frame_buffer f;
    w::serialize_into(f, std::vector<std::string>{"a", "", "ccc"}, std::vector<bool>{true, false},
                      std::vector<std::int64_t>{-1, 2}, std::u16string(u"hi"));
    std::u16string wide;
    w::deserialize_from(f.bytes().subspan(w::header_size), strs, flags, nums, wide);
    CHECK(strs == std::vector<std::string>{"a", "", "ccc"});
    CHECK(flags == std::vector<bool>{true, false});
    CHECK(nums == std::vector<std::int64_t>{-1, 2});
    CHECK(wide == u"hi");
  }

  TEST_CASE("plain numbers take the direct path and keep cereal's bytes") {
    std::int32_t a = -7;
    double d = 2.5;
    std::uint64_t u = 0x0102030405060708ull;
    tlaunch::wire::frame_buffer f;
    tlaunch::wire::serialize_into(f, a, d, u);
    auto fast = f.bytes().subspan(tlaunch::wire::header_size);
    // The same values through cereal's own archive.
    std::ostringstream os;
    {
      cereal::BinaryOutputArchive ar(os);
      ar(a, d, u);
    }
    CHECK(std::string(fast.data(), fast.size()) == os.str());

    std::int32_t a2 = 0;
    double d2 = 0;
    std::uint64_t u2 = 0;
    tlaunch::wire::deserialize_from(fast, a2, d2, u2);
    CHECK(a2 == a);
    CHECK(d2 == d);
    CHECK(u2 == u);
    CHECK_THROWS_WITH_AS(tlaunch::wire::deserialize_from(fast.subspan(0, 11), a2, d2, u2),
                         doctest::Contains("Failed to read 20 bytes"), cereal::Exception);
    CHECK_THROWS_WITH_AS(tlaunch::wire::deserialize_from(fast, a2, d2),
                         doctest::Contains("trailing bytes"), std::runtime_error);
    // bool goes through the archive, which checks its byte (codec_tests).
    tlaunch::wire::frame_buffer fb;
    tlaunch::wire::serialize_into(fb, true, a);
    bool b2 = false;
    tlaunch::wire::deserialize_from(fb.bytes().subspan(tlaunch::wire::header_size), b2, a2);
    CHECK(b2);
    CHECK(a2 == a);
  }

  TEST_CASE("a small frame on the stack holds the same bytes as a frame buffer") {
    std::int32_t a = -7;
    double d = 2.5;
    std::uint64_t u = 0x0102030405060708ull;
    auto small = tlaunch::wire::make_small_frame(a, d, u);
    static_assert(decltype(small)::payload_size == 20);
    CHECK(small.span().size() == tlaunch::wire::header_size + 20);
    tlaunch::wire::frame_buffer f;
    tlaunch::wire::serialize_into(f, a, d, u);
    auto payload = f.bytes().subspan(tlaunch::wire::header_size);
    CHECK(std::string(small.bytes + tlaunch::wire::header_size, 20) ==
          std::string(payload.data(), payload.size()));
    auto none = tlaunch::wire::make_small_frame();
    CHECK(none.span().size() == tlaunch::wire::header_size);
    static_assert(tlaunch::wire::small_frame_values<int, double>);
    static_assert(!tlaunch::wire::small_frame_values<bool>);
    static_assert(!tlaunch::wire::small_frame_values<std::string>);
  }

  TEST_CASE("large bytes are sent from where they are and received as views") {
    std::string big(200000, 'q');
    tlaunch::bytes b(big);
    tlaunch::wire::frame_buffer f;
    tlaunch::wire::serialize_into(f, std::string("tag"), b, 7);
    CHECK(f.has_externals());
    CHECK(f.payload_size() == (8 + 3) + 8 + big.size() + 4);
    f.seal({.type = tlaunch::wire::kind::call});
    auto out = f.release();
    std::string flat;
    out.for_each_piece(0, [&](const char* p, std::size_t n) {
      flat.append(p, n);
      return true;
    });
    CHECK(flat.size() == out.size());
    auto owner = std::make_shared<std::string>(flat);
    std::shared_ptr<const void> shared = owner;
    std::string tag;
    tlaunch::bytes got;
    int seven = 0;
    tlaunch::wire::deserialize_from(
        tlaunch::wire::received_payload{std::span<const char>(owner->data(), owner->size())
                                            .subspan(tlaunch::wire::header_size),
                                        &shared},
        tag, got, seven);
    CHECK(tag == "tag");
    CHECK(seven == 7);
    CHECK(got == b);
    CHECK(got.data() >= owner->data());  // a view into the frame
    CHECK(got.data() < owner->data() + owner->size());
    // Skipping into the middle of a piece yields the rest.
    std::size_t total = 0;
    out.for_each_piece(100, [&](const char*, std::size_t n) {
      total += n;
      return true;
    });
    CHECK(total == out.size() - 100);
  }

  TEST_CASE("hello round trip; version and magic mismatches are explained") {
    tlaunch::wire::hello h;
    h.build_id = "abc123";
    h.listen_address = "127.0.0.1:4000";
    h.name = "worker/2";
    h.nonce[3] = 9;
    tlaunch::wire::frame_buffer f;
    tlaunch::wire::encode_hello(f, h);
    auto p = f.bytes().subspan(tlaunch::wire::header_size);
    std::string problem;
    auto d = tlaunch::wire::decode_hello(p, problem);
    REQUIRE(d);
    CHECK(d->build_id == "abc123");
    CHECK(d->listen_address == "127.0.0.1:4000");
    CHECK(d->name == "worker/2");
    CHECK(d->nonce[3] == 9);
    std::vector<char> bad(p.begin(), p.end());
    bad[4] = 77;  // version
    CHECK_FALSE(tlaunch::wire::decode_hello(bad, problem));
    CHECK(problem.find("protocol version 77") == 0);
    bad[0] = 'X';
    CHECK_FALSE(tlaunch::wire::decode_hello(bad, problem));
    CHECK(problem.find("bad magic") != std::string::npos);
    CHECK_FALSE(tlaunch::wire::decode_hello(p.subspan(0, p.size() - 1), problem));
  }

  TEST_CASE("SHA-256 and HMAC-SHA256 match the published vectors") {
    CHECK(hex(tlaunch::detail::sha256(bytes(""))) ==
          "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(hex(tlaunch::detail::sha256(bytes("abc"))) ==
          "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(hex(tlaunch::detail::sha256(
              bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))) ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    // RFC 4231 test case 2
    CHECK(hex(tlaunch::detail::hmac_sha256(bytes("Jefe"), bytes("what do ya want for nothing?"))) ==
          "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    // RFC 4231 test case 6: a key longer than the block
    std::string key(131, '\xaa');
    CHECK(hex(tlaunch::detail::hmac_sha256(
              bytes(key), bytes("Test Using Larger Than Block-Size Key - Hash Key First"))) ==
          "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  }

  TEST_CASE("proofs depend on secret, label and both nonces") {
    std::vector<std::uint8_t> secret(32, 1), other(32, 2);
    std::array<std::uint8_t, 16> a{}, b{};
    b[0] = 1;
    auto p = tlaunch::wire::secret_proof(secret, "acceptor", a, b);
    CHECK(p != tlaunch::wire::secret_proof(other, "acceptor", a, b));
    CHECK(p != tlaunch::wire::secret_proof(secret, "connector", a, b));
    CHECK(p != tlaunch::wire::secret_proof(secret, "acceptor", b, a));
    CHECK(tlaunch::detail::constant_time_equal(p, tlaunch::wire::secret_proof(secret, "acceptor", a, b)));
  }

  TEST_CASE("secrets are random and hex round-trips; bad hex is refused") {
    auto s1 = tlaunch::detail::random_secret(), s2 = tlaunch::detail::random_secret();
    CHECK(s1 != s2);
    auto back = tlaunch::detail::from_hex(tlaunch::detail::to_hex(s1));
    REQUIRE(back);
    CHECK(std::equal(back->begin(), back->end(), s1.begin()));
    CHECK_FALSE(tlaunch::detail::from_hex("abc"));
    CHECK_FALSE(tlaunch::detail::from_hex("zz"));
  }

  TEST_CASE("method ids come from names and signatures") {
    constexpr auto a = tlaunch::detail::method_id<&S::a>();
    constexpr auto b = tlaunch::detail::method_id<&S::b>();
    constexpr auto b2 = tlaunch::detail::method_id<&S::b2>();
    CHECK(a != b);
    CHECK(b != b2);
    CHECK(tlaunch::detail::member_name<&S::a>().ends_with("S::a"));
  }

  TEST_CASE("the build id of this binary is its GNU build-id note") {
    const std::string& id = tlaunch::detail::self_build_id();
    CHECK(id == tlaunch::detail::file_build_id("/proc/self/exe"));
    CHECK(id.size() == 40);  // linked with --build-id (sha1)
    char self[4096] = {};
  REQUIRE(::readlink("/proc/self/exe", self, sizeof self - 1) > 0);
  std::string cmd = std::string("readelf -n '") + self + "' 2>/dev/null | grep 'Build ID'";
  std::FILE* p = ::popen(cmd.c_str(), "r");
    REQUIRE(p);
    char line[256] = {};
    bool got = std::fgets(line, sizeof line, p) != nullptr;
    ::pclose(p);
    if (got) CHECK(std::string(line).find(id) != std::string::npos);
    CHECK_THROWS_WITH(tlaunch::detail::file_build_id("/etc/hostname"),
                      doctest::Contains("not a 64-bit ELF"));
  }
}
