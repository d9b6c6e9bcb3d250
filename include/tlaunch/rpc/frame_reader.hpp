// The receiving side of a connection without the socket: a buffer that reads
// land in (prepare, commit), cut into frames (next). Frames are parsed where
// they arrived, so a payload is a view into the buffer, valid until the buffer
// is next prepared or made room in. A large frame gets a page-aligned buffer of
// its own that the kernel reads into directly and that payload views
// (tlaunch::bytes) may keep after the frame.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>

#include <asio/buffer.hpp>

#include "../detail/buffer_pool.hpp"
#include "../wire/codec.hpp"
#include "../wire/frame.hpp"

namespace tlaunch::rpc {

class frame_reader {
 public:
  static constexpr std::size_t page = 4096;
  static constexpr std::size_t initial_buffer = 64 * 1024;

  struct frame {
    wire::frame_header header;
    std::span<const char> payload;
  };
  enum class status {
    frame,      // `out` is the next frame
    need_more,  // no whole header yet: read on
    partial,    // a frame began and is not all here: make_room(), then read on
    malformed,  // the header is refused: problem()
  };

  frame_reader() = default;
  frame_reader(const frame_reader&) = delete;
  frame_reader& operator=(const frame_reader&) = delete;
  ~frame_reader() { std::free(buf_); }

  // The buffer reads start with, and grow to once full (initial_buffer unless
  // set): a connection keeps it small until its peer has authenticated.
  void set_min_buffer(std::size_t n) { min_buffer_ = n; }

  // Where the next read goes; never empty.
  asio::mutable_buffer prepare() {
    if (big_) return asio::buffer(big_.get() + big_fill_, big_total_ - big_fill_);
    if (end_ == cap_ || cap_ < min_buffer_)
      reserve(std::max<std::size_t>(end_ - begin_ + page, min_buffer_));
    return asio::buffer(buf_ + end_, cap_ - end_);
  }
  // n bytes arrived where prepare() pointed.
  void commit(std::size_t n) {
    if (big_)
      big_fill_ += n;
    else
      end_ += n;
  }

  // The next whole frame in the buffer. A header must pass wire::header_ok
  // with `limit` as the largest payload.
  status next(std::uint32_t limit, frame& out) {
    if (end_ - begin_ < wire::header_size) return status::need_more;
    const wire::frame_header header = wire::load_header(buf_ + begin_);
    if (!wire::header_ok(header, limit)) [[unlikely]] {
      refused_ = header;
      return status::malformed;
    }
    const std::size_t total = wire::header_size + header.size;
    if (end_ - begin_ < total) {
      partial_ = header.size;
      return status::partial;
    }
    out = {header, {buf_ + begin_ + wire::header_size, header.size}};
    begin_ += total;
    return status::frame;
  }
  // Why next() said malformed.
  std::string problem(std::uint32_t limit) const { return wire::header_problem(refused_, limit); }

  // After next() said partial: room for all of that frame. Payloads seen so far
  // may move. With allow_big, a payload of wire::external_threshold bytes or
  // more goes to a buffer of its own (big_frame_done() tells when it is whole).
  void make_room(bool allow_big) {
    const std::size_t total = wire::header_size + partial_;
    if (allow_big && partial_ >= wire::external_threshold)
      start_big_frame(total);
    else
      reserve(total);
  }

  // After next() said partial: the bytes of that frame, header included.
  std::size_t partial_frame_size() const { return wire::header_size + partial_; }

  // Whether reads go to a large frame's own buffer, and whether it is whole.
  bool in_big_frame() const { return big_ != nullptr; }
  bool big_frame_done() const { return big_ && big_fill_ == big_total_; }
  // The whole large frame; its payload lives as long as `owner`.
  struct big_frame {
    wire::frame_header header;
    std::shared_ptr<const void> owner;
    std::span<const char> payload() const {
      return {static_cast<const char*>(owner.get()) + wire::header_size, header.size};
    }
  };
  big_frame take_big_frame() {
    big_frame f{wire::load_header(big_.get()), std::move(big_)};  // checked when it began
    big_.reset();
    big_total_ = big_fill_ = 0;
    return f;
  }

  // The frames of a read are handled: an empty buffer starts over at its front.
  void rewind_if_empty() {
    if (begin_ == end_) begin_ = end_ = 0;
  }
  // The bytes received and not yet parsed, outside a large frame.
  std::span<const char> unparsed() const { return {buf_ + begin_, end_ - begin_}; }
  // Bytes received and not yet parsed (tests).
  std::size_t buffered() const { return big_ ? big_fill_ : end_ - begin_; }

 private:
  // Makes room for `need` contiguous bytes from begin_, page-aligned allocation.
  void reserve(std::size_t need) {
    if (cap_ - begin_ >= need) return;
    std::size_t have = end_ - begin_;
    if (cap_ >= need && begin_ > 0) {
      std::memmove(buf_, buf_ + begin_, have);
    } else {
      std::size_t ncap = std::max(need, cap_ * 2);
      ncap = (ncap + page - 1) / page * page;
      char* nb = static_cast<char*>(std::aligned_alloc(page, ncap));
      if (!nb) throw std::bad_alloc();
      if (have) std::memcpy(nb, buf_ + begin_, have);
      std::free(buf_);
      buf_ = nb;
      cap_ = ncap;
    }
    begin_ = 0;
    end_ = have;
  }

  void start_big_frame(std::size_t total) {
    big_ = tlaunch::detail::buffer_pool::instance().get(total);
    big_total_ = total;
    big_fill_ = end_ - begin_;
    std::memcpy(big_.get(), buf_ + begin_, big_fill_);
    begin_ = end_ = 0;
  }

  char* buf_ = nullptr;
  std::size_t cap_ = 0, begin_ = 0, end_ = 0;
  std::size_t min_buffer_ = initial_buffer;
  std::shared_ptr<char> big_;  // the large frame being read, if any
  std::size_t big_total_ = 0, big_fill_ = 0;
  std::uint32_t partial_ = 0;  // payload size of the frame next() found incomplete
  wire::frame_header refused_{};
};

}  // namespace tlaunch::rpc
