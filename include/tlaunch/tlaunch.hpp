// tlaunch: distributed programs as compile-time graphs of coroutine actors.
// This umbrella header is the only one programs need; unit tests of a program add
// <tlaunch/testing.hpp> (test_launch).
#pragma once

#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/use_awaitable.hpp>

#include "batched.hpp"
#include "bytes.hpp"
#include "context.hpp"
#include "error.hpp"
#include "handle.hpp"
#include "main.hpp"
#include "program.hpp"
#include "service.hpp"
#include "start.hpp"
