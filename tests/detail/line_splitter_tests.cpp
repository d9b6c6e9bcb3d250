#include <algorithm>
#include <cstddef>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include <tlaunch/detail/line_splitter.hpp>

using tlaunch::detail::line_splitter;

namespace {

using lines = std::vector<std::string>;

// Feeds the chunks in order, then finishes.
lines split(const std::vector<std::string_view>& chunks, bool finish = true) {
  line_splitter s;
  lines out;
  auto collect = [&](std::string_view l) { out.emplace_back(l); };
  for (auto c : chunks) s.feed(c, collect);
  if (finish) s.finish(collect);
  return out;
}

}  // namespace

TEST_SUITE("line_splitter") {
  TEST_CASE("complete lines come out without their newline, as soon as they end") {
    line_splitter s;
    lines out;
    auto collect = [&](std::string_view l) { out.emplace_back(l); };
    s.feed("one\ntwo\nthr", collect);
    CHECK(out == lines{"one", "two"});
    s.feed("ee", collect);
    CHECK(out.size() == 2);  // no newline yet
    s.feed("\n", collect);
    CHECK(out == lines{"one", "two", "three"});
    s.finish(collect);  // nothing pending
    CHECK(out.size() == 3);
  }

  TEST_CASE("empty lines and empty chunks") {
    CHECK(split({"\n\n"}) == lines{"", ""});
    CHECK(split({"", "a", "", "\n", ""}) == lines{"a"});
    CHECK(split({}).empty());
    CHECK(split({"\n", "\n", "x\n"}) == lines{"", "", "x"});
  }

  TEST_CASE("a last line without a newline comes out at finish, once") {
    line_splitter s;
    lines out;
    auto collect = [&](std::string_view l) { out.emplace_back(l); };
    s.feed("done\nlast", collect);
    CHECK(out == lines{"done"});
    s.finish(collect);
    CHECK(out == lines{"done", "last"});
    s.finish(collect);
    CHECK(out.size() == 2);
    // The splitter goes on after finish with an empty line buffer.
    s.feed("next\n", collect);
    CHECK(out.back() == "next");
    CHECK(split({"tail"}, false).empty());
  }

  TEST_CASE("one trailing carriage return is dropped, others are kept") {
    CHECK(split({"crlf\r\n"}) == lines{"crlf"});
    CHECK(split({"a\rb\r\n"}) == lines{"a\rb"});
    CHECK(split({"two\r\r\n"}) == lines{"two\r"});
    CHECK(split({"\r\n"}) == lines{""});
    CHECK(split({"\rlead\n"}) == lines{"\rlead"});
    // The \r and the \n in different reads (a pty's "\r\n" often splits).
    CHECK(split({"split\r", "\nnext\r", "\n"}) == lines{"split", "next"});
    // At finish too.
    CHECK(split({"end\r"}) == lines{"end"});
  }

  TEST_CASE("any split of the stream into reads gives the same lines") {
    const std::string text = "alpha\nbeta\r\n\ngamma delta\r\n\r\nx\nlast line";
    const lines whole = split({text});
    REQUIRE(whole == lines{"alpha", "beta", "", "gamma delta", "", "x", "last line"});
    // Every single cut point, and byte by byte.
    for (std::size_t cut = 0; cut <= text.size(); ++cut) {
      CAPTURE(cut);
      std::string_view t = text;
      CHECK(split({t.substr(0, cut), t.substr(cut)}) == whole);
    }
    std::vector<std::string_view> bytes;
    for (std::size_t i = 0; i < text.size(); ++i)
      bytes.push_back(std::string_view(text).substr(i, 1));
    CHECK(split(bytes) == whole);
  }

  TEST_CASE("random output in random reads") {
    std::mt19937 rng(2024);
    const char alphabet[] = "ab \r\n\n";
    for (int round = 0; round < 200; ++round) {
      std::string text;
      std::size_t len = rng() % 400;
      for (std::size_t i = 0; i < len; ++i) text += alphabet[rng() % (sizeof alphabet - 1)];
      // Reference: split at each '\n', one trailing '\r' dropped, a non-empty tail kept.
      lines expected;
      std::size_t start = 0;
      for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
        std::string l = text.substr(start, nl - start);
        if (!l.empty() && l.back() == '\r') l.pop_back();
        expected.push_back(l);
      }
      if (start < text.size()) {
        std::string l = text.substr(start);
        if (l.back() == '\r') l.pop_back();
        expected.push_back(l);
      }
      std::vector<std::string_view> chunks;
      for (std::size_t at = 0; at < text.size();) {
        std::size_t n = std::min<std::size_t>(text.size() - at, rng() % 12);
        chunks.push_back(std::string_view(text).substr(at, n));
        at += n;
      }
      CAPTURE(round);
      CHECK(split(chunks) == expected);
    }
  }

  TEST_CASE("a line longer than max_line without a newline is cut") {
    const std::size_t max = line_splitter::max_line;
    line_splitter s;
    lines out;
    auto collect = [&](std::string_view l) { out.emplace_back(l); };
    // Exactly max_line bytes are still one line in the making...
    std::string run(max, 'r');
    s.feed(std::string_view(run).substr(0, max / 2), collect);
    s.feed(std::string_view(run).substr(max / 2), collect);
    CHECK(out.empty());
    // ...one more byte and what has come so far is emitted as a line.
    s.feed("s", collect);
    REQUIRE(out.size() == 1);
    CHECK(out[0] == run + "s");
    // The rest of the runaway line starts afresh.
    s.feed("tail\n", collect);
    REQUIRE(out.size() == 2);
    CHECK(out[1] == "tail");
  }

  TEST_CASE("a long line that ends in the same read is not cut") {
    std::string big(3 * line_splitter::max_line, 'b');
    CHECK(split({big + "\nafter\n"}) == lines{big, "after"});
    // Ended by a newline arriving right after the limit was reached.
    std::string exact(line_splitter::max_line, 'e');
    CHECK(split({exact, "\n"}) == lines{exact});
  }
}
