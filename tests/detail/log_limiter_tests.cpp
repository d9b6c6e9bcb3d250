#include <doctest/doctest.h>

#include <string>
#include <tlaunch/detail/log_limiter.hpp>

using tlaunch::detail::log_limiter;
using namespace std::chrono_literals;

TEST_SUITE("log_limiter") {
  TEST_CASE("one line per reason per interval, then the count of the suppressed ones") {
    log_limiter lim(1s);
    const auto t0 = log_limiter::clock::time_point{} + 100s;
    auto first = lim.admit("bad magic", "refusing 1.2.3.4:5: bad magic", t0);
    REQUIRE(first);
    CHECK(*first == "refusing 1.2.3.4:5: bad magic");
    CHECK_FALSE(lim.admit("bad magic", "refusing 1.2.3.4:6: bad magic", t0 + 10ms));
    CHECK_FALSE(lim.admit("bad magic", "refusing 1.2.3.4:7: bad magic", t0 + 999ms));
    CHECK(lim.suppressed() == 2);
    // Another reason is not held back by the first.
    auto other = lim.admit("timeout", "no hello from 1.2.3.4:8", t0 + 20ms);
    REQUIRE(other);
    CHECK(*other == "no hello from 1.2.3.4:8");
    // After the interval the next line is printed with the count.
    auto later = lim.admit("bad magic", "refusing 1.2.3.4:9: bad magic", t0 + 1s);
    REQUIRE(later);
    CHECK(*later == "refusing 1.2.3.4:9: bad magic (2 more lines like this were suppressed)");
    CHECK(lim.suppressed() == 0);
    CHECK_FALSE(lim.admit("bad magic", "x", t0 + 1500ms));
    auto one = lim.admit("bad magic", "y", t0 + 2500ms);
    REQUIRE(one);
    CHECK(*one == "y (1 more line like this was suppressed)");
  }

  TEST_CASE("many distinct reasons stay within a bounded table") {
    log_limiter lim(1s);
    const auto t0 = log_limiter::clock::time_point{} + 100s;
    int printed = 0;
    for (int i = 0; i < 10000; ++i)
      if (lim.admit("reason " + std::to_string(i), "line", t0)) ++printed;
    // The first max_reasons reasons get a line each, the rest share one.
    CHECK(printed == static_cast<int>(log_limiter::max_reasons) + 1);
    // Once quiet for an interval, the table makes room for new reasons.
    CHECK(lim.admit("fresh", "line", t0 + 5s));
  }
}
