// ssh/connect.hpp against the sshd of tools/sshd-fixture.sh: the connection, host keys,
// authentication.
#include <tlaunch/launch/ssh/connect.hpp>

#include "fixture.hpp"

#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstdio>
#include <filesystem>
#include <future>
#include <regex>
#include <string>
#include <vector>

using namespace ssh_test;

namespace {

// A function that reads an int option (level, name) of the session's socket.
auto socket_option_of(ssh_session session) {
  return [fd = ssh_get_fd(session)](int level, int name) {
    int v = -1;
    socklen_t len = sizeof v;
    REQUIRE(::getsockopt(fd, level, name, &v, &len) == 0);
    return v;
  };
}

}  // namespace

TEST_SUITE("ssh_connect") {
  TEST_CASE("login authenticates with the identity file; the socket knows our address") {
    auto s = ssh::login(host(), options());
    REQUIRE(s);
    CHECK(ssh_is_connected(s.get()));
    // sshd sees every loopback client as 127.0.0.1
    CHECK(ssh::socket_local_address(ssh_get_fd(s.get())) == "127.0.0.1");
    CHECK(ssh::socket_local_address(-1) == "");
    // logged in: a channel opens
    ssh_channel c = ssh_channel_new(s.get());
    REQUIRE(c != nullptr);
    CHECK(ssh_channel_open_session(c) == SSH_OK);
    ssh_channel_close(c);
    ssh_channel_free(c);
  }

  TEST_CASE("the connection has TCP keepalive on, so a dead link is noticed") {
    auto o = options();
    o.keepalive_idle_s = 7;
    o.liveness_ms = 0;  // --liveness=0: the keepalive options as set
    auto s = ssh::open_connection(host("127.0.0.3"), o);
    auto option = socket_option_of(s.get());
    CHECK(option(SOL_SOCKET, SO_KEEPALIVE) == 1);
    CHECK(option(IPPROTO_TCP, TCP_KEEPIDLE) == 7);
    CHECK(option(IPPROTO_TCP, TCP_KEEPINTVL) == o.keepalive_interval_s);
    CHECK(option(IPPROTO_TCP, TCP_KEEPCNT) == o.keepalive_count);
    // data sent but never acknowledged fails the connection after as long
    CHECK(option(IPPROTO_TCP, TCP_USER_TIMEOUT) ==
          (7 + o.keepalive_interval_s * o.keepalive_count) * 1000);
  }

  TEST_CASE("with --liveness, keepalive every interval and no acknowledgement for two") {
    auto o = options();
    o.liveness_ms = 1500;
    auto s = ssh::open_connection(host("127.0.0.3"), o);
    auto option = socket_option_of(s.get());
    CHECK(option(SOL_SOCKET, SO_KEEPALIVE) == 1);
    CHECK(option(IPPROTO_TCP, TCP_KEEPIDLE) == 2);  // whole seconds, rounded up
    CHECK(option(IPPROTO_TCP, TCP_KEEPINTVL) == 2);
    CHECK(option(IPPROTO_TCP, TCP_KEEPCNT) == 2);
    CHECK(option(IPPROTO_TCP, TCP_USER_TIMEOUT) == 3000);
  }

  TEST_CASE("the host key fingerprint reads as ssh(1) shows it") {
    auto s = ssh::open_connection(host(), options());
    auto fp = ssh::host_key_fingerprint(s.get());
    CAPTURE(fp);
    CHECK(std::regex_match(fp, std::regex("ssh-[a-z0-9-]+ key SHA256:[A-Za-z0-9+/]{43}")));
    ssh::check_host_key(s.get(), host(), options());  // the fixture's known_hosts has it
  }

  TEST_CASE("connecting where nothing listens names the host") {
    ssh::host_spec h{"root", "127.0.0.2", closed_port()};
    auto what = error_of([&] { ssh::login(h, options()); });
    CHECK(contains(what, "ssh root@127.0.0.2:" + std::to_string(h.port) + ": cannot connect"));
    CHECK(contains(what, "refused"));
  }

  TEST_CASE("a key the host does not accept is refused clearly") {
    temp_dir tmp;
    auto o = options();
    o.identity = fresh_key(tmp.path).first;
    auto s = ssh::open_connection(host(), o);
    ssh::check_host_key(s.get(), host(), o);
    auto what = error_of([&] { ssh::authenticate(s.get(), host(), o); });
    CHECK(contains(what, "ssh root@127.0.0.2:"));
    CHECK(contains(what, "authentication refused for user root"));
    CHECK(contains(what, o.identity));

    o.identity = (tmp.path / "missing_key").string();
    what = error_of([&] { ssh::login(host(), o); });
    CHECK(contains(what, "cannot read the identity file"));
  }

  TEST_CASE("an unknown host key is refused with its fingerprint unless accept_new") {
    temp_dir tmp;
    auto o = options();
    o.known_hosts = (tmp.path / "known_hosts").string();
    write_file(o.known_hosts, "");

    auto what = error_of([&] { ssh::login(host(), o); });
    CHECK(contains(what, "ssh root@127.0.0.2:"));
    CHECK(contains(what, "host key unknown"));
    CHECK(contains(what, "SHA256:"));

    o.accept_new = true;
    { auto s = ssh::login(host(), o); }
    CHECK(contains(read_file(o.known_hosts), "[127.0.0.2]:" + std::to_string(env().port)));

    o.accept_new = false;  // now it is known
    auto s = ssh::login(host(), o);
    CHECK(ssh_is_connected(s.get()));

    // a file that does not exist yet counts as empty
    o.known_hosts = (tmp.path / "absent").string();
    what = error_of([&] { ssh::login(host(), o); });
    CHECK(contains(what, "host key unknown"));
  }

  TEST_CASE("a changed host key is always refused") {
    temp_dir tmp;
    auto o = options();
    o.known_hosts = (tmp.path / "known_hosts").string();
    write_file(o.known_hosts,
               "[127.0.0.2]:" + std::to_string(env().port) + " " + fresh_key(tmp.path).second + "\n");
    const std::string before = read_file(o.known_hosts);
    for (bool accept_new : {false, true}) {
      o.accept_new = accept_new;
      auto what = error_of([&] { ssh::login(host(), o); });
      CHECK(contains(what, "ssh root@127.0.0.2:"));
      CHECK(contains(what, "HOST KEY CHANGED"));
      CHECK(contains(what, "SHA256:"));
    }
    CHECK(read_file(o.known_hosts) == before);  // never replaced
  }

  TEST_CASE("many sessions accepting new keys at once, no ~/.ssh yet: each key recorded once") {
    // Sessions that log in at the same time race to create the directory and to append
    // (one failed with "Cannot create ... directory: File exists", others appended twice).
    temp_dir tmp;
    auto o = options();
    o.known_hosts = (tmp.path / "home" / ".ssh" / "known_hosts").string();
    o.accept_new = true;
    std::vector<std::future<void>> logins;
    std::promise<void> go;
    std::shared_future<void> start = go.get_future().share();
    for (int i = 0; i < 12; ++i)
      logins.push_back(std::async(std::launch::async, [&, i, start] {
        static const char* addrs[] = {"127.0.0.1", "127.0.0.2", "127.0.0.3"};
        start.wait();
        auto s = ssh::login(host(addrs[i % 3]), o);
        CHECK(ssh_is_connected(s.get()));
      }));
    go.set_value();
    for (auto& f : logins) CHECK_NOTHROW(f.get());
    const std::string known = read_file(o.known_hosts);
    CAPTURE(known);
    for (const char* a : {"127.0.0.1", "127.0.0.2", "127.0.0.3"}) {
      const std::string entry = "[" + std::string(a) + "]:" + std::to_string(env().port) + " ";
      std::size_t n = 0;
      for (auto at = known.find(entry); at != std::string::npos; at = known.find(entry, at + 1)) ++n;
      CHECK(n == 1);
    }
    CHECK((fs::status(tmp.path / "home" / ".ssh").permissions() & fs::perms::group_all) ==
          fs::perms::none);
  }
}
