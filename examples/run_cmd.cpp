// Like TLaunch's run_cmd: one runner per host runs shell commands there, and a
// display node gathers every runner's answer and prints one table. Give the
// runner as many replicas as there are hosts; round-robin placement puts one on each:
//   ./run_cmd                                               # one runner, this machine
//   ./run_cmd --launch=ssh --hosts=h1,h2 --replicas runner=2
//   ./run_cmd --launch=ssh --hosts=h1,h2,h3 --replicas runner=2 --place runner=h2,h3
//   ./run_cmd --launch=ssh --hosts=h1,h2 --replicas runner=2 -- "df -h /" "free -m"
// Without commands after `--`, each host runs nproc, uptime and, where it is
// installed, nvidia-smi -L.
#include <tlaunch/tlaunch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

// One command's result on one host.
struct command_result {
  std::string command;
  std::string output;  // stdout and stderr, trailing newline removed
  int status = 0;      // the shell's exit code
  template <class Archive>
  void serialize(Archive& a) {
    a(command, output, status);
  }
};

// What one runner reports: where it ran and what each command printed.
struct host_report {
  std::string hostname, ssh_address;
  std::vector<command_result> results;
  template <class Archive>
  void serialize(Archive& a) {
    a(hostname, ssh_address, results);
  }
};

struct Runner {
  // Blocks this node's strand while the commands run: the runner has nothing
  // else to do meanwhile.
  host_report run_commands(std::vector<std::string> commands) const {
    host_report r;
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    r.hostname = name;
    // sshd sets SSH_CONNECTION="client_ip client_port server_ip server_port".
    if (const char* c = std::getenv("SSH_CONNECTION")) {
      std::istringstream words(c);
      std::string skip;
      words >> skip >> skip >> r.ssh_address;
    }
    for (auto& cmd : commands) r.results.push_back(run_one(cmd));
    return r;
  }

  using rpc = tlaunch::methods<&Runner::run_commands>;

 private:
  static command_result run_one(const std::string& command) {
    command_result r{command, {}, 0};
    std::FILE* p = ::popen((command + " 2>&1").c_str(), "r");
    if (p == nullptr) {
      r.output = "(cannot start the shell)";
      r.status = -1;
      return r;
    }
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
    int st = ::pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    while (!r.output.empty() && std::isspace(static_cast<unsigned char>(r.output.back())))
      r.output.pop_back();
    r.output.erase(0, r.output.find_first_not_of(" \t"));
    return r;
  }
};

struct Display {
  tlaunch::handles<Runner> runners;

  asio::awaitable<void> run(tlaunch::context& ctx) {
    std::vector<std::string> commands = ctx.args();
    if (commands.empty())
      commands = {"nproc", "uptime",
                  "if command -v nvidia-smi >/dev/null; then nvidia-smi -L; "
                  "else echo '(no nvidia-smi)'; fi"};
    // Every runner at once; the answers come back in replica order.
    auto reports = co_await runners.broadcast<&Runner::run_commands>(commands);
    std::vector<std::string> ids;
    for (std::size_t i = 0; i < runners.size(); ++i) ids.push_back(runners[i].id());
    print_table(ctx, ids, reports);
    ctx.stop_program();
  }

 private:
  static void print_table(tlaunch::context& ctx, const std::vector<std::string>& ids,
                          const std::vector<host_report>& reports) {
    struct row {
      std::string runner, host, address, command, output;
    };
    std::vector<row> rows;
    for (std::size_t i = 0; i < reports.size(); ++i)
      for (auto& r = reports[i]; auto& c : r.results) {
        // A multi-line output becomes one row per line, the first one labelled.
        std::istringstream lines(c.output.empty() ? std::string("-") : c.output);
        std::string line;
        bool first = true;
        std::string shown = c.command.rfind("if command -v nvidia-smi", 0) == 0
                                ? std::string("nvidia-smi -L")
                                : c.command;
        while (std::getline(lines, line)) {
          if (c.status != 0 && first) line += " (exit " + std::to_string(c.status) + ")";
          rows.push_back({first ? ids[i] : "", first ? r.hostname : "",
                          first ? (r.ssh_address.empty() ? "-" : r.ssh_address) : "",
                          first ? shown : "", line});
          first = false;
        }
      }
    row head{"runner", "hostname", "ssh address", "command", "output"};
    std::size_t w[4] = {head.runner.size(), head.host.size(), head.address.size(),
                        head.command.size()};
    for (auto& r : rows) {
      w[0] = std::max(w[0], r.runner.size());
      w[1] = std::max(w[1], r.host.size());
      w[2] = std::max(w[2], r.address.size());
      w[3] = std::max(w[3], r.command.size());
    }
    auto print = [&](const row& r) {
      ctx.log("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {}", r.runner, w[0], r.host, w[1], r.address,
              w[2], r.command, w[3], r.output);
    };
    print(head);
    for (auto& r : rows) print(r);
  }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"runner", Runner>(),
    tlaunch::node<"display", Display>(tlaunch::ref<"runner">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
