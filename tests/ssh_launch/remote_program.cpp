// A tlaunch program for the ssh launch tests; what its workers do is the first
// program argument (after `--`):
//   where    every worker logs the address its SSH connection reached, then ends
//   idle     every worker logs "ready pid=<pid>" and waits for the stop
//   abort    like idle, but worker/1 calls std::abort() 300 ms after "ready"
//   restart FILE  like abort, but only while FILE does not exist (worker/1 makes it
//            first); the restarted worker/1 logs "back after a restart" and stops the program
//   colocation  every worker calls pid_of on every replica (itself too) and logs
//            "colocation index=I peer=J pid=P peer_pid=Q saves=S at=IP" (S: how often the
//            argument was serialized; IP: the host its SSH connection reached), then ends
//   rss      every worker logs its resident set ("rss_kb=N hwm_kb=N", from
//            /proc/self/status) once running, then ends (benchmarks/launch_bench.py)
#include <tlaunch/tlaunch.hpp>

#include "../common/services.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

using namespace std::chrono_literals;

using tlaunch::test_support::counted;

// The host address this process's SSH connection reached.
std::string reached_at() {
  // sshd sets SSH_CONNECTION="client_ip client_port server_ip server_port".
  std::istringstream words(std::getenv("SSH_CONNECTION") ? std::getenv("SSH_CONNECTION") : "");
  std::string client_ip, client_port, server_ip, server_port;
  words >> client_ip >> client_port >> server_ip >> server_port;
  return server_ip.empty() ? "(not over ssh)" : server_ip;
}

struct Worker {
  tlaunch::handles<Worker> peers;

  std::int64_t pid_of(counted c) { return c.value == 0 ? -1 : ::getpid(); }
  using rpc = tlaunch::methods<&Worker::pid_of>;

  asio::awaitable<void> run(tlaunch::context& ctx) {
    std::string mode = ctx.args().empty() ? "idle" : ctx.args()[0];
    if (mode == "where") {
      ctx.log("reached at {}", reached_at());
      co_return;
    }
    if (mode == "colocation") {
      for (std::size_t j = 0; j < peers.size(); ++j) {
        std::atomic<int> saves{0};
        auto pid = co_await peers[j].call<&Worker::pid_of>(counted{1, &saves});
        ctx.log("colocation index={} peer={} pid={} peer_pid={} saves={} at={}", ctx.index(), j,
                ::getpid(), pid, saves.load(), reached_at());
      }
      co_return;
    }
    if (mode == "rss") {
      std::ifstream status("/proc/self/status");
      std::string rss = "?", hwm = "?";
      for (std::string line; std::getline(status, line);) {
        std::istringstream f(line);
        std::string key, kb;
        f >> key >> kb;
        if (key == "VmRSS:") rss = kb;
        if (key == "VmHWM:") hwm = kb;
      }
      ctx.log("rss_kb={} hwm_kb={}", rss, hwm);
      co_return;
    }
    ctx.log("ready pid={}", ::getpid());
    if (mode == "restart" && ctx.index() == 1 && ctx.args().size() > 1) {
      if (std::filesystem::exists(ctx.args()[1])) {
        ctx.log("back after a restart");
        ctx.stop_program();
        co_return;
      }
      std::ofstream(ctx.args()[1]) << "crashed once\n";
      mode = "abort";
    }
    if (mode == "abort" && ctx.index() == 1) {
      co_await ctx.sleep_for(300ms);
      std::abort();
    }
    co_await ctx.stopped();
  }
};

constexpr auto program =
    tlaunch::program(tlaunch::node<"worker", Worker>(tlaunch::ref<"worker">).replicas(2));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
