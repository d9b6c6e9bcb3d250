#include <memory>
#include <random>
#include <string>
#include <unordered_map>

#include <doctest/doctest.h>

#include <tlaunch/detail/id_map.hpp>

using tlaunch::detail::id_map;

TEST_SUITE("id_map") {
  TEST_CASE("insert, take and contains on a handful of ids") {
    id_map<std::string> m;
    CHECK(m.empty());
    m.insert(1, "one");
    m.insert(2, "two");
    m.insert(1, "uno");  // replaces
    CHECK(m.size() == 2);
    CHECK(m.contains(1));
    CHECK_FALSE(m.contains(3));
    auto v = m.take(1);
    REQUIRE(v);
    CHECK(*v == "uno");
    CHECK_FALSE(m.take(1));
    CHECK(m.size() == 1);
    CHECK(*m.take(2) == "two");
    CHECK(m.empty());
  }

  TEST_CASE("agrees with std::unordered_map over random inserts and removals") {
    // Small table, ids clustered like call ids and scattered: collisions, wrap-around
    // runs and backward shifts all happen.
    std::mt19937_64 rng(12345);
    id_map<std::uint64_t> m(8);
    std::unordered_map<std::uint64_t, std::uint64_t> ref;
    std::uint64_t next = 1;
    for (int step = 0; step < 200000; ++step) {
      auto op = rng() % 10;
      if (op < 5) {
        std::uint64_t id = (rng() % 4 == 0) ? (rng() | 1) : next++;
        m.insert(id, id * 3);
        ref[id] = id * 3;
      } else {
        std::uint64_t id = ref.empty() || rng() % 8 == 0 ? (rng() % (next + 5)) + 1
                                                         : std::next(ref.begin(), 0)->first;
        if (!ref.empty() && rng() % 2) {
          auto it = ref.begin();
          std::advance(it, static_cast<long>(rng() % std::min<std::size_t>(ref.size(), 16)));
          id = it->first;
        }
        auto got = m.take(id);
        auto it = ref.find(id);
        REQUIRE(got.has_value() == (it != ref.end()));
        if (got) {
          REQUIRE(*got == it->second);
          ref.erase(it);
        }
      }
      REQUIRE(m.size() == ref.size());
    }
    for (auto& [id, v] : ref) REQUIRE(m.contains(id));
    std::size_t seen = 0;
    m.for_each([&](std::uint64_t id, std::uint64_t& v) {
      ++seen;
      CHECK(ref.at(id) == v);
    });
    CHECK(seen == ref.size());
  }

  TEST_CASE("drain hands over every value and empties the map") {
    id_map<std::shared_ptr<int>> m;
    for (int i = 1; i <= 1000; ++i) m.insert(static_cast<std::uint64_t>(i), std::make_shared<int>(i));
    auto all = m.drain();
    CHECK(all.size() == 1000);
    long sum = 0;
    for (auto& p : all) sum += *p;
    CHECK(sum == 1000 * 1001 / 2);
    CHECK(m.empty());
    CHECK_FALSE(m.contains(5));
    m.insert(5, std::make_shared<int>(5));
    CHECK(m.size() == 1);
  }
}
