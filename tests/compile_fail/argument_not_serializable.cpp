// Store::put takes a Blob, which has no serialize() function; a node calls it too, so both
// the service and the call reach the check, which reports once.
// expect-first-gcc: use of deleted function 'void tlaunch::detail::argument_type_cannot_be_serialized\(\) \[with auto Method = &Store::put; long unsigned int Argument = 2; Type = Blob\]'
// expect-first-clang: static_assert failed due to requirement 'argument_type_is_serializable<&Store::put, 2UL, Blob>' "tlaunch: an argument type of this exposed method cannot be serialized by cereal
// g++ shows the advice in its note, on the deleted function's line.
// expect-line-gcc: = delete; +// tlaunch: give it a serialize\(\) function
// expect-only-error
#include "common.hpp"

struct Blob {
  int x = 0;
};

struct Store {
  void put(int, Blob) {}
  using rpc = tlaunch::methods<&Store::put>;
};

struct Writer {
  tlaunch::handle<Store> store;
  asio::awaitable<void> run(tlaunch::context&) { co_await store.call<&Store::put>(1, Blob{}); }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"store", Store>(),
    tlaunch::node<"writer", Writer>(tlaunch::ref<"store">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
