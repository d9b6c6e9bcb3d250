// tlaunch's archive: every shape of value round-trips in cereal's binary format,
// and malformed payloads (bad bools, size claims) are refused.
#include <doctest/doctest.h>

#include <cereal/archives/binary.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/optional.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/tuple.hpp>
#include <cereal/types/vector.hpp>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tlaunch/bytes.hpp>
#include <tlaunch/wire/codec.hpp>
#include <tuple>
#include <vector>

#include "../common/errors.hpp"

namespace w = tlaunch::wire;

namespace {

struct point {
  std::int32_t x = 0;
  std::string name;
  std::vector<std::vector<double>> rows;
  bool flag = false;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(x, name, rows, flag);
  }
  bool operator==(const point&) const = default;
};

struct with_bytes {
  std::string tag;
  tlaunch::bytes data;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(tag, data);
  }
};

// The payload serialize_into writes, external pieces spliced in.
template <class... T>
std::string payload_of(const T&... v) {
  w::frame_buffer f;
  w::serialize_into(f, v...);
  f.seal({.type = w::kind::reply});
  auto out = f.release();
  std::string flat;
  out.for_each_piece(0, [&](const char* p, std::size_t n) {
    flat.append(p, n);
    return true;
  });
  return flat.substr(w::header_size);
}

// The same values through cereal's own binary archive.
template <class... T>
std::string cereal_bytes_of(const T&... v) {
  std::ostringstream os;
  {
    cereal::BinaryOutputArchive ar(os);
    ar(v...);
  }
  return os.str();
}

std::span<const char> span_of(const std::string& s) { return {s.data(), s.size()}; }

template <class T>
T round_trip(const T& v) {
  auto p = payload_of(v);
  CHECK(p == cereal_bytes_of(v));
  T back{};
  w::deserialize_from(span_of(p), back);
  return back;
}

std::string error_of(auto&& f) {
  return tlaunch::test_support::message_of<std::exception>(f).value_or("no error");
}

}  // namespace

TEST_SUITE("codec") {
  TEST_CASE("every shape round-trips, byte for byte as cereal's binary archive writes it") {
    CHECK(round_trip(std::vector<std::int64_t>{}).empty());
    CHECK(round_trip(std::vector<std::int64_t>{-1, 0, 1}) == std::vector<std::int64_t>{-1, 0, 1});
    CHECK(round_trip(std::string()).empty());
    CHECK(round_trip(std::string("text")) == "text");
    CHECK(round_trip(std::u16string()).empty());
    CHECK(round_trip(std::u16string(u"wide")) == u"wide");
    CHECK(round_trip(std::vector<char>{}).empty());
    CHECK(round_trip(std::vector<bool>{}).empty());
    CHECK(round_trip(std::vector<bool>{true, false, true}) == std::vector<bool>{true, false, true});
    CHECK(round_trip(std::vector<std::string>{"", "a", ""}) ==
          std::vector<std::string>{"", "a", ""});
    using nested = std::vector<std::vector<std::int64_t>>;
    CHECK(round_trip(nested{}).empty());
    CHECK(round_trip(nested{{}, {1, 2}, {}}) == nested{{}, {1, 2}, {}});
    using table = std::map<std::string, std::vector<double>>;
    CHECK(round_trip(table{{"", {}}, {"x", {1.5, -2}}}) == table{{"", {}}, {"x", {1.5, -2}}});
    CHECK(round_trip(std::optional<std::string>()) == std::nullopt);
    CHECK(round_trip(std::optional<std::string>("")) == std::optional<std::string>(""));
    CHECK(round_trip(std::tuple<int, std::string, bool>{7, "", true}) ==
          std::tuple<int, std::string, bool>{7, "", true});
    point p{-3, "", {{}, {0.5}}, true};
    CHECK(round_trip(p) == p);
    CHECK(round_trip(std::vector<point>{p, {}, p}) == std::vector<point>{p, {}, p});
    CHECK(round_trip(true) == true);
    CHECK(round_trip(false) == false);
  }

  TEST_CASE("bytes of every size keep the format; large ones go out from where they are") {
    std::string large(200000, '\0');
    for (std::size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>(i * 31);
    for (const std::string& s : {std::string(), std::string("abc"), large}) {
      CAPTURE(s.size());
      tlaunch::bytes b(s);
      CHECK(round_trip(b) == b);
      w::frame_buffer f;
      w::serialize_into(f, b);
      CHECK(f.has_externals() == (s.size() >= w::external_threshold));
    }
    tlaunch::bytes big(large);
    CHECK(round_trip(tlaunch::bytes()).empty());
    // Several large pieces in one frame, inside containers and user types.
    std::vector<tlaunch::bytes> many{big, tlaunch::bytes(std::string("x")), big};
    auto back = round_trip(many);
    REQUIRE(back.size() == 3);
    CHECK(back[0] == big);
    CHECK(back[1].view() == "x");
    CHECK(back[2] == big);
    with_bytes wb{"tag", big};
    auto payload = payload_of(wb);
    CHECK(payload == cereal_bytes_of(wb));
    with_bytes wb2;
    w::deserialize_from(span_of(payload), wb2);
    CHECK(wb2.tag == "tag");
    CHECK(wb2.data == big);
    // Through plain cereal archives bytes are copied, in the same format.
    std::istringstream is(cereal_bytes_of(big));
    tlaunch::bytes plain;
    {
      cereal::BinaryInputArchive ar(is);
      ar(plain);
    }
    CHECK(plain == big);
  }

  TEST_CASE("received bytes are views of the frame only when its buffer may be kept") {
    std::string large(100000, 'v');
    auto owner = std::make_shared<std::string>(
        payload_of(std::string("t"), tlaunch::bytes(large), tlaunch::bytes(std::string("s"))));
    std::shared_ptr<const void> keep = owner;
    const char* begin = owner->data();
    const char* end = begin + owner->size();
    auto inside = [&](const tlaunch::bytes& b) { return b.data() >= begin && b.data() < end; };
    std::string tag;
    tlaunch::bytes got, small;
    w::deserialize_from(w::received_payload{span_of(*owner), &keep}, tag, got, small);
    CHECK(got.view() == large);
    CHECK(inside(got));     // a view
    CHECK(!inside(small));  // small ones are copied
    CHECK(small.view() == "s");
    keep.reset();
    owner.reset();
    CHECK(got.view() == large);  // the view keeps the buffer
    // Without an owner (or an empty one) everything is copied.
    auto again = payload_of(std::string("t"), tlaunch::bytes(large), tlaunch::bytes());
    std::shared_ptr<const void> none;
    const std::shared_ptr<const void>* owners[] = {nullptr, &none};
    for (auto* o : owners) {
      w::deserialize_from(w::received_payload{span_of(again), o}, tag, got, small);
      CHECK(got.view() == large);
      CHECK((got.data() < again.data() || got.data() >= again.data() + again.size()));
      CHECK(small.empty());
    }
  }

  TEST_CASE("a bool whose byte is not 0 or 1 is refused as malformed") {
    bool b = false;
    for (unsigned char byte : {0, 1}) {
      std::string p(1, static_cast<char>(byte));
      w::deserialize_from(span_of(p), b);
      CHECK(b == (byte == 1));
    }
    for (unsigned char byte : {2, 0x80, 0xff}) {
      CAPTURE(int(byte));
      std::string p(1, static_cast<char>(byte));
      CHECK_THROWS_WITH_AS(w::deserialize_from(span_of(p), b),
                           ("a bool holds the byte " + std::to_string(byte)).c_str(),
                           cereal::Exception);
    }
    // Inside containers, tuples and user types alike.
    auto bad = payload_of(std::vector<bool>{true, true});
    bad.back() = 7;
    std::vector<bool> flags;
    CHECK(error_of([&] { w::deserialize_from(span_of(bad), flags); }) == "a bool holds the byte 7");
    bad = payload_of(std::tuple<std::int32_t, bool>{1, true});
    bad.back() = 2;
    std::tuple<std::int32_t, bool> t;
    CHECK(error_of([&] { w::deserialize_from(span_of(bad), t); }) == "a bool holds the byte 2");
    bad = payload_of(point{1, "n", {}, true});
    bad.back() = 9;
    point p;
    CHECK(error_of([&] { w::deserialize_from(span_of(bad), p); }) == "a bool holds the byte 9");
  }

  TEST_CASE("size claims beyond the payload are refused, for strings, vectors and bytes") {
    auto claim = [](std::uint64_t n, std::size_t tail) {
      std::string p(8 + tail, 'x');
      std::memcpy(p.data(), &n, 8);
      return p;
    };
    std::string s;
    auto p = claim(4, 3);
    CHECK(error_of([&] { w::deserialize_from(span_of(p), s); }) ==
          "a string claims 4 elements, but only 3 bytes of the payload are left");
    std::u16string wide;
    p = claim(2, 3);  // 2 chars of 2 bytes need 4
    CHECK(error_of([&] { w::deserialize_from(span_of(p), wide); }) ==
          "a string claims 2 elements, but only 3 bytes of the payload are left");
    std::vector<point> points;
    p = claim(std::uint64_t{1} << 62, 5);
    CHECK(error_of([&] { w::deserialize_from(span_of(p), points); }) ==
          "a vector claims 4611686018427387904 elements, but only 5 bytes of the payload are left");
    tlaunch::bytes b;
    p = claim(std::uint64_t{1} << 45, 10);
    CHECK(error_of([&] { w::deserialize_from(span_of(p), b); }) ==
          "bytes: size 35184372088832 exceeds the payload");
    // Exactly what is left is fine.
    p = claim(3, 3);
    w::deserialize_from(span_of(p), s);
    CHECK(s == "xxx");
    // A truncated number is cereal's error.
    p = payload_of(std::string("ab"), std::int64_t{5});
    std::int64_t n = 0;
    CHECK(error_of([&] { w::deserialize_from(span_of(p).first(p.size() - 3), s, n); }) ==
          "Failed to read 8 bytes from input stream! Read 5");
  }

  TEST_CASE("empty pieces reach no memcpy with a null pointer") {
    w::frame_buffer f;
    f.append(nullptr, 0);
    CHECK(f.payload_size() == 0);
    std::vector<std::int64_t> empty;
    w::output_archive out(f);
    out(cereal::binary_data(empty.data(), 0));
    CHECK(f.payload_size() == 0);
    w::input_archive in(std::span<const char>{});
    in(cereal::binary_data(empty.data(), 0));
    CHECK(in.remaining() == 0);
    CHECK(in.payload_owner() == nullptr);
  }

  TEST_CASE("the archive is cereal's interface: user types see tlaunch's archive types") {
    static_assert(cereal::traits::is_output_serializable<point, w::output_archive>::value);
    static_assert(cereal::traits::is_input_serializable<point, w::input_archive>::value);
    static_assert(cereal::traits::is_output_serializable<tlaunch::bytes, w::output_archive>::value);
    static_assert(cereal::traits::is_input_serializable<tlaunch::bytes, w::input_archive>::value);
    static_assert(!cereal::traits::is_text_archive<w::output_archive>::value);
    CHECK(true);
  }
}
