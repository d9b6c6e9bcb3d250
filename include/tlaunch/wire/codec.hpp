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

// A growable byte buffer that reserves room for the frame header up front, so a
// payload is serialized once, in place, and sent without another copy.
class frame_buffer {
 public:
  frame_buffer() { data_.resize(header_size); }
  explicit frame_buffer(std::size_t reserve) {
    data_.reserve(header_size + reserve);
    data_.resize(header_size);
  }
  void append(const void* p, std::size_t n) {
    auto old = data_.size();
    data_.resize(old + n);
    std::memcpy(data_.data() + old, p, n);
  }
  std::size_t payload_size() const { return data_.size() - header_size; }
  // Writes the header in front of the payload; h.size is filled in.
  void seal(frame_header h) {
    h.size = static_cast<std::uint32_t>(payload_size());
    encode_header(h, data_.data());
  }
  std::span<const char> bytes() const { return {data_.data(), data_.size()}; }
  byte_vector& storage() { return data_; }

 private:
  byte_vector data_;
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

namespace detail {
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

template <class... T>
void serialize_into(frame_buffer& b, const T&... values) {
  if constexpr (sizeof...(T) > 0) {
    detail::frame_out_buf sb(b);
    std::ostream& os = detail::thread_ostream(&sb);
    detail::stream_lease<std::ostream> lease{os};
    cereal::BinaryOutputArchive ar(os);
    ar(values...);
  }
}

// Throws cereal::Exception on a payload that does not hold the expected values,
// and std::runtime_error when bytes are left over.
template <class... T>
void deserialize_from(std::span<const char> payload, T&... values) {
  detail::span_in_buf sb(payload);
  {
    std::istream& is = detail::thread_istream(&sb);
    detail::stream_lease<std::istream> lease{is};
    cereal::BinaryInputArchive ar(is);
    if constexpr (sizeof...(T) > 0) ar(values...);
  }
  if (sb.remaining() != 0) throw std::runtime_error("payload has trailing bytes");
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
