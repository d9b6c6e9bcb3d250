// What a node parses from a peer's bytes: the stream cut into reads of the
// sizes the input picks, into frames (frame_reader, with the limits a
// connection applies), and each frame before authentication into the hello
// exchange of an acceptor (handshake, wire::decode_hello); after it, the
// frames a connection decodes itself (refusal reasons, error replies).
//
// Input: byte 0 picks the mode (even: a stranger, before authentication; odd:
// an authenticated peer), byte 1 seeds the read sizes; the rest is the stream.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include <tlaunch/rpc/frame_reader.hpp>
#include <tlaunch/rpc/handshake.hpp>
#include <tlaunch/wire/codec.hpp>
#include <tlaunch/wire/frame.hpp>
#include <tlaunch/wire/hello.hpp>

namespace {

using namespace tlaunch;

const rpc::hello_identity& identity() {
  static const rpc::hello_identity id{
      .secret = std::vector<std::uint8_t>(32, 1),
      .build_id = "fuzz",  // the seed corpus's hellos carry it
      .listen_address = "127.0.0.1:1",
      .name = "fuzz/0"};
  return id;
}

// Largest frame once authenticated: small, so the fuzzer reaches the end of one.
constexpr std::uint32_t max_frame = 1u << 17;

void check_frame(rpc::handshake& hs, bool authenticated, const wire::frame_header& h,
                 std::span<const char> payload, bool& stop) {
  if (!authenticated && !hs.ready()) {
    auto step = hs.on_frame(h, payload);
    if (step.what == rpc::handshake::outcome::refuse ||
        step.what == rpc::handshake::outcome::peer_refused) {
      if (step.reason.empty()) __builtin_trap();  // a refusal always says why
      stop = true;
    }
    return;
  }
  switch (h.type) {
    case wire::kind::refuse:
      (void)rpc::handshake::refusal_reason(payload);
      stop = true;
      break;
    case wire::kind::error_reply:
      (void)wire::decode_error(payload);
      break;
    default:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const bool authenticated = data[0] & 1;
  std::uint32_t rng = data[1] * 2654435761u + 1;
  std::span<const char> in(reinterpret_cast<const char*>(data) + 2, size - 2);

  // The hello decoder on its own, on the whole input.
  std::string problem;
  if (auto hello = wire::decode_hello(in, problem); !hello && problem.empty()) __builtin_trap();

  rpc::handshake hs(rpc::handshake::side::acceptor, identity(), rpc::handshake::nonce{});
  rpc::frame_reader reader;
  if (!authenticated) reader.set_min_buffer(rpc::handshake::buffer_size);
  bool stop = false;
  while (!in.empty() && !stop) {
    auto room = reader.prepare();
    if (room.size() == 0) __builtin_trap();
    rng = rng * 1103515245u + 12345u;
    std::size_t n = std::min({in.size(), room.size(), std::size_t{1} + (rng >> 16) % 300});
    std::memcpy(room.data(), in.data(), n);
    reader.commit(n);
    in = in.subspan(n);
    if (!authenticated && reader.buffered() > rpc::handshake::buffer_size) __builtin_trap();
    if (reader.in_big_frame()) {
      if (!reader.big_frame_done()) continue;
      auto f = reader.take_big_frame();
      check_frame(hs, authenticated, f.header, f.payload(), stop);
      continue;
    }
    for (;;) {
      const bool ready = authenticated || hs.ready();
      const std::uint32_t limit = ready ? max_frame : rpc::handshake::max_frame;
      rpc::frame_reader::frame f;
      auto got = reader.next(limit, f);
      if (got == rpc::frame_reader::status::frame) {
        if (f.payload.size() != f.header.size || f.header.size > limit) __builtin_trap();
        check_frame(hs, authenticated, f.header, f.payload, stop);
        if (stop) break;
        continue;
      }
      if (got == rpc::frame_reader::status::malformed) {
        if (reader.problem(limit).empty()) __builtin_trap();  // a refused header says why
        stop = true;
      } else if (got == rpc::frame_reader::status::partial) {
        reader.make_room(ready);
      }
      break;
    }
    reader.rewind_if_empty();
  }
  return 0;
}
