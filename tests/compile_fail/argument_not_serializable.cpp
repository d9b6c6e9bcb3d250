// Store::put takes a Blob, which has no serialize() function.
// expect-message: an argument type of this exposed method cannot be serialized by cereal
// expect-line: exposed_method_check<&Store::put>
// expect-line: all_serializable_v<std::tuple<Blob> ?>
#include "common.hpp"

struct Blob {
  int x = 0;
};

struct Store {
  void put(Blob) {}
  using rpc = tlaunch::methods<&Store::put>;
};

constexpr auto program = tlaunch::program(tlaunch::node<"store", Store>());

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
