// A program built against tlaunch the way a user builds one: it includes the umbrella header
// and uses each dependency tlaunch brings along, so a missing include path, define or library
// in the package fails to compile or link here.
#include <sstream>
#include <thread>

#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <cereal/archives/binary.hpp>
#include <fmt/core.h>
#include <libssh/libssh.h>
#include <openssl/crypto.h>

#include <tlaunch/tlaunch.hpp>

int main() {
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
  return posted == 1 && bytes.str().size() == sizeof(int) ? 0 : 1;
}
