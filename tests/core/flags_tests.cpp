// The launcher's command line.
#include <doctest/doctest.h>

#include <tlaunch/launch/flags.hpp>
#include <vector>

namespace {
tlaunch::launch::options parse(std::vector<const char*> a) {
  a.insert(a.begin(), "prog");
  return tlaunch::launch::parse(static_cast<int>(a.size()), a.data());
}
}  // namespace

TEST_SUITE("flags") {
  TEST_CASE("both flag forms, replicas, placement and program arguments") {
    auto o = parse({"--launch=local_mp", "--replicas", "worker=8,ps=2", "--grace=1.5",
                    "--place", "worker=h2,h3", "--hosts=h1,root@h2:2222", "--", "--count", "5"});
    CHECK(o.launch == "local_mp");
    CHECK(o.replicas.at("worker") == 8);
    CHECK(o.replicas.at("ps") == 2);
    CHECK(o.grace.count() == 1500);
    CHECK(o.place.at("worker") == std::vector<std::string>{"h2", "h3"});
    CHECK(o.hosts == std::vector<std::string>{"h1", "root@h2:2222"});
    CHECK(o.user_args == std::vector<std::string>{"--count", "5"});
    // What node processes must see to build the same graph.
    CHECK(o.passthrough == std::vector<std::string>{"--replicas=worker=8,ps=2", "--grace=1.5",
                                                    "--", "--count", "5"});
  }

  TEST_CASE("--busy-poll takes microseconds and reaches node processes") {
    auto o = parse({"--busy-poll=250"});
    CHECK(o.busy_poll == std::chrono::microseconds(250));
    CHECK(o.passthrough == std::vector<std::string>{"--busy-poll=250"});
    CHECK(parse({}).busy_poll == std::chrono::microseconds(0));
    CHECK_THROWS_WITH(parse({"--busy-poll=soon"}), doctest::Contains("--busy-poll: 'soon'"));
    CHECK_THROWS_WITH(parse({"--busy-poll=2000000"}), doctest::Contains("--busy-poll"));
  }

  TEST_CASE("bad input names the flag") {
    CHECK_THROWS_WITH(parse({"--lanch=ssh"}), doctest::Contains("unknown flag '--lanch'"));
    CHECK_THROWS_WITH(parse({"--launch=cloud"}), doctest::Contains("'cloud' is not one of"));
    CHECK_THROWS_WITH(parse({"--replicas", "worker"}), doctest::Contains("NAME=N"));
    CHECK_THROWS_WITH(parse({"--replicas=worker=-1"}), doctest::Contains("--replicas"));
    CHECK_THROWS_WITH(parse({"--grace=soon"}), doctest::Contains("--grace"));
    CHECK_THROWS_WITH(parse({"--threads"}), doctest::Contains("--threads needs a value"));
    CHECK_THROWS_WITH(parse({"stray"}), doctest::Contains("after `--`"));
    CHECK_THROWS_WITH(parse({"--force-wire=yes"}), doctest::Contains("takes no value"));
  }

  TEST_CASE("usage lists every flag") {
    auto u = tlaunch::launch::usage("prog");
    for (const char* f : {"--launch", "--replicas", "--threads", "--busy-poll", "--grace", "--log-dir", "--color",
                          "--force-wire", "--max-frame", "--hosts", "--hostfile", "--place",
                          "--ssh-identity", "--ssh-accept-new", "--known-hosts",
                          "--coordinator-host", "--start-timeout", "--help"})
      CHECK_MESSAGE(u.find(f) != std::string::npos, f);
  }
}
