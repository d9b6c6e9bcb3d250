// The sending side of a connection without the socket. A frame_queue collects
// frames from any thread (under the connection's lock); the frame_writer, used
// by one writer at a time, takes them as a batch and turns it into the gather
// buffers of the next write, however much of it the socket took last time.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include <asio/buffer.hpp>

#include "../wire/codec.hpp"
#include "../wire/frame.hpp"

namespace tlaunch::rpc {

class frame_queue {
 public:
  static constexpr std::size_t small_frame = 2048, merged_limit = 8 * 1024;

  // Queues a frame. A small frame after another small one is appended to that
  // one's bytes: a burst of calls or replies then reaches the writer as one
  // piece, not one object per frame, and its buffer is reused at once.
  void push(wire::frame_buffer&& f) {
    auto bytes = f.bytes();
    if (!f.has_externals() && bytes.size() <= small_frame && append_to_tail(bytes)) {
      pushed_ += bytes.size();
      wire::recycle(f.release());
      return;
    }
    frames_.push_back(f.release());
    pushed_ += frames_.back().size();
  }
  // Queues a copy of whole frames' bytes (a frame built on the stack).
  void push_bytes(std::span<const char> bytes) {
    pushed_ += bytes.size();
    if (append_to_tail(bytes)) return;
    wire::outgoing_frame f{wire::detail::take_spare_buffer(), {}};
    f.inline_bytes.resize(bytes.size());
    std::memcpy(f.inline_bytes.data(), bytes.data(), bytes.size());
    frames_.push_back(std::move(f));
  }
  // Queues a frame as it is, never merged (handshake frames).
  void push_whole(wire::frame_buffer&& f) {
    frames_.push_back(f.release());
    pushed_ += frames_.back().size();
  }

  bool empty() const { return frames_.empty(); }
  void clear() { frames_.clear(); }
  std::vector<wire::outgoing_frame>& frames() { return frames_; }
  // Bytes of every frame ever pushed (the connection compares it with what was written).
  std::uint64_t pushed() const { return pushed_; }

 private:
  // Appends a small frame's bytes to the last queued frame when it has room.
  bool append_to_tail(std::span<const char> bytes) {
    if (frames_.empty()) return false;
    auto& tail = frames_.back();
    if (!tail.externals.empty() || tail.inline_bytes.size() + bytes.size() > merged_limit)
      return false;
    std::size_t used = tail.inline_bytes.size();
    tail.inline_bytes.resize(used + bytes.size());
    std::memcpy(tail.inline_bytes.data() + used, bytes.data(), bytes.size());
    return true;
  }

  std::vector<wire::outgoing_frame> frames_;
  std::uint64_t pushed_ = 0;
};

class frame_writer {
 public:
  static constexpr std::size_t max_pieces = 64, small_piece = 2048;
  static constexpr std::size_t coalesce_capacity = 64 * 1024;

  // Whether the batch has all been written (or there is none).
  bool done() const { return index_ >= batch_.size(); }

  // Moves a queue's frames to the end of the batch.
  void take(frame_queue& q) {
    for (auto& f : q.frames()) batch_.push_back(std::move(f));
    q.clear();
  }
  // Starts the next batch: the written frames' buffers are reused on this thread.
  void recycle_written() {
    for (auto& f : batch_) wire::recycle(std::move(f));
    clear();
  }
  void clear() {
    batch_.clear();
    index_ = offset_ = 0;
  }

  // The next write's buffers, from where the last write ended. Small pieces
  // (most frames) are copied side by side into one buffer: the kernel copies
  // one long piece much faster than many short ones. Large pieces (external
  // payloads) are written from where they are. Valid until the next call.
  const std::vector<asio::const_buffer>& gather() {
    if (coalesce_.capacity() < coalesce_capacity) coalesce_.reserve(coalesce_capacity);
    gather_.clear();
    coalesce_.clear();
    const char* run = nullptr;  // start of the coalesced piece that gather_.back() is
    for (std::size_t i = index_; i < batch_.size() && gather_.size() < max_pieces; ++i) {
      bool full = false;
      batch_[i].for_each_piece(i == index_ ? offset_ : 0, [&](const char* p, std::size_t n) {
        if (n == 0) return true;
        if (n <= small_piece && coalesce_.size() + n <= coalesce_.capacity()) {
          std::size_t used = coalesce_.size();
          coalesce_.resize(used + n);  // within capacity: no move
          char* at = coalesce_.data() + used;
          std::memcpy(at, p, n);
          if (run && !gather_.empty() && static_cast<const char*>(gather_.back().data()) == run)
            gather_.back() = asio::const_buffer(run, gather_.back().size() + n);
          else {
            run = at;
            gather_.emplace_back(at, n);
          }
          return gather_.size() < max_pieces;
        }
        if (n <= small_piece) {  // no room left: next write
          full = true;
          return false;
        }
        run = nullptr;
        gather_.emplace_back(p, n);
        return gather_.size() < max_pieces;
      });
      if (full) break;
    }
    return gather_;
  }

  // Bytes the socket has taken so far; readable from any thread (a lower bound).
  std::uint64_t written() const { return written_.load(std::memory_order_relaxed); }

  // The socket took n bytes of the last gather().
  void advance(std::size_t n) {
    written_.store(written_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    while (n > 0 && index_ < batch_.size()) {
      std::size_t left = batch_[index_].size() - offset_;
      if (n >= left) {
        n -= left;
        ++index_;
        offset_ = 0;
      } else {
        offset_ += n;
        n = 0;
      }
    }
  }

 private:
  std::vector<wire::outgoing_frame> batch_;
  std::size_t index_ = 0, offset_ = 0;
  std::vector<asio::const_buffer> gather_;
  wire::byte_vector coalesce_;  // small pieces of the write in flight, side by side
  std::atomic<std::uint64_t> written_{0};  // only the writer changes it
};

}  // namespace tlaunch::rpc
