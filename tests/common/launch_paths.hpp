// The paths a call can take within one tlaunch::testing::test_launch, for tests that check
// each: launch_options(wire) gives options with a 2 s grace whose calls all go over the wire
// (or none); on_every_path(f) runs f(options) on one io thread and on two, each direct and
// over the wire.
#pragma once

#include <doctest/doctest.h>

#include <chrono>

#include <tlaunch/launch/flags.hpp>

namespace tlaunch::test_support {

inline tlaunch::launch::options launch_options(bool wire) {
  tlaunch::launch::options o;
  o.force_wire = wire;
  o.grace = std::chrono::seconds(2);
  return o;
}

template <class F>
void on_every_path(F f) {
  for (unsigned threads : {1u, 2u})
    for (bool wire : {false, true}) {
      CAPTURE(threads);
      CAPTURE(wire);
      auto o = launch_options(wire);
      o.threads = threads;
      f(o);
    }
}

}  // namespace tlaunch::test_support
