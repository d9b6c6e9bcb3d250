// Opening an SSH connection to a host: TCP with keepalive, the host key checked against
// known_hosts, public-key authentication. What comes out is a libssh session ready for
// channels, used by one thread at a time.
#pragma once

#include <libssh/libssh.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <fcntl.h>
#include <cerrno>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

#include "error.hpp"
#include "host_spec.hpp"
#include "options.hpp"

namespace tlaunch::ssh {

// Disconnects (when connected) and frees a libssh session.
struct session_free {
  void operator()(ssh_session s) const {
    if (ssh_is_connected(s)) ssh_disconnect(s);
    ssh_free(s);
  }
};
using session_ptr = std::unique_ptr<ssh_session_struct, session_free>;

// The TCP connection and the SSH key exchange, with keepalive on; the host key is not
// checked yet and nobody is logged in. Options come from ~/.ssh/config, then from `options`.
session_ptr open_connection(const host_spec& host, const session_options& options);
// Accepts the host key when known_hosts has it; records an unknown one with accept_new;
// refuses a changed one always. Throws ssh::error showing the key's fingerprint.
void check_host_key(ssh_session s, const host_spec& host, const session_options& options);
// Logs in with the identity file, or with ssh-agent and ~/.ssh/id_* when there is none.
void authenticate(ssh_session s, const host_spec& host, const session_options& options);
// All three: a session logged in to a host whose key we know; throws ssh::error.
session_ptr login(const host_spec& host, const session_options& options);

// "ssh-ed25519 key SHA256:..." of the key the server presented, as ssh(1) shows it.
std::string host_key_fingerprint(ssh_session s);
// Our end of a connected socket as a numeric address; "" when unknown.
std::string socket_local_address(int fd);

namespace detail {

inline void set_keepalive(int fd, const session_options& o) {
  // libssh blocks forever on a dead link: let the kernel notice it. TCP_USER_TIMEOUT covers
  // the case keepalive does not: data sent but never acknowledged.
  int on = 1, idle = std::max(1, o.keepalive_idle_s), intvl = std::max(1, o.keepalive_interval_s),
      cnt = std::max(1, o.keepalive_count);
  unsigned user_timeout_ms = static_cast<unsigned>(idle + intvl * cnt) * 1000;
  if (o.liveness_ms > 0) {  // as rpc::connection::configure_socket does
    idle = intvl = static_cast<int>(std::max(1L, (o.liveness_ms + 999) / 1000));
    cnt = 2;
    user_timeout_ms = static_cast<unsigned>(o.liveness_ms * 2);
  }
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

// The known_hosts file libssh uses for s (after ssh_connect, with ~ expanded); "" if unknown.
inline std::string known_hosts_path(ssh_session s) {
  char* p = nullptr;
  if (ssh_options_get(s, SSH_OPTIONS_KNOWNHOSTS, &p) != SSH_OK || p == nullptr) return {};
  std::string out = p;
  ssh_string_free_char(p);
  return out;
}

// Records the host key of s in known_hosts once, however many sessions (threads of this
// launcher, or launchers started at the same time) accept new keys at once: libssh's own
// "create ~/.ssh, then append" races with itself. One thread at a time in this process, an
// exclusive flock on the file across processes, the directory created tolerating EEXIST, and
// the key checked again under the lock (another launcher may just have recorded it).
// Returns libssh's error text, or "" when the key is recorded.
inline std::string record_host_key(ssh_session s) {
  static std::mutex in_process;
  std::lock_guard lk(in_process);
  std::string path = known_hosts_path(s);
  int fd = -1;
  if (!path.empty()) {
    std::error_code ec;
    auto dir = std::filesystem::path(path).parent_path();
    if (!dir.empty() && !std::filesystem::exists(dir, ec)) {
      std::filesystem::create_directories(dir, ec);  // EEXIST from a racing process is fine
      std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
    }
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0)
      while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
      }
  }
  std::string why;
  if (ssh_session_is_known_server(s) != SSH_KNOWN_HOSTS_OK &&
      ssh_session_update_known_hosts(s) != SSH_OK)
    why = ssh_get_error(s);
  if (fd >= 0) ::close(fd);  // releases the lock
  return why;
}

}  // namespace detail

inline std::string socket_local_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
  } else if (ss.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

inline std::string host_key_fingerprint(ssh_session s) {
  ssh_key key = nullptr;
  if (ssh_get_server_publickey(s, &key) != SSH_OK) return "(no host key)";
  unsigned char* hash = nullptr;
  std::size_t hlen = 0;
  std::string out = "(unknown fingerprint)";
  if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &hlen) == SSH_OK) {
    if (char* fp = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hlen)) {
      out = std::string(ssh_key_type_to_char(ssh_key_type(key))) + " key " + fp;
      ssh_string_free_char(fp);
    }
    ssh_clean_pubkey_hash(&hash);
  }
  ssh_key_free(key);
  return out;
}

inline session_ptr open_connection(const host_spec& host, const session_options& options) {
  session_ptr s(ssh_new());
  if (!s) throw error(host, "cannot create a libssh session");

  long timeout = options.connect_timeout_s;
  int nodelay = 1;  // synchronous SFTP writes crawl with Nagle on
  ssh_options_set(s.get(), SSH_OPTIONS_HOST, host.host.c_str());
  // ~/.ssh/config first, so what the caller set below wins over it
  ssh_options_parse_config(s.get(), nullptr);
  ssh_options_set(s.get(), SSH_OPTIONS_USER, host.user.c_str());
  unsigned port = static_cast<unsigned>(host.port);
  ssh_options_set(s.get(), SSH_OPTIONS_PORT, &port);
  ssh_options_set(s.get(), SSH_OPTIONS_TIMEOUT, &timeout);
  ssh_options_set(s.get(), SSH_OPTIONS_NODELAY, &nodelay);
  if (!options.known_hosts.empty()) {
    ssh_options_set(s.get(), SSH_OPTIONS_KNOWNHOSTS, options.known_hosts.c_str());
  }

  if (ssh_connect(s.get()) != SSH_OK) {
    throw error(host, "cannot connect: " + std::string(ssh_get_error(s.get())));
  }
  detail::set_keepalive(ssh_get_fd(s.get()), options);
  return s;
}

inline void check_host_key(ssh_session s, const host_spec& host, const session_options& options) {
  const std::string known =
      options.known_hosts.empty() ? std::string("~/.ssh/known_hosts") : options.known_hosts;
  switch (ssh_session_is_known_server(s)) {
    case SSH_KNOWN_HOSTS_OK:
      return;
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER:
      throw error(host, "HOST KEY CHANGED: the host now presents " + host_key_fingerprint(s) +
                            ", which does not match " + known +
                            ". Someone may be intercepting the connection, or the host was "
                            "reinstalled; if you trust the new key, remove the old entry "
                            "(ssh-keygen -R) and retry");
    case SSH_KNOWN_HOSTS_UNKNOWN:
    case SSH_KNOWN_HOSTS_NOT_FOUND:
      if (!options.accept_new) {
        throw error(host, "host key unknown (" + host_key_fingerprint(s) + " is not in " + known +
                              "); check the fingerprint and pass --ssh-accept-new to record it, "
                              "or add it with ssh-keyscan");
      }
      if (auto why = detail::record_host_key(s); !why.empty()) {
        throw error(host, "cannot record the host key in " + known + ": " + why);
      }
      return;
    case SSH_KNOWN_HOSTS_ERROR:
    default:
      throw error(host, "cannot check the host key against " + known + ": " + ssh_get_error(s));
  }
}

inline void authenticate(ssh_session s, const host_spec& host, const session_options& options) {
  int rc;
  std::string how;
  if (!options.identity.empty()) {
    how = "key " + options.identity;
    ssh_key key = nullptr;
    if (ssh_pki_import_privkey_file(options.identity.c_str(), nullptr, nullptr, nullptr, &key) !=
        SSH_OK) {
      throw error(host, "cannot read the identity file " + options.identity +
                            " (missing, unreadable, or protected by a passphrase: use ssh-agent "
                            "then)");
    }
    rc = ssh_userauth_publickey(s, nullptr, key);
    ssh_key_free(key);
  } else {
    how = "ssh-agent and ~/.ssh/id_* keys";
    rc = ssh_userauth_publickey_auto(s, nullptr, nullptr);
  }
  if (rc == SSH_AUTH_ERROR) {
    throw error(host, "authentication failed: " + std::string(ssh_get_error(s)));
  }
  if (rc == SSH_AUTH_PARTIAL) {
    throw error(host, "the host wants more than a public key to log in " + host.user +
                          " (multi-factor authentication is not supported)");
  }
  if (rc != SSH_AUTH_SUCCESS) {
    throw error(host, "authentication refused for user " + host.user + " with " + how +
                          " (is the public key in ~" + host.user +
                          "/.ssh/authorized_keys on the host?)");
  }
}

inline session_ptr login(const host_spec& host, const session_options& options) {
  session_ptr s = open_connection(host, options);
  check_host_key(s.get(), host, options);
  authenticate(s.get(), host, options);
  return s;
}

}  // namespace tlaunch::ssh
