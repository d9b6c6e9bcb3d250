// ssh/host_spec.hpp: hosts as users write them. No sshd needed.
#include <tlaunch/launch/ssh/host_spec.hpp>

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

namespace {

namespace ssh = tlaunch::ssh;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
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
}
