// Store::fetch returns a Blob, which has no serialize() function; a node calls it too.
// expect-first-gcc: use of deleted function 'void tlaunch::detail::result_type_cannot_be_serialized\(\) \[with auto Method = &Store::fetch; Type = Blob\]'
// expect-first-clang: static_assert failed due to requirement 'result_type_is_serializable<&Store::fetch, Blob>' "tlaunch: the result type of this exposed method cannot be serialized by cereal
// expect-only-error
#include "common.hpp"

struct Blob {
  int x = 0;
};

struct Store {
  asio::awaitable<Blob> fetch(int) { co_return Blob{}; }
  using rpc = tlaunch::methods<&Store::fetch>;
};

struct Reader {
  tlaunch::handle<Store> store;
  asio::awaitable<void> run(tlaunch::context&) { (void)co_await store.call<&Store::fetch>(1); }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"store", Store>(),
    tlaunch::node<"reader", Reader>(tlaunch::ref<"store">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
