// The launch layer and Asio's own sources, compiled once: the library tlaunch::compiled
// (CMake) or tlaunch_compiled_dep (Meson), built with TLAUNCH_SEPARATE_COMPILATION and
// ASIO_SEPARATE_COMPILATION (README, "Separate compilation").
#include <tlaunch/impl/src.hpp>
