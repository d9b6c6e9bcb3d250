// Placement (launch/placement.hpp): hosts from --hosts and hostfiles with slots, --place
// and round-robin. No SSH involved: any launcher that is given hosts places this way.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <tlaunch/launch/colocation.hpp>
#include <tlaunch/launch/placement.hpp>
#include <vector>

#include "../common/temp_dir.hpp"

using namespace tlaunch::launch;

namespace {
struct node {
  std::string name;
  std::uint32_t replicas;
};
std::vector<std::string> hosts_of(const std::vector<placement>& ps) {
  std::vector<std::string> out;
  for (auto& p : ps) out.push_back(p.host);
  return out;
}
}  // namespace

TEST_SUITE("placement") {
  TEST_CASE("the host of a host entry") {
    CHECK(host_of_entry("h1") == "h1");
    CHECK(host_of_entry("alice@h1") == "h1");
    CHECK(host_of_entry("alice@h1:2222") == "h1");
    CHECK(host_of_entry("127.0.0.2:2299") == "127.0.0.2");
    CHECK(host_of_entry("[::1]:2299") == "::1");
    CHECK(host_of_entry("bob@[fe80::1]") == "fe80::1");
    CHECK(host_of_entry("::1") == "::1");
  }

  TEST_CASE("a hostfile: slots, comments, blank lines; errors name file and line") {
    std::istringstream in("# cluster\nh1 slots=2\n\n  alice@h2:2222   # login node\nh3\n");
    CHECK(parse_hostfile(in, "hosts.txt") ==
          std::vector<std::string>{"h1", "h1", "alice@h2:2222", "h3"});
    for (std::string bad : {"h1 slots=0\n", "h1 slots=x\n", "h1 slots=3x\n", "h1 slots=5000\n"}) {
      CAPTURE(bad);
      std::istringstream b("h0\n" + bad);
      CHECK_THROWS_WITH_AS(parse_hostfile(b, "f"), doctest::Contains("f:2: bad 'slots="),
                           tlaunch::launch_error);
    }
    std::istringstream w("h1 cpus=4\n");
    CHECK_THROWS_WITH_AS(parse_hostfile(w, "f"),
                         "f:1: unknown word 'cpus=4' (expected slots=N)", tlaunch::launch_error);
  }

  TEST_CASE("listed hosts: --hosts first, then the hostfile; none is an error naming the launch") {
    tlaunch::test_support::temp_dir dir;
    std::string file = (dir.path / "hosts").string();
    std::ofstream(file) << "h3 slots=2\n";
    CHECK(listed_hosts({"h1", "h2"}, file, "ssh") ==
          std::vector<std::string>{"h1", "h2", "h3", "h3"});
    CHECK_THROWS_WITH_AS(listed_hosts({}, "", "ssh"), "--launch=ssh needs --hosts or --hostfile",
                         tlaunch::launch_error);
    CHECK_THROWS_WITH_AS(listed_hosts({}, (dir.path / "missing").string(), "ssh"),
                         doctest::Contains("--hostfile: cannot read"), tlaunch::launch_error);
  }

  TEST_CASE("round-robin over the hosts in program order, --place for named nodes") {
    std::vector<node> nodes{{"counter", 1}, {"producer", 4}, {"logger", 2}};
    std::vector<std::string> hosts{"h1", "h2", "h3"};
    auto ps = place_instances(nodes, {}, hosts);
    REQUIRE(ps.size() == 7);
    CHECK(ps[0].id == "counter/0");
    CHECK(ps[4].id == "producer/3");
    CHECK(ps[6].flat == 6);
    CHECK(hosts_of(ps) == std::vector<std::string>{"h1", "h2", "h3", "h1", "h2", "h3", "h1"});

    auto placed = place_instances(nodes, {{"producer", {"h3", "h2"}}}, hosts);
    // producer's replicas alternate over h3, h2; the others go round all hosts.
    CHECK(hosts_of(placed) == std::vector<std::string>{"h1", "h3", "h2", "h3", "h2", "h2", "h3"});
  }

  TEST_CASE("--place by bare host name means the listed login; ambiguity and unknown nodes") {
    std::vector<node> nodes{{"counter", 1}};
    CHECK(place_instances(nodes, {{"counter", {"h1"}}}, {"alice@h1:2222", "h2"})[0].host ==
          "alice@h1:2222");
    // A host no entry has stays as written.
    CHECK(place_instances(nodes, {{"counter", {"h9"}}}, {"h1"})[0].host == "h9");
    CHECK_THROWS_WITH_AS(place_instances(nodes, {{"counter", {"h1"}}}, {"a@h1", "b@h1"}),
                         doctest::Contains("host 'h1' is ambiguous"), tlaunch::launch_error);
    CHECK_THROWS_WITH_AS(place_instances(nodes, {{"countr", {"h1"}}}, {"h1"}),
                         "--place names node 'countr', which is not in the program",
                         tlaunch::launch_error);
  }

  TEST_CASE("a colocation group is placed as a unit: its leader's host, one turn of the round-robin") {
    std::vector<node> nodes{{"learner", 1}, {"replay", 1}, {"actor", 3}};
    options o;
    o.colocate = {"learner,replay", "actor/1,actor/2"};
    auto groups = colocation_groups(nodes, {}, o);
    CHECK(groups == std::vector<colocation_group>{{0, 1}, {3, 4}});
    auto leaders = colocation_leaders(groups, 5);
    CHECK(leaders == std::vector<std::uint32_t>{0, 0, 2, 3, 3});
    CHECK(hosts_of(place_instances(nodes, {}, {"h1", "h2"}, leaders)) ==
          std::vector<std::string>{"h1", "h1", "h2", "h1", "h1"});
    // --place of the leader's node moves the group; a member's own --place does not.
    CHECK(hosts_of(place_instances(nodes, {{"learner", {"h3"}}, {"replay", {"h2"}}},
                                   {"h1", "h2"}, leaders)) ==
          std::vector<std::string>{"h3", "h3", "h1", "h2", "h2"});
  }

  TEST_CASE("without hosts every instance is on this machine") {
    std::vector<node> nodes{{"a", 2}};
    CHECK(hosts_of(place_instances(nodes, {}, {})) == std::vector<std::string>{"", ""});
  }
}
