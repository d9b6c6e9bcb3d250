// The binary cache on a host: one folder per build id, written by SFTP, so a binary is
// copied to a host once and every later launch of the same build finds it there.
#pragma once

#include <libssh/libssh.h>
#include <libssh/sftp.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "error.hpp"
#include "host_spec.hpp"

namespace tlaunch::ssh {

namespace detail {

inline std::string sftp_error_text(sftp_session sftp) {
  switch (sftp_get_error(sftp)) {
    case SSH_FX_EOF: return "unexpected end of file";
    case SSH_FX_NO_SUCH_FILE: return "no such file or directory";
    case SSH_FX_PERMISSION_DENIED: return "permission denied";
    case SSH_FX_FAILURE: return "failure";
    case SSH_FX_BAD_MESSAGE: return "bad message";
    case SSH_FX_NO_CONNECTION: return "no connection";
    case SSH_FX_CONNECTION_LOST: return "connection lost";
    case SSH_FX_OP_UNSUPPORTED: return "operation not supported";
    case SSH_FX_INVALID_HANDLE: return "invalid handle";
    case SSH_FX_NO_SUCH_PATH: return "no such path";
    case SSH_FX_FILE_ALREADY_EXISTS: return "file already exists";
    case SSH_FX_WRITE_PROTECT: return "file system is read-only";
    case SSH_FX_NO_MEDIA: return "no media";
    default: return "error";
  }
}

}  // namespace detail

// <cache_dir>/<build id>/<binary name> on one host. Only the thread that uses the session
// calls it (SFTP runs over the session); destroy it, or close() it, before the session.
class binary_cache {
 public:
  static constexpr std::size_t upload_chunk = 128 * 1024;
  using progress_fn = std::function<void(std::uint64_t done, std::uint64_t total)>;

  // cache_dir: relative paths are under the remote home; "" is ".cache/tlaunch".
  binary_cache(ssh_session ssh, host_spec host, std::string cache_dir)
      : ssh_(ssh), host_(std::move(host)), cache_dir_(std::move(cache_dir)) {}
  binary_cache(const binary_cache&) = delete;
  binary_cache& operator=(const binary_cache&) = delete;
  ~binary_cache() { close(); }

  struct upload_result {
    std::string path;      // absolute path on the host
    bool skipped = false;  // a file of the same size was there already
  };

  // Copies local_path to <cache_dir>/<build_id>/<basename> on the host (0755). Skipped when a
  // file of the same size is already there; written under a temporary name and renamed, so a
  // crash never leaves a truncated binary under the final name. progress(done, total) is
  // called along the way (once, with done == total, when skipped). Throws ssh::error.
  upload_result upload(const std::string& local_path, const std::string& build_id,
                       const progress_fn& progress = {});

  // Ends the SFTP subsystem (it is started by the first upload).
  void close() {
    if (sftp_ != nullptr) sftp_free(sftp_);
    sftp_ = nullptr;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw error(host_, what); }
  sftp_session ensure_sftp();

  ssh_session ssh_;
  host_spec host_;
  std::string cache_dir_;
  sftp_session sftp_ = nullptr;
  std::string remote_home_;
};

inline sftp_session binary_cache::ensure_sftp() {
  if (sftp_ != nullptr) return sftp_;
  sftp_session s = sftp_new(ssh_);
  if (s == nullptr) fail("cannot start SFTP: " + std::string(ssh_get_error(ssh_)));
  if (sftp_init(s) != SSH_OK) {
    std::string why = ssh_get_error(ssh_);
    sftp_free(s);
    fail("cannot start SFTP (is the sftp subsystem enabled in sshd_config?): " + why);
  }
  char* home = sftp_canonicalize_path(s, ".");
  if (home == nullptr) {
    std::string why = detail::sftp_error_text(s);
    sftp_free(s);
    fail("cannot find the remote home directory: " + why);
  }
  remote_home_ = home;
  ssh_string_free_char(home);
  sftp_ = s;
  return s;
}

inline binary_cache::upload_result binary_cache::upload(const std::string& local_path,
                                                        const std::string& build_id,
                                                        const progress_fn& progress) {
  using detail::sftp_error_text;
  if (build_id.empty() || build_id.find('/') != std::string::npos || build_id == "." ||
      build_id == "..") {
    fail("bad build id '" + build_id + "' for the binary cache (must be one path component)");
  }
  int fd = ::open(local_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot read " + local_path + " to upload it: " + std::strerror(errno));
  struct fd_closer {
    int fd;
    ~fd_closer() { ::close(fd); }
  } closer{fd};
  struct stat local_st {};
  if (::fstat(fd, &local_st) != 0) fail("cannot stat " + local_path + ": " + std::strerror(errno));
  const auto total = static_cast<std::uint64_t>(local_st.st_size);

  sftp_session sftp = ensure_sftp();
  std::string base = cache_dir_.empty() ? std::string(".cache/tlaunch") : cache_dir_;
  if (base.front() != '/') base = remote_home_ + "/" + base;
  const std::string dir = base + "/" + build_id;
  std::string name = local_path.substr(local_path.find_last_of('/') + 1);
  if (name.empty()) fail("cannot upload " + local_path + ": it names a directory");
  const std::string remote = dir + "/" + name;

  // mkdir -p
  for (std::size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string part = dir.substr(0, pos);
    if (sftp_attributes a = sftp_stat(sftp, part.c_str()); a != nullptr) {
      bool is_dir = a->type == SSH_FILEXFER_TYPE_DIRECTORY;
      sftp_attributes_free(a);
      if (!is_dir) fail("cannot create the binary cache " + dir + ": " + part + " is not a directory");
      continue;
    }
    if (sftp_mkdir(sftp, part.c_str(), 0755) != 0) {
      if (sftp_attributes a = sftp_stat(sftp, part.c_str()); a != nullptr) {  // made by a racer
        sftp_attributes_free(a);
        continue;
      }
      fail("cannot create directory " + part + " for the binary cache: " + sftp_error_text(sftp));
    }
  }

  auto same_file_there = [&] {
    sftp_attributes a = sftp_stat(sftp, remote.c_str());
    if (a == nullptr) return false;
    bool same = a->type == SSH_FILEXFER_TYPE_REGULAR && a->size == total;
    bool exec = (a->permissions & 0111) == 0111;
    sftp_attributes_free(a);
    if (same && !exec) sftp_chmod(sftp, remote.c_str(), 0755);
    return same;
  };
  if (same_file_there()) {
    if (progress) progress(total, total);
    return {remote, true};
  }

  std::random_device rd;
  const std::string tmp =
      remote + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
  sftp_file f = sftp_open(sftp, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0700);
  if (f == nullptr) fail("cannot create " + tmp + ": " + sftp_error_text(sftp));
  auto abandon = [&](const std::string& why) {
    sftp_close(f);
    sftp_unlink(sftp, tmp.c_str());
    fail("upload of " + local_path + " to " + remote + " failed: " + why);
  };

  std::vector<char> buf(upload_chunk);
  std::uint64_t done = 0;
  if (progress) progress(0, total);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      abandon("reading the local file: " + std::string(std::strerror(errno)));
    }
    if (n == 0) break;
    ssize_t w = sftp_write(f, buf.data(), static_cast<std::size_t>(n));
    if (w != n) {
      std::string why = sftp_error_text(sftp);
      // SFTP v3 reports a full disk as a bare "failure": ask the file system.
      if (sftp_get_error(sftp) == SSH_FX_FAILURE &&
          sftp_extension_supported(sftp, "statvfs@openssh.com", "2")) {
        if (sftp_statvfs_t v = sftp_statvfs(sftp, dir.c_str()); v != nullptr) {
          std::uint64_t avail = v->f_bavail * v->f_frsize;
          sftp_statvfs_free(v);
          if (avail < total - done) {
            why = "no space left on the host's file system holding " + dir + " (" +
                  std::to_string(avail) + " bytes free, " + std::to_string(total) +
                  " needed; set another cache directory or free space)";
          }
        }
      }
      if (!ssh_is_connected(ssh_)) why += " (" + std::string(ssh_get_error(ssh_)) + ")";
      abandon(why);
    }
    done += static_cast<std::uint64_t>(n);
    if (progress) progress(done, total);
  }
  if (sftp_close(f) != SSH_OK) {
    std::string why = sftp_error_text(sftp);
    sftp_unlink(sftp, tmp.c_str());
    fail("upload of " + local_path + " to " + remote + " failed on close: " + why);
  }
  if (sftp_chmod(sftp, tmp.c_str(), 0755) != 0) {
    std::string why = sftp_error_text(sftp);
    sftp_unlink(sftp, tmp.c_str());
    fail("cannot make " + tmp + " executable: " + why);
  }
  // SFTP v3 rename refuses an existing target: another upload of the same build may have won.
  if (sftp_rename(sftp, tmp.c_str(), remote.c_str()) != 0) {
    if (!same_file_there()) {
      sftp_unlink(sftp, remote.c_str());
      if (sftp_rename(sftp, tmp.c_str(), remote.c_str()) != 0) {
        std::string why = sftp_error_text(sftp);
        sftp_unlink(sftp, tmp.c_str());
        fail("cannot rename " + tmp + " to " + remote + ": " + why);
      }
    } else {
      sftp_unlink(sftp, tmp.c_str());
    }
  }
  return {remote, false};
}

}  // namespace tlaunch::ssh
