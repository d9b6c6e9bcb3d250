// What the tests in tests/ssh share: the throwaway sshd of tools/sshd-fixture.sh (its env
// file is named by TLAUNCH_SSHD_ENV, which CTest and the Meson wrapper set), scratch
// directories, and a recorder of what a child process reports.
#pragma once

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <libssh/libssh.h>

#include <tlaunch/launch/process/child.hpp>
#include <tlaunch/launch/ssh/error.hpp>
#include <tlaunch/launch/ssh/host_spec.hpp>
#include <tlaunch/launch/ssh/options.hpp>

#include "../common/errors.hpp"
#include "../common/temp_dir.hpp"

namespace ssh_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using tlaunch::launch::exit_status;
using tlaunch::launch::stream;
namespace ssh = tlaunch::ssh;

struct fixture_env {
  int port = 0;
  std::string identity, known_hosts;
};

inline const fixture_env& env() {
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

// 127.0.0.2 and 127.0.0.3 are two "hosts" of the one sshd, both in its known_hosts.
inline ssh::host_spec host(const char* addr = "127.0.0.2") { return {"root", addr, env().port}; }

inline ssh::session_options options() {
  ssh::session_options o;
  o.identity = env().identity;
  o.known_hosts = env().known_hosts;
  o.connect_timeout_s = 10;
  return o;
}

// Each test's scratch directory.
struct temp_dir : tlaunch::test_support::temp_dir {
  temp_dir() : tlaunch::test_support::temp_dir("tlaunch-ssh-test") {}
};

inline void write_file(const fs::path& p, const std::string& content) {
  std::ofstream out(p, std::ios::binary);
  out << content;
}

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline std::string unique_id(const char* what) {
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
  auto what = tlaunch::test_support::message_of<ssh::error>(std::forward<F>(f));
  if (!what) FAIL("expected an ssh::error");
  return what.value_or("");
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Writes a fresh ed25519 key pair under dir: returns {private key path, "type base64" public}.
inline std::pair<std::string, std::string> fresh_key(const fs::path& dir) {
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
inline int closed_port() {
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

}  // namespace ssh_test
