// One translation unit of libtlaunch.a, built with TLAUNCH_SEPARATE_COMPILATION and
// ASIO_SEPARATE_COMPILATION: the part that tlaunch/impl/src/rpc.hpp describes.
#include <tlaunch/impl/src/rpc.hpp>
