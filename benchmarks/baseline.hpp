// The baseline: a plain standalone-Asio TCP echo that puts the same bytes on the wire
// as a tlaunch call. A message is a 32-byte header (payload length, little-endian, in
// the first four bytes; a call id at byte 16, as in a tlaunch frame) followed by the
// payload; the server sends every message back unchanged.
//
// Everything here is C++20 coroutines on whatever executor the caller gives, so the
// server can run inside any process (a tlaunch node included) and the client on the
// same io_context as the tlaunch calls it is compared with.
#pragma once

#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/connect.hpp>
#include <asio/detached.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "stats.hpp"

namespace tlaunch::bench {

inline constexpr std::size_t echo_header_bytes = 32;
inline constexpr std::size_t page_bytes = 4096;

// ----- buffers ------------------------------------------------------------------

// Page-aligned bytes: the kernel copies into an aligned destination about three times
// faster than into one 16 bytes past a page boundary on this CPU.
class aligned_bytes {
 public:
  aligned_bytes() = default;
  explicit aligned_bytes(std::size_t n) { resize(n); }
  void resize(std::size_t n) {
    std::size_t rounded = (n + page_bytes - 1) / page_bytes * page_bytes;
    if (rounded == 0) rounded = page_bytes;
    char* p = static_cast<char*>(std::aligned_alloc(page_bytes, rounded));
    if (!p) throw std::bad_alloc();
    if (data_ && size_) std::memcpy(p, data_.get(), std::min(size_, rounded));
    data_.reset(p);
    size_ = rounded;
  }
  char* data() { return data_.get(); }
  const char* data() const { return data_.get(); }
  std::size_t size() const { return size_; }

 private:
  struct free_deleter {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, free_deleter> data_;
  std::size_t size_ = 0;
};

inline void put_le32(char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
inline void put_le64(char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
inline std::uint32_t get_le32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
inline std::uint64_t get_le64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

inline std::array<char, echo_header_bytes> echo_header(std::uint32_t payload, std::uint64_t id) {
  std::array<char, echo_header_bytes> h{};
  put_le32(h.data(), payload);
  h[4] = 4;  // same kind byte as a tlaunch call frame, so a capture looks alike
  put_le64(h.data() + 16, id);
  return h;
}

// A complete message inside a frame_reader's buffer; valid until the next read_more().
struct echo_frame {
  std::uint64_t id = 0;
  std::span<const char> bytes;    // header and payload
  std::span<const char> payload;
};

// Reads messages: takes whatever has arrived in one read, then hands out every complete
// message before going back to the kernel. The header of a message that starts the
// buffer sits just before a page boundary, so a large payload lands page-aligned.
class frame_reader {
 public:
  explicit frame_reader(std::size_t capacity = 64 * 1024) { buf_.resize(pad + capacity); }

  std::optional<echo_frame> next() {
    std::size_t avail = tail_ - head_;
    if (avail < echo_header_bytes) return std::nullopt;
    const char* p = data() + head_;
    std::size_t total = echo_header_bytes + get_le32(p);
    if (avail < total) {
      want_ = total;
      return std::nullopt;
    }
    echo_frame f{get_le64(p + 16), {p, total}, {p + echo_header_bytes, total - echo_header_bytes}};
    head_ += total;
    return f;
  }

  // Moves a partial message to the front and reads what the socket has; returns bytes read.
  asio::awaitable<std::size_t> read_more(asio::ip::tcp::socket& s) {
    if (head_ > 0) {
      std::memmove(data(), data() + head_, tail_ - head_);
      tail_ -= head_;
      head_ = 0;
    }
    if (pad + want_ > buf_.size()) buf_.resize(pad + want_);
    std::size_t n = co_await s.async_read_some(
        asio::buffer(data() + tail_, buf_.size() - pad - tail_), asio::use_awaitable);
    tail_ += n;
    co_return n;
  }

  // Reads until a complete message is buffered and returns it.
  asio::awaitable<echo_frame> read_frame(asio::ip::tcp::socket& s) {
    for (;;) {
      if (auto f = next()) co_return *f;
      co_await read_more(s);
    }
  }

 private:
  static constexpr std::size_t pad = page_bytes - echo_header_bytes;
  char* data() { return buf_.data() + pad; }
  aligned_bytes buf_;
  std::size_t head_ = 0, tail_ = 0, want_ = 0;
};

// ----- writing --------------------------------------------------------------------

// How large messages are written. asio::async_write hands the kernel at most 64 KiB
// per write_some (transfer_all's default), an async_write_some loop hands it all.
enum class write_mode { write_some_loop, async_write };

inline const char* to_string(write_mode m) {
  return m == write_mode::async_write ? "async_write" : "async_write_some loop";
}

// Writes first then second (either may be empty).
inline asio::awaitable<void> write_all(asio::ip::tcp::socket& s, asio::const_buffer first,
                                       asio::const_buffer second, write_mode mode) {
  std::array<asio::const_buffer, 2> bufs{first, second};
  if (mode == write_mode::async_write) {
    co_await asio::async_write(s, bufs, asio::use_awaitable);
    co_return;
  }
  std::size_t i = 0;
  while (i < bufs.size()) {
    if (bufs[i].size() == 0) {
      ++i;
      continue;
    }
    std::size_t n = co_await s.async_write_some(
        std::span<const asio::const_buffer>(bufs.data() + i, bufs.size() - i), asio::use_awaitable);
    for (; n > 0 && i < bufs.size(); ++i) {
      std::size_t take = std::min(n, bufs[i].size());
      bufs[i] += take;
      n -= take;
      if (bufs[i].size() != 0) break;
    }
  }
}

// ----- server ---------------------------------------------------------------------

// The echo server. Per connection: read what has arrived, send every complete message
// back in one write (straight from the receive buffer, no copy), repeat.
class echo_server {
 public:
  explicit echo_server(asio::any_io_executor ex, write_mode mode = write_mode::write_some_loop)
      : state_(std::make_shared<state>(ex, mode)) {}
  echo_server(const echo_server&) = delete;
  echo_server& operator=(const echo_server&) = delete;
  ~echo_server() { stop(); }

  // Binds host:port (port 0: any free port), starts accepting, returns the bound port.
  std::uint16_t start(const std::string& host, std::uint16_t port = 0) {
    using asio::ip::tcp;
    tcp::endpoint ep(asio::ip::make_address(host), port);
    state_->acceptor.open(ep.protocol());
    state_->acceptor.set_option(tcp::acceptor::reuse_address(true));
    state_->acceptor.bind(ep);
    state_->acceptor.listen();
    asio::co_spawn(state_->acceptor.get_executor(), accept_loop(state_), asio::detached);
    return state_->acceptor.local_endpoint().port();
  }

  asio::ip::tcp::endpoint endpoint() const { return state_->acceptor.local_endpoint(); }
  std::size_t connections() const { return state_->accepted.load(); }

  // Stops accepting; open connections end when their peer closes.
  void stop() {
    std::error_code ec;
    if (state_) state_->acceptor.close(ec);
  }

 private:
  struct state {
    state(asio::any_io_executor ex, write_mode m) : acceptor(ex), mode(m) {}
    asio::ip::tcp::acceptor acceptor;
    write_mode mode;
    std::atomic<std::size_t> accepted{0};
  };

  static asio::awaitable<void> accept_loop(std::shared_ptr<state> st) {
    for (;;) {
      std::error_code ec;
      auto sock = co_await st->acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;  // closed
      ++st->accepted;
      asio::co_spawn(st->acceptor.get_executor(), session(std::move(sock), st->mode), asio::detached);
    }
  }

  static asio::awaitable<void> session(asio::ip::tcp::socket s, write_mode mode) {
    s.set_option(asio::ip::tcp::no_delay(true));
    frame_reader reader;
    try {
      for (;;) {
        co_await reader.read_more(s);
        const char* begin = nullptr;
        std::size_t bytes = 0;
        while (auto f = reader.next()) {
          if (!begin) begin = f->bytes.data();
          bytes += f->bytes.size();
        }
        if (bytes) co_await write_all(s, asio::buffer(begin, bytes), {}, mode);
      }
    } catch (const std::system_error&) {
      // The peer closed: the session ends.
    }
  }

  std::shared_ptr<state> state_;
};

// ----- client -----------------------------------------------------------------------

inline asio::awaitable<asio::ip::tcp::socket> connect_echo(const std::string& host, std::uint16_t port) {
  using asio::ip::tcp;
  auto ex = co_await asio::this_coro::executor;
  tcp::resolver resolver(ex);
  auto results = co_await resolver.async_resolve(host, std::to_string(port), asio::use_awaitable);
  tcp::socket s(ex);
  co_await asio::async_connect(s, results, asio::use_awaitable);
  s.set_option(tcp::no_delay(true));
  co_return s;
}

// One call at a time: warmup calls, then count timed ones added to rec; returns the
// timed calls' wall time in seconds. payload_bytes is the size of the message body
// (what tlaunch would put after its frame header).
inline asio::awaitable<double> echo_sequential_run(asio::ip::tcp::socket& s,
                                                   std::size_t payload_bytes, std::size_t warmup,
                                                   std::size_t count, latency_recorder& rec,
                                                   write_mode mode = write_mode::write_some_loop) {
  aligned_bytes body(payload_bytes);
  std::memset(body.data(), 'x', body.size());
  frame_reader reader(payload_bytes + echo_header_bytes);
  rec.reserve_more(count);
  bench_clock::time_point start{};
  for (std::size_t i = 0; i < warmup + count; ++i) {
    if (i == warmup) start = bench_clock::now();
    auto header = echo_header(static_cast<std::uint32_t>(payload_bytes), i);
    auto t0 = bench_clock::now();
    co_await write_all(s, asio::buffer(header), asio::buffer(body.data(), payload_bytes), mode);
    auto f = co_await reader.read_frame(s);
    if (f.id != i || f.payload.size() != payload_bytes)
      throw std::runtime_error("echo baseline: reply does not match the request");
    if (i >= warmup) rec.add(elapsed_ns(t0));
  }
  co_return double(elapsed_ns(start)) / 1e9;
}

// The same, summarized: rec's samples, this run's wall time and bytes.
inline asio::awaitable<summary> echo_sequential(asio::ip::tcp::socket& s, std::size_t payload_bytes,
                                                std::size_t warmup, std::size_t count,
                                                latency_recorder& rec,
                                                write_mode mode = write_mode::write_some_loop) {
  double wall = co_await echo_sequential_run(s, payload_bytes, warmup, count, rec, mode);
  co_return rec.summarize(wall, 2 * count * payload_bytes);
}

// inflight calls on one connection: starts that many in one write, then for every batch
// of replies read at once sends as many new calls in one write. Latency is per call,
// from its send to its reply.
inline asio::awaitable<summary> echo_pipelined(asio::ip::tcp::socket& s, std::size_t payload_bytes,
                                               std::size_t inflight, std::size_t count,
                                               latency_recorder& rec) {
  if (inflight == 0) inflight = 1;
  std::vector<char> body(payload_bytes, 'x');
  frame_reader reader;
  std::vector<bench_clock::time_point> sent(count);
  std::vector<char> batch;
  std::size_t next_id = 0, done = 0;
  rec.reserve_more(count);
  auto send_upto = [&](std::size_t n) -> asio::awaitable<void> {
    batch.clear();
    auto now = bench_clock::now();
    for (; n > 0 && next_id < count; --n, ++next_id) {
      auto h = echo_header(static_cast<std::uint32_t>(payload_bytes), next_id);
      batch.insert(batch.end(), h.begin(), h.end());
      batch.insert(batch.end(), body.begin(), body.end());
      sent[next_id] = now;
    }
    if (!batch.empty()) co_await write_all(s, asio::buffer(batch), {}, write_mode::write_some_loop);
  };
  auto start = bench_clock::now();
  co_await send_upto(inflight);
  while (done < count) {
    co_await reader.read_more(s);
    std::size_t got = 0;
    auto now = bench_clock::now();
    while (auto f = reader.next()) {
      if (f->id >= count) throw std::runtime_error("echo baseline: reply with an unknown id");
      rec.add(static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now - sent[f->id]).count()));
      ++got;
    }
    done += got;
    co_await send_upto(got);
  }
  double wall = double(elapsed_ns(start)) / 1e9;
  co_return rec.summarize(wall, 2 * count * payload_bytes);
}

}  // namespace tlaunch::bench
