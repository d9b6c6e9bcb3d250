// ssh/binary_cache.hpp against the sshd of tools/sshd-fixture.sh. The test thread is the
// session's only user, so it calls the cache directly; the sshd runs on this machine as
// root, so the files it writes are checked here on the local file system.
#include <tlaunch/launch/ssh/binary_cache.hpp>
#include <tlaunch/launch/ssh/connect.hpp>

#include "fixture.hpp"

#include <sys/mount.h>
#include <sys/stat.h>

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
    CHECK(names == std::vector<std::string>{"node-binary"});

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
}
