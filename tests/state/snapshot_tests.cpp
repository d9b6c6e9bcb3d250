// The snapshot store on its own (rpc/snapshots.hpp): what a file holds, how many are kept,
// which are loaded (this launch's, or any with --resume), and how a damaged one is passed over.
#include <doctest/doctest.h>

#include <tlaunch/rpc/snapshots.hpp>
#include <tlaunch/state.hpp>

#include <asio/io_context.hpp>
#include <cereal/types/map.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "../common/temp_dir.hpp"

using tlaunch::test_support::temp_dir;
namespace rpc = tlaunch::rpc;

namespace {

struct Model {
  std::map<std::string, double> weights;
  std::uint64_t steps = 0;
  template <class Archive>
  void state(Archive& ar) {
    ar(weights, steps);
  }
};

struct Split {
  std::vector<int> saved;
  int loads = 0;
  template <class Archive>
  void save_state(Archive& ar) const {
    ar(saved);
  }
  template <class Archive>
  void load_state(Archive& ar) {
    ar(saved);
    ++loads;
  }
};

struct Plain {
  int x = 0;
};

static_assert(tlaunch::detail::has_state<Model>);
static_assert(tlaunch::detail::has_state<Split>);
static_assert(!tlaunch::detail::has_state<Plain>);

// One hosted instance of T named "model/0", as the program's hosting makes it.
template <class T>
struct hosted {
  asio::io_context io;
  rpc::instance inst{io, "model", 0, 1, 0};
  T* object = new T{};
  hosted() {
    inst.object = std::shared_ptr<void>(object, [](void* p) { delete static_cast<T*>(p); });
    inst.type_name = "Model";
    inst.state = tlaunch::detail::state_ops_of<T>();
  }
};

std::vector<std::string> lines;
rpc::snapshot_store store_at(const std::string& dir, const std::string& launch, bool resume) {
  return rpc::snapshot_store(dir, launch, resume, [](const std::string& l) { lines.push_back(l); });
}

}  // namespace

TEST_CASE("a snapshot holds its header and the state; the newest `keep` stay") {
  temp_dir dir("tlaunch-snap");
  hosted<Model> a;
  a.object->weights = {{"w", 0.5}, {"b", -2}};
  rpc::snapshot_store s(dir.path.string(), "launch-1", false, nullptr);
  s.add(a.inst, {.keep = 2}, std::chrono::milliseconds(-1));
  std::string last;
  for (int i = 1; i <= 4; ++i) {
    a.object->steps = static_cast<std::uint64_t>(i);
    last = s.write(a.inst);
  }
  CHECK(last == (dir.path / "model/0/0000000000000004.snapshot").string());
  auto files = rpc::snapshot_store::list((dir.path / "model/0").string());
  REQUIRE(files.size() == 2);
  CHECK(files[0].first == 4);
  CHECK(files[1].first == 3);
  std::uint64_t state_at = 0;
  auto h = rpc::snapshot_store::read(last, &state_at);
  CHECK(h.type_name == "Model");
  CHECK(h.instance == "model/0");
  CHECK(h.launch_id == "launch-1");
  CHECK(h.sequence == 4);
  CHECK(h.state_bytes + state_at == std::filesystem::file_size(last));
  CHECK(state_at > 12);
  CHECK(!h.build_id.empty());

  SUBCASE("this launch's snapshot is loaded into a new object") {
    hosted<Model> b;
    rpc::snapshot_store s2(dir.path.string(), "launch-1", false, nullptr);
    s2.add(b.inst, {}, std::chrono::milliseconds(-1));
    CHECK(s2.restore(b.inst));
    CHECK(b.inst.resumed);
    CHECK(b.object->steps == 4);
    CHECK(b.object->weights == a.object->weights);
    // Its next snapshot follows the newest on disk.
    CHECK(s2.write(b.inst).ends_with("0000000000000005.snapshot"));
  }
  SUBCASE("another launch's is loaded only when resuming") {
    hosted<Model> b;
    lines.clear();
    auto fresh = store_at(dir.path.string(), "launch-2", false);
    fresh.add(b.inst, {}, std::chrono::milliseconds(-1));
    CHECK_FALSE(fresh.restore(b.inst));
    CHECK(b.object->steps == 0);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find("holds snapshots of an earlier launch; starting afresh") != std::string::npos);
    auto resumed = store_at(dir.path.string(), "launch-2", true);
    resumed.add(b.inst, {}, std::chrono::milliseconds(-1));
    CHECK(resumed.restore(b.inst));
    CHECK(b.object->steps == 4);
  }
  SUBCASE("a damaged newest one is passed over for the one before it") {
    {
      std::string bytes;
      {
        std::ifstream in(last, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
      }
      bytes.back() ^= 0x55;  // the state no longer matches its checksum
      std::ofstream out(last, std::ios::binary | std::ios::trunc);
      out << bytes;
    }
    CHECK_THROWS_WITH(rpc::snapshot_store::read(last),
                      "its state does not match its checksum");
    hosted<Model> b;
    lines.clear();
    auto s2 = store_at(dir.path.string(), "launch-1", false);
    s2.add(b.inst, {}, std::chrono::milliseconds(-1));
    CHECK(s2.restore(b.inst));
    CHECK(b.object->steps == 3);
    REQUIRE(!lines.empty());
    CHECK(lines[0].find("is damaged (its state does not match its checksum); trying the one "
                        "before it") != std::string::npos);
  }
  SUBCASE("a file that is not a snapshot says so") {
    const auto junk = dir.path / "junk";
    std::ofstream(junk) << "hello";
    CHECK_THROWS_WITH(rpc::snapshot_store::read(junk.string()), "it is not a tlaunch snapshot");
  }
}

TEST_CASE("save_state and load_state, and an instance without state") {
  temp_dir dir("tlaunch-snap");
  hosted<Split> a;
  a.object->saved = {1, 2, 3};
  rpc::snapshot_store s(dir.path.string(), "l", false, nullptr);
  s.add(a.inst, {}, std::chrono::milliseconds(-1));
  s.write(a.inst);
  hosted<Split> b;
  rpc::snapshot_store s2(dir.path.string(), "l", false, nullptr);
  s2.add(b.inst, {}, std::chrono::milliseconds(-1));
  CHECK(s2.restore(b.inst));
  CHECK(b.object->saved == std::vector<int>{1, 2, 3});
  CHECK(b.object->loads == 1);

  hosted<Plain> p;
  CHECK(p.inst.state == nullptr);
  s.add(p.inst, {}, std::chrono::milliseconds(-1));  // nothing to keep
  CHECK_FALSE(s.has(p.inst));
  CHECK_THROWS_WITH(s.write(p.inst), doctest::Contains("has no state to snapshot"));
}
