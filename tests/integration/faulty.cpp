// A tlaunch program that misbehaves on request, for the integration tests.
// The behaviour is the first program argument (after `--`); replica 0 of
// "worker" does it, the other replicas idle until the program stops:
//   idle              every worker waits for the stop
//   throw             worker/0 throws from run()
//   abort             worker/0 calls std::abort()
//   exit CODE         worker/0 ends its process with _exit(CODE)
//   hang              worker/0 blocks its thread and ignores the stop; worker/1 stops the program
//   freeze            as hang, but worker/0 stops its whole process with SIGSTOP (local_mp
//                     only), so its own grace-period exit cannot run and the launcher kills it
//   stall             worker/0 stops its process with SIGSTOP and nobody stops the program:
//                     only a liveness check (--heartbeat) notices
//   lines N           worker/0 logs N lines, then stops the program
//   probe FILE        worker/0 waits until FILE exists, then calls target.ping(41) and stops
//   calls N           worker/0 makes N good calls to target.ping, retrying one that fails as
//                     unavailable (target restarting), then stops the program; each call's
//                     deadline is 5 s, or FAULTY_CALL_TIMEOUT=SECONDS (a slow restart)
//   colocation        every worker calls target.pid_of once and logs "colocation index=I
//                     pid=P target_pid=T saves=S" (S: how often its argument was serialized),
//                     then ends (tests of --colocate)
//   busy MS KIB       target computes for MS ms without a co_await in the first call
//                     worker/0 makes, while worker/0 sends it 8 more calls of KIB KiB each
//                     and worker/1 computes for MS ms in run(); worker/0 logs "busy calls
//                     done after N ms" and stops the program (a busy process is not gone)
//   outage            worker/0 calls target.process_id every 50 ms without a deadline; it
//                     logs the first failure of a streak ("call failed after N ms: ...")
//                     and, at the first good call after failures, from another target
//                     process (a restart) or that took 1 s or more (a call that waited out
//                     an outage), "calls succeed again" and stops the program
//                     (tests/netns, benchmarks/fault_bench.py)
// Further arguments are ignored: tests add a unique marker to find the processes.
// FAULTY_SLOW_TARGET=SECONDS in the environment: target's constructor sleeps that long, so
// the workers register and wait for a directory that comes only once target registers.
// FAULTY_TARGET_CRASH=N: target aborts on the Nth call its process serves.
// FAULTY_ONCE=FILE: the crash and the stall happen only while FILE does not exist (they
// create it), so a restarted process behaves; a restarted stall worker stops the program,
// a restarted target takes a second to start.
// target has a restart policy (3 restarts within 60 s); worker has none but --restart.
// Every worker first logs "ready pid=<pid>".
#include <tlaunch/tlaunch.hpp>

#include "../common/services.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

// FAULTY_ONCE: true (and FILE made) the first time in any process; always true without it.
bool fault_now() {
  const char* once = std::getenv("FAULTY_ONCE");
  if (once == nullptr) return true;
  if (std::filesystem::exists(once)) return false;
  std::ofstream(once) << "done\n";
  return true;
}

using tlaunch::test_support::counted;

// Keeps this thread computing for ms milliseconds.
void spin_for(std::int64_t ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  volatile std::uint64_t x = 0;
  while (std::chrono::steady_clock::now() < until) x = x + 1;
}

struct Target {  // a plain service, the probe's good call goes here
  Target() {
    if (const char* s = std::getenv("FAULTY_SLOW_TARGET"))
      std::this_thread::sleep_for(std::chrono::seconds(std::atoi(s)));
    // A restarted target (FAULTY_ONCE's file made) takes a second to start: calls made
    // meanwhile wait for it.
    if (const char* once = std::getenv("FAULTY_ONCE"); once && std::filesystem::exists(once))
      std::this_thread::sleep_for(1s);
  }
  std::int64_t ping(std::int64_t x) {
    if (const char* n = std::getenv("FAULTY_TARGET_CRASH"))
      if (++served == std::atoi(n) && fault_now()) std::abort();
    return x + 1;
  }
  std::int64_t pid_of(counted c) { return c.value == 0 ? -1 : ::getpid(); }
  std::int64_t process_id() { return ::getpid(); }
  // Computes for ms milliseconds on the io thread (no co_await, no sleep).
  std::int64_t spin(std::int64_t ms, std::string payload) {
    spin_for(ms);
    return static_cast<std::int64_t>(payload.size());
  }
  int served = 0;
  using rpc =
      tlaunch::methods<&Target::ping, &Target::pid_of, &Target::process_id, &Target::spin>;
};

struct Worker {
  tlaunch::handle<Target> target;

  asio::awaitable<void> run(tlaunch::context& ctx) {
    const auto& a = ctx.args();
    std::string mode = a.empty() ? "idle" : a[0];
    std::string param = a.size() > 1 ? a[1] : "";
    ctx.log("ready pid={} mode={}", ::getpid(), mode);
    if (mode == "colocation") {
      std::atomic<int> saves{0};
      auto pid = co_await target.call<&Target::pid_of>(counted{1, &saves});
      ctx.log("colocation index={} pid={} target_pid={} saves={}", ctx.index(), ::getpid(), pid,
              saves.load());
      co_return;
    }
    if ((mode == "hang" || mode == "freeze") && ctx.index() == 1) {
      co_await ctx.sleep_for(300ms);
      ctx.stop_program();
      co_return;
    }
    if (mode == "busy" && ctx.index() == 1) {
      spin_for(std::stoll(param));  // this process's only io thread, busy
      co_await ctx.stopped();
      co_return;
    }
    if (ctx.index() != 0 || mode == "idle") {
      co_await ctx.stopped();
      co_return;
    }
    if (mode == "throw") {
      co_await ctx.sleep_for(200ms);
      throw std::runtime_error("faulty worker gave up on purpose");
    } else if (mode == "abort") {
      // Long enough for a test to find every node process after the "ready" lines,
      // also in a sanitizer build on a loaded machine.
      co_await ctx.sleep_for(1500ms);
      std::abort();
    } else if (mode == "exit") {
      co_await ctx.sleep_for(1500ms);
      ::_exit(std::stoi(param));
    } else if (mode == "hang") {
      ctx.log("ignoring the stop from now on");
      for (;;) std::this_thread::sleep_for(50ms);  // blocks this io thread for good
    } else if (mode == "freeze") {
      ctx.log("freezing this process");
      ::kill(::getpid(), SIGSTOP);
      for (;;) std::this_thread::sleep_for(50ms);
    } else if (mode == "stall") {
      if (!fault_now()) {
        ctx.log("restarted after a stall");
        ctx.stop_program();
        co_return;
      }
      ctx.log("stalling this process");
      ::kill(::getpid(), SIGSTOP);
      co_await ctx.stopped();
    } else if (mode == "lines") {
      int n = std::stoi(param);
      for (int i = 1; i <= n; ++i) ctx.log("line {} of {}", i, n);
      ctx.stop_program();
    } else if (mode == "probe") {
      while (!std::filesystem::exists(param)) co_await ctx.sleep_for(20ms);
      auto r = co_await target.call<&Target::ping>(41);
      ctx.log("good call after bad input: {}", r);
      ctx.stop_program();
    } else if (mode == "calls") {
      int n = std::stoi(param), failed = 0;
      std::chrono::seconds deadline(5);
      if (const char* t = std::getenv("FAULTY_CALL_TIMEOUT"))
        deadline = std::chrono::seconds(std::atoi(t));
      for (int i = 1; i <= n;) {
        bool ok = false;
        try {
          auto r = co_await target.call<&Target::ping>(tlaunch::call_options{.timeout = deadline},
                                                       std::int64_t{i});
          ctx.log("call {} -> {}", i, r);
          ok = true;
        } catch (const tlaunch::unavailable& e) {
          if (failed++ == 0) ctx.log("call {} failed: {}", i, e.what());
        }
        if (ok)
          ++i;
        else
          co_await ctx.sleep_for(50ms);
      }
      ctx.log("{} good calls, {} unavailable", n, failed);
      ctx.stop_program();
    } else if (mode == "busy") {
      auto start = std::chrono::steady_clock::now();
      std::size_t kib = a.size() > 2 ? std::stoul(a[2]) : 0;
      auto first = target.async<&Target::spin>(std::stoll(param), std::string());
      std::vector<tlaunch::future<std::int64_t>> more;
      for (int i = 0; i < 8; ++i)
        more.push_back(target.async<&Target::spin>(std::int64_t{0}, std::string(kib << 10, 'x')));
      std::int64_t bytes = co_await first.async_wait();
      for (auto& f : more) bytes += co_await f.async_wait();
      ctx.log("busy calls done after {} ms ({} bytes)",
              std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count(),
              bytes);
      ctx.stop_program();
    } else if (mode == "outage") {
      bool failing = false;
      std::int64_t first_pid = 0;
      for (;;) {
        auto start = std::chrono::steady_clock::now();
        try {
          auto pid = co_await target.call<&Target::process_id>();
          if (first_pid == 0) {
            first_pid = pid;
            ctx.log("first call served by pid {}", pid);
          } else if (failing || pid != first_pid ||
                     std::chrono::steady_clock::now() - start >= 1s) {
            ctx.log("calls succeed again (target pid {}, this call took {} ms)", pid,
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count());
            ctx.stop_program();
            co_return;
          }
        } catch (const tlaunch::unavailable& e) {
          if (!failing)
            ctx.log("call failed after {} ms: {}",
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count(),
                    e.what());
          failing = true;
        }
        co_await ctx.sleep_for(50ms);
      }
    } else {
      throw std::invalid_argument("faulty: unknown mode '" + mode + "'");
    }
  }
};

// worker/2 and worker/3 exist only with --replicas worker=4 (tests of the program's
// colocation groups); without them the group is empty and changes nothing.
constexpr auto program =
    tlaunch::program(tlaunch::node<"target", Target>().restart(
                         {.max_restarts = 3, .window = std::chrono::seconds(60), .backoff = 100ms}),
                     tlaunch::node<"worker", Worker>(tlaunch::ref<"target">).replicas(2))
        .colocate<"worker/2", "worker/3">();

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
