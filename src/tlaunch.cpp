// The whole compiled library in one translation unit (tlaunch/impl/src.hpp). The builds do
// not compile it: libtlaunch.a is made of src/asio.cpp, src/rpc.cpp and src/launch_*.cpp,
// the same parts one file each, so that a parallel build spreads them.
// benchmarks/compile_time.sh measures this file as the library's cost in one piece.
#include <tlaunch/impl/src.hpp>
