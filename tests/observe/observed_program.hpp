// metrics_program (TLAUNCH_METRICS_PROGRAM_EXE) launched under local_mp for the tests of
// --metrics and --dashboard: the ports and the token its launcher printed, and its stop.
#pragma once

#include <doctest/doctest.h>

#include <signal.h>

#include <regex>
#include <string>
#include <vector>

#include "../common/process.hpp"

namespace tlaunch::test_support {

class observed_program {
 public:
  // `flags` go after --launch=local_mp; a unique marker names its processes.
  observed_program(std::string_view what, std::vector<std::string> flags)
      : marker_(integration::unique_marker(what)), p_(argv(std::move(flags), marker_)) {}

  integration::process& process() { return p_; }
  const std::string& marker() const { return marker_; }

  // The port of "metrics at http://ADDR:PORT/metrics" or "dashboard at http://ADDR:PORT/".
  std::uint16_t port(const std::string& endpoint) {
    using namespace std::chrono_literals;
    REQUIRE_MESSAGE(p_.wait_for_output(endpoint + " at http://", 30s), p_.all());
    std::smatch m;
    const std::string all = p_.all();
    REQUIRE_MESSAGE(
        std::regex_search(all, m, std::regex(endpoint + R"( at http://[^ ]*:(\d+)/)")), all);
    return static_cast<std::uint16_t>(std::stoi(m[1]));
  }

  // The token the launcher printed for its endpoints off loopback.
  std::string token() {
    std::smatch m;
    const std::string all = p_.all();
    REQUIRE_MESSAGE(std::regex_search(all, m, std::regex(R"(Authorization: Bearer ([0-9a-f]{32}))")),
                    all);
    return m[1];
  }

  // SIGTERM: the launcher exits 143 and leaves no node process behind.
  void stop() {
    using namespace std::chrono_literals;
    p_.signal(SIGTERM);
    CHECK(p_.wait_or_kill(60s) == 143);
    CHECK(integration::all_gone(integration::node_pids(marker_), 10s));
  }

 private:
  static std::vector<std::string> argv(std::vector<std::string> flags, const std::string& marker) {
    std::vector<std::string> a{TLAUNCH_METRICS_PROGRAM_EXE, "--launch=local_mp"};
    a.insert(a.end(), flags.begin(), flags.end());
    a.push_back("--");
    a.push_back(marker);
    return a;
  }

  std::string marker_;
  integration::process p_;
};

}  // namespace tlaunch::test_support
