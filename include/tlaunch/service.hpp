// Services: plain classes that list the methods they expose.
//
//   struct Counter {
//     asio::awaitable<std::int64_t> add(std::int64_t k);
//     std::int64_t get() const;
//     using rpc = tlaunch::methods<&Counter::add, &Counter::get>;
//   };
//
// tlaunch::methods and the checks on it are defined by the rpc layer.
#pragma once

#include "rpc/method.hpp"
