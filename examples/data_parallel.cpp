// Data-parallel training (TLaunch's MNIST example, in C++): each worker holds a shard
// of the data set and computes the gradient of a logistic-regression model on it; a
// parameter server combines the gradients and takes one step. Its combining method is
// a batched handler: every worker makes one ordinary call with its gradient, the calls
// that arrive together form one batch, and the method averages the batch, updates the
// weights once and answers every worker with the new weights; worker 0 prints the loss
// on its shard as it falls. The data are generated (labels drawn from a hidden "true"
// model), so no download is needed.
//   ./data_parallel
//   ./data_parallel --launch=local_mp --replicas worker=8 -- --steps=300 --examples=5000
// Program arguments (after `--`): --steps=N (per worker, default 100), --examples=N
// (per worker's shard, 2000), --features=N (16), --seed=N (1).
#include <tlaunch/tlaunch.hpp>

#include <cereal/types/vector.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
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

// One worker's shard: x[i] has `features` values, y[i] is 0 or 1.
struct shard {
  std::vector<std::vector<float>> x;
  std::vector<float> y;
};

// Every worker draws the same hidden model from `seed`, and its own examples from
// `seed` and its index: the shards are disjoint samples of one distribution.
shard make_shard(std::uint64_t seed, std::size_t features, std::size_t index, std::size_t examples) {
  std::mt19937_64 model_rng(seed);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> truth(features);
  for (auto& t : truth) t = normal(model_rng);
  std::mt19937_64 rng(seed * 7919 + index + 1);
  shard s;
  for (std::size_t i = 0; i < examples; ++i) {
    std::vector<float> x(features);
    float z = 0.5f;  // the hidden model's bias
    for (std::size_t j = 0; j < features; ++j) z += truth[j] * (x[j] = normal(rng));
    float p = 1 / (1 + std::exp(-z));
    s.x.push_back(std::move(x));
    s.y.push_back(std::bernoulli_distribution(p)(rng) ? 1.0f : 0.0f);
  }
  return s;
}

}  // namespace

// What a worker sends: the gradient of the mean log loss on its shard (the last entry
// is the bias's), and that loss.
struct gradient {
  std::vector<float> values;
  double loss = 0;
  template <class Ar>
  void serialize(Ar& ar) { ar(values, loss); }
};

// What every worker of a batch gets back.
struct step_result {
  std::int64_t step = 0;        // steps the server has taken
  std::vector<float> weights;   // after this step
  std::int64_t gradients = 0;   // how many gradients this step combined
  template <class Ar>
  void serialize(Ar& ar) { ar(step, weights, gradients); }
};

struct ParameterServer {
  explicit ParameterServer(double learning_rate) : learning_rate(learning_rate) {}
  double learning_rate;
  std::vector<float> weights;  // sized by the first gradient, starting at zero
  std::int64_t step = 0;

  // Runs once per batch of calls: one gradient per worker that called, one result each.
  std::vector<step_result> apply(std::vector<gradient> batch) {
    if (weights.empty()) weights.assign(batch.front().values.size(), 0.0f);
    std::vector<float> mean(weights.size(), 0.0f);
    for (const auto& g : batch) {
      if (g.values.size() != weights.size()) throw std::invalid_argument("gradient of another size");
      for (std::size_t j = 0; j < mean.size(); ++j) mean[j] += g.values[j] / static_cast<float>(batch.size());
    }
    for (std::size_t j = 0; j < weights.size(); ++j)
      weights[j] -= static_cast<float>(learning_rate) * mean[j];
    ++step;
    return std::vector<step_result>(
        batch.size(), step_result{step, weights, static_cast<std::int64_t>(batch.size())});
  }

  // A batch runs when 64 gradients wait, or 10 ms after its first one arrived: the
  // workers' calls of one round arrive within that and make one step together.
  using rpc = tlaunch::methods<tlaunch::batched<
      &ParameterServer::apply,
      tlaunch::batch_options{.max_batch = 64, .max_wait = std::chrono::milliseconds(10)}>>;
};

struct Worker {
  tlaunch::handle<ParameterServer> server;

  asio::awaitable<void> run(tlaunch::context& ctx) {
    const auto steps = arg(ctx.args(), "steps", 100);
    const auto features = static_cast<std::size_t>(arg(ctx.args(), "features", 16));
    const shard data = make_shard(static_cast<std::uint64_t>(arg(ctx.args(), "seed", 1)), features,
                                  ctx.index(), static_cast<std::size_t>(arg(ctx.args(), "examples", 2000)));
    const std::int64_t log_every = std::max<std::int64_t>(1, steps / 10);
    std::vector<float> weights(features + 1, 0.0f);  // the server's start: all zero
    double first_loss = 0;
    for (std::int64_t s = 1; s <= steps; ++s) {
      gradient g = gradient_of(weights, data);
      const double loss = g.loss;  // on this shard, at the weights the gradient is taken at
      if (s == 1) first_loss = loss;
      // One ordinary call; the server combines it with the other workers' gradients.
      step_result r = co_await server.call<&ParameterServer::apply>(std::move(g));
      weights = std::move(r.weights);
      if (ctx.index() == 0 && (s == 1 || s % log_every == 0))
        ctx.log("step {:>4}: loss {:.4f} on its shard (server step {}, gradients combined: {})", s,
                loss, r.step, r.gradients);
      if (ctx.index() == 0 && s == steps)
        ctx.log("loss on its shard fell from {:.4f} to {:.4f} over {} steps", first_loss, loss, steps);
    }
  }

  // The gradient of the mean log loss of a logistic-regression model on the shard.
  static gradient gradient_of(const std::vector<float>& w, const shard& data) {
    const std::size_t features = w.size() - 1;
    gradient g{std::vector<float>(w.size(), 0.0f), 0};
    const auto n = static_cast<float>(data.y.size());
    for (std::size_t i = 0; i < data.y.size(); ++i) {
      float z = w[features];
      for (std::size_t j = 0; j < features; ++j) z += w[j] * data.x[i][j];
      float p = 1 / (1 + std::exp(-z)), error = p - data.y[i];
      for (std::size_t j = 0; j < features; ++j) g.values[j] += error * data.x[i][j] / n;
      g.values[features] += error / n;
      // log(1 + e^z) - y z, computed without overflow
      g.loss += (std::max(z, 0.0f) + std::log1p(std::exp(-std::abs(z))) - data.y[i] * z) / n;
    }
    return g;
  }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"server", ParameterServer>(1.0),  // the learning rate
    tlaunch::node<"worker", Worker>(tlaunch::ref<"server">).replicas(4));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
