#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <tlaunch/rpc/frame_reader.hpp>
#include <tlaunch/rpc/handshake.hpp>

using tlaunch::rpc::frame_reader;
namespace wire = tlaunch::wire;

namespace {

struct seen_frame {
  wire::kind type;
  std::uint64_t call_id;
  std::string payload;
  bool operator==(const seen_frame&) const = default;
};

void append_frame(std::vector<char>& stream, wire::kind k, std::uint64_t id, std::size_t size) {
  wire::frame_header h{.size = static_cast<std::uint32_t>(size), .type = k, .call_id = id};
  std::size_t at = stream.size();
  stream.resize(at + wire::header_size + size);
  wire::encode_header(h, stream.data() + at);
  for (std::size_t i = 0; i < size; ++i)
    stream[at + wire::header_size + i] = static_cast<char>('a' + (id + i) % 26);
}

seen_frame expected(wire::kind k, std::uint64_t id, std::size_t size) {
  std::vector<char> one;
  append_frame(one, k, id, size);
  return {k, id, std::string(one.begin() + wire::header_size, one.end())};
}

// Feeds bytes as reads would (through prepare and commit) and parses after
// each read the way a connection does; copies every frame seen.
struct reading {
  frame_reader reader;
  std::vector<seen_frame> frames;
  std::uint32_t limit = 1u << 20;
  bool allow_big = false;
  std::string problem;

  void read(const char* p, std::size_t n) {
    while (n > 0) {
      auto room = reader.prepare();
      REQUIRE(room.size() > 0);
      std::size_t k = std::min(n, room.size());
      std::memcpy(room.data(), p, k);
      reader.commit(k);
      p += k;
      n -= k;
      parse();
    }
  }
  void parse() {
    if (reader.in_big_frame()) {
      if (!reader.big_frame_done()) return;
      auto f = reader.take_big_frame();
      auto payload = f.payload();
      frames.push_back({f.header.type, f.header.call_id, std::string(payload.begin(), payload.end())});
    }
    frame_reader::frame f;
    for (;;) {
      auto got = reader.next(limit, f);
      if (got == frame_reader::status::frame) {
        frames.push_back({f.header.type, f.header.call_id,
                          std::string(f.payload.begin(), f.payload.end())});
        continue;
      }
      if (got == frame_reader::status::malformed) problem = reader.problem(limit);
      if (got == frame_reader::status::partial) reader.make_room(allow_big);
      break;
    }
    reader.rewind_if_empty();
  }
};

}  // namespace

TEST_SUITE("frame_reader") {
  TEST_CASE("frames split at every byte boundary arrive whole and in order") {
    std::vector<char> stream;
    std::vector<seen_frame> want;
    std::uint64_t id = 1;
    for (std::size_t size : {0, 1, 7, 31, 32, 33, 300, 2000}) {
      auto k = id % 2 ? wire::kind::call : wire::kind::reply;
      append_frame(stream, k, id, size);
      want.push_back(expected(k, id, size));
      ++id;
    }
    for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
      CAPTURE(cut);
      reading r;
      r.read(stream.data(), cut);
      r.read(stream.data() + cut, stream.size() - cut);
      CHECK(r.frames == want);
      CHECK(r.reader.buffered() == 0);
    }
    reading one_byte_at_a_time;
    for (char c : stream) one_byte_at_a_time.read(&c, 1);
    CHECK(one_byte_at_a_time.frames == want);
  }

  TEST_CASE("a stream longer than the buffer moves and grows it without losing a byte") {
    std::vector<char> stream;
    std::vector<seen_frame> want;
    for (std::uint64_t id = 1; id <= 200; ++id) {
      std::size_t size = (id * 977) % 3000;
      append_frame(stream, wire::kind::call, id, size);
      want.push_back(expected(wire::kind::call, id, size));
    }
    append_frame(stream, wire::kind::call, 201, 200 * 1024);  // larger than the first buffer
    want.push_back(expected(wire::kind::call, 201, 200 * 1024));
    for (std::size_t chunk : {1000, 4096, 65536, 1 << 20}) {
      CAPTURE(chunk);
      reading r;
      for (std::size_t at = 0; at < stream.size(); at += chunk)
        r.read(stream.data() + at, std::min(chunk, stream.size() - at));
      CHECK(r.frames == want);
    }
  }

  TEST_CASE("a big frame gets a page-aligned buffer of its own that outlives the reader") {
    const std::size_t big = wire::external_threshold + 12345;
    std::vector<char> stream;
    append_frame(stream, wire::kind::call, 1, 10);
    append_frame(stream, wire::kind::call, 2, big);
    append_frame(stream, wire::kind::reply, 3, 20);

    auto r = std::make_unique<frame_reader>();
    auto room = r->prepare();
    std::size_t first = wire::header_size * 2 + 10 + 100;  // the small frame, then part of the big one
    std::memcpy(room.data(), stream.data(), first);
    r->commit(first);
    frame_reader::frame f;
    REQUIRE(r->next(1u << 20, f) == frame_reader::status::frame);
    CHECK(f.header.call_id == 1);
    REQUIRE(r->next(1u << 20, f) == frame_reader::status::partial);
    r->make_room(true);
    REQUIRE(r->in_big_frame());
    CHECK_FALSE(r->big_frame_done());
    // The kernel reads the rest of the big frame, and only that, straight into its buffer.
    room = r->prepare();
    CHECK(room.size() == wire::header_size + big - (wire::header_size + 100));
    std::memcpy(room.data(), stream.data() + first, room.size());
    r->commit(room.size());
    REQUIRE(r->big_frame_done());
    auto b = r->take_big_frame();
    CHECK_FALSE(r->in_big_frame());
    CHECK(b.header.call_id == 2);
    CHECK(b.header.size == big);
    CHECK(reinterpret_cast<std::uintptr_t>(b.owner.get()) % frame_reader::page == 0);
    auto want = expected(wire::kind::call, 2, big).payload;
    // The frame after it parses from the ordinary buffer.
    std::size_t rest_at = first + room.size();
    reading after;
    after.read(stream.data() + rest_at, stream.size() - rest_at);
    REQUIRE(after.frames.size() == 1);
    CHECK(after.frames[0].call_id == 3);
    r.reset();  // the payload stays with its owner
    CHECK(std::string(b.payload().begin(), b.payload().end()) == want);
  }

  TEST_CASE("without allow_big a large frame is read into the ordinary buffer") {
    std::vector<char> stream;
    append_frame(stream, wire::kind::call, 1, wire::external_threshold * 3);
    reading r;
    r.read(stream.data(), stream.size());
    CHECK_FALSE(r.reader.in_big_frame());
    REQUIRE(r.frames.size() == 1);
    CHECK(r.frames[0] == expected(wire::kind::call, 1, wire::external_threshold * 3));
  }

  TEST_CASE("an oversized or unknown frame is refused before its payload is awaited") {
    std::vector<char> stream;
    append_frame(stream, wire::kind::call, 1, 5);
    wire::frame_header h{.size = 1001, .type = wire::kind::call};
    char header[wire::header_size];
    SUBCASE("larger than the limit") {
      wire::encode_header(h, header);
      stream.insert(stream.end(), header, header + sizeof header);
      reading r;
      r.limit = 1000;
      r.read(stream.data(), stream.size());
      CHECK(r.frames.size() == 1);  // the frame before it still counts
      CHECK(r.problem == "frame of 1001 bytes exceeds the maximum of 1000");
    }
    SUBCASE("an unknown kind") {
      h.size = 0;
      wire::encode_header(h, header);
      header[4] = 99;
      stream.insert(stream.end(), header, header + sizeof header);
      reading r;
      r.read(stream.data(), stream.size());
      CHECK(r.problem == "unknown frame kind 99");
    }
  }

  TEST_CASE("before authentication the buffer stays small, then grows") {
    // A connection's reader until the peer has proven the secret: frames of at
    // most handshake::max_frame, read into handshake::buffer_size bytes.
    using tlaunch::rpc::handshake;
    std::vector<char> stream;
    for (std::uint64_t id = 1; id <= 40; ++id)
      append_frame(stream, wire::kind::hello, id, (id * 977) % (handshake::max_frame + 1));
    reading r;
    r.limit = handshake::max_frame;
    r.reader.set_min_buffer(handshake::buffer_size);
    const char* p = stream.data();
    std::size_t n = stream.size(), most = 0;
    while (n > 0) {  // reads of odd sizes, each as large as the room allows
      auto room = r.reader.prepare();
      std::size_t k = std::min({n, room.size(), std::size_t{1} + n % 3001});
      std::memcpy(room.data(), p, k);
      r.reader.commit(k);
      most = std::max(most, r.reader.buffered() + (room.size() - k));
      p += k;
      n -= k;
      r.parse();
    }
    CHECK(r.frames.size() == 40);
    CHECK(r.problem.empty());
    CHECK(most <= handshake::buffer_size);  // what the peer's bytes ever had room for
    // Authenticated: reads get the full buffer again.
    r.reader.set_min_buffer(frame_reader::initial_buffer);
    CHECK(r.reader.prepare().size() >= frame_reader::initial_buffer);
  }
}
