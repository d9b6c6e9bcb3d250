// Snapshots of the instances a process hosts whose node types have state (tlaunch/state.hpp):
// written atomically under the state directory (--state-dir=DIR) as
// DIR/NODE/INDEX/<sequence>.snapshot, the newest `keep` kept; loaded when an instance
// starts again in the same launch (a restart) or in any launch with --resume.
// docs/guide/state.md has the rules; this file, the format:
//
//   "TLSNAP01"                 8 bytes
//   header length              4 bytes, little-endian
//   header                     cereal binary: snapshot_header below
//   state                      what the type's save wrote (header.state_bytes bytes)
//
// A file is written to a temporary name beside it, fsync'ed, renamed and its folder
// fsync'ed: a reader finds either the whole snapshot or none of it.
#pragma once

#include <asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../detail/config.hpp"
#include "../node_options.hpp"
#include "instance.hpp"

namespace tlaunch::rpc {

// What a snapshot file says of itself.
struct snapshot_header {
  std::uint32_t format = 1;
  std::string type_name;  // the node type's name (detail::type_name)
  std::string instance;   // "learner/0"
  std::string build_id;   // of the binary that wrote it
  std::uint32_t state_version = 0;
  bool versioned = false;
  std::string launch_id;  // of the launch that wrote it
  std::uint64_t sequence = 0;
  std::uint32_t incarnation = 0;
  std::int64_t written_unix_ms = 0;
  std::uint64_t state_bytes = 0;
  std::uint64_t checksum = 0;  // of the state bytes

  template <class Ar>
  void serialize(Ar& ar) {
    ar(format, type_name, instance, build_id, state_version, versioned, launch_id, sequence,
       incarnation, written_unix_ms, state_bytes, checksum);
  }
};

// A snapshot that cannot be loaded and must not be skipped: another node type's, or another
// build's that the type does not say it reads. The message names the instance and the file.
struct snapshot_refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class snapshot_store {
 public:
  // `launch_id` tells this launch's snapshots from earlier ones'; `log` takes a line for
  // the process's output.
  TLAUNCH_DECL snapshot_store(std::string dir, std::string launch_id, bool resume,
                              std::function<void(const std::string&)> log);
  TLAUNCH_DECL ~snapshot_store();
  snapshot_store(const snapshot_store&) = delete;
  snapshot_store& operator=(const snapshot_store&) = delete;

  const std::string& dir() const noexcept { return dir_; }
  bool resume() const noexcept { return resume_; }

  // Takes an instance with state into the store's care, before threads run: `policy`
  // (with `every_override` in place of its period when not negative) says how often it
  // is snapshotted and how many files are kept. Creates its folder.
  TLAUNCH_DECL void add(instance& i, const snapshot_policy& policy,
                        std::chrono::milliseconds every_override);
  bool has(const instance& i) const { return find(i) != nullptr; }

  // Loads i's latest snapshot when there is one to load: of this launch (i restarted), or
  // of any launch with resume. Returns whether it loaded one. A damaged file (cut short,
  // wrong checksum) is reported and the one before it tried; throws snapshot_refused for
  // one of another type or build (see snapshot_header).
  TLAUNCH_DECL bool restore(instance& i);

  // Writes i's state now and returns the file's path. Call it on i's strand, or while
  // nothing runs on it. Throws std::runtime_error when the file cannot be written.
  TLAUNCH_DECL std::string write(instance& i);

  // Throws when resuming from a directory that does not exist (on this host).
  TLAUNCH_DECL void check_resumable() const;

  // Starts the periodic snapshots (on each instance's strand); stop() ends them (the
  // store outlives the io threads).
  TLAUNCH_DECL void start();
  TLAUNCH_DECL void stop();

  // Writes every instance's snapshot from its strand and waits (a graceful stop); the
  // io threads must be running. Failures are reported, not thrown.
  TLAUNCH_DECL void write_all();

  // The launch id of a launch secret: not the secret, and the same in every process.
  TLAUNCH_DECL static std::string launch_id_of(const std::vector<std::uint8_t>& secret);
  // The snapshots in `folder`, newest first (sequence, path).
  TLAUNCH_DECL static std::vector<std::pair<std::uint64_t, std::string>> list(
      const std::string& folder);
  // Reads a snapshot file's header and checks its state bytes (their count and checksum)
  // without keeping them; `state_at` gets their offset in the file. Throws
  // std::runtime_error saying what is wrong with the file.
  TLAUNCH_DECL static snapshot_header read(const std::string& path,
                                           std::uint64_t* state_at = nullptr);

 private:
  struct entry;
  entry* find(const instance& i) const;
  void arm(entry& e);

  std::string dir_, launch_id_;
  bool resume_ = false;
  std::function<void(const std::string&)> log_;
  std::vector<std::unique_ptr<entry>> entries_;
};

}  // namespace tlaunch::rpc

// Compiled once in the library (tlaunch/impl/src/rpc.hpp) with TLAUNCH_SEPARATE_COMPILATION.
#if TLAUNCH_HEADER_DEFINITIONS
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <asio/post.hpp>
#include <cerrno>
#include <cereal/archives/binary.hpp>
#include <cereal/types/string.hpp>
#include <cstring>
#include <filesystem>
#include <future>
#include <istream>
#include <ostream>
#include <sstream>
#include <streambuf>

#include "../detail/build_id.hpp"
#include "../detail/crypto.hpp"

namespace tlaunch::rpc {

namespace detail {

inline std::string errno_text(int e) { return std::strerror(e); }

// mkdir -p: throws saying why `path` is not a directory it can write into.
inline void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw std::runtime_error("cannot create " + path + ": " + ec.message());
  if (!std::filesystem::is_directory(path, ec))
    throw std::runtime_error(path + " is not a directory");
}

// Writes all n bytes; 0, or the errno of the write that failed.
inline int write_fully(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return 0;
}

// A checksum of the state bytes, fed in pieces as they are written or read: 8 bytes a step,
// to keep 100 MB within a few tens of milliseconds.
class state_hasher {
 public:
  void add(const char* p, std::size_t n) {
    total_ += n;
    while (have_ > 0 && have_ < 8 && n > 0) {
      tail_[have_++] = *p++;
      --n;
    }
    if (have_ == 8) {
      mix(tail_);
      have_ = 0;
    }
    for (; n >= 8; p += 8, n -= 8) mix(p);
    while (n > 0) {
      tail_[have_++] = *p++;
      --n;
    }
  }
  std::uint64_t value() const {
    std::uint64_t h = h_ ^ total_;
    for (std::size_t i = 0; i < have_; ++i)
      h = (h ^ static_cast<unsigned char>(tail_[i])) * 0x100000001b3ull;
    return h ^ (h >> 32);
  }
  std::uint64_t bytes() const { return total_; }

 private:
  void mix(const char* p) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    h_ = (h_ ^ w) * 0xff51afd7ed558ccdull;
    h_ ^= h_ >> 29;
  }
  std::uint64_t h_ = 0x9e3779b97f4a7c15ull, total_ = 0;
  char tail_[8] = {};
  std::size_t have_ = 0;
};

// The state as the type's save writes it, straight to the file through a 64 KiB buffer (a
// large block, as cereal writes a vector of numbers, goes from the object's memory), hashed
// on the way: a snapshot of 100 MB allocates no 100 MB. A write error is kept, not thrown
// (an ostream would swallow it): the caller checks `error`.
class file_out_buf : public std::streambuf {
 public:
  file_out_buf(int fd, std::string path) : fd_(fd), path_(std::move(path)), buf_(1 << 16) {
    setp(buf_.data(), buf_.data() + buf_.size());
  }
  std::string error;
  state_hasher hash;

 protected:
  int_type overflow(int_type c) override {
    drain();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return error.empty() ? traits_type::not_eof(c) : traits_type::eof();
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (static_cast<std::size_t>(n) < buf_.size() / 2) return std::streambuf::xsputn(s, n);
    drain();
    put(s, static_cast<std::size_t>(n));
    return error.empty() ? n : 0;
  }
  int sync() override {
    drain();
    return error.empty() ? 0 : -1;
  }

 private:
  void drain() {
    put(pbase(), static_cast<std::size_t>(pptr() - pbase()));
    setp(buf_.data(), buf_.data() + buf_.size());
  }
  void put(const char* p, std::size_t n) {
    if (!error.empty() || n == 0) return;
    hash.add(p, n);
    if (int e = write_fully(fd_, p, n)) error = "cannot write " + path_ + ": " + errno_text(e);
  }
  int fd_;
  std::string path_;
  std::vector<char> buf_;
};

// A file read through a 64 KiB buffer, from its current offset; a large block goes straight
// into the reader's memory.
class file_in_buf : public std::streambuf {
 public:
  explicit file_in_buf(int fd) : fd_(fd), buf_(1 << 16) { setg(buf_.data(), buf_.data(), buf_.data()); }
  int error = 0;  // errno of a failed read

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    std::size_t n = get(buf_.data(), buf_.size());
    setg(buf_.data(), buf_.data(), buf_.data() + n);
    return n == 0 ? traits_type::eof() : traits_type::to_int_type(*gptr());
  }
  std::streamsize xsgetn(char* s, std::streamsize n) override {
    std::size_t want = static_cast<std::size_t>(n);
    std::size_t have = std::min<std::size_t>(want, static_cast<std::size_t>(egptr() - gptr()));
    std::memcpy(s, gptr(), have);
    gbump(static_cast<int>(have));
    if (have == want) return n;
    if (want - have < buf_.size() / 2) return static_cast<std::streamsize>(have) + std::streambuf::xsgetn(s + have, static_cast<std::streamsize>(want - have));
    return static_cast<std::streamsize>(have + get(s + have, want - have));
  }

 private:
  std::size_t get(char* into, std::size_t n) {
    std::size_t got = 0;
    while (got < n) {
      ssize_t r = ::read(fd_, into + got, n - got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) error = errno;
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
    return got;
  }
  int fd_;
  std::vector<char> buf_;
};

// Closes a descriptor at the end of its scope.
struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

constexpr char snapshot_magic[8] = {'T', 'L', 'S', 'N', 'A', 'P', '0', '1'};

}  // namespace detail

struct snapshot_store::entry {
  instance* inst = nullptr;
  std::string folder;
  std::chrono::milliseconds every{0};
  std::uint32_t keep = 3;
  std::uint64_t next_sequence = 1;  // on the instance's strand
  std::unique_ptr<asio::steady_timer> timer;
  bool stopped = false;  // on the strand
};

TLAUNCH_DECL snapshot_store::snapshot_store(std::string dir, std::string launch_id, bool resume,
                                            std::function<void(const std::string&)> log)
    : dir_(std::move(dir)), launch_id_(std::move(launch_id)), resume_(resume), log_(std::move(log)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

TLAUNCH_DECL snapshot_store::~snapshot_store() = default;

TLAUNCH_DECL std::string snapshot_store::launch_id_of(const std::vector<std::uint8_t>& secret) {
  std::vector<std::uint8_t> in{'t', 'l', 'a', 'u', 'n', 'c', 'h', '.', 's', 't', 'a', 't', 'e', ':'};
  in.insert(in.end(), secret.begin(), secret.end());
  auto d = tlaunch::detail::sha256(in);
  return tlaunch::detail::to_hex({d.data(), 8});
}

TLAUNCH_DECL snapshot_store::entry* snapshot_store::find(const instance& i) const {
  for (const auto& e : entries_)
    if (e->inst == &i) return e.get();
  return nullptr;
}

TLAUNCH_DECL void snapshot_store::add(instance& i, const snapshot_policy& policy,
                                      std::chrono::milliseconds every_override) {
  if (!i.state || find(i)) return;
  auto e = std::make_unique<entry>();
  e->inst = &i;
  e->folder = dir_ + "/" + std::string(i.node_name) + "/" + std::to_string(i.replica);
  e->every = every_override.count() >= 0 ? every_override : policy.every;
  e->keep = std::max<std::uint32_t>(policy.keep, 1);
  detail::make_dirs(e->folder);
  auto existing = list(e->folder);
  if (!existing.empty()) e->next_sequence = existing.front().first + 1;
  entries_.push_back(std::move(e));
}

TLAUNCH_DECL std::vector<std::pair<std::uint64_t, std::string>> snapshot_store::list(
    const std::string& folder) {
  std::vector<std::pair<std::uint64_t, std::string>> out;
  DIR* d = ::opendir(folder.c_str());
  if (!d) return out;
  while (dirent* de = ::readdir(d)) {
    std::string_view n = de->d_name;
    constexpr std::string_view ext = ".snapshot";
    if (n.size() != 16 + ext.size() || n.substr(16) != ext) continue;
    std::uint64_t seq = 0;
    bool digits = true;
    for (char c : n.substr(0, 16)) {
      if (c < '0' || c > '9') digits = false;
      seq = seq * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (digits) out.emplace_back(seq, folder + "/" + std::string(n));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

TLAUNCH_DECL snapshot_header snapshot_store::read(const std::string& path,
                                                  std::uint64_t* state_at) {
  detail::fd_closer f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) throw std::runtime_error("cannot open it: " + detail::errno_text(errno));
  detail::file_in_buf in_buf(f.fd);
  std::istream in(&in_buf);
  char prefix[12];
  if (in_buf.sgetn(prefix, 12) != 12 || std::memcmp(prefix, detail::snapshot_magic, 8) != 0)
    throw std::runtime_error(in_buf.error ? "cannot read it: " + detail::errno_text(in_buf.error)
                                          : std::string("it is not a tlaunch snapshot"));
  std::uint32_t hlen = 0;
  for (int k = 0; k < 4; ++k)
    hlen |= static_cast<std::uint32_t>(static_cast<unsigned char>(prefix[8 + k])) << (8 * k);
  if (hlen > (1u << 20)) throw std::runtime_error("its header is too long to be one");
  std::string header(hlen, '\0');
  if (in_buf.sgetn(header.data(), hlen) != static_cast<std::streamsize>(hlen))
    throw std::runtime_error("it is cut short (in its header)");
  snapshot_header h;
  try {
    std::istringstream hs(header);
    cereal::BinaryInputArchive ar(hs);
    ar(h);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("its header cannot be read: ") + e.what());
  }
  if (h.format != 1)
    throw std::runtime_error("its format is " + std::to_string(h.format) + ", not 1");
  // The state: counted and hashed a buffer at a time, not kept.
  detail::state_hasher hash;
  std::vector<char> chunk(1 << 16);
  for (;;) {
    std::streamsize n = in_buf.sgetn(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    if (n <= 0) break;
    hash.add(chunk.data(), static_cast<std::size_t>(n));
  }
  if (in_buf.error) throw std::runtime_error("cannot read it: " + detail::errno_text(in_buf.error));
  if (hash.bytes() != h.state_bytes)
    throw std::runtime_error("it is cut short: " + std::to_string(hash.bytes()) +
                             " bytes of state, not " + std::to_string(h.state_bytes));
  if (hash.value() != h.checksum) throw std::runtime_error("its state does not match its checksum");
  if (state_at) *state_at = 12 + hlen;
  return h;
}

TLAUNCH_DECL bool snapshot_store::restore(instance& i) {
  entry* e = find(i);
  if (!e) return false;
  const std::string id = i.id();
  auto files = list(e->folder);
  for (const auto& [seq, path] : files) {
    std::uint64_t state_at = 0;
    snapshot_header h;
    try {
      h = read(path, &state_at);
    } catch (const std::exception& ex) {
      if (log_) log_("snapshot " + path + " of " + id + " is damaged (" + ex.what() + "); trying the one before it");
      continue;
    }
    if (!resume_ && h.launch_id != launch_id_) {
      if (log_ && i.incarnation == 0)
        log_(id + ": " + e->folder + " holds snapshots of an earlier launch; starting afresh (--resume=" +
             dir_ + " loads them)");
      return false;
    }
    if (h.type_name != i.type_name)
      throw snapshot_refused("node " + id + ": snapshot " + path + " holds the state of " +
                             h.type_name + ", not of " + std::string(i.type_name));
    if (h.build_id != tlaunch::detail::self_build_id()) {
      if (!i.state->versioned || !h.versioned)
        throw snapshot_refused(
            "node " + id + ": snapshot " + path + " was written by another build of the program (" +
            h.build_id + "); a node type that declares `static constexpr std::uint32_t "
            "state_version` reads the snapshots of other builds up to that version");
      if (h.state_version > i.state->version)
        throw snapshot_refused("node " + id + ": snapshot " + path + " has state_version " +
                               std::to_string(h.state_version) + ", newer than this build's " +
                               std::to_string(i.state->version));
    }
    try {
      detail::fd_closer f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
      if (f.fd < 0 || ::lseek(f.fd, static_cast<off_t>(state_at), SEEK_SET) < 0)
        throw std::runtime_error("cannot read it again: " + detail::errno_text(errno));
      detail::file_in_buf in_buf(f.fd);
      std::istream in(&in_buf);
      i.state->load(i.object.get(), in, h.versioned ? h.state_version : 0);
      if (in_buf.error) throw std::runtime_error("cannot read it: " + detail::errno_text(in_buf.error));
    } catch (const std::exception& ex) {
      throw snapshot_refused("node " + id + ": snapshot " + path + " cannot be loaded: " + ex.what());
    }
    i.resumed = true;
    if (log_)
      log_(id + ": loaded snapshot " + path + " (" + std::to_string(h.state_bytes) + " bytes, " +
           (h.launch_id == launch_id_ ? "this launch" : "an earlier launch") + ")");
    return true;
  }
  return false;
}

TLAUNCH_DECL std::string snapshot_store::write(instance& i) {
  entry* e = find(i);
  if (!e) {
    if (!i.state)
      throw std::logic_error("node " + i.id() + " has no state to snapshot: its type " +
                             std::string(i.type_name) + " defines no state(Archive&) (tlaunch/state.hpp)");
    throw std::logic_error("node " + i.id() + ": snapshots need --state-dir=DIR");
  }
  snapshot_header h;
  h.type_name = std::string(i.type_name);
  h.instance = i.id();
  h.build_id = tlaunch::detail::self_build_id();
  h.state_version = i.state->version;
  h.versioned = i.state->versioned;
  h.launch_id = launch_id_;
  h.sequence = e->next_sequence++;
  h.incarnation = i.incarnation;
  h.written_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  // The header's length does not depend on its numbers (cereal writes them at full width):
  // it is written first with the state's size and checksum at 0, and again once known.
  auto header_bytes = [&h] {
    std::ostringstream hs;
    {
      cereal::BinaryOutputArchive ar(hs);
      ar(h);
    }
    std::string header = std::move(hs).str();
    std::string out(detail::snapshot_magic, 8);
    for (int k = 0; k < 4; ++k) out += static_cast<char>((header.size() >> (8 * k)) & 0xff);
    return out + header;
  };
  const std::string first = header_bytes();

  char name[32];
  std::snprintf(name, sizeof name, "%016llu.snapshot", static_cast<unsigned long long>(h.sequence));
  const std::string path = e->folder + "/" + name;
  const std::string tmp = e->folder + "/." + name + ".tmp";
  {
    detail::fd_closer f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    if (f.fd < 0) throw std::runtime_error("cannot create " + tmp + ": " + detail::errno_text(errno));
    try {
      if (int err = detail::write_fully(f.fd, first.data(), first.size()))
        throw std::runtime_error("cannot write " + tmp + ": " + detail::errno_text(err));
      detail::file_out_buf out_buf(f.fd, tmp);
      {
        std::ostream out(&out_buf);
        try {
          i.state->save(i.object.get(), out);
        } catch (...) {
          // A failed write shows as the archive's "failed to write": say why.
          if (!out_buf.error.empty()) throw std::runtime_error(out_buf.error);
          throw;
        }
        out.flush();
      }
      if (!out_buf.error.empty()) throw std::runtime_error(out_buf.error);
      h.state_bytes = out_buf.hash.bytes();
      h.checksum = out_buf.hash.value();
      const std::string final_header = header_bytes();
      if (final_header.size() != first.size() ||
          ::pwrite(f.fd, final_header.data(), final_header.size(), 0) !=
              static_cast<ssize_t>(final_header.size()))
        throw std::runtime_error("cannot write " + tmp + "'s header: " + detail::errno_text(errno));
      if (::fsync(f.fd) != 0)
        throw std::runtime_error("cannot sync " + tmp + ": " + detail::errno_text(errno));
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " + detail::errno_text(err));
  }
  if (int dfd = ::open(e->folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  // The newest `keep` stay.
  auto files = list(e->folder);
  for (std::size_t k = e->keep; k < files.size(); ++k) ::unlink(files[k].second.c_str());
  return path;
}

TLAUNCH_DECL void snapshot_store::arm(entry& e) {
  e.timer->expires_after(e.every);
  e.timer->async_wait([this, &e](std::error_code ec) {
    if (ec || e.stopped) return;
    try {
      write(*e.inst);
    } catch (const std::exception& ex) {
      if (log_) log_(e.inst->id() + ": periodic snapshot failed: " + ex.what());
    }
    arm(e);
  });
}

TLAUNCH_DECL void snapshot_store::start() {
  for (auto& e : entries_) {
    if (e->every.count() <= 0 || e->timer) continue;
    e->timer = std::make_unique<asio::steady_timer>(e->inst->strand);
    asio::post(e->inst->strand, [this, p = e.get()] { arm(*p); });
  }
}

TLAUNCH_DECL void snapshot_store::stop() {
  for (auto& e : entries_) {
    if (!e->timer) continue;
    asio::post(e->inst->strand, [p = e.get()] {
      p->stopped = true;
      p->timer->cancel();
    });
  }
}

TLAUNCH_DECL void snapshot_store::check_resumable() const {
  struct stat st{};
  if (!resume_) return;
  if (::stat(dir_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return;
  char host[256] = "this host";
  ::gethostname(host, sizeof host - 1);
  throw std::runtime_error("--resume=" + dir_ + ": no such directory on " + host +
                           (::stat(dir_.c_str(), &st) == 0 ? " (a file is there)" : ""));
}

TLAUNCH_DECL void snapshot_store::write_all() {
  for (auto& e : entries_) {
    std::promise<void> done;
    auto f = done.get_future();
    asio::post(e->inst->strand, [this, p = e.get(), &done] {
      try {
        write(*p->inst);
      } catch (const std::exception& ex) {
        if (log_) log_(p->inst->id() + ": snapshot at stop failed: " + ex.what());
      }
      done.set_value();
    });
    f.wait();
  }
}

}  // namespace tlaunch::rpc
#endif
