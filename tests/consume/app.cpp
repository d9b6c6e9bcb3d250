// A program built against tlaunch the way a user builds one: it includes the umbrella header
// and uses each dependency tlaunch brings along, so a missing include path, define or library
// in the package fails to compile or link here. Then it runs a two-node tlaunch program
// through tlaunch::main (local_mt unless the command line says otherwise): with the compiled
// library, tlaunch::main's body (the launch layer) comes from libtlaunch.a, and run.sh checks
// that this file's object does not contain it; header-only, it is compiled here.
#include <sstream>
#include <thread>

#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <cereal/archives/binary.hpp>
#include <fmt/core.h>
#include <libssh/libssh.h>
#include <openssl/crypto.h>

#include <tlaunch/tlaunch.hpp>

struct Counter {
  std::int64_t total = 0;
  asio::awaitable<std::int64_t> add(std::int64_t k) { co_return total += k; }
  using rpc = tlaunch::methods<&Counter::add>;
};

struct Adder {
  tlaunch::handle<Counter> counter;
  asio::awaitable<void> run(tlaunch::context& ctx) {
    ctx.log("call answered {}", co_await counter.call<&Counter::add>(2));
  }
};

constexpr auto program = tlaunch::program(tlaunch::node<"counter", Counter>(),
                                          tlaunch::node<"adder", Adder>(tlaunch::ref<"counter">));

int main(int argc, char** argv) {
  asio::io_context io;
  int posted = 0;
  asio::post(io, [&] { ++posted; });
  std::thread runner([&] { io.run(); });
  runner.join();

  std::ostringstream bytes;
  {
    cereal::BinaryOutputArchive archive(bytes);
    archive(42);
  }

  fmt::print("tlaunch consumer ok: asio {} cereal {} bytes libssh {} libcrypto {:x}\n", posted,
             bytes.str().size(), ssh_version(0), OpenSSL_version_num());
  std::fflush(stdout);
  if (posted != 1 || bytes.str().size() != sizeof(int)) return 1;
  return tlaunch::main(program, argc, argv);
}
