#include <deque>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>

#include <doctest/doctest.h>

#include <tlaunch/detail/id_map.hpp>

using tlaunch::detail::id_map;
using tlaunch::detail::seq_id_map;

TEST_SUITE("id_map") {
  TEST_CASE_TEMPLATE("insert, take and contains on a handful of ids", M, id_map<std::string>,
                     seq_id_map<std::string>) {
    M m;
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

  TEST_CASE_TEMPLATE("agrees with std::unordered_map over random inserts and removals", M,
                     id_map<std::uint64_t>, seq_id_map<std::uint64_t>) {
    // Small table, ids clustered like call ids and scattered: collisions, wrap-around
    // runs and backward shifts all happen (for seq_id_map: ring slots taken by
    // older ids, the spill map, and growth of the ring).
    std::mt19937_64 rng(12345);
    M m(8);
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

  TEST_CASE_TEMPLATE("drain hands over every value and empties the map", M,
                     id_map<std::shared_ptr<int>>, seq_id_map<std::shared_ptr<int>>) {
    M m;
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

  TEST_CASE("seq_id_map: consecutive ids stay in the ring; long-lived ones spill, then it grows") {
    seq_id_map<std::uint64_t> m(16, 64);
    CHECK(m.ring_size() == 16);
    // A window of 16 consecutive ids in flight, completed oldest first, many times over.
    std::uint64_t next = 1;
    for (; next <= 16; ++next) m.insert(next, next);
    for (int i = 0; i < 1000; ++i, ++next) {
      auto v = m.take(next - 16);
      REQUIRE(v);
      CHECK(*v == next - 16);
      m.insert(next, next);
    }
    CHECK(m.size() == 16);
    CHECK(m.ring_size() == 16);  // never spilled
    // One call that never completes (its slot keeps an old id): later ids that
    // land on that slot spill, and everything is still found.
    REQUIRE(m.take(next - 16));
    std::deque<std::uint64_t> window;
    for (std::uint64_t id = next - 15; id < next; ++id) window.push_back(id);
    const std::uint64_t stuck = next;
    m.insert(next++, 424242);
    for (int i = 0; i < 200; ++i, ++next) {
      auto v = m.take(window.front());
      REQUIRE(v);
      CHECK(*v == window.front());
      window.pop_front();
      m.insert(next, next);
      window.push_back(next);
    }
    CHECK(m.size() == 16);
    CHECK(m.contains(stuck));
    CHECK(*m.take(stuck) == 424242);
    CHECK_FALSE(m.contains(stuck));
    // More in flight than the ring holds: it grows up to its limit and keeps every value.
    std::vector<std::uint64_t> ids;
    for (int i = 0; i < 300; ++i, ++next) {
      m.insert(next, next * 2);
      ids.push_back(next);
    }
    CHECK(m.ring_size() == 64);
    for (auto id : ids) {
      auto v = m.take(id);
      REQUIRE(v);
      CHECK(*v == id * 2);
    }
    CHECK(m.size() == 15);
    for (auto id : window) CHECK(*m.take(id) == id);
    CHECK(m.empty());
  }
}
