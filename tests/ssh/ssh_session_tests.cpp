// tlaunch::ssh::session, which ties the pieces in ssh/ together, against a real sshd on
// loopback (tools/sshd-fixture.sh): children driven from any thread through the session's
// I/O loop, uploads, a connection that dies, many sessions at once. The pieces have tests
// of their own beside this file.
#include <tlaunch/launch/ssh/session.hpp>

#include "fixture.hpp"

#include <fmt/format.h>

#include <signal.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace ssh_test;

TEST_SUITE("ssh_session") {
  TEST_CASE("connect authenticates with the identity file and knows our address") {
    auto s = ssh::session::connect(host(), options());
    CHECK(s.host().display() == "root@127.0.0.2:" + std::to_string(env().port));
    // sshd sees every loopback client as 127.0.0.1
    CHECK(s.local_address() == "127.0.0.1");
    auto r = s.run("echo $USER; hostname -I >/dev/null 2>&1; echo ok");
    CHECK(r.status.ok());
    CHECK(r.out == "root\nok\n");
  }

  TEST_CASE("exec keeps stdout and stderr apart and reports the exit code after the output") {
    auto s = ssh::session::connect(host(), options());
    recorder rec;
    auto child = s.exec("echo out; echo err 1>&2; printf tail; exit 7", rec.callbacks());
    CHECK(child->host() == "127.0.0.2");
    REQUIRE(rec.wait_exit());
    std::lock_guard lock(rec.mu);
    CHECK(rec.out == std::vector<std::string>{"out", "tail"});
    CHECK(rec.err == std::vector<std::string>{"err"});
    CHECK(rec.status.code == 7);
    CHECK(rec.status.signal_name.empty());
    CHECK(rec.exits == 1);
    CHECK(rec.lines_after_exit == 0);
    CHECK_FALSE(child->running());
  }

  TEST_CASE("stdin reaches the process, and close_stdin gives it EOF") {
    auto s = ssh::session::connect(host(), options());
    SUBCASE("head -n1") {
      recorder rec;
      auto child = s.exec("head -n1; echo done", rec.callbacks());
      CHECK(child->running());
      child->write_stdin("secret-0123456789abcdef\nsecond line\n");
      REQUIRE(rec.wait_exit());
      CHECK(rec.out == std::vector<std::string>{"secret-0123456789abcdef", "done"});
      CHECK(rec.status.ok());
    }
    SUBCASE("cat ends on EOF") {
      recorder rec;
      auto child = s.exec("cat; echo eof-seen", rec.callbacks());
      child->write_stdin("a\n");
      child->write_stdin("b");
      REQUIRE(rec.wait_out_lines(1));
      CHECK(child->running());  // cat waits for more until stdin closes
      child->close_stdin();
      REQUIRE(rec.wait_exit());
      CHECK(rec.out == std::vector<std::string>{"a", "beof-seen"});
      CHECK(rec.status.ok());
    }
    SUBCASE("more stdin than one channel window") {
      recorder rec;
      auto child = s.exec("wc -c", rec.callbacks());
      std::string big(3 * 1024 * 1024, 'x');
      child->write_stdin(big);
      child->close_stdin();
      REQUIRE(rec.wait_exit());
      REQUIRE(rec.out.size() == 1);
      CHECK(rec.out[0] == std::to_string(big.size()));
    }
  }

  TEST_CASE("several channels on one session run at the same time") {
    auto s = ssh::session::connect(host(), options());
    constexpr int n = 6;
    std::vector<recorder> recs(n);
    std::vector<tlaunch::launch::child_ptr> children;
    for (int i = 0; i < n; ++i) {
      children.push_back(s.exec("read x; echo \"$x-" + std::to_string(i) + "\"", recs[i].callbacks()));
    }
    // all are waiting on stdin now; answer them in reverse order
    for (int i = n - 1; i >= 0; --i) children[i]->write_stdin(fmt::format("v{}\n", i));
    for (int i = 0; i < n; ++i) {
      REQUIRE(recs[i].wait_exit());
      CHECK(recs[i].out == std::vector<std::string>{fmt::format("v{}-{}", i, i)});
      CHECK(recs[i].status.ok());
    }
  }

  TEST_CASE("shell_quote survives the remote shell") {
    auto s = ssh::session::connect(host(), options());
    for (std::string text : {"plain", "it's", "a b  c", "$HOME `id` \"q\" \\ *", "", "-n"}) {
      CAPTURE(text);
      auto r = s.run("printf '[%s]' " + ssh::shell_quote(text));
      CHECK(r.out == "[" + text + "]\n");
    }
  }

  TEST_CASE("upload_cached copies once, keeps it executable and skips the second time") {
    auto s = ssh::session::connect(host(), options());
    temp_dir tmp;
    auto local = tmp.path / "node-binary";
    std::string content = "#!/bin/sh\necho uploaded-ok \"$@\"\n";
    content += "# padding so the copy takes several writes\n#";
    content += std::string(300 * 1024, 'p');
    content += "\n";
    write_file(local, content);
    const std::string id = unique_id("upload");

    std::vector<std::pair<std::uint64_t, std::uint64_t>> calls;
    auto remote = s.upload_cached(local.string(), id,
                                  [&](std::uint64_t done, std::uint64_t total) {
                                    calls.emplace_back(done, total);
                                  });
    CHECK(remote == "/root/.cache/tlaunch/" + id + "/node-binary");
    CHECK_FALSE(s.last_upload_skipped());
    REQUIRE(calls.size() >= 3);  // 0, then one per 128 KiB write
    CHECK(calls.back() == std::pair<std::uint64_t, std::uint64_t>(content.size(), content.size()));

    auto r = s.run("stat -c %a " + ssh::shell_quote(remote) + "; cmp " +
                   ssh::shell_quote(local.string()) + " " + ssh::shell_quote(remote) +
                   " && echo same; ls -a " + ssh::shell_quote("/root/.cache/tlaunch/" + id));
    // no temporary file left behind; the marker of the build's last use
    CHECK(r.out == "755\nsame\n.\n..\n.tlaunch-used\nnode-binary\n");

    r = s.run(ssh::shell_quote(remote) + " arg1");
    CHECK(r.out == "uploaded-ok arg1\n");

    // the second upload (another session, as another launch would) is skipped
    auto s2 = ssh::session::connect(host("127.0.0.3"), options());
    auto again = s2.upload_cached(local.string(), id);
    CHECK(again == remote);
    CHECK(s2.last_upload_skipped());

    // a different size means a different file: copied again
    write_file(local, content + "more\n");
    s.upload_cached(local.string(), id);
    CHECK_FALSE(s.last_upload_skipped());
    r = s.run("wc -c < " + ssh::shell_quote(remote));
    CHECK(r.out == std::to_string(content.size() + 5) + "\n");

    s.run("rm -rf " + ssh::shell_quote("/root/.cache/tlaunch/" + id));
  }

  TEST_CASE("kill ends a node that stops on stdin EOF, and gives up on one that does not") {
    auto s = ssh::session::connect(host(), options());
    SUBCASE("stops on EOF") {
      recorder rec;
      // Running before the kill, so the 2 s the kill waits for are not spent starting it.
      auto child = s.exec("echo up; cat >/dev/null; echo stopping", rec.callbacks());
      REQUIRE(rec.wait_out_lines(1));
      child->kill();
      REQUIRE(rec.wait_exit(10s));
      CHECK(rec.out == std::vector<std::string>{"up", "stopping"});
      CHECK(rec.status.ok());
    }
    SUBCASE("ignores EOF") {
      recorder rec;
      auto child = s.exec("echo $$; exec sleep 60", rec.callbacks());
      REQUIRE(rec.wait_out_lines(1));
      long remote_pid = std::stol(rec.out[0]);
      auto t0 = std::chrono::steady_clock::now();
      child->kill();
      REQUIRE(rec.wait_exit(10s));
      CHECK(std::chrono::steady_clock::now() - t0 < 5s);
      CHECK(contains(rec.all_err(), "may still be running"));
      CHECK(rec.status.code == -1);
      CHECK_FALSE(child->running());
      // root's signal requests are ignored by sshd: the sleep is still there; clean it up
      CHECK(s.run("kill " + std::to_string(remote_pid)).status.ok());
    }
  }

  TEST_CASE("a connection that dies is reported to each running child") {
    auto s = ssh::session::connect(host(), options());
    recorder rec;
    // the shell's parent is sshd's process for this connection
    auto child = s.exec("echo $PPID $$; exec sleep 60", rec.callbacks());
    REQUIRE(rec.wait_out_lines(1));
    long sshd_pid = 0, sleep_pid = 0;
    std::istringstream(rec.out[0]) >> sshd_pid >> sleep_pid;
    std::ifstream comm("/proc/" + std::to_string(sshd_pid) + "/comm");
    std::string name;
    comm >> name;
    REQUIRE(name == "sshd");
    REQUIRE(::kill(static_cast<pid_t>(sshd_pid), SIGKILL) == 0);
    REQUIRE(rec.wait_exit(20s));
    CHECK(rec.status.code == 255);
    CHECK(contains(rec.all_err(), "ssh: connection to root@127.0.0.2:" +
                                      std::to_string(env().port) + " lost"));
    // How the process ended is unknown, and said so instead of "exited with code 255".
    CHECK_FALSE(rec.status.ok());
    CHECK(contains(rec.status.describe(), "ssh connection to root@127.0.0.2:" +
                                              std::to_string(env().port) + " lost ("));
    CHECK(rec.exits == 1);
    ::kill(static_cast<pid_t>(sleep_pid), SIGKILL);
    // later calls fail with the host named instead of hanging
    auto what = error_of([&] { s.run("true"); });
    CHECK(contains(what, "ssh root@127.0.0.2:"));
    CHECK(contains(what, "connection lost"));
  }

  TEST_CASE("many sessions connect in parallel") {
    constexpr int n = 12;
    std::vector<std::string> got(n);
    std::vector<std::string> failed(n);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([i, &got, &failed] {
        try {
          auto s = ssh::session::connect(host(i % 2 ? "127.0.0.2" : "127.0.0.3"), options());
          got[i] = s.run("echo " + std::to_string(i)).out;
        } catch (const std::exception& e) {
          failed[i] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < n; ++i) {
      CAPTURE(i);
      CHECK(failed[i] == "");
      CHECK(got[i] == std::to_string(i) + "\n");
    }
  }
}
