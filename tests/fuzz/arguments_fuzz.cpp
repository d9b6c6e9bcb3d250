// Argument decoding as a method's dispatch does it: a call's payload read
// through wire::input_archive (wire::deserialize_from) into argument types a
// program may use. Malformed payloads must throw, never crash, read out of
// bounds or allocate what a size field claims; a payload that decodes to
// strings and vectors must encode back to the same bytes.
//
// Input: byte 0 picks the argument types; the rest is the payload.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <cereal/types/map.hpp>
#include <cereal/types/optional.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/tuple.hpp>
#include <cereal/types/vector.hpp>

#include <tlaunch/bytes.hpp>
#include <tlaunch/wire/codec.hpp>

namespace {

using namespace tlaunch;

struct point {
  double x = 0, y = 0;
  std::string label;
  template <class A>
  void serialize(A& ar) {
    ar(x, y, label);
  }
};

// Decodes the payload as T...; returns whether it held exactly those values.
template <class... T>
bool decode(std::span<const char> payload, const std::shared_ptr<const void>* owner,
            T&... values) {
  try {
    wire::deserialize_from(wire::received_payload{payload, owner}, values...);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// Decoded values encode back to the payload they came from.
template <class... T>
void round_trip(std::span<const char> payload, const T&... values) {
  wire::frame_buffer f;
  wire::serialize_into(f, values...);
  auto b = f.bytes();
  if (b.size() != wire::header_size + payload.size() ||
      std::memcmp(b.data() + wire::header_size, payload.data(), payload.size()) != 0)
    __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::span<const char> p(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 9) {
    case 0: {
      std::string s;
      if (decode(p, nullptr, s)) round_trip(p, s);
      break;
    }
    case 1: {
      std::vector<std::int64_t> v;
      std::string s;
      if (decode(p, nullptr, v, s)) round_trip(p, v, s);
      break;
    }
    case 2: {
      std::vector<std::string> v;
      if (decode(p, nullptr, v)) round_trip(p, v);
      break;
    }
    case 3: {
      std::vector<bool> v;
      std::int32_t i = 0;
      if (decode(p, nullptr, v, i)) round_trip(p, v, i);
      break;
    }
    case 4: {
      std::map<std::string, std::vector<double>> m;
      decode(p, nullptr, m);
      break;
    }
    case 5: {
      std::optional<std::string> o;
      bool b = false;
      std::tuple<std::uint8_t, std::string> t;
      decode(p, nullptr, o, b, t);
      break;
    }
    case 6: {
      std::vector<point> v;
      decode(p, nullptr, v);
      break;
    }
    case 7: {  // bytes copied out of the payload
      tlaunch::bytes b;
      char c = 0;
      if (decode(p, nullptr, c, b) && b.size() > p.size()) __builtin_trap();
      break;
    }
    case 8: {  // bytes as a view of the received frame's own buffer
      auto owner = std::make_shared<std::vector<char>>(p.begin(), p.end());
      std::shared_ptr<const void> keep = owner;
      tlaunch::bytes b;
      std::int64_t n = 0;
      if (decode(std::span<const char>(owner->data(), owner->size()), &keep, n, b) &&
          b.size() != 0 &&
          (b.data() < owner->data() || b.data() + b.size() > owner->data() + owner->size()) &&
          b.size() >= wire::external_threshold)
        __builtin_trap();  // a view outside the frame
      break;
    }
  }
  return 0;
}
