// TLaunch's three data-transfer shapes, each a program of its own; the program
// argument --shape picks one (the node processes get the same arguments, so they
// pick the same program):
//   star  one hub sends a block of numbers to each leaf and gathers one from each;
//   tree  a root splits its numbers among a level of intermediate nodes, which split
//         them among their leaves; partial results are reduced on the way back up;
//   net   every peer sends a block to every other peer.
// Every transfer is checked against what was sent; a mismatch fails the node, and the
// launcher then exits non-zero.
//   ./topologies -- --shape=tree
//   ./topologies --launch=local_mp --replicas leaf=8 -- --shape=star --numbers=100000
//   ./topologies --launch=local_mp --replicas peer=6 -- --shape=net
// Program arguments (after `--`): --shape=star|tree|net (default star), --numbers=N
// (numbers per block, or in the tree's whole input; default 1000), --corrupt=1 (one
// number of the first block sent is changed: a check fails and the program exits 1).
#include <tlaunch/tlaunch.hpp>

#include <cereal/types/vector.hpp>

#include <cstdint>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using block = std::vector<std::int64_t>;

// Reads --name=N from the program's arguments, else `fallback`.
std::int64_t arg(const std::vector<std::string>& args, std::string_view name, std::int64_t fallback) {
  const std::string prefix = fmt::format("--{}=", name);
  for (const auto& a : args)
    if (a.rfind(prefix, 0) == 0) return std::stoll(a.substr(prefix.size()));
  return fallback;
}

// The block of n numbers named `tag`: sender and checker compute it on their own.
block make_block(std::uint64_t tag, std::int64_t n) {
  block b(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<std::int64_t>((tag * 1'000'003 + i * 7'919) % 1'000'000);
  return b;
}

// Position-weighted, so a lost, added or reordered number changes it.
std::uint64_t checksum(const block& b) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < b.size(); ++i) sum += (i + 1) * static_cast<std::uint64_t>(b[i]);
  return sum;
}

const char* verdict(bool ok) { return ok ? "ok" : "MISMATCH"; }

// A mismatch fails the node (an exception out of run()), and so the program.
void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(fmt::format("mismatch: {}", what));
}

// --corrupt: the first block a sender sends has one number changed, to see a check fail.
block maybe_corrupt(block b, const std::vector<std::string>& args) {
  if (arg(args, "corrupt", 0) != 0 && !b.empty()) b[0] += 1;
  return b;
}

}  // namespace

// ---- star: one hub, many leaves --------------------------------------------------

struct Leaf {
  // hub -> leaf: returns the checksum of what arrived, for the hub to compare.
  std::uint64_t take(block b) const { return checksum(b); }
  // leaf -> hub: the block named `tag`.
  block give(std::uint64_t tag, std::int64_t n) const { return make_block(tag, n); }
  using rpc = tlaunch::methods<&Leaf::take, &Leaf::give>;
};

struct Hub {
  tlaunch::handles<Leaf> leaves;

  asio::awaitable<void> run(tlaunch::context& ctx) {
    const auto n = arg(ctx.args(), "numbers", 1000);
    // Scatter: a different block to each leaf, every call in flight at once.
    std::vector<tlaunch::future<std::uint64_t>> sent;
    for (std::size_t i = 0; i < leaves.size(); ++i)
      sent.push_back(leaves[i].async<&Leaf::take>(
          i == 0 ? maybe_corrupt(make_block(i, n), ctx.args()) : make_block(i, n)));
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      std::uint64_t expected = checksum(make_block(i, n)), got = co_await sent[i].async_wait();
      ctx.log("hub -> {}: {} numbers, checksum {} arrived as {}: {}", leaves[i].id(), n,
              expected, got, verdict(got == expected));
      check(got == expected, fmt::format("{} received another block", leaves[i].id()));
    }
    // Gather: a block from each leaf.
    std::vector<tlaunch::future<block>> asked;
    for (std::size_t i = 0; i < leaves.size(); ++i)
      asked.push_back(leaves[i].async<&Leaf::give>(1000 + i, n));
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      block b = co_await asked[i].async_wait();
      bool ok = b == make_block(1000 + i, n);
      ctx.log("{} -> hub: {} numbers, checksum {}: {}", leaves[i].id(), b.size(), checksum(b),
              verdict(ok));
      check(ok, fmt::format("{} sent another block", leaves[i].id()));
    }
    ctx.log("star: {} blocks out and {} back, all as sent", leaves.size(), leaves.size());
  }
};

constexpr auto star = tlaunch::program(
    tlaunch::node<"leaf", Leaf>().replicas(4),
    tlaunch::node<"hub", Hub>(tlaunch::ref<"leaf">));

// ---- tree: fan-out and reduction through a level of intermediate nodes -----------

// What a node of the tree answers: a sum of squares, and where its parts came from.
struct partial {
  std::string from;
  std::int64_t numbers = 0, sum_of_squares = 0;
  template <class Ar>
  void serialize(Ar& ar) { ar(from, numbers, sum_of_squares); }
};

std::int64_t sum_of_squares(const block& b) {
  std::int64_t s = 0;
  for (auto x : b) s += x * x;
  return s;
}

struct TreeLeaf {
  std::int64_t square_sum(block part) const { return sum_of_squares(part); }
  using rpc = tlaunch::methods<&TreeLeaf::square_sum>;
};

struct Mid {
  tlaunch::handles<TreeLeaf> leaves;

  // Mid `me` of `mids` owns the leaves whose index is me modulo mids: it splits its
  // chunk among them, and returns their partial sums (its own sum is theirs added up).
  asio::awaitable<std::vector<partial>> reduce(std::size_t me, std::size_t mids, block chunk) {
    std::vector<std::size_t> mine;
    for (std::size_t i = me; i < leaves.size(); i += mids) mine.push_back(i);
    if (mine.empty()) throw std::invalid_argument("more mids than leaves: give --replicas leaf=N");
    std::vector<tlaunch::future<std::int64_t>> asked;
    std::vector<partial> parts;
    for (std::size_t k = 0; k < mine.size(); ++k) {
      // An equal share for each leaf, the remainder to the last.
      auto first = chunk.size() * k / mine.size(), last = chunk.size() * (k + 1) / mine.size();
      block part(chunk.begin() + static_cast<std::ptrdiff_t>(first),
                 chunk.begin() + static_cast<std::ptrdiff_t>(last));
      parts.push_back({leaves[mine[k]].id(), static_cast<std::int64_t>(part.size()), 0});
      asked.push_back(leaves[mine[k]].async<&TreeLeaf::square_sum>(std::move(part)));
    }
    for (std::size_t k = 0; k < mine.size(); ++k) parts[k].sum_of_squares = co_await asked[k].async_wait();
    co_return parts;
  }
  using rpc = tlaunch::methods<&Mid::reduce>;
};

struct Root {
  tlaunch::handles<Mid> mids;

  asio::awaitable<void> run(tlaunch::context& ctx) {
    const auto n = arg(ctx.args(), "numbers", 1000);
    block all(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i + 1);
    // Fan-out: one contiguous chunk per mid, all in flight at once.
    std::vector<block> chunks;
    std::vector<tlaunch::future<std::vector<partial>>> asked;
    for (std::size_t m = 0; m < mids.size(); ++m) {
      auto first = all.size() * m / mids.size(), last = all.size() * (m + 1) / mids.size();
      chunks.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(first),
                          all.begin() + static_cast<std::ptrdiff_t>(last));
      asked.push_back(mids[m].async<&Mid::reduce>(
          m, mids.size(), m == 0 ? maybe_corrupt(chunks.back(), ctx.args()) : chunks.back()));
    }
    // Reduction: each mid's parts, checked against the numbers the root sent it.
    std::int64_t total = 0;
    for (std::size_t m = 0; m < mids.size(); ++m) {
      std::vector<partial> parts = co_await asked[m].async_wait();
      ctx.log("root -> {}: numbers {}..{}", mids[m].id(), chunks[m].front(), chunks[m].back());
      std::int64_t mid_sum = 0, offset = 0;
      for (const auto& p : parts) {
        block sent(chunks[m].begin() + offset, chunks[m].begin() + offset + p.numbers);
        offset += p.numbers;
        bool ok = p.sum_of_squares == sum_of_squares(sent);
        ctx.log("  {} -> {}: {} numbers; back: sum of squares {}: {}", mids[m].id(), p.from,
                p.numbers, p.sum_of_squares, verdict(ok));
        check(ok, fmt::format("{}'s sum", p.from));
        mid_sum += p.sum_of_squares;
      }
      check(offset == static_cast<std::int64_t>(chunks[m].size()),
            fmt::format("{} left numbers out", mids[m].id()));
      ctx.log("{} -> root: {} partial sums, total {}", mids[m].id(), parts.size(), mid_sum);
      total += mid_sum;
    }
    const std::int64_t expected = n * (n + 1) * (2 * n + 1) / 6;
    ctx.log("tree: sum of squares of 1..{} = {}, expected {}: {}", n, total, expected,
            verdict(total == expected));
    check(total == expected, "the total");
  }
};

constexpr auto tree = tlaunch::program(
    tlaunch::node<"leaf", TreeLeaf>().replicas(4),
    tlaunch::node<"mid", Mid>(tlaunch::ref<"leaf">).replicas(2),
    tlaunch::node<"root", Root>(tlaunch::ref<"mid">));

// ---- net: every peer calls every other peer --------------------------------------

struct Peer {
  explicit Peer(tlaunch::handles<Peer> peers) : peers(std::move(peers)) {}
  tlaunch::handles<Peer> peers;  // every replica of this node, this one included
  std::map<std::size_t, std::uint64_t> received;  // sender -> checksum of its block

  std::uint64_t deliver(std::size_t from, block b) { return received[from] = checksum(b); }

  asio::awaitable<void> run(tlaunch::context& ctx) {
    const auto n = arg(ctx.args(), "numbers", 1000);
    const std::size_t me = ctx.index(), count = peers.size();
    auto tag = [count](std::size_t from, std::size_t to) { return from * count + to; };
    // A block of its own to every other peer, all in flight at once.
    std::map<std::size_t, tlaunch::future<std::uint64_t>> sent;
    for (std::size_t j = 0; j < count; ++j)
      if (j != me)
        sent.emplace(j, peers[j].async<&Peer::deliver>(
                            me, j == (me + 1) % count ? maybe_corrupt(make_block(tag(me, j), n), ctx.args())
                                                      : make_block(tag(me, j), n)));
    for (auto& [j, reply] : sent) {
      std::uint64_t got = co_await reply.async_wait(), expected = checksum(make_block(tag(me, j), n));
      ctx.log("{} -> {}: {} numbers, checksum {} arrived as {}: {}", peers[me].id(), peers[j].id(),
              n, expected, got, verdict(got == expected));
      check(got == expected, fmt::format("{} received another block", peers[j].id()));
    }
    // The others' blocks arrive through deliver(), which runs between these sleeps.
    while (received.size() < count - 1) co_await ctx.sleep_for(std::chrono::milliseconds(5));
    for (auto& [from, sum] : received)
      check(sum == checksum(make_block(tag(from, me), n)),
            fmt::format("the block from {}", peers[from].id()));
    ctx.log("{} received {} blocks, one from every other peer: ok", peers[me].id(), received.size());
  }
  using rpc = tlaunch::methods<&Peer::deliver>;
};

constexpr auto net = tlaunch::program(
    tlaunch::node<"peer", Peer>(tlaunch::ref<"peer">).replicas(4));

// ---- main: --shape picks the program ---------------------------------------------

int main(int argc, char** argv) {
  std::string shape = "star";
  for (int i = 1, after_dashes = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") after_dashes = 1;
    else if (after_dashes && a.rfind("--shape=", 0) == 0) shape = a.substr(8);
  }
  if (shape == "star") return tlaunch::main(star, argc, argv);
  if (shape == "tree") return tlaunch::main(tree, argc, argv);
  if (shape == "net") return tlaunch::main(net, argc, argv);
  std::fprintf(stderr, "--shape: '%s' is not one of star, tree, net\n", shape.c_str());
  return 2;
}
