// Payloads: cereal binary archives written straight into frame buffers.
#pragma once

#include <cereal/archives/binary.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstring>
#include <istream>
#include <ostream>
#include <memory>
#include <span>
#include <streambuf>
#include <string>
#include <type_traits>
#include <vector>

#include "frame.hpp"

namespace tlaunch::wire {

// Bytes that are not zero-filled when a vector grows: every byte is written
// right after, so the fill would be a second pass over large payloads.
template <class T>
struct default_init_allocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = default_init_allocator<U>;
  };
  using std::allocator<T>::allocator;
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
};
using byte_vector = std::vector<char, default_init_allocator<char>>;

// Memory a frame sends from where it is instead of copying it (a large
// tlaunch::bytes payload); `owner` keeps it alive until it is written.
struct external_piece {
  std::size_t at;  // offset in the inline bytes where it goes
  std::shared_ptr<const void> owner;
  const char* data;
  std::size_t size;
};

// A frame ready to send: inline bytes (header first) with external pieces
// spliced in at their offsets.
struct outgoing_frame {
  byte_vector inline_bytes;
  std::vector<external_piece> externals;

  std::size_t size() const {
    std::size_t n = inline_bytes.size();
    for (const auto& e : externals) n += e.size;
    return n;
  }
  // Calls f(pointer, length) for each contiguous piece, skipping the first
  // `skip` bytes; stops when f returns false.
  template <class F>
  void for_each_piece(std::size_t skip, F&& f) const {
    std::size_t at = 0;
    auto emit = [&](const char* p, std::size_t n) {
      if (skip >= n) {
        skip -= n;
        return true;
      }
      p += skip;
      n -= skip;
      skip = 0;
      return f(p, n);
    };
    for (const auto& e : externals) {
      if (!emit(inline_bytes.data() + at, e.at - at)) return;
      if (!emit(e.data, e.size)) return;
      at = e.at;
    }
    emit(inline_bytes.data() + at, inline_bytes.size() - at);
  }
};

namespace detail {
// Small frame buffers already written, kept per thread for the next frames: a
// malloc and free per frame showed up in every pipelined profile.
inline thread_local std::vector<byte_vector> spare_buffers;
inline constexpr std::size_t spare_buffer_limit = 256, spare_buffer_max_size = 16 * 1024;

inline byte_vector take_spare_buffer() {
  auto& spare = spare_buffers;
  if (spare.empty()) return {};
  byte_vector b = std::move(spare.back());
  spare.pop_back();
  return b;
}
}  // namespace detail

// Gives a written frame's inline bytes back for reuse on this thread.
inline void recycle(outgoing_frame&& f) {
  auto& spare = detail::spare_buffers;
  if (spare.size() < detail::spare_buffer_limit &&
      f.inline_bytes.capacity() <= detail::spare_buffer_max_size) {
    f.inline_bytes.clear();
    spare.push_back(std::move(f.inline_bytes));
  }
}

// A growable byte buffer that reserves room for the frame header up front, so a
// payload is serialized once, in place, and sent without another copy.
class frame_buffer {
 public:
  frame_buffer() : data_(detail::take_spare_buffer()) { data_.resize(header_size); }
  explicit frame_buffer(std::size_t reserve) : data_(detail::take_spare_buffer()) {
    data_.reserve(header_size + reserve);
    data_.resize(header_size);
  }
  void append(const void* p, std::size_t n) {
    auto old = data_.size();
    data_.resize(old + n);
    std::memcpy(data_.data() + old, p, n);
  }
  // Sends [p, p+n) from where it is; owner keeps it alive.
  void append_external(std::shared_ptr<const void> owner, const char* p, std::size_t n) {
    externals_.push_back({data_.size(), std::move(owner), p, n});
    external_bytes_ += n;
  }
  std::size_t payload_size() const { return data_.size() - header_size + external_bytes_; }
  // Writes the header in front of the payload; h.size is filled in.
  void seal(frame_header h) {
    h.size = static_cast<std::uint32_t>(payload_size());
    encode_header(h, data_.data());
  }
  // The inline bytes (header and payload when there are no external pieces).
  std::span<const char> bytes() const { return {data_.data(), data_.size()}; }
  bool has_externals() const { return !externals_.empty(); }
  outgoing_frame release() { return {std::move(data_), std::move(externals_)}; }

 private:
  byte_vector data_;
  std::vector<external_piece> externals_;
  std::size_t external_bytes_ = 0;
};

namespace detail {

class frame_out_buf : public std::streambuf {
 public:
  explicit frame_out_buf(frame_buffer& b) : b_(b) {}

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    b_.append(s, static_cast<std::size_t>(n));
    return n;
  }
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) {
      char ch = static_cast<char>(c);
      b_.append(&ch, 1);
    }
    return c;
  }

 private:
  frame_buffer& b_;
};

class span_in_buf : public std::streambuf {
 public:
  explicit span_in_buf(std::span<const char> s) {
    char* b = const_cast<char*>(s.data());
    setg(b, b, b + s.size());
  }
  std::size_t remaining() const { return static_cast<std::size_t>(egptr() - gptr()); }
  // The next n bytes, consumed without copying; null if there are fewer.
  const char* take(std::size_t n) {
    if (n > remaining()) return nullptr;
    char* p = gptr();
    setg(eback(), p + n, egptr());
    return p;
  }

 protected:
  std::streamsize xsgetn(char* s, std::streamsize n) override {
    auto avail = egptr() - gptr();
    if (n > avail) n = avail;
    std::memcpy(s, gptr(), static_cast<std::size_t>(n));
    gbump(static_cast<int>(n));
    return n;
  }
};

}  // namespace detail

// Payloads at least this large go out from where they are (tlaunch::bytes).
inline constexpr std::size_t external_threshold = 64 * 1024;

namespace detail {
// What the running serialize_into / deserialize_from on this thread works on,
// for types that bypass cereal's copy (tlaunch::bytes).
inline thread_local frame_buffer* active_output = nullptr;
struct input_source {
  span_in_buf* buf = nullptr;
  const std::shared_ptr<const void>* owner = nullptr;  // the frame's own buffer, if shareable
};
inline thread_local input_source active_input{};
// Set by the connection while a frame that owns its buffer is handled.
inline thread_local const std::shared_ptr<const void>* current_payload_owner = nullptr;

template <class T>
struct scoped_set {
  T& slot;
  T old;
  scoped_set(T& s, T v) : slot(s), old(s) { slot = v; }
  ~scoped_set() { slot = old; }
};

// One stream object per thread, pointed at each call's buffer: constructing a
// std::ostream (its locale) per call cost more than the serialization itself.
inline std::ostream& thread_ostream(std::streambuf* sb) {
  thread_local std::ostream os(nullptr);
  os.rdbuf(sb);
  os.clear();
  return os;
}
inline std::istream& thread_istream(std::streambuf* sb) {
  thread_local std::istream is(nullptr);
  is.rdbuf(sb);
  is.clear();
  return is;
}
// Detaches the stream from a buffer that is about to go away, also on exceptions.
template <class S>
struct stream_lease {
  S& s;
  ~stream_lease() { s.rdbuf(nullptr); }
};
}  // namespace detail

namespace detail {
// Numbers (not bool) that cereal's binary archive writes as their own bytes:
// written and read here directly, byte for byte the same, without the archive.
template <class... T>
inline constexpr bool all_plain_numbers =
    sizeof...(T) > 0 && ((std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) && ...);
}  // namespace detail

template <class... T>
void serialize_into(frame_buffer& b, const T&... values) {
  if constexpr (detail::all_plain_numbers<T...>) {
    char raw[(sizeof(T) + ...)];
    std::size_t at = 0;
    ((std::memcpy(raw + at, &values, sizeof(T)), at += sizeof(T)), ...);
    b.append(raw, sizeof raw);
  } else if constexpr (sizeof...(T) > 0) {
    detail::frame_out_buf sb(b);
    std::ostream& os = detail::thread_ostream(&sb);
    detail::stream_lease<std::ostream> lease{os};
    detail::scoped_set<frame_buffer*> active(detail::active_output, &b);
    cereal::BinaryOutputArchive ar(os);
    ar(values...);
  }
}

// A frame whose payload is a few plain numbers (or nothing), built on the
// stack: the header's room first, then the numbers as serialize_into writes
// them. Connections copy it straight into their write queue, so a small call
// or reply costs no buffer of its own.
template <std::size_t N>
struct small_frame {
  static constexpr std::size_t payload_size = N;
  char bytes[header_size + N];
  std::span<char> span() { return {bytes, sizeof bytes}; }
};

// Whether make_small_frame takes these values.
template <class... T>
inline constexpr bool small_frame_values = sizeof...(T) == 0 || detail::all_plain_numbers<T...>;

template <class... T>
  requires small_frame_values<T...>
small_frame<(std::size_t{0} + ... + sizeof(T))> make_small_frame(const T&... values) {
  small_frame<(std::size_t{0} + ... + sizeof(T))> f;
  [[maybe_unused]] std::size_t at = header_size;
  ((std::memcpy(f.bytes + at, &values, sizeof(T)), at += sizeof(T)), ...);
  return f;
}

// Throws cereal::Exception on a payload that does not hold the expected values,
// and std::runtime_error when bytes are left over.
template <class... T>
void deserialize_from(std::span<const char> payload, T&... values) {
  if constexpr (detail::all_plain_numbers<T...>) {
    constexpr std::size_t need = (sizeof(T) + ...);
    if (payload.size() < need)
      throw cereal::Exception("Failed to read " + std::to_string(need) +
                              " bytes from input stream! Read " + std::to_string(payload.size()));
    if (payload.size() > need) throw std::runtime_error("payload has trailing bytes");
    std::size_t at = 0;
    ((std::memcpy(&values, payload.data() + at, sizeof(T)), at += sizeof(T)), ...);
  } else {
    detail::span_in_buf sb(payload);
    {
      std::istream& is = detail::thread_istream(&sb);
      detail::stream_lease<std::istream> lease{is};
      detail::scoped_set<detail::input_source> active(
          detail::active_input, detail::input_source{&sb, detail::current_payload_owner});
      cereal::BinaryInputArchive ar(is);
      if constexpr (sizeof...(T) > 0) ar(values...);
    }
    if (sb.remaining() != 0) throw std::runtime_error("payload has trailing bytes");
  }
}

// Error replies: code + message.
inline void encode_error(frame_buffer& b, error_code code, const std::string& message) {
  serialize_into(b, static_cast<std::uint8_t>(code), message);
}
inline std::pair<error_code, std::string> decode_error(std::span<const char> payload) {
  std::uint8_t code = 0;
  std::string msg;
  try {
    deserialize_from(payload, code, msg);
  } catch (const std::exception& e) {
    return {error_code::remote_exception, std::string("malformed error reply: ") + e.what()};
  }
  return {static_cast<error_code>(code), std::move(msg)};
}

}  // namespace tlaunch::wire

namespace tlaunch::wire::detail {
// While a payload is read, a string or vector whose size field claims more
// elements than the rest of the payload could hold is refused before anything
// is allocated: a malformed frame must not make the reader allocate what it
// claims (up to 2^64 bytes). Elements of an empty class may serialize to
// nothing, so their count is not checked.
inline void check_claim(std::uint64_t count, std::size_t min_bytes_each, const char* what) {
  if (!active_input.buf || min_bytes_each == 0) return;
  std::size_t left = active_input.buf->remaining();
  if (count > left / min_bytes_each)
    throw cereal::Exception(std::string(what) + " claims " + std::to_string(count) +
                            " elements, but only " + std::to_string(left) +
                            " bytes of the payload are left");
}
// Reads a string's or vector's size field and checks its claim.
inline std::size_t claimed_size(cereal::BinaryInputArchive& ar, std::size_t min_bytes_each,
                                const char* what) {
  cereal::size_type size;
  ar(cereal::make_size_tag(size));
  check_claim(size, min_bytes_each, what);
  return static_cast<std::size_t>(size);
}
template <class T>
inline constexpr std::size_t min_serialized_size =
    std::is_arithmetic_v<T> ? sizeof(T) : (std::is_empty_v<T> ? 0 : 1);
}  // namespace tlaunch::wire::detail

// The binary archive's loads of strings and vectors, with that check; more
// specialized than cereal's own, so these are the ones chosen.
namespace cereal {
template <class CharT, class Traits, class Alloc>
void CEREAL_LOAD_FUNCTION_NAME(BinaryInputArchive& ar, std::basic_string<CharT, Traits, Alloc>& str) {
  std::size_t size = tlaunch::wire::detail::claimed_size(ar, sizeof(CharT), "a string");
  str.resize(size);
  ar(binary_data(const_cast<CharT*>(str.data()), size * sizeof(CharT)));
}

template <class T, class A>
  requires(!std::is_same_v<T, bool>)
void CEREAL_LOAD_FUNCTION_NAME(BinaryInputArchive& ar, std::vector<T, A>& vector) {
  std::size_t size = tlaunch::wire::detail::claimed_size(
      ar, tlaunch::wire::detail::min_serialized_size<T>, "a vector");
  vector.resize(size);
  if constexpr (std::is_arithmetic_v<T>) {
    ar(binary_data(vector.data(), size * sizeof(T)));
  } else {
    for (auto&& v : vector) ar(v);
  }
}

template <class A>
void CEREAL_LOAD_FUNCTION_NAME(BinaryInputArchive& ar, std::vector<bool, A>& vector) {
  vector.resize(tlaunch::wire::detail::claimed_size(ar, 1, "a vector<bool>"));
  for (auto&& v : vector) {
    bool b;
    ar(b);
    v = b;
  }
}
}  // namespace cereal
