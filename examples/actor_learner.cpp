// Acme's actor-learner-replay shape on a five-armed bandit. Actors play the bandit
// with the latest policy they were given and insert what happened into a replay node
// (tlaunch::data_store); the learner samples batches of experience, as fast as the
// replay's rate limiter lets it, updates its estimate of each arm's value, and pushes
// the new policy to every actor with one broadcast. It prints a learning curve: the
// mean reward of the experience it learned from, per window of learner steps.
//   ./actor_learner
//   ./actor_learner --launch=local_mp --replicas actor=8 -- --steps=1000 --seed=3
// The learner keeps its state (tlaunch/state.hpp): with --state-dir=DIR it snapshots it at
// the end of each window, and when it is killed and restarted (its restart policy) its
// curve goes on from the last snapshot; --resume=DIR goes on from there in a new launch.
//   ./actor_learner --launch=local_mp --state-dir=/tmp/al -- --kill-at=110
// The actors are elastic (up to 16): with --grow-at=N the learner doubles them at step N
// (ctx.resize, under local_mp, ssh or slurm); the next policy broadcast reaches the new ones.
//   ./actor_learner --launch=local_mp -- --grow-at=100
// Program arguments (after `--`): --steps=N (learner steps, default 200), --batch=N
// (experience per step, 32), --window=N (steps per line of the curve, 20), --seed=N (1),
// --kill-at=N (the learner's first process kills itself with SIGKILL at step N; 0: never),
// --grow-at=N (the learner doubles the actors at step N; 0: never).
#include <tlaunch/store/client.hpp>  // tlaunch::data_store and its writer and sampler
#include <tlaunch/tlaunch.hpp>

#include <signal.h>
#include <unistd.h>

#include <cereal/types/array.hpp>
#include <cereal/types/vector.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// Reads --name=N from the program's arguments, else `fallback`.
std::int64_t arg(const std::vector<std::string>& args, std::string_view name, std::int64_t fallback) {
  const std::string prefix = fmt::format("--{}=", name);
  for (const auto& a : args)
    if (a.rfind(prefix, 0) == 0) return std::stoll(a.substr(prefix.size()));
  return fallback;
}

// The environment: pulling arm a pays 1 with probability payout[a], else 0. Arm 4 is best.
constexpr std::array<double, 5> payout{0.1, 0.3, 0.5, 0.2, 0.9};
constexpr int arms = static_cast<int>(payout.size());

struct bandit {
  std::mt19937_64 rng;
  float pull(int arm) { return std::bernoulli_distribution(payout[arm])(rng) ? 1.0f : 0.0f; }
};

// One step of experience, as the actors insert it and the learner samples it.
struct experience {
  int arm = 0;
  float reward = 0;
  std::int64_t policy_version = 0;  // which policy chose the arm
  template <class Ar>
  void serialize(Ar& ar) { ar(arm, reward, policy_version); }
};

// What the learner pushes to the actors: its estimate of each arm's value.
struct policy {
  std::int64_t version = 0;  // 0: nothing learned yet
  std::vector<float> value = std::vector<float>(arms, 0.0f);
  template <class Ar>
  void serialize(Ar& ar) { ar(version, value); }
};

}  // namespace

struct Actor {
  explicit Actor(tlaunch::handle<tlaunch::data_store> replay) : replay(std::move(replay)) {}
  tlaunch::handle<tlaunch::data_store> replay;
  policy current;

  // Called by the learner (a broadcast to every actor); runs on this actor's strand
  // between the steps of run(), so it needs no lock.
  void set_policy(policy p) {
    if (p.version > current.version) current = std::move(p);
  }

  // Epsilon-greedy: a random arm one time in ten (and before anything is learned),
  // else the arm of highest value.
  int choose(std::mt19937_64& rng) const {
    if (current.version == 0 || std::uniform_real_distribution<>(0, 1)(rng) < 0.1)
      return std::uniform_int_distribution<>(0, arms - 1)(rng);
    return static_cast<int>(std::max_element(current.value.begin(), current.value.end()) -
                            current.value.begin());
  }

  asio::awaitable<void> run(tlaunch::context& ctx) {
    auto seed = static_cast<std::uint64_t>(arg(ctx.args(), "seed", 1)) * 1000 + ctx.index();
    bandit env{std::mt19937_64(seed)};
    std::mt19937_64 rng(seed + 1);
    // 8 items per insert call; append() waits while the replay's rate limiter holds inserts.
    tlaunch::store::writer<experience> out(replay, "experience", 8);
    bool playing = false;
    try {
      for (;;) {  // until the learner stops the program
        if (!playing && current.version > 0) {
          ctx.log("playing policy {}", current.version);  // the first one it got
          playing = true;
        }
        int arm = choose(rng);
        co_await out.append(experience{arm, env.pull(arm), current.version});
      }
    } catch (const tlaunch::unavailable&) {
      // The replay node stopped: the stop reaches nodes one by one, and the replay may
      // go before this actor hears of it. (Had the replay failed, the launcher reports
      // that failure.)
    }
  }

  using rpc = tlaunch::methods<&Actor::set_policy>;
};

struct Learner {
  tlaunch::handle<tlaunch::data_store> replay;
  tlaunch::handles<Actor> actors;

  // What it has learned, which its snapshots hold: the steps done, the policy, each arm's
  // reward sum and count, the curve so far and the current window's reward.
  std::int64_t step = 0;
  policy p = {};
  std::array<double, arms> sum = {}, count = {};
  std::vector<double> curve = {};  // mean reward per window
  double reward_sum = 0;
  template <class Archive>
  void state(Archive& ar) {
    ar(step, p, sum, count, curve, reward_sum);
  }

  asio::awaitable<void> run(tlaunch::context& ctx) {
    const auto steps = arg(ctx.args(), "steps", 200), batch = arg(ctx.args(), "batch", 32),
               window = arg(ctx.args(), "window", 20), kill_at = arg(ctx.args(), "kill-at", 0),
               grow_at = arg(ctx.args(), "grow-at", 0);
    if (steps < 2 * window || batch < 1 || window < 1)
      throw std::invalid_argument("need --steps >= 2 * --window, --batch >= 1 and --window >= 1");
    if (ctx.resumed()) ctx.log("resumed at step {} (start {} of this learner)", step, ctx.incarnation());
    // Prefetches the next batch while this one is learned from.
    tlaunch::store::sampler<experience> in(replay, "experience", static_cast<std::uint32_t>(batch));
    // Each arm's value is the mean reward of every sample of it so far: unbiased whichever
    // policy chose the arm, and an arm the actors rarely explore still converges.
    while (step < steps) {
      ++step;
      for (std::int64_t i = 0; i < batch; ++i) {
        experience e = (co_await in.next()).value;  // waits while the rate limiter says so
        if (e.arm < 0 || e.arm >= arms) throw std::out_of_range(fmt::format("no arm {}", e.arm));
        sum[e.arm] += e.reward;
        count[e.arm] += 1;
        p.value[e.arm] = static_cast<float>(sum[e.arm] / count[e.arm]);
        reward_sum += e.reward;
      }
      if (step % 5 == 0) {  // every 5 steps, the new policy to every actor at once
        p.version = step;
        co_await actors.broadcast<&Actor::set_policy>(p);
      }
      if (step % window == 0) {
        curve.push_back(reward_sum / static_cast<double>(window * batch));
        reward_sum = 0;
        ctx.log("steps {:>4}-{:<4} mean reward {:.3f}  values [{:.2f}]", step - window + 1, step,
                curve.back(), fmt::join(p.value, " "));
        if (ctx.can_snapshot()) co_await ctx.snapshot();  // with --state-dir
      }
      if (step == grow_at && actors.size() < 16) {
        // More actors half-way: placed as the first ones were, and known to every process
        // (this broadcast list included) once resize returns.
        const auto more = static_cast<std::uint32_t>(std::min<std::size_t>(actors.size() * 2, 16));
        co_await ctx.resize<"actor">(more);
        ctx.log("step {}: {} actors now", step, actors.size());
      }
      if (step == kill_at && ctx.incarnation() == 0) {
        ctx.log("killing this learner's process at step {}", step);
        ::kill(::getpid(), SIGKILL);
      }
    }
    ctx.log("learning curve: first window {:.3f}, last window {:.3f}, best arm {} (of {})",
            curve.front(), curve.back(),
            std::max_element(p.value.begin(), p.value.end()) - p.value.begin(), arms);
    ctx.stop_program();  // the actors play forever: stop them
  }
};

namespace store = tlaunch::store;

constexpr auto program = tlaunch::program(
    // Holds the latest 1,000 steps. The rate limiter keeps actors and learner in step:
    // each item is sampled about twice (samples per insert 2), learning starts once 100
    // items are in, and either side may run ahead of the other by 200 samples.
    tlaunch::node<"replay", tlaunch::data_store>(
        store::table_config{.name = "experience",
                            .sampler = store::uniform(),
                            .remover = store::fifo(),
                            .max_size = 1000,
                            .limiter = store::sample_to_insert_ratio(2.0, 100, 200.0)},
        store::options{.seed = 1}),
    // 4 at launch; the learner may add more while it runs (--grow-at), up to 16.
    tlaunch::node<"actor", Actor>(tlaunch::ref<"replay">).replicas(4).elastic(16),
    // A killed learner is started again (local_mp, ssh, slurm, k8s), from its snapshot.
    tlaunch::node<"learner", Learner>(tlaunch::ref<"replay">, tlaunch::ref<"actor">)
        .restart({.max_restarts = 3}));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
