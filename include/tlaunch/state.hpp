// A node's state: what a node type saves in its snapshots and loads when it starts again
// (docs/guide/state.md). A node type has state when it defines, cereal-style, either
//
//   template <class Archive> void state(Archive& ar) { ar(count_, weights_); }
//
// (one function both ways), or save_state(Archive&) const and load_state(Archive&). Each may
// take the snapshot's version as a second argument (std::uint32_t) when the type declares
//
//   static constexpr std::uint32_t state_version = 2;
//
// which also lets it load snapshots written by other builds of the program, up to that
// version. Without it, a snapshot is loaded only by the build that wrote it.
#pragma once

#include <cereal/archives/binary.hpp>
#include <cstdint>
#include <istream>
#include <ostream>
#include <type_traits>

#include "rpc/instance.hpp"

namespace tlaunch {

namespace detail {

using state_out = cereal::BinaryOutputArchive;
using state_in = cereal::BinaryInputArchive;

template <class T>
concept split_state = requires(const T& c, T& t, state_out& o, state_in& i) {
  c.save_state(o);
  t.load_state(i);
} || requires(const T& c, T& t, state_out& o, state_in& i, std::uint32_t v) {
  c.save_state(o, v);
  t.load_state(i, v);
};

template <class T>
concept one_state = requires(T& t, state_out& o, state_in& i) {
  t.state(o);
  t.state(i);
} || requires(T& t, state_out& o, state_in& i, std::uint32_t v) {
  t.state(o, v);
  t.state(i, v);
};

template <class T>
inline constexpr bool has_state = split_state<T> || one_state<T>;

template <class T>
constexpr std::uint32_t state_version_of() {
  if constexpr (requires { T::state_version; })
    return static_cast<std::uint32_t>(T::state_version);
  else
    return 0;
}

template <class T>
void save_state_of(void* object, std::ostream& out) {
  T& t = *static_cast<T*>(object);
  state_out ar(out);
  constexpr std::uint32_t v = state_version_of<T>();
  if constexpr (requires(const T& c) { c.save_state(ar, v); })
    static_cast<const T&>(t).save_state(ar, v);
  else if constexpr (requires(const T& c) { c.save_state(ar); })
    static_cast<const T&>(t).save_state(ar);
  else if constexpr (requires { t.state(ar, v); })
    t.state(ar, v);
  else
    t.state(ar);
}

template <class T>
void load_state_of(void* object, std::istream& in, std::uint32_t version) {
  T& t = *static_cast<T*>(object);
  state_in ar(in);
  if constexpr (requires { t.load_state(ar, version); })
    t.load_state(ar, version);
  else if constexpr (requires { t.load_state(ar); })
    t.load_state(ar);
  else if constexpr (requires { t.state(ar, version); })
    t.state(ar, version);
  else
    t.state(ar);
}

// The state_ops of T (rpc/instance.hpp); null when T has no state.
template <class T>
const rpc::state_ops* state_ops_of() {
  if constexpr (has_state<T>) {
    static constexpr rpc::state_ops ops{&save_state_of<T>, &load_state_of<T>,
                                        state_version_of<T>(), requires { T::state_version; }};
    return &ops;
  } else {
    return nullptr;
  }
}

}  // namespace detail
}  // namespace tlaunch
