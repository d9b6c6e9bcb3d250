// tlaunch::ssh::session against a real sshd on loopback (tools/sshd-fixture.sh).
// TLAUNCH_SSHD_ENV names the fixture's env file; CTest and the Meson wrapper set it.
#include <tlaunch/launch/ssh_session.hpp>

#include "../common/temp_dir.hpp"

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using tlaunch::launch::exit_status;
using tlaunch::launch::stream;
namespace ssh = tlaunch::ssh;

struct fixture_env {
  int port = 0;
  std::string identity, known_hosts;
};

const fixture_env& env() {
  static const fixture_env e = [] {
    const char* path = std::getenv("TLAUNCH_SSHD_ENV");
    if (path == nullptr || *path == '\0') {
      FAIL("TLAUNCH_SSHD_ENV is not set: run these tests through ctest (fixture sshd) or "
           "`tools/sshd-fixture.sh run DIR -- <test binary>`");
    }
    std::ifstream in(path);
    if (!in) FAIL("cannot read the sshd fixture env file " << path);
    std::map<std::string, std::string> kv;
    for (std::string line; std::getline(in, line);) {
      auto eq = line.find('=');
      if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
    }
    fixture_env r;
    r.port = std::stoi(kv.at("PORT"));
    r.identity = kv.at("IDENTITY");
    r.known_hosts = kv.at("KNOWN_HOSTS");
    return r;
  }();
  return e;
}

ssh::host_spec host(const char* addr = "127.0.0.2") { return {"root", addr, env().port}; }

ssh::session_options options() {
  ssh::session_options o;
  o.identity = env().identity;
  o.known_hosts = env().known_hosts;
  o.connect_timeout_s = 10;
  return o;
}

// A scratch directory removed at the end of the test.
// Each test's scratch directory.
struct temp_dir : tlaunch::test_support::temp_dir {
  temp_dir() : tlaunch::test_support::temp_dir("tlaunch-ssh-test") {}
};

void write_file(const fs::path& p, const std::string& content) {
  std::ofstream out(p, std::ios::binary);
  out << content;
}

std::string unique_id(const char* what) {
  return std::string("test-") + what + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

// Collects what a child reports and checks the callback contract as it goes.
struct recorder {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> out, err;
  int exits = 0;
  int lines_after_exit = 0;
  exit_status status;

  tlaunch::launch::child_callbacks callbacks() {
    tlaunch::launch::child_callbacks cb;
    cb.on_line = [this](stream s, std::string_view line) {
      std::lock_guard lock(mu);
      if (exits > 0) ++lines_after_exit;
      (s == stream::out ? out : err).emplace_back(line);
      cv.notify_all();
    };
    cb.on_exit = [this](const exit_status& st) {
      std::lock_guard lock(mu);
      ++exits;
      status = st;
      cv.notify_all();
    };
    return cb;
  }
  bool wait_exit(std::chrono::seconds limit = 30s) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [&] { return exits > 0; });
  }
  bool wait_out_lines(std::size_t n, std::chrono::seconds limit = 30s) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [&] { return out.size() >= n || exits > 0; }) &&
           out.size() >= n;
  }
  std::string all_err() {
    std::lock_guard lock(mu);
    std::string s;
    for (auto& l : err) s += l + "\n";
    return s;
  }
};

// Message of the ssh::error that f throws (fails the test when it does not throw one).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ssh::error& e) {
    return e.what();
  }
  FAIL("expected an ssh::error");
  return {};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Writes a fresh ed25519 key pair under dir: returns {private key path, "type base64" public}.
std::pair<std::string, std::string> fresh_key(const fs::path& dir) {
  ssh_key key = nullptr;
  REQUIRE(ssh_pki_generate(SSH_KEYTYPE_ED25519, 0, &key) == SSH_OK);
  std::string priv = (dir / "other_key").string();
  REQUIRE(ssh_pki_export_privkey_file(key, nullptr, nullptr, nullptr, priv.c_str()) == SSH_OK);
  char* b64 = nullptr;
  REQUIRE(ssh_pki_export_pubkey_base64(key, &b64) == SSH_OK);
  std::string pub = std::string("ssh-ed25519 ") + b64;
  ssh_string_free_char(b64);
  ssh_key_free(key);
  return {priv, pub};
}

// A port on 127.0.0.2 where nothing listens (bound then released).
int closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  ::inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace

TEST_SUITE("ssh_session") {
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

  TEST_CASE("connect authenticates with the identity file and knows our address") {
    auto s = ssh::session::connect(host(), options());
    CHECK(s.host().display() == "root@127.0.0.2:" + std::to_string(env().port));
    // sshd sees every loopback client as 127.0.0.1
    CHECK(s.local_address() == "127.0.0.1");
    auto r = s.run("echo $USER; hostname -I >/dev/null 2>&1; echo ok");
    CHECK(r.status.ok());
    CHECK(r.out == "root\nok\n");
  }

  TEST_CASE("the connection has TCP keepalive on, so a dead link is noticed") {
    auto o = options();
    o.keepalive_idle_s = 7;
    auto s = ssh::session::connect(host("127.0.0.3"), o);
    // our end of the connection, as the kernel shows it
    std::string cmd = "ss -tnoH state established dst 127.0.0.3:" + std::to_string(env().port);
    std::string table;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[512];
      while (std::fgets(buf, sizeof buf, p) != nullptr) table += buf;
      ::pclose(p);
    }
    CAPTURE(table);
    CHECK(contains(table, "timer:(keepalive,"));
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

  TEST_CASE("a process killed by a signal reports the signal's name") {
    auto s = ssh::session::connect(host(), options());
    recorder rec;
    auto child = s.exec("kill -SEGV $$", rec.callbacks());
    REQUIRE(rec.wait_exit());
    CHECK(rec.status.signal_name == "SEGV");
    CHECK(rec.status.describe() == "killed by signal SIGSEGV");
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

  TEST_CASE("output larger than the channel window arrives complete") {
    auto s = ssh::session::connect(host(), options());
    recorder rec;
    auto child = s.exec("head -c 4000000 /dev/zero | tr '\\0' x | fold -w 1000", rec.callbacks());
    REQUIRE(rec.wait_exit(60s));
    CHECK(rec.status.ok());
    REQUIRE(rec.out.size() == 4000);
    CHECK(rec.out.front() == std::string(1000, 'x'));
    CHECK(rec.out.back() == std::string(1000, 'x'));
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
    for (int i = n - 1; i >= 0; --i) children[i]->write_stdin("v" + std::to_string(i) + "\n");
    for (int i = 0; i < n; ++i) {
      REQUIRE(recs[i].wait_exit());
      CHECK(recs[i].out == std::vector<std::string>{"v" + std::to_string(i) + "-" + std::to_string(i)});
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
    CHECK(r.out == "755\nsame\n.\n..\nnode-binary\n");  // no temporary file left behind

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

  TEST_CASE("upload errors name the host and the file") {
    auto s = ssh::session::connect(host(), options());
    auto what = error_of([&] { s.upload_cached("/nonexistent/tlaunch-binary", "x"); });
    CHECK(contains(what, "ssh root@127.0.0.2:"));
    CHECK(contains(what, "/nonexistent/tlaunch-binary"));

    temp_dir tmp;
    write_file(tmp.path / "bin", "x");
    what = error_of([&] { s.upload_cached((tmp.path / "bin").string(), "../escape"); });
    CHECK(contains(what, "bad build id"));

    auto o = options();
    o.cache_dir = "/proc/tlaunch-cannot-be-here";
    auto s2 = ssh::session::connect(host(), o);
    what = error_of([&] { s2.upload_cached((tmp.path / "bin").string(), "x"); });
    CHECK(contains(what, "ssh root@127.0.0.2:"));
    CHECK(contains(what, "/proc/tlaunch-cannot-be-here"));
  }

  TEST_CASE("a full remote disk is reported as such") {
    temp_dir tmp;
    auto mnt = tmp.path / "small";
    fs::create_directory(mnt);
    REQUIRE_MESSAGE(::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=256k") == 0,
                    "mounting a small tmpfs needs root: " << std::strerror(errno));
    struct unmount {
      fs::path p;
      ~unmount() { ::umount2(p.c_str(), MNT_DETACH); }
    } guard{mnt};

    auto local = tmp.path / "big-binary";
    write_file(local, std::string(1024 * 1024, 'b'));
    auto o = options();
    o.cache_dir = mnt.string();
    auto s = ssh::session::connect(host(), o);
    auto what = error_of([&] { s.upload_cached(local.string(), "full"); });
    CHECK(contains(what, "ssh root@127.0.0.2:"));
    CHECK(contains(what, "no space left"));
    // the partial temporary file is gone
    CHECK(fs::is_empty(mnt / "full"));
    // the session still works after the failed upload
    CHECK(s.run("echo alive").out == "alive\n");
  }

  TEST_CASE("a binary that cannot run there reports the shell's exit code and message") {
    auto s = ssh::session::connect(host(), options());
    temp_dir tmp;
    auto not_exec = tmp.path / "not-executable";
    write_file(not_exec, "\x7f" "ELF garbage");
    ::chmod(not_exec.c_str(), 0644);

    recorder rec;
    auto child = s.exec(ssh::shell_quote(not_exec.string()) + " --tlaunch-role=x/0", rec.callbacks());
    REQUIRE(rec.wait_exit());
    CHECK(rec.status.code == 126);
    CHECK(contains(rec.all_err(), "Permission denied"));

    auto garbage = tmp.path / "garbage";
    write_file(garbage, std::string("\x7f" "ELF\x02\x01\x01", 7) + std::string(64, '\0'));
    ::chmod(garbage.c_str(), 0755);
    recorder rec2;
    auto child2 = s.exec(ssh::shell_quote(garbage.string()), rec2.callbacks());
    REQUIRE(rec2.wait_exit());
    CHECK((rec2.status.code == 126 || rec2.status.code == 127));
    CHECK_FALSE(rec2.all_err().empty());

    recorder rec3;
    auto child3 = s.exec("/nonexistent/tlaunch-node", rec3.callbacks());
    REQUIRE(rec3.wait_exit());
    CHECK(rec3.status.code == 127);
    // bash says "No such file or directory", dash "not found"
    CHECK((contains(rec3.all_err(), "No such file") || contains(rec3.all_err(), "not found")));
    CHECK(contains(rec3.all_err(), "/nonexistent/tlaunch-node"));
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

  TEST_CASE("connecting where nothing listens names the host") {
    ssh::host_spec h{"root", "127.0.0.2", closed_port()};
    auto what = error_of([&] { ssh::session::connect(h, options()); });
    CHECK(contains(what, "ssh root@127.0.0.2:" + std::to_string(h.port) + ": cannot connect"));
    CHECK(contains(what, "refused"));
  }

  TEST_CASE("a key the host does not accept is refused clearly") {
    temp_dir tmp;
    auto o = options();
    o.identity = fresh_key(tmp.path).first;
    auto what = error_of([&] { ssh::session::connect(host(), o); });
    CHECK(contains(what, "ssh root@127.0.0.2:"));
    CHECK(contains(what, "authentication refused for user root"));
    CHECK(contains(what, o.identity));

    o.identity = (tmp.path / "missing_key").string();
    what = error_of([&] { ssh::session::connect(host(), o); });
    CHECK(contains(what, "cannot read the identity file"));
  }

  TEST_CASE("an unknown host key is refused with its fingerprint unless accept_new") {
    temp_dir tmp;
    auto o = options();
    o.known_hosts = (tmp.path / "known_hosts").string();
    write_file(o.known_hosts, "");

    auto what = error_of([&] { ssh::session::connect(host(), o); });
    CHECK(contains(what, "ssh root@127.0.0.2:"));
    CHECK(contains(what, "host key unknown"));
    CHECK(contains(what, "SHA256:"));

    o.accept_new = true;
    { auto s = ssh::session::connect(host(), o); }
    std::ifstream in(o.known_hosts);
    std::string recorded((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(contains(recorded, "[127.0.0.2]:" + std::to_string(env().port)));

    o.accept_new = false;  // now it is known
    auto s = ssh::session::connect(host(), o);
    CHECK(s.run("echo known").out == "known\n");

    // a file that does not exist yet counts as empty
    o.known_hosts = (tmp.path / "absent").string();
    what = error_of([&] { ssh::session::connect(host(), o); });
    CHECK(contains(what, "host key unknown"));
  }

  TEST_CASE("a changed host key is always refused") {
    temp_dir tmp;
    auto o = options();
    o.known_hosts = (tmp.path / "known_hosts").string();
    write_file(o.known_hosts,
               "[127.0.0.2]:" + std::to_string(env().port) + " " + fresh_key(tmp.path).second + "\n");
    for (bool accept_new : {false, true}) {
      o.accept_new = accept_new;
      auto what = error_of([&] { ssh::session::connect(host(), o); });
      CHECK(contains(what, "ssh root@127.0.0.2:"));
      CHECK(contains(what, "HOST KEY CHANGED"));
      CHECK(contains(what, "SHA256:"));
    }
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
