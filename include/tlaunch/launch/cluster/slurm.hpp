// slurm: node processes as the tasks of one srun step, inside an allocation (an sbatch
// script or salloc). The launcher is the coordinator, in the allocation's first process;
// it starts one `srun` whose task r is node process r of the program (colocation_processes:
// an instance, or a colocation group at its first member's place, in program order; without
// groups, instance r), placed by --distribution=arbitrary on the Slurm node --place or
// round-robin chose; each task finds its role from SLURM_PROCID (launch/cluster/slurm_task.hpp;
// the tasks get --colocate/--no-colocate to map ranks alike) and dials back as a local_mp
// node does. A group's task hosts every member, each registering on its own connection.
//
// The launch secret reaches the tasks as it reaches every node process: one line on
// stdin, which srun broadcasts to every task (its default --input=all). Nothing of it is
// on argv, in the environment, or in a file a shared filesystem might keep; and the EOF
// of srun's stdin is the same "stop now" a local node gets.
//
// The step dies with the program: a stop (stop_program(), every run() over, a failure,
// Ctrl-C) ends every task; what outlives the grace period is killed by killing srun,
// which makes slurmstepd kill the whole step; srun itself dies with the launcher
// (PR_SET_PDEATHSIG), and scancel ends the job, launcher and step with it.
//
// Restarts: one task's end never ends the step (--kill-on-bad-exit=0, and with a restart
// policy --wait=0). A failed instance whose policy allows it starts again as a step of one
// task on the same Slurm node (srun --jobid --overlap --nodes=1 --ntasks=1 --nodelist),
// with its role on its command line and the secret on its stdin; such a step ends as the
// first does, by its stdin's EOF or by killing its srun.
#pragma once

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "../../detail/self_exe.hpp"
#include "../../program_view.hpp"
#include "../colocation.hpp"
#include "../process/coordinator.hpp"
#include "../decl.hpp"
#include "../entry_points.hpp"
#include "../flags.hpp"
#include "../launcher.hpp"
#include "../process/local_child.hpp"
#include "../node_env.hpp"
#include "../terminal/output.hpp"
#include "../placement.hpp"
#include "slurm_task.hpp"

namespace tlaunch::launch {

namespace detail {

// The stdout of a short command (scontrol), or a launch_error with what it said.
inline std::string command_output(const std::vector<std::string>& argv) {
  struct result {
    std::mutex mu;
    std::string out, err;
    std::promise<exit_status> done;
  };
  auto r = std::make_shared<result>();
  child_callbacks cb;
  cb.on_line = [r](stream s, std::string_view l) {
    std::lock_guard lk(r->mu);
    (s == stream::out ? r->out : r->err).append(l).push_back('\n');
  };
  cb.on_exit = [r](const exit_status& st) { r->done.set_value(st); };
  auto status = r->done.get_future();
  child_ptr c;
  try {
    c = start_local_child(argv, std::move(cb));
  } catch (const std::exception& e) {
    throw launch_error(std::string("--launch=slurm: ") + e.what());
  }
  c->close_stdin();
  auto st = status.get();
  std::lock_guard lk(r->mu);
  if (!st.ok()) throw launch_error("--launch=slurm: " + argv[0] + " " + st.describe() + ": " + r->err);
  return r->out;
}

// The node names of this job's allocation, in Slurm's order.
inline std::vector<std::string> slurm_allocation_nodes() {
  const char* list = std::getenv("SLURM_JOB_NODELIST");
  if (list == nullptr) list = std::getenv("SLURM_NODELIST");
  if (list == nullptr || *list == '\0')
    throw launch_error("--launch=slurm: SLURM_JOB_NODELIST is not set");
  std::vector<std::string> nodes;
  std::string out = command_output({"scontrol", "show", "hostnames", list});
  for (auto& n : split(out, '\n'))
    if (!n.empty()) nodes.push_back(n);
  if (nodes.empty()) throw launch_error(std::string("--launch=slurm: no nodes in '") + list + "'");
  return nodes;
}

// An address of this machine the tasks can dial: the first non-loopback IPv4 address its
// host name resolves to, else that of an interface that is up (Debian maps the host name to
// 127.0.1.1), else 127.0.0.1 (a one-machine cluster).
inline std::string slurm_launcher_address() {
  auto text = [](const sockaddr* a) {
    char buf[INET_ADDRSTRLEN] = {};
    auto* in = reinterpret_cast<const sockaddr_in*>(a);
    return ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf) ? std::string(buf) : std::string();
  };
  auto routable = [](const std::string& ip) { return !ip.empty() && ip.rfind("127.", 0) != 0; };
  char name[256] = {};
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::gethostname(name, sizeof name - 1) == 0 && ::getaddrinfo(name, nullptr, &hints, &res) == 0) {
    std::string chosen;
    for (auto* a = res; a != nullptr && chosen.empty(); a = a->ai_next)
      if (auto ip = text(a->ai_addr); routable(ip)) chosen = ip;
    ::freeaddrinfo(res);
    if (!chosen.empty()) return chosen;
  }
  ifaddrs* ifs = nullptr;
  std::string chosen = "127.0.0.1";
  if (::getifaddrs(&ifs) == 0) {
    for (auto* i = ifs; i != nullptr; i = i->ifa_next)
      if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
          !(i->ifa_flags & IFF_LOOPBACK))
        if (auto ip = text(i->ifa_addr); routable(ip)) {
          chosen = ip;
          break;
        }
    ::freeifaddrs(ifs);
  }
  return chosen;
}

// How a task ended, from srun's report "srun: error: node2: task 3: Exited with exit code 2"
// ("tasks 0-2,5: Killed", ...): the ranks and their status, or nothing for another line.
struct srun_task_report {
  std::vector<std::uint32_t> ranks;
  exit_status status;
};
inline std::optional<srun_task_report> parse_srun_task_report(std::string_view line) {
  constexpr std::string_view head = "srun: error: ";
  if (line.rfind(head, 0) != 0) return std::nullopt;
  line.remove_prefix(head.size());
  auto colon = line.find(": task");
  if (colon == std::string_view::npos) return std::nullopt;
  line.remove_prefix(colon + 6);
  if (!line.empty() && line.front() == 's') line.remove_prefix(1);
  if (line.empty() || line.front() != ' ') return std::nullopt;
  line.remove_prefix(1);
  auto end = line.find(": ");
  if (end == std::string_view::npos) return std::nullopt;
  srun_task_report r;
  for (auto& item : split(std::string(line.substr(0, end)), ',')) {
    auto dash = item.find('-');
    try {
      unsigned long lo = std::stoul(item.substr(0, dash));
      unsigned long hi = dash == std::string::npos ? lo : std::stoul(item.substr(dash + 1));
      for (unsigned long i = lo; i <= hi && i < lo + 100000; ++i)
        r.ranks.push_back(static_cast<std::uint32_t>(i));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  std::string_view what = line.substr(end + 2);
  constexpr std::string_view exited = "Exited with exit code ";
  if (what.rfind(exited, 0) == 0) {
    try {
      r.status.code = std::stoi(std::string(what.substr(exited.size())));
    } catch (const std::exception&) {
      r.status.unknown = std::string(what);
    }
    return r;
  }
  // "Killed", "Segmentation fault", "Aborted (core dumped)": strsignal()'s words
  for (int sig = 1; sig < NSIG; ++sig) {
    const char* words = ::strsignal(sig);
    const char* abbrev = ::sigabbrev_np(sig);
    if (words == nullptr || abbrev == nullptr || *words == '\0') continue;
    if (what.rfind(words, 0) == 0) {
      r.status.signal = sig;
      r.status.signal_name = abbrev;
      return r;
    }
  }
  r.status.unknown = std::string(what);
  return r;
}

// One srun step whose tasks are node processes. The coordinator sees each task as a
// child (slurm_task below); they share srun's stdin (broadcast to every task), its
// output (demultiplexed by srun's --label "rank: " prefix) and its end.
//
// One task may end or be replaced while the others run (restarts): its stop goes on its
// connection, and srun's stdin closes only once every task was told to stop or has ended;
// a kill of one task, while others run on, is a `kill -KILL` of its registered pid on its
// Slurm node by a one-task helper step (srun --overlap), since srun can signal only the
// whole step. Once every task was told to stop, a kill kills srun, which ends the step.
class slurm_step {
 public:
  // hosts: the Slurm node of each task; job: the allocation's job id.
  slurm_step(std::vector<std::string> hosts, std::string job,
             std::function<void(std::string_view)> srun_line)
      : tasks_(hosts.size()), exited_(hosts.size(), false), told_(hosts.size(), false),
        killing_(hosts.size(), false), pids_(hosts.size(), -1), hosts_(std::move(hosts)),
        job_(std::move(job)), srun_line_(std::move(srun_line)) {}

  void add_task(std::uint32_t rank, child_callbacks cb) {
    std::lock_guard lk(mu_);
    tasks_.at(rank) = std::move(cb);
  }

  // Starts srun once every task is added; when srun cannot start, every task ends
  // (unknown status) and the error is thrown.
  void start(const std::vector<std::string>& argv, const local_child_options& opt) {
    child_callbacks cb;
    cb.on_line = [this](stream s, std::string_view l) { on_line(s, l); };
    cb.on_exit = [this](const exit_status& st) { on_srun_exit(st); };
    try {
      auto c = start_local_child(argv, std::move(cb), opt);
      std::lock_guard lk(mu_);
      srun_ = std::move(c);
      if (!pending_stdin_.empty()) srun_->write_stdin(pending_stdin_);
      if (stdin_closed_) srun_->close_stdin();
    } catch (const std::exception& e) {
      exit_status st;
      st.unknown = std::string("srun did not start: ") + e.what();
      for (std::uint32_t r = 0; r < tasks_.size(); ++r) task_exit(r, st);
      throw;
    }
  }

  // The secret: the same line for every task, so srun gets it once.
  void write_stdin(std::string_view data) {
    std::lock_guard lk(mu_);
    if (stdin_written_) return;
    stdin_written_ = true;
    if (srun_)
      srun_->write_stdin(data);
    else
      pending_stdin_ = std::string(data);
  }
  // Task `rank` is told to stop (its stop message went on its connection); srun's stdin,
  // every task's, closes once no task runs that was not told.
  void close_stdin(std::uint32_t rank) {
    std::lock_guard lk(mu_);
    told_.at(rank) = true;
    if (stdin_closed_ || !all_told()) return;
    stdin_closed_ = true;
    if (srun_) srun_->close_stdin();
  }
  void registered(std::uint32_t rank, long pid) {
    std::lock_guard lk(mu_);
    pids_.at(rank) = pid;
  }
  // Kills task `rank`: the whole step (killing srun makes slurmstepd end every task) when
  // every task was told to stop or it is the only one; else that task alone.
  void kill(std::uint32_t rank) {
    long pid = -1;
    {
      std::lock_guard lk(mu_);
      if (tasks_.size() > 1 && !all_told()) {
        if (exited_.at(rank) || killing_.at(rank)) return;
        pid = pids_.at(rank);
        killing_[rank] = true;
      }
      if (pid <= 0) {
        if (srun_) srun_->kill();
        return;
      }
    }
    kill_one(rank, pid);
  }
  bool running(std::uint32_t rank) const {
    std::lock_guard lk(mu_);
    return !exited_.at(rank);
  }

 private:
  bool all_told() const {  // mu_ held
    for (std::size_t r = 0; r < told_.size(); ++r)
      if (!told_[r] && !exited_[r]) return false;
    return true;
  }

  // `kill -KILL pid` on the task's node, in a one-task step that overlaps this one. srun
  // reports a task it kills; one that was gone already had exited 0 (srun reports only
  // the others). If the helper cannot run, the whole step is killed: a kill must end it.
  void kill_one(std::uint32_t rank, long pid) {
    std::vector<std::string> argv = {"srun",
                                     "--jobid=" + job_,
                                     "--overlap",
                                     "--nodes=1",
                                     "--ntasks=1",
                                     "--nodelist=" + hosts_[rank],
                                     "--job-name=tlaunch-kill",
                                     "--quiet",
                                     "/bin/sh",
                                     "-c",
                                     "kill -KILL \"$0\" 2>/dev/null || exit 3",
                                     std::to_string(pid)};
    child_callbacks cb;
    cb.on_line = [this](stream, std::string_view l) {
      if (srun_line_) srun_line_(l);
    };
    cb.on_exit = [this, rank](const exit_status& st) {
      if (st.ok()) {
        exit_status killed;
        killed.signal = SIGKILL;
        killed.signal_name = "KILL";
        return task_exit(rank, killed);
      }
      if (st.code == 3 && st.signal == 0 && st.unknown.empty()) return task_exit(rank, {});
      if (srun_line_)
        srun_line_(fmt::format("could not kill task {} alone ({}): killing the step", rank,
                               st.describe()));
      std::lock_guard lk(mu_);
      if (srun_) srun_->kill();
    };
    try {
      auto c = start_local_child(argv, std::move(cb));
      c->close_stdin();
      std::lock_guard lk(mu_);
      helpers_.push_back(std::move(c));
    } catch (const std::exception& e) {
      if (srun_line_) srun_line_(fmt::format("cannot run srun to kill task {}: {}", rank, e.what()));
      std::lock_guard lk(mu_);
      if (srun_) srun_->kill();
    }
  }

  void on_line(stream s, std::string_view line) {
    // "rank: text" (srun pads the rank with spaces to one width)
    std::string_view rest = line;
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    std::size_t digits = 0;
    while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
    if (digits > 0 && digits < 10 && rest.substr(digits, 2) == ": ") {
      unsigned long rank = std::stoul(std::string(rest.substr(0, digits)));
      if (rank < tasks_.size()) {
        std::function<void(stream, std::string_view)> f;
        {
          std::lock_guard lk(mu_);
          f = tasks_[rank].on_line;
        }
        if (f) f(s, rest.substr(digits + 2));
        return;
      }
    }
    if (auto report = parse_srun_task_report(line)) {
      {
        std::lock_guard lk(mu_);
        explained_ = true;
      }
      for (auto r : report->ranks)
        if (r < tasks_.size()) task_exit(r, report->status);
      return;
    }
    if (srun_line_) srun_line_(line);
  }

  void task_exit(std::uint32_t rank, const exit_status& st) {
    std::function<void(const exit_status&)> f;
    {
      std::lock_guard lk(mu_);
      if (exited_[rank]) return;
      exited_[rank] = true;
      f = std::move(tasks_[rank].on_exit);
      // The tasks left may all have been told to stop already.
      if (!stdin_closed_ && all_told()) {
        stdin_closed_ = true;
        if (srun_) srun_->close_stdin();
      }
    }
    if (f) f(st);
  }

  // Tasks srun reported no failure for exited with 0, unless srun itself failed
  // without naming a task (the step could not start) or was killed.
  void on_srun_exit(const exit_status& srun) {
    exit_status rest;
    bool explained;
    {
      std::lock_guard lk(mu_);
      explained = explained_;
    }
    if (srun.signal != 0 || (!srun.ok() && !explained))
      rest.unknown = fmt::format("ended with its srun step (srun {})", srun.describe());
    for (std::uint32_t r = 0; r < tasks_.size(); ++r) task_exit(r, rest);
  }

  mutable std::mutex mu_;
  std::vector<child_callbacks> tasks_;
  std::vector<bool> exited_, told_, killing_;
  std::vector<long> pids_;
  std::vector<std::string> hosts_;
  std::string job_;
  std::function<void(std::string_view)> srun_line_;
  std::string pending_stdin_;
  bool stdin_written_ = false, stdin_closed_ = false, explained_ = false;
  std::vector<child_ptr> helpers_;  // kill_one's sruns
  child_ptr srun_;
};

// A task of a step, as the coordinator sees a node process.
class slurm_task final : public child {
 public:
  slurm_task(std::shared_ptr<slurm_step> step, std::uint32_t rank, std::string node)
      : step_(std::move(step)), rank_(rank), node_(std::move(node)) {}
  void write_stdin(std::string_view data) override { step_->write_stdin(data); }
  void close_stdin() override { step_->close_stdin(rank_); }
  void kill() override { step_->kill(rank_); }
  bool running() const override { return step_->running(rank_); }
  std::string host() const override { return node_; }
  long pid() const override { return -1; }
  void registered(long pid) override { step_->registered(rank_, pid); }

 private:
  std::shared_ptr<slurm_step> step_;
  std::uint32_t rank_;
  std::string node_;
};

// The srun options for the nodes' resource hints. One step serves every task, so each
// gets the largest hint of any node (largest_resources_warning says so when they differ).
// Memory is per CPU in srun's terms (--mem is per Slurm node, shared by its tasks). With a
// CPU hint the step no longer overcommits: each task then needs its CPUs in the allocation.
inline std::vector<std::string> srun_resource_args(
    const std::vector<tlaunch::rpc::node_info>& nodes) {
  auto r = largest_resources(nodes);
  std::vector<std::string> args;
  if (r.cpus == 0) args.push_back("--overcommit");
  if (r.cpus) args.push_back(fmt::format("--cpus-per-task={}", r.cpus));
  if (r.gpus) args.push_back(fmt::format("--gpus-per-task={}", r.gpus));
  if (r.memory_mb)
    args.push_back(fmt::format("--mem-per-cpu={}M",
                               (r.memory_mb + std::max(r.cpus, 1u) - 1) / std::max(r.cpus, 1u)));
  return args;
}

// A directory only this user can read, removed with everything in it.
class private_temp_dir {
 public:
  private_temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/tlaunch-slurm-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw launch_error("--launch=slurm: cannot create a directory in " + tmpl + ": " +
                         errno_text(errno));
    path_ = tmpl;  // mkdtemp makes it 0700
  }
  ~private_temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  private_temp_dir(const private_temp_dir&) = delete;
  private_temp_dir& operator=(const private_temp_dir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace detail

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_CLUSTER)
TLAUNCH_DECL int run_slurm(const launch_plan& plan, output_printer& out) {
  const auto began = std::chrono::steady_clock::now();
  const options& o = plan.opt;
  const auto& nodes = plan.nodes;  // with --restart
  const auto& groups = plan.groups;
  const char* job = std::getenv("SLURM_JOB_ID");
  if (job == nullptr || *job == '\0')
    throw launch_error(
        "--launch=slurm runs inside a Slurm allocation: start it from an sbatch script or "
        "under salloc (SLURM_JOB_ID is not set)");
  if (const char* n = std::getenv("SLURM_STEP_NUM_TASKS"); n != nullptr && std::string_view(n) != "1")
    throw launch_error(fmt::format(
        "--launch=slurm: this process is one of {} tasks of an srun step; start the launcher "
        "once (in the sbatch script or under salloc), and it starts the step of node "
        "processes itself",
        n));

  auto allocation = detail::slurm_allocation_nodes();
  std::vector<std::string> hosts = o.hosts.empty() && o.hostfile.empty()
                                       ? allocation
                                       : listed_hosts(o.hosts, o.hostfile, "slurm");
  std::vector<std::string> named = hosts;
  for (const auto& [name, placed] : o.place) named.insert(named.end(), placed.begin(), placed.end());
  for (const auto& h : named)
    if (std::find(allocation.begin(), allocation.end(), h) == allocation.end())
      throw launch_error("--launch=slurm: host '" + h + "' is not a node of job " + job);
  if (auto w = largest_resources_warning(nodes, "slurm"); !w.empty())
    out.print("launcher", stream::err, w);
  // One srun task per node process: a group's task hosts all its members.
  const std::uint32_t instances = plan.instances();
  auto places = place_instances(nodes, o.place, hosts, colocation_leaders(groups, instances));
  if (places.empty()) throw launch_error("--launch=slurm: the program has no node instance");
  // The processes that start with the program (an elastic node's other replicas start
  // later, each in a step of its own, as a restart does).
  auto processes = launch_processes(nodes, groups);
  std::vector<std::uint32_t> rank_of(instances);  // flat id -> its process's task
  for (std::uint32_t r = 0; r < processes.size(); ++r)
    for (std::uint32_t f : processes[r]) rank_of[f] = r;

  // The task layout: line r is the node of task r.
  detail::private_temp_dir dir;
  std::string hostfile = dir.path() + "/tasks";
  std::set<std::string> used;
  {
    std::ofstream f(hostfile);
    for (const auto& members : processes) {
      f << places[members[0]].host << '\n';
      used.insert(places[members[0]].host);
    }
    if (!f) throw launch_error("--launch=slurm: cannot write " + hostfile);
  }

  // With a restart policy, one task's end must not end the step: srun then waits for the
  // others without a limit (--wait=0: whatever WaitTime the cluster sets), and never kills
  // the step for a bad exit (--kill-on-bad-exit=0, also without policies: the launcher
  // stops the others itself).
  bool restarts = std::any_of(nodes.begin(), nodes.end(),
                              [](const auto& n) { return n.restart.max_restarts > 0; });
  coordinator coord(nodes, o, out);
  coord.colocate(groups);
  coord.listen(o.coordinator_host.empty() ? "0.0.0.0" : o.coordinator_host);
  std::string dial =
      o.coordinator_host.empty() ? detail::slurm_launcher_address() : o.coordinator_host;
  if (dial.find(':') != std::string::npos) dial = "[" + dial + "]";
  std::string exe = tlaunch::detail::self_exe<launch_error>();
  auto srun_line = [&out](std::string_view l) { out.print("srun", stream::err, l); };
  std::vector<std::string> task_hosts;
  for (const auto& members : processes) task_hosts.push_back(places[members[0]].host);
  auto step = std::make_shared<detail::slurm_step>(task_hosts, job, srun_line);
  std::size_t added = 0;
  std::chrono::steady_clock::time_point step_started;
  std::vector<std::string> srun_args;  // after srun's own: resources, then --srun-arg
  for (auto& a : detail::srun_resource_args(nodes)) srun_args.push_back(a);
  for (const auto& a : o.slurm.srun_args) srun_args.push_back(a);
  // The node process: `role` is --tlaunch-role=slurm (from the rank) or the instance's.
  auto node_argv = [&](std::vector<std::string> argv, std::uint16_t port,
                       const std::vector<std::string>& tail, const std::string& role) {
    argv.push_back(exe);
    argv.push_back(fmt::format("--tlaunch-coordinator={}:{}", dial, port));
    argv.push_back(role);
    // Nothing of tlaunch's runs beside a task to see it stop: it watches itself (node_watch.hpp).
    argv.push_back("--tlaunch-watch");
    for (const auto& c : o.colocate) argv.push_back(fmt::format("--colocate={}", c));
    if (o.no_colocate) argv.push_back("--no-colocate");
    argv.insert(argv.end(), tail.begin() + 1, tail.end());
    return argv;
  };

  int code = coord.run(places, [&](const placement& pl, std::uint16_t port,
                                   const std::vector<std::string>& tail, child_callbacks cb) {
    if (added == processes.size()) {
      // A restart: a step of one task on the same Slurm node, inside the allocation,
      // sharing the resources of the first step (--overlap); its role on its command line,
      // the secret on its stdin as for the first step.
      auto one = std::make_shared<detail::slurm_step>(std::vector<std::string>{pl.host}, job,
                                                      srun_line);
      one->add_task(0, std::move(cb));
      std::vector<std::string> argv = {"srun", fmt::format("--jobid={}", job), "--overlap"};
      argv.insert(argv.end(), srun_args.begin(), srun_args.end());
      for (const char* a : {"--nodes=1", "--ntasks=1", "--label", "--kill-on-bad-exit=0",
                            "--job-name=tlaunch"})
        argv.push_back(a);
      argv.push_back("--nodelist=" + pl.host);
      one->start(node_argv(argv, port, tail, tail[0]), {});
      return std::make_unique<detail::slurm_task>(one, 0, pl.host);
    }
    // Called once per process, for its leader.
    step->add_task(rank_of[pl.flat], std::move(cb));
    if (++added == processes.size()) {  // the last process: every task has its callbacks
      std::vector<std::string> argv = {
          "srun", fmt::format("--ntasks={}", processes.size()),
          fmt::format("--nodes={}", used.size()),
          "--distribution=arbitrary", "--label", "--kill-on-bad-exit=0", "--job-name=tlaunch"};
      if (restarts) argv.push_back("--wait=0");
      argv.insert(argv.end(), srun_args.begin(), srun_args.end());
      local_child_options lo;
      lo.env = {{"SLURM_HOSTFILE", hostfile}};
      step_started = std::chrono::steady_clock::now();
      // Every task the same command line: the role comes from its rank.
      step->start(node_argv(argv, port, tail, "--tlaunch-role=slurm"), lo);
    }
    return std::make_unique<detail::slurm_task>(step, rank_of[pl.flat], pl.host);
  });
  if (const char* t = std::getenv("TLAUNCH_TIMINGS"); t != nullptr && std::string_view(t) == "1") {
    auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
    out.print("launcher", stream::err,
              fmt::format("timings: {} nodes on {} Slurm nodes of job {}; launcher start to srun "
                          "{} ms; to all registered {} ms; stop {} ms; total {} ms",
                          processes.size(), used.size(), job, ms(step_started - began),
                          coord.time_to_registered().count(), coord.time_to_stop().count(),
                          ms(std::chrono::steady_clock::now() - began)));
  }
  return code;
}
#endif


}  // namespace tlaunch::launch
