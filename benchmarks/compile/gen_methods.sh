#!/usr/bin/env bash
# Prints a C++ program whose service has N remote methods, each called once:
#   gen_methods.sh N tlaunch   a tlaunch program (a handle calls every method)
#   gen_methods.sh N plain     the same service and calls on plain Asio coroutines, with cereal
#                              serialising every argument and result once (the floor any RPC
#                              instantiates)
# The methods cycle through four ordinary shapes: an integer method, a coroutine taking a
# string, a method taking std::vector<double>, a coroutine taking a struct and an integer.
set -euo pipefail
n=${1:?usage: gen_methods.sh N tlaunch|plain}
kind=${2:?usage: gen_methods.sh N tlaunch|plain}

# (Arguments are named variables: g++ 12 mishandles a braced temporary in a co_await's
# arguments.)
shape() {  # shape <i>: the declaration of method i, and its call's arguments
  local i=$1
  case $((i % 4)) in
    0) decl="std::int64_t m$i(std::int64_t k) { return k + $i; }"
       setup="std::int64_t a = $i;" ; args="a" ; result="std::int64_t" ;;
    1) decl="asio::awaitable<std::string> m$i(std::string s) { co_return s + \"$i\"; }"
       setup="std::string a = \"x\";" ; args="std::move(a)" ; result="std::string" ;;
    2) decl="double m$i(std::vector<double> v) { double t = $i; for (double x : v) t += x; return t; }"
       setup="std::vector<double> a{1.0, 2.0};" ; args="std::move(a)" ; result="double" ;;
    3) decl="asio::awaitable<point> m$i(point p, int k) { p.x += k + $i; co_return p; }"
       setup="point a{1, 2}; int b = $i;" ; args="a, b" ; result="point" ;;
  esac
}

cat <<'HEAD'
#include <cstdint>
#include <string>
#include <vector>
HEAD
if [[ $kind == tlaunch ]]; then
  echo '#include <tlaunch/tlaunch.hpp>'
elif [[ $kind == plain ]]; then
  cat <<'HEAD'
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <cereal/archives/binary.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstdio>
#include <sstream>
HEAD
else
  echo "gen_methods.sh: the kind is tlaunch or plain, got '$kind'" >&2
  exit 2
fi

cat <<'EOF2'

struct point {
  double x = 0, y = 0;
  template <class A>
  void serialize(A& a) { a(x, y); }
};

struct Service {
EOF2
for ((i = 0; i < n; ++i)); do shape $i; echo "  $decl"; done
if [[ $kind == tlaunch ]]; then
  printf '  using rpc = tlaunch::methods<'
  for ((i = 0; i < n; ++i)); do ((i)) && printf ', '; printf '&Service::m%d' $i; done
  echo '>;'
fi
echo '};'

if [[ $kind == tlaunch ]]; then
  cat <<'EOF2'

struct Client {
  tlaunch::handle<Service> service;
  asio::awaitable<void> run(tlaunch::context& ctx) {
    std::size_t seen = 0;
EOF2
  for ((i = 0; i < n; ++i)); do
    shape $i
    echo "    { $setup auto r = co_await service.call<&Service::m$i>($args); seen += sizeof(r); }"
  done
  cat <<'EOF2'
    ctx.log("{} bytes of results", seen);
  }
};

constexpr auto program = tlaunch::program(tlaunch::node<"service", Service>(),
                                          tlaunch::node<"client", Client>(tlaunch::ref<"service">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
EOF2
else
  cat <<'EOF2'

// What an RPC must do per call at least: serialise the arguments, deserialise them, run the
// method, serialise the result and deserialise it.
template <class... T>
std::string encode(const T&... v) {
  std::ostringstream os;
  {
    cereal::BinaryOutputArchive a(os);
    a(v...);
  }
  return os.str();
}
template <class... T>
void decode(const std::string& s, T&... v) {
  std::istringstream is(s);
  cereal::BinaryInputArchive a(is);
  a(v...);
}
template <class T>
asio::awaitable<T> as_awaitable(T v) { co_return v; }
template <class T>
asio::awaitable<T> as_awaitable(asio::awaitable<T> v) { co_return co_await std::move(v); }

asio::awaitable<void> client(Service& service) {
  std::size_t seen = 0;
EOF2
  for ((i = 0; i < n; ++i)); do
    shape $i
    case $((i % 4)) in
      0 | 1 | 2) echo "  { $setup decltype(a) x{}; decode(encode(a), x); auto r = co_await as_awaitable(service.m$i(std::move(x))); $result o{}; decode(encode(r), o); seen += sizeof(o); }" ;;
      3) echo "  { $setup point x; int y{}; decode(encode(a, b), x, y); auto r = co_await as_awaitable(service.m$i(x, y)); $result o{}; decode(encode(r), o); seen += sizeof(o); }" ;;
    esac
  done
  cat <<'EOF2'
  std::printf("%zu bytes of results\n", seen);
}

int main() {
  asio::io_context io;
  Service service;
  asio::co_spawn(io, client(service), asio::detached);
  io.run();
}
EOF2
fi
