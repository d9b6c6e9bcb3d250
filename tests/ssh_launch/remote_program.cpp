// A tlaunch program for the ssh launch tests; what its workers do is the first
// program argument (after `--`):
//   where    every worker logs the address its SSH connection reached, then ends
//   idle     every worker logs "ready pid=<pid>" and waits for the stop
//   abort    like idle, but worker/1 calls std::abort() 300 ms after "ready"
//   restart FILE  like abort, but only while FILE does not exist (worker/1 makes it
//            first); the restarted worker/1 logs "back after a restart" and stops the program
//   rss      every worker logs its resident set ("rss_kb=N hwm_kb=N", from
//            /proc/self/status) once running, then ends (benchmarks/launch_bench.py)
#include <tlaunch/tlaunch.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

using namespace std::chrono_literals;

struct Worker {
  asio::awaitable<void> run(tlaunch::context& ctx) {
    std::string mode = ctx.args().empty() ? "idle" : ctx.args()[0];
    if (mode == "where") {
      // sshd sets SSH_CONNECTION="client_ip client_port server_ip server_port".
      std::istringstream words(std::getenv("SSH_CONNECTION") ? std::getenv("SSH_CONNECTION") : "");
      std::string client_ip, client_port, server_ip, server_port;
      words >> client_ip >> client_port >> server_ip >> server_port;
      ctx.log("reached at {}", server_ip.empty() ? "(not over ssh)" : server_ip);
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

constexpr auto program = tlaunch::program(tlaunch::node<"worker", Worker>().replicas(2));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
