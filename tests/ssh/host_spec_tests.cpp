// ssh/host_spec.hpp: hosts as users write them, and hostfiles. No sshd needed.
#include <tlaunch/launch/ssh/host_spec.hpp>

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../common/temp_dir.hpp"

namespace {

namespace ssh = tlaunch::ssh;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::vector<ssh::hostfile_entry> parse(const std::string& text) {
  std::istringstream in(text);
  return ssh::parse_hostfile(in, "hosts.txt");
}

// The launch_error that parsing text throws.
std::string parse_error(const std::string& text) {
  try {
    parse(text);
  } catch (const tlaunch::launch_error& e) {
    return e.what();
  }
  FAIL("accepted: " << text);
  return {};
}

}  // namespace

TEST_SUITE("ssh_host_spec") {
  TEST_CASE("host_spec parses the forms users write and rejects the rest") {
    auto h = ssh::host_spec::parse("alice@node7:2222");
    CHECK(h.user == "alice");
    CHECK(h.host == "node7");
    CHECK(h.port == 2222);
    CHECK(h.display() == "alice@node7:2222");

    h = ssh::host_spec::parse("node7");
    CHECK(h.host == "node7");
    CHECK(h.port == 22);
    CHECK_FALSE(h.user.empty());
    CHECK(h.display() == h.user + "@node7");

    h = ssh::host_spec::parse("bob@10.0.0.5");
    CHECK(h.user == "bob");
    CHECK(h.port == 22);
    h = ssh::host_spec::parse("node7:2200");
    CHECK(h.host == "node7");
    CHECK(h.port == 2200);
    h = ssh::host_spec::parse("carol@[::1]:2201");
    CHECK(h.host == "::1");
    CHECK(h.port == 2201);
    CHECK(h.display() == "carol@[::1]:2201");

    for (const char* bad : {"", "@node7", "alice@", "node7:", "node7:x", "node7:0",
                            "node7:70000", "::1", "[::1", "a b"}) {
      CAPTURE(bad);
      try {
        ssh::host_spec::parse(bad);
        FAIL("accepted");
      } catch (const tlaunch::launch_error& e) {
        CHECK(contains(e.what(), "bad ssh host '" + std::string(bad) + "'"));
      }
    }
  }

  TEST_CASE("the user defaults to $USER, and an '@' in the user name is kept") {
    auto h = ssh::host_spec::parse("[fe80::1]");
    CHECK(h.host == "fe80::1");
    CHECK(h.port == 22);
    CHECK(h.display() == h.user + "@[fe80::1]");
    if (const char* u = std::getenv("USER"); u != nullptr && *u != '\0') CHECK(h.user == u);
    // the last '@' splits: a user name may hold one (as in Kerberos principals)
    h = ssh::host_spec::parse("a@b@node7");
    CHECK(h.user == "a@b");
    CHECK(h.host == "node7");
  }

  TEST_CASE("a hostfile lists hosts with their slots; comments and blank lines are skipped") {
    auto entries = parse(
        "# cluster\n"
        "node1\n"
        "\n"
        "  alice@node2:2222   slots=3  # the big one\n"
        "[::1]:2201 slots=1\n");
    REQUIRE(entries.size() == 3);
    CHECK(entries[0].host == "node1");
    CHECK(entries[0].slots == 1);
    CHECK(entries[1].host == "alice@node2:2222");
    CHECK(entries[1].slots == 3);
    CHECK(entries[2].host == "[::1]:2201");
    CHECK(entries[2].slots == 1);
    CHECK(parse("").empty());
    CHECK(parse("# nothing\n\n").empty());
    CHECK(parse("node1 slots=4096")[0].slots == 4096);
  }

  TEST_CASE("hostfile errors name the file and the line") {
    CHECK(parse_error("node1\nnode2 slots=0\n") == "hosts.txt:2: bad 'slots=0'");
    CHECK(parse_error("node2 slots=4097") == "hosts.txt:1: bad 'slots=4097'");
    CHECK(parse_error("node2 slots=x") == "hosts.txt:1: bad 'slots=x'");
    CHECK(parse_error("node2 slots=") == "hosts.txt:1: bad 'slots='");
    CHECK(parse_error("\n\nnode3 cpus=4") ==
          "hosts.txt:3: unknown word 'cpus=4' (expected slots=N)");
  }

  TEST_CASE("read_hostfile reads a file and names one it cannot read") {
    tlaunch::test_support::temp_dir tmp("tlaunch-hostfile-test");
    auto path = (tmp.path / "hosts").string();
    {
      std::ofstream out(path);
      out << "node1 slots=2\nnode2\n";
    }
    auto entries = ssh::read_hostfile(path);
    REQUIRE(entries.size() == 2);
    CHECK(entries[0].slots == 2);
    CHECK(entries[1].host == "node2");

    auto missing = (tmp.path / "absent").string();
    try {
      ssh::read_hostfile(missing);
      FAIL("read a missing file");
    } catch (const tlaunch::launch_error& e) {
      CHECK(std::string(e.what()) == "--hostfile: cannot read " + missing);
    }
  }
}
