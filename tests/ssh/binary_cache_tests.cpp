// ssh/binary_cache.hpp against the sshd of tools/sshd-fixture.sh. The test thread is the
// session's only user, so it calls the cache directly; the sshd runs on this machine as
// root, so the files it writes are checked here on the local file system.
#include <tlaunch/launch/ssh/binary_cache.hpp>
#include <tlaunch/launch/ssh/connect.hpp>
#include <tlaunch/launch/ssh/upload_progress.hpp>

#include "fixture.hpp"

#include <sys/mount.h>
#include <sys/stat.h>
#include <utime.h>

#include <algorithm>
#include <chrono>
#include <ctime>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

using namespace ssh_test;

namespace {

// A node binary of several upload chunks.
std::string binary_content() {
  std::string content = "#!/bin/sh\necho uploaded-ok \"$@\"\n";
  content += "# padding so the copy takes several writes\n#";
  content += std::string(300 * 1024, 'p');
  content += "\n";
  return content;
}

// Sets a file's or folder's modification time to `age` seconds ago.
void make_older(const fs::path& p, long age) {
  const auto t = static_cast<std::time_t>(std::time(nullptr) - age);
  struct utimbuf times {t, t};
  REQUIRE(::utime(p.c_str(), &times) == 0);
}

}  // namespace

TEST_SUITE("ssh_binary_cache") {
  TEST_CASE("upload copies once, executable, with no temporary file left, then skips") {
    auto s = ssh::login(host(), options());
    ssh::binary_cache cache(s.get(), host(), ".cache/tlaunch");
    temp_dir tmp;
    auto local = tmp.path / "node-binary";
    const std::string content = binary_content();
    write_file(local, content);
    const std::string id = unique_id("cache");
    const fs::path dir = "/root/.cache/tlaunch/" + id;

    std::vector<std::pair<std::uint64_t, std::uint64_t>> calls;
    auto r = cache.upload(local.string(), id, [&](std::uint64_t done, std::uint64_t total) {
      calls.emplace_back(done, total);
    });
    CHECK(r.path == (dir / "node-binary").string());
    CHECK_FALSE(r.skipped);
    // 0, then one per chunk
    const std::size_t chunks = (content.size() + ssh::binary_cache::upload_chunk - 1) /
                               ssh::binary_cache::upload_chunk;
    REQUIRE(calls.size() == chunks + 1);
    CHECK(calls.front() == std::pair<std::uint64_t, std::uint64_t>(0, content.size()));
    CHECK(calls.back() == std::pair<std::uint64_t, std::uint64_t>(content.size(), content.size()));
    CHECK(read_file(r.path) == content);
    struct stat st {};
    REQUIRE(::stat(r.path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0755);
    std::vector<std::string> names;
    for (auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{ssh::binary_cache::used_marker, "node-binary"});

    // again, from another connection as another launch would: skipped, one progress call
    auto s2 = ssh::login(host("127.0.0.3"), options());
    ssh::binary_cache cache2(s2.get(), host("127.0.0.3"), "");
    calls.clear();
    auto again = cache2.upload(local.string(), id, [&](std::uint64_t done, std::uint64_t total) {
      calls.emplace_back(done, total);
    });
    CHECK(again.path == r.path);
    CHECK(again.skipped);
    CHECK(calls == std::vector<std::pair<std::uint64_t, std::uint64_t>>{
                       {content.size(), content.size()}});

    // a cached file that lost its x bits gets them back
    REQUIRE(::chmod(r.path.c_str(), 0644) == 0);
    CHECK(cache2.upload(local.string(), id).skipped);
    REQUIRE(::stat(r.path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0755);

    // a different size means a different file: copied again
    write_file(local, content + "more\n");
    CHECK_FALSE(cache.upload(local.string(), id).skipped);
    CHECK(read_file(r.path) == content + "more\n");

    fs::remove_all(dir);
  }

  TEST_CASE("an absolute cache directory is used as it is, created with its parents") {
    auto s = ssh::login(host(), options());
    temp_dir tmp;
    const fs::path base = tmp.path / "deep" / "cache";
    ssh::binary_cache cache(s.get(), host(), base.string());
    write_file(tmp.path / "bin", "x");
    auto r = cache.upload((tmp.path / "bin").string(), "id1");
    CHECK(r.path == (base / "id1" / "bin").string());
    CHECK(read_file(r.path) == "x");
  }

  TEST_CASE("upload errors name the host and the file") {
    auto s = ssh::login(host(), options());
    ssh::binary_cache cache(s.get(), host(), ".cache/tlaunch");
    auto what = error_of([&] { cache.upload("/nonexistent/tlaunch-binary", "x"); });
    CHECK(contains(what, "ssh root@127.0.0.2:"));
    CHECK(contains(what, "/nonexistent/tlaunch-binary"));

    temp_dir tmp;
    write_file(tmp.path / "bin", "x");
    for (const char* bad : {"../escape", "", ".", ".."}) {
      CAPTURE(bad);
      what = error_of([&] { cache.upload((tmp.path / "bin").string(), bad); });
      CHECK(contains(what, "bad build id"));
    }

    ssh::binary_cache nowhere(s.get(), host(), "/proc/tlaunch-cannot-be-here");
    what = error_of([&] { nowhere.upload((tmp.path / "bin").string(), "x"); });
    CHECK(contains(what, "ssh root@127.0.0.2:"));
    CHECK(contains(what, "/proc/tlaunch-cannot-be-here"));

    write_file(tmp.path / "file", "");
    ssh::binary_cache under_file(s.get(), host(), (tmp.path / "file").string());
    what = error_of([&] { under_file.upload((tmp.path / "bin").string(), "x"); });
    CHECK(contains(what, "is not a directory"));
  }

  TEST_CASE("a full remote disk is reported as such, and the cache still works after it") {
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
    auto s = ssh::login(host(), options());
    ssh::binary_cache cache(s.get(), host(), mnt.string());
    auto what = error_of([&] { cache.upload(local.string(), "full"); });
    CHECK(contains(what, "ssh root@127.0.0.2:"));
    CHECK(contains(what, "no space left"));
    // the partial temporary file is gone
    CHECK(fs::is_empty(mnt / "full"));
    // the same SFTP session takes a file that fits
    write_file(tmp.path / "small-binary", "fits");
    auto r = cache.upload((tmp.path / "small-binary").string(), "full");
    CHECK(read_file(r.path) == "fits");
  }

  TEST_CASE("the cache keeps the most recently used builds, never one used in the last minute") {
    auto s = ssh::login(host(), options());
    temp_dir tmp;
    const fs::path base = tmp.path / "cache";
    write_file(tmp.path / "bin", "x");
    auto build = [](char c) { return std::string(40, c); };  // named like GNU build ids
    ssh::binary_cache keep_all(s.get(), host(), base.string());
    for (char c : {'a', 'b', 'c', 'd'}) {
      auto r = keep_all.upload((tmp.path / "bin").string(), build(c));
      CHECK(r.removed.empty());
    }
    // used 4 h, 3 h and 2 h ago, and 30 s ago
    const std::pair<char, long> ages[] = {{'a', 4 * 3600}, {'b', 3 * 3600}, {'c', 2 * 3600}, {'d', 30}};
    for (auto [c, age] : ages) {
      make_older(base / build(c) / ssh::binary_cache::used_marker, age);
      make_older(base / build(c), age);
    }
    // not the launcher's: a folder named otherwise, and a build-like folder holding a folder
    fs::create_directories(base / "notes");
    make_older(base / "notes", 5 * 3600);
    const std::string odd = std::string(20, 'f');
    fs::create_directories(base / odd / "sub");
    make_older(base / odd, 5 * 3600);

    ssh::binary_cache keep3(s.get(), host(), base.string(), 3);
    auto r = keep3.upload((tmp.path / "bin").string(), build('e'));
    CHECK(r.prune_error == "");
    CHECK(r.removed == std::vector<std::string>{build('b'), build('a')});
    for (char c : {'c', 'd', 'e'}) CHECK(fs::exists(base / build(c) / "bin"));
    for (char c : {'a', 'b'}) CHECK_FALSE(fs::exists(base / build(c)));
    CHECK(fs::exists(base / "notes"));
    CHECK(fs::exists(base / odd / "sub"));

    // keep 1: c goes; d, used 30 s ago, stays though it is beyond the count
    ssh::binary_cache keep1(s.get(), host(), base.string(), 1);
    r = keep1.upload((tmp.path / "bin").string(), build('e'));
    CHECK(r.skipped);
    CHECK(r.removed == std::vector<std::string>{build('c')});
    CHECK(fs::exists(base / build('d') / "bin"));
    CHECK(fs::exists(base / build('e') / "bin"));
  }

  TEST_CASE("upload progress: on a terminal a line every half second, in every case one when done") {
    using namespace std::chrono_literals;
    const auto t0 = ssh::upload_progress::clock::now();
    constexpr std::uint64_t MiB = 1 << 20;
    ssh::upload_progress quiet("h1", false);
    CHECK_FALSE(quiet.update(0, 4 * MiB, t0));
    CHECK_FALSE(quiet.update(MiB, 4 * MiB, t0 + 1s));
    auto done = quiet.update(4 * MiB, 4 * MiB, t0 + 2s);
    REQUIRE(done);
    CHECK(*done == "uploaded 4.0 MiB to h1 in 2.0 s (2.0 MiB/s)");
    CHECK(quiet.copied());

    ssh::upload_progress tty("h2", true);
    CHECK_FALSE(tty.update(0, 4 * MiB, t0));
    CHECK_FALSE(tty.update(MiB / 2, 4 * MiB, t0 + 100ms));  // too soon
    auto line = tty.update(MiB, 4 * MiB, t0 + 1s);
    REQUIRE(line);
    CHECK(*line == "uploading to h2: 1.0 MiB of 4.0 MiB (25%), 1.0 MiB/s, about 3 s left");
    CHECK_FALSE(tty.update(2 * MiB, 4 * MiB, t0 + 1200ms));
    CHECK(tty.update(4 * MiB, 4 * MiB, t0 + 1300ms));

    // a binary already cached reports (total, total) alone: no copy, no line
    ssh::upload_progress cached("h3", true);
    CHECK_FALSE(cached.update(4 * MiB, 4 * MiB, t0));
    CHECK_FALSE(cached.copied());
    CHECK(ssh::human_bytes(512) == "512 B");
    CHECK(ssh::human_bytes(1536) == "1.5 KiB");
  }
}
