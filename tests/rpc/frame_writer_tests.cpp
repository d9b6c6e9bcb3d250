#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <tlaunch/rpc/frame_writer.hpp>

using tlaunch::rpc::frame_queue;
using tlaunch::rpc::frame_writer;
namespace wire = tlaunch::wire;

namespace {

std::string pattern(std::size_t n, char first) {
  std::string s(n, ' ');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(first + i % 23);
  return s;
}

// A frame of inline bytes with an external piece of `external` in the middle.
wire::frame_buffer frame_with_external(const std::shared_ptr<const std::string>& external,
                                       std::uint64_t id) {
  wire::frame_buffer f;
  auto before = pattern(10, 'a');
  f.append(before.data(), before.size());
  f.append_external(external, external->data(), external->size());
  auto after = pattern(5, 'k');
  f.append(after.data(), after.size());
  f.seal({.type = wire::kind::call, .call_id = id});
  return f;
}

// The bytes one frame puts on the wire.
std::string wire_bytes(const wire::outgoing_frame& f) {
  std::string s;
  f.for_each_piece(0, [&](const char* p, std::size_t n) {
    s.append(p, n);
    return true;
  });
  return s;
}

// Writes the writer's batch as a socket that takes at most `per_write` bytes a call.
std::string drain(frame_writer& w, std::size_t per_write, std::size_t* writes = nullptr) {
  std::string out;
  while (!w.done()) {
    const auto& gather = w.gather();
    REQUIRE_FALSE(gather.empty());
    std::size_t room = per_write;
    for (const auto& b : gather) {
      std::size_t k = std::min(room, b.size());
      out.append(static_cast<const char*>(b.data()), k);
      room -= k;
      if (room == 0) break;
    }
    w.advance(per_write - room);
    if (writes) ++*writes;
  }
  return out;
}

}  // namespace

TEST_SUITE("frame_writer") {
  TEST_CASE("small frames queued one after another merge into one piece") {
    frame_queue q;
    char frame[wire::header_size + 8] = {};
    for (int i = 0; i < 10; ++i) q.push_bytes(frame);
    wire::frame_buffer f;
    f.append("xy", 2);
    f.seal({.type = wire::kind::reply});
    q.push(std::move(f));
    REQUIRE(q.frames().size() == 1);
    CHECK(q.frames()[0].inline_bytes.size() == 10 * sizeof frame + wire::header_size + 2);
    q.push_whole(wire::frame_buffer());  // a handshake frame stays on its own
    CHECK(q.frames().size() == 2);
  }

  TEST_CASE("external pieces are written from where they are, small ones side by side") {
    auto external = std::make_shared<const std::string>(pattern(100000, 'A'));
    frame_queue q;
    std::string want;
    char small[wire::header_size + 4] = {1, 2, 3};
    q.push_bytes(small);
    q.push(frame_with_external(external, 1));
    q.push_bytes(small);  // not merged into a frame with an external piece
    q.push(frame_with_external(external, 2));
    REQUIRE(q.frames().size() == 4);
    for (const auto& f : q.frames()) want += wire_bytes(f);

    frame_writer w;
    w.take(q);
    CHECK(q.empty());
    const auto& gather = w.gather();
    // small frame + header and head of frame 1 | external | tail of 1, small, head of 2 | external | tail of 2
    REQUIRE(gather.size() == 5);
    CHECK(gather[1].data() == external->data());
    CHECK(gather[1].size() == external->size());
    CHECK(gather[3].data() == external->data());
    CHECK(gather[0].size() == sizeof small + wire::header_size + 10);
    CHECK(gather[2].size() == 5 + sizeof small + wire::header_size + 10);
    CHECK(gather[4].size() == 5);
    std::string all;
    for (const auto& b : gather) all.append(static_cast<const char*>(b.data()), b.size());
    CHECK(all == want);
  }

  TEST_CASE("partial writes resume at the byte where the socket stopped") {
    auto external = std::make_shared<const std::string>(pattern(70000, 'A'));
    for (std::size_t per_write : {1, 7, 4096, 65536, 100000, 1 << 24}) {
      CAPTURE(per_write);
      frame_queue q;
      std::string want;
      for (std::uint64_t id = 1; id <= 3; ++id) {
        q.push(frame_with_external(external, id));
        std::string bytes = pattern(100 + id, 'z');
        wire::frame_buffer f;
        f.append(bytes.data(), bytes.size());
        f.seal({.type = wire::kind::reply, .call_id = id});
        q.push(std::move(f));
      }
      for (const auto& f : q.frames()) want += wire_bytes(f);
      frame_writer w;
      w.take(q);
      if (per_write > 4096) {
        std::size_t writes = 0;
        CHECK(drain(w, per_write, &writes) == want);
        if (per_write >= want.size()) CHECK(writes == 1);
      } else if (per_write == 4096) {
        CHECK(drain(w, per_write) == want);
      } else {
        // Byte-sized writes over the first frames only: long enough to cross every piece.
        std::string got;
        std::size_t limit = 200;
        while (!w.done() && got.size() < limit) {
          const auto& g = w.gather();
          std::size_t k = std::min<std::size_t>(per_write, g[0].size());
          got.append(static_cast<const char*>(g[0].data()), k);
          w.advance(k);
        }
        got += drain(w, 1 << 24);
        CHECK(got == want);
      }
      w.recycle_written();
      CHECK(w.done());
    }
  }

  TEST_CASE("one write carries at most max_pieces buffers; the next takes the rest") {
    auto external = std::make_shared<const std::string>(pattern(5000, 'A'));
    frame_queue q;
    std::string want;
    for (std::uint64_t id = 1; id <= 100; ++id) {
      wire::frame_buffer f;
      f.append_external(external, external->data(), external->size());
      f.seal({.type = wire::kind::call, .call_id = id});
      q.push(std::move(f));
    }
    for (const auto& f : q.frames()) want += wire_bytes(f);
    frame_writer w;
    w.take(q);
    CHECK(w.gather().size() == frame_writer::max_pieces);
    std::size_t writes = 0;
    CHECK(drain(w, 1 << 30, &writes) == want);
    CHECK(writes == 4);  // 100 headers and 100 externals, 64 buffers a write
  }
}
