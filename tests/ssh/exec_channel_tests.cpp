// ssh/exec_channel.hpp against the sshd of tools/sshd-fixture.sh. The test thread drives
// the channels as a session's I/O loop would (poll, then pump), so every callback runs
// here, between two pumps, and the channel state can be set directly.
#include <tlaunch/launch/ssh/connect.hpp>
#include <tlaunch/launch/ssh/exec_channel.hpp>

#include "fixture.hpp"

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

using namespace ssh_test;

namespace {

// One logged-in connection and its channels, turned by hand.
struct driver {
  ssh::session_ptr session = ssh::login(host(), options());
  ssh::exec_channels channels{host()};
  ssh_event event = ssh_event_new();

  driver() { ssh_event_add_session(event, session.get()); }
  ~driver() {
    channels.close_all();
    ssh_event_remove_session(event, session.get());
    ssh_event_free(event);
  }
  driver(const driver&) = delete;
  driver& operator=(const driver&) = delete;

  std::shared_ptr<ssh::channel_state> open(const std::string& command, recorder& rec) {
    return channels.open(session.get(), command, rec.callbacks());
  }
  // Turns until done() holds; false after 60 s.
  template <class Done>
  bool turn_until(Done done) {
    auto give_up = std::chrono::steady_clock::now() + 60s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      bool progress = channels.pump();
      ssh_event_dopoll(event, progress ? 0 : std::min(50, channels.wait_ms()));
    }
    return true;
  }
  bool turn_until_exit(recorder& rec) {
    return turn_until([&] {
      std::lock_guard lock(rec.mu);
      return rec.exits > 0;
    });
  }
  bool turn_until_out_lines(recorder& rec, std::size_t n) {
    return turn_until([&] {
      std::lock_guard lock(rec.mu);
      return rec.out.size() >= n || rec.exits > 0;
    }) && rec.out.size() >= n;
  }
};

}  // namespace

TEST_SUITE("ssh_exec_channel") {
  TEST_CASE("shell_quote leaves plain words alone and single-quotes the rest") {
    CHECK(ssh::shell_quote("plain") == "plain");
    CHECK(ssh::shell_quote("/opt/bin/node-1.2_x") == "/opt/bin/node-1.2_x");
    CHECK(ssh::shell_quote("--tlaunch-coordinator=[::1]:80") == "'--tlaunch-coordinator=[::1]:80'");
    CHECK(ssh::shell_quote("a=b,c@d%e+f:g") == "a=b,c@d%e+f:g");
    CHECK(ssh::shell_quote("") == "''");
    CHECK(ssh::shell_quote("a b") == "'a b'");
    CHECK(ssh::shell_quote("it's") == "'it'\\''s'");
    CHECK(ssh::shell_quote("$HOME") == "'$HOME'");
  }

  TEST_CASE("output comes as lines on their streams, and the exit code after them") {
    driver d;
    recorder rec;
    auto st = d.open("echo out; echo err 1>&2; printf tail; exit 7", rec);
    CHECK(d.channels.size() == 1);
    CHECK(st->running);
    REQUIRE(d.turn_until_exit(rec));
    CHECK(rec.out == std::vector<std::string>{"out", "tail"});
    CHECK(rec.err == std::vector<std::string>{"err"});
    CHECK(rec.status.code == 7);
    CHECK(rec.exits == 1);
    CHECK(rec.lines_after_exit == 0);
    CHECK_FALSE(st->running);
    CHECK(st->channel == nullptr);     // closed and freed
    CHECK(d.channels.size() == 0);     // and dropped
  }

  TEST_CASE("a process killed by a signal reports the signal's name") {
    driver d;
    recorder rec;
    auto st = d.open("kill -SEGV $$", rec);
    REQUIRE(d.turn_until_exit(rec));
    CHECK(rec.status.signal_name == "SEGV");
    CHECK(rec.status.describe() == "killed by signal SIGSEGV");
  }

  TEST_CASE("output larger than the channel window arrives complete") {
    driver d;
    recorder rec;
    auto st = d.open("head -c 4000000 /dev/zero | tr '\\0' x | fold -w 1000", rec);
    REQUIRE(d.turn_until_exit(rec));
    CHECK(rec.status.ok());
    REQUIRE(rec.out.size() == 4000);
    CHECK(rec.out.front() == std::string(1000, 'x'));
    CHECK(rec.out.back() == std::string(1000, 'x'));
  }

  TEST_CASE("stdin larger than the window is written as the window opens, then EOF") {
    driver d;
    recorder rec;
    auto st = d.open("wc -c", rec);
    st->stdin_pending = std::string(3 * 1024 * 1024, 'x');
    st->close_stdin = true;
    REQUIRE(d.turn_until_exit(rec));
    CHECK(st->eof_sent);
    CHECK(st->stdin_pending.empty());
    REQUIRE(rec.out.size() == 1);
    CHECK(rec.out[0] == std::to_string(3 * 1024 * 1024));
  }

  TEST_CASE("a binary that cannot run there reports the shell's exit code and message") {
    driver d;
    temp_dir tmp;
    auto not_exec = tmp.path / "not-executable";
    write_file(not_exec, "\x7f" "ELF garbage");
    ::chmod(not_exec.c_str(), 0644);
    recorder rec;
    auto st = d.open(ssh::shell_quote(not_exec.string()) + " --tlaunch-role=x/0", rec);
    REQUIRE(d.turn_until_exit(rec));
    CHECK(rec.status.code == 126);
    CHECK(contains(rec.all_err(), "Permission denied"));

    auto garbage = tmp.path / "garbage";
    write_file(garbage, std::string("\x7f" "ELF\x02\x01\x01", 7) + std::string(64, '\0'));
    ::chmod(garbage.c_str(), 0755);
    recorder rec2;
    auto st2 = d.open(ssh::shell_quote(garbage.string()), rec2);
    REQUIRE(d.turn_until_exit(rec2));
    CHECK((rec2.status.code == 126 || rec2.status.code == 127));
    CHECK_FALSE(rec2.all_err().empty());

    recorder rec3;
    auto st3 = d.open("/nonexistent/tlaunch-node", rec3);
    REQUIRE(d.turn_until_exit(rec3));
    CHECK(rec3.status.code == 127);
    // bash says "No such file or directory", dash "not found"
    CHECK((contains(rec3.all_err(), "No such file") || contains(rec3.all_err(), "not found")));
    CHECK(contains(rec3.all_err(), "/nonexistent/tlaunch-node"));
  }

  TEST_CASE("kill closes stdin; a process that ignores it is given up after the grace period") {
    driver d;
    recorder rec;
    auto st = d.open("echo $$; exec sleep 60", rec);
    REQUIRE(d.turn_until_out_lines(rec, 1));
    long remote_pid = std::stol(rec.out[0]);
    CHECK(d.channels.wait_ms() == 1000);
    st->kill_requested = true;
    d.channels.pump();
    CHECK(st->kill_sent);
    CHECK(st->eof_sent);
    // the poll wakes for the deadline, not later
    CHECK(d.channels.wait_ms() <= std::chrono::duration_cast<std::chrono::milliseconds>(
                                       ssh::exec_channels::kill_grace).count() + 1);
    REQUIRE(d.turn_until_exit(rec));
    CHECK(rec.status.code == -1);
    CHECK(contains(rec.status.describe(), "may still be running"));
    CHECK(contains(rec.all_err(), "after kill(); the process ignored stdin EOF"));
    // root's signal requests are ignored by sshd: the sleep is still there
    CHECK(::kill(static_cast<pid_t>(remote_pid), SIGKILL) == 0);
  }

  TEST_CASE("a lost connection ends every running process with code 255 and says why") {
    driver d;
    recorder a, b;
    auto sa = d.open("echo $$; exec sleep 60", a);
    auto sb = d.open("echo $$; exec sleep 60", b);
    REQUIRE(d.turn_until_out_lines(a, 1));
    REQUIRE(d.turn_until_out_lines(b, 1));
    d.channels.connection_lost("Socket error: disconnected");
    const std::string who = "root@127.0.0.2:" + std::to_string(env().port);
    for (recorder* r : {&a, &b}) {
      CHECK(r->exits == 1);
      CHECK(r->status.code == 255);
      CHECK_FALSE(r->status.ok());
      CHECK(r->status.describe() ==
            "ssh connection to " + who + " lost (Socket error: disconnected)");
      CHECK(r->err.back() == "ssh: connection to " + who + " lost: Socket error: disconnected");
    }
    CHECK(d.channels.size() == 0);
    CHECK_FALSE(sa->running);
    ::kill(static_cast<pid_t>(std::stol(a.out[0])), SIGKILL);
    ::kill(static_cast<pid_t>(std::stol(b.out[0])), SIGKILL);
  }

  TEST_CASE("a detached child is ended without callbacks, and so is every child at close_all") {
    driver d;
    recorder a, b;
    auto sa = d.open("echo up; cat", a);
    auto sb = d.open("echo up; cat", b);
    REQUIRE(d.turn_until_out_lines(a, 1));
    REQUIRE(d.turn_until_out_lines(b, 1));
    sa->detached = true;  // what dropping its child handle does
    d.channels.pump();
    CHECK(sa->done);
    CHECK(d.channels.size() == 1);
    d.channels.close_all();
    CHECK(sb->done);
    CHECK(d.channels.size() == 0);
    CHECK(a.exits == 0);
    CHECK(b.exits == 0);
    CHECK(b.out == std::vector<std::string>{"up"});
  }
}
