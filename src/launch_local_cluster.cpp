// One translation unit of libtlaunch.a, built with TLAUNCH_SEPARATE_COMPILATION and
// ASIO_SEPARATE_COMPILATION: the part that tlaunch/impl/src/launch_local_cluster.hpp describes.
#include <tlaunch/impl/src/launch_local_cluster.hpp>
