// Store::fetch returns a Blob, which has no serialize() function.
// expect-message: the result type of this exposed method cannot be serialized by cereal
// expect-line: exposed_method_check<&Store::fetch>
// expect-line: is_serializable_v<Blob>
#include "common.hpp"

struct Blob {
  int x = 0;
};

struct Store {
  asio::awaitable<Blob> fetch(int) { co_return Blob{}; }
  using rpc = tlaunch::methods<&Store::fetch>;
};

constexpr auto program = tlaunch::program(tlaunch::node<"store", Store>());

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
