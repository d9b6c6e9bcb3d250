// The binary cache on a host: one folder per build id, written by SFTP, so a binary is
// copied to a host once and every later launch of the same build finds it there. Each use
// rewrites a marker file in the build's folder (its time is the host's clock), and the
// cache then keeps the `keep` most recently used builds and removes older ones.
#pragma once

#include <libssh/libssh.h>
#include <libssh/sftp.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <string_view>
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

// Whether a folder of the cache is named as the launcher names builds (a GNU build id in
// hex, or sha256-<hex> of the file): pruning never touches anything else.
inline bool looks_like_build_id(const std::string& name) {
  auto all_hex = [](std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    });
  };
  std::string_view v = name;
  if (v.starts_with("sha256-")) return v.size() == 7 + 64 && all_hex(v.substr(7));
  return v.size() >= 16 && v.size() <= 128 && all_hex(v);
}

}  // namespace detail

// <cache_dir>/<build id>/<binary name> on one host. Only the thread that uses the session
// calls it (SFTP runs over the session); destroy it, or close() it, before the session.
class binary_cache {
 public:
  static constexpr std::size_t upload_chunk = 128 * 1024;
  using progress_fn = std::function<void(std::uint64_t done, std::uint64_t total)>;
  // In each build's folder, rewritten at every use: the most recently used builds are kept.
  static constexpr const char* used_marker = ".tlaunch-used";
  // A build used this recently (seconds) is never removed: a launch may be starting it.
  static constexpr std::uint64_t recent_s = 60;

  // cache_dir: relative paths are under the remote home; "" is ".cache/tlaunch".
  // keep: after each upload, the builds kept, the one just used included; 0 keeps all.
  binary_cache(ssh_session ssh, host_spec host, std::string cache_dir, unsigned keep = 0)
      : ssh_(ssh), host_(std::move(host)), cache_dir_(std::move(cache_dir)), keep_(keep) {}
  binary_cache(const binary_cache&) = delete;
  binary_cache& operator=(const binary_cache&) = delete;
  ~binary_cache() { close(); }

  struct upload_result {
    std::string path;      // absolute path on the host
    bool skipped = false;  // a file of the same size was there already
    std::vector<std::string> removed;  // older builds removed from the cache (folder names)
    std::string prune_error;           // why pruning stopped early; the upload still holds
  };

  // Copies local_path to <cache_dir>/<build_id>/<basename> on the host (0755). Skipped when a
  // file of the same size is already there; written under a temporary name and renamed, so a
  // crash never leaves a truncated binary under the final name. progress(done, total) is
  // called along the way (once, with done == total, when skipped). Then marks the build used
  // and removes the builds beyond the `keep` most recently used ones, except those used in
  // the last minute: only folders named like a build id and holding only files; a failure there is reported in prune_error, never
  // thrown. Throws ssh::error.
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
  void mark_used(sftp_session sftp, const std::string& dir);
  void prune(sftp_session sftp, const std::string& base, const std::string& current,
             upload_result& r);

  ssh_session ssh_;
  host_spec host_;
  std::string cache_dir_;
  unsigned keep_ = 0;
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
  auto finish = [&](bool skipped) {
    upload_result r{remote, skipped, {}, {}};
    mark_used(sftp, dir);
    if (keep_ > 0) prune(sftp, base, build_id, r);
    return r;
  };
  if (same_file_there()) {
    if (progress) progress(total, total);
    return finish(true);
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
  return finish(false);
}

inline void binary_cache::mark_used(sftp_session sftp, const std::string& dir) {
  // Rewriting a file gives it the host's time: launchers on machines with skewed clocks
  // still agree on the order. A failure only makes the build look older.
  const std::string marker = dir + "/" + used_marker;
  sftp_file f = sftp_open(sftp, marker.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (f == nullptr) return;
  sftp_write(f, "1\n", 2);
  sftp_close(f);
}

inline void binary_cache::prune(sftp_session sftp, const std::string& base,
                                const std::string& current, upload_result& r) {
  using detail::sftp_error_text;
  struct build {
    std::uint64_t used;
    std::string name;
  };
  std::vector<build> builds;
  // The host's now: the marker of the build just used. A build used within the last minute
  // stays beyond `keep`: another launch may be about to start it.
  std::uint64_t now = 0;
  if (sftp_attributes m = sftp_stat(sftp, (base + "/" + current + "/" + used_marker).c_str())) {
    now = m->mtime;
    sftp_attributes_free(m);
  }
  sftp_dir d = sftp_opendir(sftp, base.c_str());
  if (d == nullptr) {
    r.prune_error = "cannot list " + base + ": " + sftp_error_text(sftp);
    return;
  }
  while (sftp_attributes a = sftp_readdir(sftp, d)) {
    std::string name = a->name != nullptr ? a->name : "";
    bool is_dir = a->type == SSH_FILEXFER_TYPE_DIRECTORY;
    std::uint64_t mtime = a->mtime;
    sftp_attributes_free(a);
    if (!is_dir || name == current || !detail::looks_like_build_id(name)) continue;
    // A folder without the marker (written before markers existed) counts by its own time.
    const std::string marker = base + "/" + name + "/" + used_marker;
    if (sftp_attributes m = sftp_stat(sftp, marker.c_str()); m != nullptr) {
      mtime = std::max<std::uint64_t>(mtime, m->mtime);
      sftp_attributes_free(m);
    }
    builds.push_back({mtime, std::move(name)});
  }
  sftp_closedir(d);
  const std::size_t others_kept = keep_ - 1;
  if (builds.size() <= others_kept) return;
  std::sort(builds.begin(), builds.end(), [](const build& a, const build& b) {
    return a.used != b.used ? a.used > b.used : a.name > b.name;
  });
  for (std::size_t i = others_kept; i < builds.size(); ++i) {
    if (builds[i].used + recent_s > now) continue;
    const std::string dir = base + "/" + builds[i].name;
    sftp_dir bd = sftp_opendir(sftp, dir.c_str());
    if (bd == nullptr) continue;  // removed by a concurrent launcher
    std::vector<std::string> files;
    bool only_files = true;
    while (sftp_attributes a = sftp_readdir(sftp, bd)) {
      std::string name = a->name != nullptr ? a->name : "";
      if (name != "." && name != "..") {
        if (a->type == SSH_FILEXFER_TYPE_REGULAR)
          files.push_back(std::move(name));
        else
          only_files = false;
      }
      sftp_attributes_free(a);
    }
    sftp_closedir(bd);
    if (!only_files) continue;  // not a folder tlaunch wrote: leave it
    for (auto& f : files) sftp_unlink(sftp, (dir + "/" + f).c_str());
    if (sftp_rmdir(sftp, dir.c_str()) != 0) {
      r.prune_error = "cannot remove " + dir + ": " + sftp_error_text(sftp);
      continue;
    }
    r.removed.push_back(builds[i].name);
  }
}

}  // namespace tlaunch::ssh
