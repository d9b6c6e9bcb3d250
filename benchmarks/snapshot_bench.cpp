// snapshot_bench: how long a node's snapshot takes to write and to load (rpc/snapshots.hpp,
// docs/guide/state.md), for states of given sizes, beside the floor of the same bytes
// written with write(2) + fsync + rename and read back with read(2) in the same run.
//
//   ./snapshot_bench                          # 1 MB and 100 MB, 7 runs each, under /tmp
//   ./snapshot_bench --sizes=1,10,100 --runs=11 --dir=/var/tmp
//
// The state is a std::vector<float> of the size asked for (cereal's binary archive writes it
// as one block). "write" is ctx.snapshot()'s work: serialize, write, fsync, rename, fsync the
// folder, drop the oldest; "load" is a restart's: read and check the file, then read it
// again into the object. The floor's read goes into memory of its own, as the object's.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <cereal/types/vector.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <tlaunch/rpc/snapshots.hpp>
#include <tlaunch/state.hpp>

#include "stats.hpp"

namespace bench = tlaunch::bench;
namespace rpc = tlaunch::rpc;

namespace {

struct Model {
  std::vector<float> weights;
  template <class Archive>
  void state(Archive& ar) {
    ar(weights);
  }
};

struct options {
  std::vector<std::size_t> sizes_mb{1, 100};
  int runs = 7;
  std::string dir = "/tmp";
};

std::vector<std::size_t> parse_list(const std::string& v) {
  std::vector<std::size_t> out;
  std::size_t at = 0;
  while (at <= v.size()) {
    auto comma = v.find(',', at);
    if (comma == std::string::npos) comma = v.size();
    out.push_back(std::stoul(v.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    try {
      if (a.rfind("--sizes=", 0) == 0)
        o.sizes_mb = parse_list(a.substr(8));
      else if (a.rfind("--runs=", 0) == 0)
        o.runs = std::stoi(a.substr(7));
      else if (a.rfind("--dir=", 0) == 0)
        o.dir = a.substr(6);
      else
        throw std::invalid_argument("unknown");
    } catch (const std::exception&) {
      std::fprintf(stderr, "usage: %s [--sizes=MB,MB...] [--runs=N] [--dir=DIR]\nbad argument: %s\n",
                   argv[0], a.c_str());
      std::exit(2);
    }
  }
  if (o.runs < 1 || o.sizes_mb.empty()) {
    std::fprintf(stderr, "snapshot_bench: --runs must be at least 1 and --sizes name a size\n");
    std::exit(2);
  }
  return o;
}

void write_file(const std::string& path, const std::vector<char>& bytes) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + tmp);
  std::size_t at = 0;
  while (at < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
    if (n <= 0) throw std::runtime_error("cannot write " + tmp);
    at += static_cast<std::size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  std::filesystem::rename(tmp, path);
}

std::size_t read_file(const std::string& path, std::vector<char>& into) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path);
  std::size_t at = 0;
  for (;;) {
    ssize_t n = ::read(fd, into.data() + at, into.size() - at);
    if (n <= 0) break;
    at += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return at;
}

std::string row(const char* what, std::size_t mb, const bench::summary& t, const bench::summary& b) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "| %zu MB | %s | %s | %s | %s | %s | %.2f |\n", mb, what,
                bench::format_ns(double(t.p50_ns)).c_str(), bench::format_ns(double(t.p90_ns)).c_str(),
                bench::format_ns(double(t.max_ns)).c_str(), bench::format_ns(double(b.p50_ns)).c_str(),
                b.p50_ns ? double(t.p50_ns) / double(b.p50_ns) : 0.0);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  std::string tmpl = o.dir + "/tlaunch-snapshot-bench-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::fprintf(stderr, "snapshot_bench: cannot make a folder under %s: %s\n", o.dir.c_str(),
                 std::strerror(errno));
    return 1;
  }
  const std::string dir = tmpl;
  std::printf("runs %d each, in %s; p50/p90/max of each, the floor's p50, and their ratio\n\n",
              o.runs, dir.c_str());
  std::printf("| state | operation | p50 | p90 | max | floor p50 | / floor |\n|---|---|---|---|---|---|---|\n");
  int status = 0;
  try {
    for (std::size_t mb : o.sizes_mb) {
      asio::io_context io;
      rpc::instance inst(io, "model", 0, 1, 0);
      auto* model = new Model{};
      model->weights.resize(mb * 1000 * 1000 / sizeof(float));
      for (std::size_t i = 0; i < model->weights.size(); ++i) model->weights[i] = float(i % 977) * 0.5f;
      inst.object = std::shared_ptr<void>(model, [](void* p) { delete static_cast<Model*>(p); });
      inst.type_name = "Model";
      inst.state = tlaunch::detail::state_ops_of<Model>();
      rpc::snapshot_store store(dir, "bench", false, nullptr);
      store.add(inst, {.keep = 2}, std::chrono::milliseconds(-1));

      std::vector<char> raw(model->weights.size() * sizeof(float));
      std::memcpy(raw.data(), model->weights.data(), raw.size());
      const std::string floor_path = dir + "/floor.bin";
      bench::latency_recorder write_t, write_b, load_t, load_b;
      for (int r = 0; r < o.runs; ++r) {  // in turns: tlaunch, then its floor
        auto t0 = bench::bench_clock::now();
        store.write(inst);
        write_t.add(bench::elapsed_ns(t0));
        t0 = bench::bench_clock::now();
        write_file(floor_path, raw);
        write_b.add(bench::elapsed_ns(t0));

        std::vector<float>().swap(model->weights);  // a restarted process's object is new
        t0 = bench::bench_clock::now();
        if (!store.restore(inst)) throw std::runtime_error("nothing was loaded");
        load_t.add(bench::elapsed_ns(t0));
        if (model->weights.size() * sizeof(float) != raw.size())
          throw std::runtime_error("the loaded state is not the one written");
        // Into memory of its own, as a restarted process reads it.
        t0 = bench::bench_clock::now();
        {
          std::vector<char> back(raw.size() + 1);
          if (read_file(floor_path, back) != raw.size()) throw std::runtime_error("short read");
        }
        load_b.add(bench::elapsed_ns(t0));
      }
      std::fputs(row("write", mb, write_t.summarize(0), write_b.summarize(0)).c_str(), stdout);
      std::fputs(row("load", mb, load_t.summarize(0), load_b.summarize(0)).c_str(), stdout);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "snapshot_bench: %s\n", e.what());
    status = 1;
  }
  std::filesystem::remove_all(dir);
  return status;
}
