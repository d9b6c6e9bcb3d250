// examples/run_cmd under local_mp (no SSH needed): every runner answers, the display
// prints one table and stops the program. The SSH run is in ssh_launch_tests.cpp.
#include <doctest/doctest.h>

#include <string>

#include "../common/process.hpp"

namespace {

namespace it = tlaunch::integration;
using namespace std::chrono_literals;

bool has(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_SUITE("run_cmd") {
  TEST_CASE("local_mp: two runners, the default commands, one table, exit 0") {
    auto r = it::run({TLAUNCH_RUN_CMD_EXE, "--launch=local_mp", "--color=never", "--replicas",
                      "runner=2"},
                     60s);
    CAPTURE(r.all);
    CHECK(r.code == 0);
    CHECK(has(r.out, "[display/0] runner    hostname"));
    CHECK(it::process::occurrences(r.out, "[display/0] runner/0 ") == 3);  // nproc, uptime, nvidia-smi
    CHECK(it::process::occurrences(r.out, "[display/0] runner/1 ") == 3);
    CHECK(it::process::occurrences(r.out, " nproc ") == 2);
    CHECK(it::process::occurrences(r.out, " load average") == 2);
  }

  TEST_CASE("commands after -- replace the defaults, and a failing one shows its exit code") {
    auto r = it::run({TLAUNCH_RUN_CMD_EXE, "--launch=local_mp", "--color=never", "--",
                      "echo tlaunch-was-here", "exit 3"},
                     60s);
    CAPTURE(r.all);
    CHECK(r.code == 0);
    CHECK(it::missing(r.out, {" echo tlaunch-was-here  tlaunch-was-here\n",
                              " exit 3                 - (exit 3)\n"}) == "");
    CHECK_FALSE(has(r.out, " nproc "));
  }
}
