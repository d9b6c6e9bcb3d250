#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <tlaunch/launch/registry.hpp>  // parse
#include <tlaunch/launch/terminal/output.hpp>

using tlaunch::launch::color_mode;
using tlaunch::launch::output_printer;
using tlaunch::launch::stream;

namespace {

// A FILE* whose bytes the test can read back.
struct memory_file {
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* f = ::open_memstream(&buf, &len);
  ~memory_file() {
    std::fclose(f);
    std::free(buf);
  }
  std::string text() {
    std::fflush(f);
    return std::string(buf, len);
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A fresh directory under /tmp, removed with its contents at scope exit.
struct temp_dir {
  std::string path;
  temp_dir() {
    char name[] = "/tmp/tlaunch_logs_XXXXXX";
    REQUIRE(::mkdtemp(name));
    path = name;
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_SUITE("output") {
  TEST_CASE("without colors a line is [name] line, stdout and stderr kept apart") {
    memory_file out, err;
    output_printer p(color_mode::never, {}, out.f, err.f);
    p.print("worker/3", stream::out, "hello");
    p.print("worker/3@host2", stream::err, "oops: disk full");
    p.print("launcher", stream::out, "");
    CHECK(out.text() == "[worker/3] hello\n[launcher] \n");
    CHECK(err.text() == "[worker/3@host2] oops: disk full\n");
  }

  TEST_CASE("auto colors are off for a target that is not a terminal") {
    memory_file out, err;
    output_printer p(color_mode::automatic, {}, out.f, err.f);
    p.print("worker/0", stream::out, "x");
    CHECK(out.text() == "[worker/0] x\n");
  }

  TEST_CASE("forced colors wrap the prefix in an ANSI color, the same for every replica") {
    memory_file out, err;
    output_printer p(color_mode::always, {}, out.f, err.f);
    p.print("worker/0", stream::out, "a");
    p.print("worker/1@host2", stream::err, "b");
    std::string o = out.text(), e = err.text();
    CHECK(o.find("\x1b[38;2;") == 0);  // a 24-bit foreground color
    CHECK(o.find("[worker/0]\x1b[0m a\n") != std::string::npos);
    CHECK(e.find("[worker/1@host2]\x1b[0m b\n") != std::string::npos);
    // Same node name, same color.
    CHECK(o.substr(0, o.find('m') + 1) == e.substr(0, e.find('m') + 1));
    // Colors come from a palette: among many node names, more than one is used.
    std::set<std::string> colors;
    for (const char* n : {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}) {
      memory_file one;
      output_printer r(color_mode::always, {}, one.f, one.f);
      r.print(std::string(n) + "/0", stream::out, "x");
      std::string t = one.text();
      colors.insert(t.substr(0, t.find('m') + 1));
    }
    CHECK(colors.size() > 1);
  }

  TEST_CASE("the mode comes from the --color flag's value; another value is a usage error") {
    auto parse = [](const char* flag) {
      const char* argv[] = {"prog", flag};
      return tlaunch::launch::parse(2, argv).color;
    };
    CHECK(parse("--color=always") == color_mode::always);
    CHECK(parse("--color=never") == color_mode::never);
    CHECK(parse("--color=auto") == color_mode::automatic);
    CHECK_THROWS_AS(parse("--color=sometimes"), tlaunch::launch::usage_error);
  }

  TEST_CASE("a log directory gets one file per node with both streams, created on demand") {
    temp_dir tmp;
    std::string dir = tmp.path + "/deep/logs";  // mkdir -p
    memory_file out, err;
    {
      output_printer p(color_mode::always, dir, out.f, err.f);
      CHECK_FALSE(std::filesystem::exists(dir));  // nothing printed yet
      p.print("worker/3", stream::out, "first");
      p.print("worker/3@host2", stream::err, "second");
      p.print("server/0", stream::out, "other node");
      p.print("launcher", stream::err, "launcher line");
      // Written as it goes, not only at the end: a crash keeps what was printed.
      CHECK(read_file(dir + "/worker.3.log") == "first\nsecond\n");
    }
    CHECK(read_file(dir + "/server.0.log") == "other node\n");
    CHECK(read_file(dir + "/launcher.log") == "launcher line\n");
    std::set<std::string> names;
    for (auto& e : std::filesystem::directory_iterator(dir)) names.insert(e.path().filename());
    CHECK(names == std::set<std::string>{"worker.3.log", "server.0.log", "launcher.log"});
  }

  TEST_CASE("a log file that cannot be written is reported once, and printing goes on") {
    temp_dir tmp;
    std::string blocker = tmp.path + "/file";
    std::ofstream(blocker) << "not a directory";
    memory_file out, err;
    output_printer p(color_mode::never, blocker + "/logs", out.f, err.f);
    p.print("worker/0", stream::out, "one");
    p.print("worker/0", stream::out, "two");
    CHECK(out.text() == "[worker/0] one\n[worker/0] two\n");
    std::string e = err.text();
    CHECK(e.find("cannot write the log file " + blocker + "/logs/worker.0.log") !=
          std::string::npos);
    CHECK(e.find("cannot write") == e.rfind("cannot write"));
  }

  TEST_CASE("last_lines keeps the last N lines of each node, oldest first") {
    memory_file out, err;
    output_printer p(color_mode::never, {}, out.f, err.f, 3);
    for (int i = 0; i < 10; ++i)
      p.print("worker/0", i % 2 ? stream::err : stream::out, "line " + std::to_string(i));
    p.print("worker/1", stream::out, "only");
    CHECK(p.last_lines("worker/0") == std::vector<std::string>{"line 7", "line 8", "line 9"});
    CHECK(p.last_lines("worker/1") == std::vector<std::string>{"only"});
    CHECK(p.last_lines("nobody/0").empty());
    output_printer d(color_mode::never, {}, out.f, err.f);
    for (int i = 0; i < 50; ++i) d.print("w/0", stream::out, std::to_string(i));
    auto kept = d.last_lines("w/0");
    REQUIRE(kept.size() == 20);  // the default
    CHECK(kept.front() == "30");
    CHECK(kept.back() == "49");
  }

  TEST_CASE("printing from 4 threads produces whole lines only") {
    memory_file out, err;
    temp_dir tmp;
    output_printer p(color_mode::always, tmp.path, out.f, err.f);
    constexpr int per_thread = 2000;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&p, t] {
        std::string name = "node/" + std::to_string(t);
        std::string body(100 + t * 37, static_cast<char>('a' + t));
        for (int i = 0; i < per_thread; ++i) p.print(name, i % 3 ? stream::out : stream::err, body);
      });
    for (auto& th : threads) th.join();
    // Strip colors, then every line must be one thread's exact line.
    int whole = 0, broken = 0;
    for (std::string all = out.text() + err.text(); auto pos = all.find('\n');) {
      if (pos == std::string::npos) break;
      std::string line = all.substr(0, pos);
      all.erase(0, pos + 1);
      std::string plain;
      for (std::size_t i = 0; i < line.size(); ++i) {
        if (line[i] == '\x1b') {
          i = line.find('m', i);
          if (i == std::string::npos) break;
          continue;
        }
        plain += line[i];
      }
      bool ok = plain.size() > 9 && plain.compare(0, 6, "[node/") == 0 && plain[7] == ']';
      if (ok) {
        int t = plain[6] - '0';
        ok = t >= 0 && t < 4 &&
             plain.substr(9) == std::string(100 + t * 37, static_cast<char>('a' + t));
      }
      ++(ok ? whole : broken);
    }
    CHECK(broken == 0);
    CHECK(whole == 4 * per_thread);
    for (int t = 0; t < 4; ++t) {
      std::string log = read_file(tmp.path + "/node." + std::to_string(t) + ".log");
      CHECK(log.size() == per_thread * (100 + t * 37 + 1));
    }
  }
}
