// A hyperparameter sweep with tlaunch::start: the same small program (an objective
// service and a trainer that runs gradient descent against it over calls) launched once
// per learning rate, one run after another in this process; then one more run whose
// learning rate depends on the results so far (an adaptive sweep). Prints a table and
// the best rate. A rate that diverges makes its trainer fail: that run's exit code is 1
// and its failure names the node; the sweep goes on.
//   ./sweep                     # node processes (local_mp)
//   ./sweep --launch=local_mt   # every node in this process (also: ./sweep local_mt)
// Any other argument is a usage error (exit 2): tlaunch::start runs local_mt and local_mp.
#include <tlaunch/tlaunch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

struct Objective {  // f(x) = (x - 3)^2, the function the trainer minimises
  double loss(double x) const { return (x - 3) * (x - 3); }
  double gradient(double x) const { return 2 * (x - 3); }
  using rpc = tlaunch::methods<&Objective::loss, &Objective::gradient>;
};

struct Trainer {  // gradient descent from x = 0 with one learning rate
  tlaunch::handle<Objective> objective;
  double learning_rate = 0;
  int steps = 0;
  std::string result_file;  // where the final loss goes: the node may be another process
  asio::awaitable<void> run(tlaunch::context& ctx) {
    double x = 0;
    for (int i = 0; i < steps; ++i)
      x -= learning_rate * co_await objective.call<&Objective::gradient>(x);
    double loss = co_await objective.call<&Objective::loss>(x);
    if (!(loss < 1e6)) throw std::runtime_error(fmt::format("diverged (loss {:.3g})", loss));
    std::ofstream(result_file) << fmt::format("{:.17g}\n", loss);
    ctx.log("learning rate {:g}: loss {:.3g} after {} steps", learning_rate, loss, steps);
  }
};

// The program for one learning rate: built at run time, one per run.
auto make_program(double learning_rate, const std::string& result_file) {
  return tlaunch::program(
      tlaunch::node<"objective", Objective>(),
      tlaunch::node<"trainer", Trainer>(tlaunch::ref<"objective">, learning_rate, 20,
                                        result_file));
}

struct trial {
  double learning_rate = 0;
  int exit_code = 0;
  double loss = NAN;    // when exit_code is 0
  std::string failure;  // when it is not
};

// The launch type from the command line: [--launch=]local_mp (the default) or local_mt;
// false when the arguments are anything else.
bool parse_launch(int argc, char** argv, tlaunch::launcher& launch) {
  launch = tlaunch::launcher::local_mp;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 2 && args[0] == "--launch") args = {"--launch=" + args[1]};
  if (args.empty()) return true;
  if (args.size() != 1) return false;
  std::string a = args[0];
  if (a.rfind("--launch=", 0) == 0) a = a.substr(9);
  if (a == "local_mt")
    launch = tlaunch::launcher::local_mt;
  else if (a != "local_mp")
    return false;
  return true;
}

int main(int argc, char** argv) {
  tlaunch::launch_options o;
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::printf("usage: %s [--launch=local_mp|local_mt]\n", argv[0]);
    return 0;
  }
  if (!parse_launch(argc, argv, o.launch)) {
    std::fprintf(stderr,
                 "%s: unexpected arguments%s%s\nusage: %s [--launch=local_mp|local_mt] "
                 "(one run per learning rate, with tlaunch::start: local_mt or local_mp)\n",
                 argv[0], argc > 1 ? ": " : "", argc > 1 ? argv[1] : "", argv[0]);
    return 2;
  }
  o.color = tlaunch::output_color::never;
  auto result_file = std::filesystem::temp_directory_path() /
                     fmt::format("tlaunch_sweep_{}.loss", ::getpid());

  std::vector<trial> trials;
  auto run_trial = [&](double learning_rate) {
    std::filesystem::remove(result_file);
    auto run = tlaunch::start(make_program(learning_rate, result_file.string()), o);
    trial t{learning_rate, run.wait(), NAN, run.failure()};
    if (t.exit_code == 0) std::ifstream(result_file) >> t.loss;
    std::filesystem::remove(result_file);
    trials.push_back(t);
  };
  auto best = [&]() -> const trial* {
    const trial* b = nullptr;
    for (const auto& t : trials)
      if (t.exit_code == 0 && (b == nullptr || t.loss < b->loss)) b = &t;
    return b;
  };

  for (double rate : {0.05, 0.3, 1.5}) run_trial(rate);
  // Adaptive: the next rate comes from the results so far.
  if (const trial* b = best()) run_trial(b->learning_rate * 1.25);

  std::printf("\n%-14s %-5s %-12s %s\n", "learning rate", "exit", "loss", "failure");
  for (const auto& t : trials)
    std::printf("%-14g %-5d %-12.3g %s\n", t.learning_rate, t.exit_code, t.loss,
                t.failure.c_str());
  const trial* b = best();
  if (b == nullptr) {
    std::printf("no learning rate converged\n");
    return 1;
  }
  std::printf("best learning rate: %g (loss %.3g)\n", b->learning_rate, b->loss);
  return 0;
}
