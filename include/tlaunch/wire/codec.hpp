// Payloads: tlaunch's archives (cereal's binary format) written straight into frame
// buffers and read from received payloads.
#pragma once

#include <cereal/archives/binary.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
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
// malloc and free per frame showed up in every pipelined profile. Only spare
// memory lives here, never the state of a frame being written or read.
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
    if (n == 0) return;  // p may be null (an empty vector's data())
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

// Payloads at least this large go out from where they are (tlaunch::bytes).
inline constexpr std::size_t external_threshold = 64 * 1024;

// tlaunch's archives: cereal's binary format (the same bytes as
// cereal::BinaryOutputArchive writes), written into a frame buffer and read
// from a received payload without a stream in between. Being types of their
// own, they carry what tlaunch::bytes needs (the frame for external pieces, the
// payload's owner for views) and what the checked loads below need (the bytes
// left), and those loads change no other archive in the program.
class output_archive
    : public cereal::OutputArchive<output_archive, cereal::AllowEmptyClassElision> {
 public:
  explicit output_archive(frame_buffer& frame) : OutputArchive(this), frame_(frame) {}
  void saveBinary(const void* data, std::size_t size) { frame_.append(data, size); }
  // The frame being written: large tlaunch::bytes go into it as external pieces.
  frame_buffer& frame() noexcept { return frame_; }

 private:
  frame_buffer& frame_;
};

class input_archive : public cereal::InputArchive<input_archive, cereal::AllowEmptyClassElision> {
 public:
  // owner: the received frame's buffer when views of it may be kept, else null.
  explicit input_archive(std::span<const char> payload,
                         const std::shared_ptr<const void>* owner = nullptr)
      : InputArchive(this),
        at_(payload.data()),
        end_(payload.data() + payload.size()),
        owner_(owner && *owner ? owner : nullptr) {}
  void loadBinary(void* data, std::size_t size) {
    if (size > remaining())
      throw cereal::Exception("Failed to read " + std::to_string(size) +
                              " bytes from input stream! Read " + std::to_string(remaining()));
    if (size) std::memcpy(data, at_, size);  // data may be null when size is 0
    at_ += size;
  }
  std::size_t remaining() const noexcept { return static_cast<std::size_t>(end_ - at_); }
  // The next n bytes, consumed without copying; null if there are fewer.
  const char* take(std::size_t n) noexcept {
    if (n > remaining()) return nullptr;
    return std::exchange(at_, at_ + n);
  }
  // The buffer the payload sits in, if a view may keep it; else null.
  const std::shared_ptr<const void>* payload_owner() const noexcept { return owner_; }

 private:
  const char* at_;
  const char* end_;
  const std::shared_ptr<const void>* owner_;
};

// What cereal's binary archive does for numbers, sizes, names and raw bytes.
template <class T>
  requires std::is_arithmetic_v<T>
void CEREAL_SAVE_FUNCTION_NAME(output_archive& ar, const T& t) {
  ar.saveBinary(std::addressof(t), sizeof(t));
}
// A bool is one byte, 0 or 1: anything else is a malformed payload, refused
// rather than loaded as a bool that is neither true nor false.
template <class T>
  requires std::is_arithmetic_v<T>
void CEREAL_LOAD_FUNCTION_NAME(input_archive& ar, T& t) {
  if constexpr (std::is_same_v<T, bool>) {
    static_assert(sizeof(bool) == 1);
    unsigned char byte = 0;
    ar.loadBinary(&byte, 1);
    if (byte > 1) throw cereal::Exception("a bool holds the byte " + std::to_string(byte));
    t = byte != 0;
  } else {
    ar.loadBinary(std::addressof(t), sizeof(t));
  }
}
template <class T>
void CEREAL_SERIALIZE_FUNCTION_NAME(output_archive& ar, cereal::NameValuePair<T>& t) {
  ar(t.value);
}
template <class T>
void CEREAL_SERIALIZE_FUNCTION_NAME(input_archive& ar, cereal::NameValuePair<T>& t) {
  ar(t.value);
}
template <class T>
void CEREAL_SERIALIZE_FUNCTION_NAME(output_archive& ar, cereal::SizeTag<T>& t) {
  ar(t.size);
}
template <class T>
void CEREAL_SERIALIZE_FUNCTION_NAME(input_archive& ar, cereal::SizeTag<T>& t) {
  ar(t.size);
}
template <class T>
void CEREAL_SAVE_FUNCTION_NAME(output_archive& ar, const cereal::BinaryData<T>& bd) {
  ar.saveBinary(bd.data, static_cast<std::size_t>(bd.size));
}
template <class T>
void CEREAL_LOAD_FUNCTION_NAME(input_archive& ar, cereal::BinaryData<T>& bd) {
  ar.loadBinary(bd.data, static_cast<std::size_t>(bd.size));
}

namespace detail {
// A string or vector whose size field claims more elements than the rest of
// the payload could hold is refused before anything is allocated: a malformed
// frame must not make the reader allocate what it claims (up to 2^64 bytes).
// Elements of an empty class may serialize to nothing, so their count is not
// checked.
inline std::size_t claimed_size(input_archive& ar, std::size_t min_bytes_each, const char* what) {
  cereal::size_type count;
  ar(cereal::make_size_tag(count));
  if (min_bytes_each != 0 && count > ar.remaining() / min_bytes_each)
    throw cereal::Exception(std::string(what) + " claims " + std::to_string(count) +
                            " elements, but only " + std::to_string(ar.remaining()) +
                            " bytes of the payload are left");
  return static_cast<std::size_t>(count);
}
template <class T>
inline constexpr std::size_t min_serialized_size =
    std::is_arithmetic_v<T> ? sizeof(T) : (std::is_empty_v<T> ? 0 : 1);
}  // namespace detail

// The checked loads of strings and vectors, found by argument-dependent lookup
// for input_archive only; more specialized than cereal's own, so chosen over them.
template <class CharT, class Traits, class Alloc>
void CEREAL_LOAD_FUNCTION_NAME(input_archive& ar, std::basic_string<CharT, Traits, Alloc>& str) {
  std::size_t size = detail::claimed_size(ar, sizeof(CharT), "a string");
  str.resize(size);
  ar.loadBinary(str.data(), size * sizeof(CharT));
}

template <class T, class A>
  requires(!std::is_same_v<T, bool>)
void CEREAL_LOAD_FUNCTION_NAME(input_archive& ar, std::vector<T, A>& vector) {
  std::size_t size = detail::claimed_size(ar, detail::min_serialized_size<T>, "a vector");
  vector.resize(size);
  if constexpr (std::is_arithmetic_v<T>) {
    ar.loadBinary(vector.data(), size * sizeof(T));
  } else {
    for (auto&& v : vector) ar(v);
  }
}

template <class A>
void CEREAL_LOAD_FUNCTION_NAME(input_archive& ar, std::vector<bool, A>& vector) {
  vector.resize(detail::claimed_size(ar, 1, "a vector<bool>"));
  for (auto&& v : vector) {
    bool b;
    ar(b);
    v = b;
  }
}

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
    output_archive ar(b);
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

// A received payload with the buffer it sits in, when the reader gave the
// frame a buffer of its own (frame_header::payload_owner): large
// tlaunch::bytes in it are then read as views that keep that buffer.
struct received_payload {
  std::span<const char> bytes;
  const std::shared_ptr<const void>* owner = nullptr;
};

// Throws cereal::Exception on a payload that does not hold the expected values,
// and std::runtime_error when bytes are left over.
template <class... T>
void deserialize_from(received_payload payload, T&... values) {
  if constexpr (detail::all_plain_numbers<T...>) {
    constexpr std::size_t need = (sizeof(T) + ...);
    const std::size_t size = payload.bytes.size();
    if (size < need)
      throw cereal::Exception("Failed to read " + std::to_string(need) +
                              " bytes from input stream! Read " + std::to_string(size));
    if (size > need) throw std::runtime_error("payload has trailing bytes");
    std::size_t at = 0;
    ((std::memcpy(&values, payload.bytes.data() + at, sizeof(T)), at += sizeof(T)), ...);
  } else {
    input_archive ar(payload.bytes, payload.owner);
    if constexpr (sizeof...(T) > 0) ar(values...);
    if (ar.remaining() != 0) throw std::runtime_error("payload has trailing bytes");
  }
}
template <class... T>
void deserialize_from(std::span<const char> payload, T&... values) {
  deserialize_from(received_payload{payload}, values...);
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

CEREAL_REGISTER_ARCHIVE(tlaunch::wire::output_archive)
CEREAL_REGISTER_ARCHIVE(tlaunch::wire::input_archive)
CEREAL_SETUP_ARCHIVE_TRAITS(tlaunch::wire::input_archive, tlaunch::wire::output_archive)
