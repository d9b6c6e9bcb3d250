#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <tlaunch/rpc/read_batch.hpp>

using tlaunch::rpc::batch_collector;
using tlaunch::rpc::deferred_writes;
using tlaunch::rpc::post_batched;
using tlaunch::rpc::post_batched_any;

namespace {

using strand = asio::strand<asio::io_context::executor_type>;
using trace = std::vector<std::string>;

// A capture that logs its own destruction (moved-from copies stay silent) and
// counts how many are alive.
struct tracked {
  trace* log;
  std::string name;
  static inline int alive = 0;
  tracked(trace& l, std::string n) : log(&l), name(std::move(n)) { ++alive; }
  tracked(tracked&& o) noexcept : log(std::exchange(o.log, nullptr)), name(std::move(o.name)) {
    ++alive;
  }
  tracked(const tracked&) = delete;
  ~tracked() {
    --alive;
    if (log) log->push_back("~" + name);
  }
};

// A job whose capture is N bytes of a pattern and aligned like max_align_t;
// when it runs, it checks both and records its index.
template <std::size_t N>
auto sized_job(int i, std::vector<int>& order, int& damaged) {
  struct alignas(std::max_align_t) payload {
    unsigned char b[N];
  };
  payload p;
  std::memset(p.b, i & 0xff, N);
  return [p, i, &order, &damaged] {
    // Through a volatile: the compiler would fold a check of &p's alignment
    // to true from p's type alone.
    volatile std::uintptr_t at = reinterpret_cast<std::uintptr_t>(&p);
    if (at % alignof(std::max_align_t) != 0) ++damaged;
    for (unsigned char c : p.b)
      if (c != (i & 0xff)) {
        ++damaged;
        break;
      }
    order.push_back(i);
  };
}

// Adds job i with a capture size chosen by i: small jobs, jobs that no longer
// fit the first block, and jobs larger than a whole block.
void add_sized_job(const asio::io_context::executor_type& ex, int i, std::vector<int>& order,
                   int& damaged) {
  switch (i % 6) {
    case 0:
      return post_batched(ex, sized_job<8>(i, order, damaged));
    case 1:
      return post_batched(ex, sized_job<100>(i, order, damaged));
    case 2:
      return post_batched(ex, sized_job<1000>(i, order, damaged));
    case 3:
      return post_batched(ex, sized_job<2000>(i, order, damaged));
    case 4:
      return post_batched(ex, sized_job<5000>(i, order, damaged));
    default:
      return post_batched(ex, sized_job<10000>(i, order, damaged));
  }
}

// What deferred_writes::stage hands to a flush, recorded by the owner.
struct staged_sink {
  struct flush {
    std::string bytes;
    std::vector<int> extras;
  };
  std::vector<flush> flushes;
  trace* log = nullptr;  // gets "flush <bytes>" too, to order flushes and writes

  static void record(const std::shared_ptr<void>& owner, std::span<char> bytes,
                     std::span<std::shared_ptr<void>> extras) {
    auto* s = static_cast<staged_sink*>(owner.get());
    flush f{std::string(bytes.data(), bytes.size()), {}};
    for (auto& e : extras) f.extras.push_back(*static_cast<int*>(e.get()));
    if (s->log) s->log->push_back("flush " + f.bytes);
    s->flushes.push_back(std::move(f));
  }
};

// Stages bytes for sink under key, counting the calls that make the owner.
bool stage(const void* key, const std::shared_ptr<staged_sink>& sink, std::string_view bytes,
           int* owners_made, std::shared_ptr<void>* extra = nullptr) {
  return deferred_writes::stage(
      key,
      [&] {
        ++*owners_made;
        return std::shared_ptr<void>(sink);
      },
      &staged_sink::record, std::span<const char>(bytes.data(), bytes.size()), extra);
}

}  // namespace

TEST_SUITE("batch") {
  TEST_CASE("without a collector, post_batched posts each job on its own") {
    asio::io_context ctx;
    trace log;
    for (int i = 0; i < 3; ++i)
      post_batched(ctx.get_executor(), [&, i] { log.push_back(std::to_string(i)); });
    CHECK(batch_collector::current() == nullptr);
    CHECK(log.empty());
    CHECK(ctx.run() == 3);
    CHECK(log == trace{"0", "1", "2"});
  }

  TEST_CASE("in a collector's scope, the jobs for one executor become one handler, in order") {
    asio::io_context ctx;
    trace log;
    batch_collector c;
    {
      batch_collector::scope s(c, false);
      CHECK(batch_collector::current() == &c);
      for (int i = 0; i < 5; ++i)
        post_batched(ctx.get_executor(), [&, i] { log.push_back(std::to_string(i)); });
    }
    CHECK(batch_collector::current() == nullptr);
    CHECK(log.empty());  // posted, not run, with at_once off
    CHECK(ctx.run() == 1);
    CHECK(log == trace{"0", "1", "2", "3", "4"});
  }

  TEST_CASE("each executor gets its own group: other contexts, other strands") {
    asio::io_context a, b;
    strand s1(a.get_executor()), s2(a.get_executor());
    trace on_a, on_b, on_strands;
    batch_collector c;
    {
      batch_collector::scope s(c, false);
      post_batched(a.get_executor(), [&] { on_a.push_back("a1"); });
      post_batched(b.get_executor(), [&] { on_b.push_back("b1"); });
      post_batched(s1, [&] { on_strands.push_back("s1-1"); });
      post_batched(s2, [&] { on_strands.push_back("s2-1"); });
      post_batched(a.get_executor(), [&] { on_a.push_back("a2"); });
      post_batched(b.get_executor(), [&] { on_b.push_back("b2"); });
      post_batched(s2, [&] { on_strands.push_back("s2-2"); });
      post_batched(s1, [&] { on_strands.push_back("s1-2"); });
    }
    CHECK(b.run() == 1);
    CHECK(on_b == trace{"b1", "b2"});
    CHECK(on_a.empty());
    a.run();
    CHECK(on_a == trace{"a1", "a2"});
    // One group a strand: each strand's two jobs run back to back.
    CHECK(on_strands == trace{"s1-1", "s1-2", "s2-1", "s2-2"});
  }

  TEST_CASE("jobs of any size up to many blocks run in order, intact and aligned") {
    asio::io_context ctx;
    std::vector<int> order;
    int damaged = 0;
    const int jobs = 300;  // about 0.9 MB of captures: the first block and many more
    batch_collector c;
    {
      batch_collector::scope s(c, false);
      for (int i = 0; i < jobs; ++i) add_sized_job(ctx.get_executor(), i, order, damaged);
    }
    CHECK(ctx.run() == 1);
    CHECK(damaged == 0);
    REQUIRE(order.size() == static_cast<std::size_t>(jobs));
    for (int i = 0; i < jobs; ++i) CHECK(order[static_cast<std::size_t>(i)] == i);
  }

  TEST_CASE("only jobs with a capture to destroy get a destroy function") {
    int n = 1;
    auto plain = [p = &n, k = 3] { *p += k; };
    tlaunch::rpc::detail::batch_job_for<decltype(plain)> trivial(std::move(plain));
    // Compared first: doctest cannot print a function pointer.
    bool trivial_destroys = trivial.destroy != nullptr;
    CHECK_FALSE(trivial_destroys);
    trivial.run(&trivial);
    CHECK(n == 4);
    auto owning = [s = std::make_shared<int>(1)] {};
    tlaunch::rpc::detail::batch_job_for<decltype(owning)> nontrivial(std::move(owning));
    bool nontrivial_destroys = nontrivial.destroy != nullptr;
    CHECK(nontrivial_destroys);
  }

  TEST_CASE("each job's capture is destroyed right after it has run") {
    asio::io_context ctx;
    trace log;
    batch_collector c;
    {
      batch_collector::scope s(c, false);
      for (std::string n : {"a", "b", "c"})
        post_batched(ctx.get_executor(),
                     [&log, t = tracked(log, n)] { log.push_back("run " + t.name); });
    }
    CHECK(log.empty());
    ctx.run();
    CHECK(log == trace{"run a", "~a", "run b", "~b", "run c", "~c"});
    CHECK(tracked::alive == 0);
  }

  TEST_CASE("a group that never runs destroys every capture once, in every block") {
    trace log;
    {
      asio::io_context ctx;
      std::vector<int> order;
      int damaged = 0;
      batch_collector c;
      {
        batch_collector::scope s(c, false);
        for (int i = 0; i < 40; ++i) {
          add_sized_job(ctx.get_executor(), i, order, damaged);
          post_batched(ctx.get_executor(), [t = tracked(log, std::to_string(i))] {});
        }
      }
      CHECK(tracked::alive == 40);
    }  // the context goes with its queued handler; LeakSanitizer checks the blocks
    CHECK(tracked::alive == 0);
    REQUIRE(log.size() == 40);
    for (int i = 0; i < 40; ++i) CHECK(log[static_cast<std::size_t>(i)] == fmt::format("~{}", i));
  }

  TEST_CASE("a job that throws: the jobs after it do not run, every capture is destroyed") {
    asio::io_context ctx;
    trace log;
    batch_collector c;
    {
      batch_collector::scope s(c, false);
      post_batched(ctx.get_executor(), [&log, t = tracked(log, "a")] { log.push_back("run a"); });
      post_batched(ctx.get_executor(), [&log, t = tracked(log, "b")] {
        log.push_back("run b");
        throw std::runtime_error("b failed");
      });
      post_batched(ctx.get_executor(), [&log, t = tracked(log, "c")] { log.push_back("run c"); });
      post_batched(ctx.get_executor(), [&log, t = tracked(log, "d")] { log.push_back("run d"); });
    }
    CHECK_THROWS_WITH_AS(ctx.run(), "b failed", std::runtime_error);
    CHECK(log == trace{"run a", "~a", "run b", "~b", "~c", "~d"});
    CHECK(tracked::alive == 0);
  }

  TEST_CASE("the scope hands its groups over also when the handling threw") {
    asio::io_context ctx;
    bool ran = false;
    batch_collector c;
    try {
      batch_collector::scope s(c, false);
      post_batched(ctx.get_executor(), [&] { ran = true; });
      throw std::runtime_error("frame handling failed");
    } catch (const std::runtime_error&) {
    }
    CHECK(batch_collector::current() == nullptr);
    CHECK(ctx.run() == 1);
    CHECK(ran);
  }

  TEST_CASE("scopes nest: the inner collector is current until its scope ends") {
    asio::io_context ctx;
    trace log;
    batch_collector outer, inner;
    {
      batch_collector::scope so(outer, false);
      post_batched(ctx.get_executor(), [&] { log.push_back("outer 1"); });
      {
        batch_collector::scope si(inner, false);
        CHECK(batch_collector::current() == &inner);
        post_batched(ctx.get_executor(), [&] { log.push_back("inner"); });
      }  // inner's group is posted now, ahead of outer's
      CHECK(batch_collector::current() == &outer);
      post_batched(ctx.get_executor(), [&] { log.push_back("outer 2"); });
    }
    CHECK(ctx.run() == 2);
    CHECK(log == trace{"inner", "outer 1", "outer 2"});
  }

  TEST_CASE("keep: every group holds the reference until its jobs are done") {
    asio::io_context ctx;
    auto conn = std::make_shared<int>(7);
    std::weak_ptr<int> watch = conn;
    auto other = std::make_shared<int>(8);
    bool kept_while_destroying = false;
    // Notes at its destruction whether the kept reference was still held.
    struct probe {
      std::weak_ptr<int> watch;
      bool* seen;
      probe(std::weak_ptr<int> w, bool* s) : watch(std::move(w)), seen(s) {}
      probe(probe&& o) noexcept : watch(std::move(o.watch)), seen(std::exchange(o.seen, nullptr)) {}
      ~probe() {
        if (seen) *seen = !watch.expired();
      }
    };
    batch_collector c;
    {
      std::shared_ptr<void> keep = conn;
      batch_collector::scope s(c, false, &keep);
      CHECK(batch_collector::keeps(conn.get()));
      CHECK_FALSE(batch_collector::keeps(other.get()));
      post_batched(ctx.get_executor(), [p = probe(watch, &kept_while_destroying)] {});
    }
    CHECK_FALSE(batch_collector::keeps(conn.get()));
    conn.reset();
    CHECK_FALSE(watch.expired());  // the group holds it
    CHECK(ctx.run() == 1);
    CHECK(watch.expired());
    CHECK(kept_while_destroying);

    SUBCASE("and while a group that never ran destroys its jobs") {
      kept_while_destroying = false;
      auto conn2 = std::make_shared<int>(9);
      std::weak_ptr<int> watch2 = conn2;
      {
        asio::io_context unrun;
        {
          std::shared_ptr<void> keep = std::exchange(conn2, nullptr);
          batch_collector::scope s(c, false, &keep);
          post_batched(unrun.get_executor(), [p = probe(watch2, &kept_while_destroying)] {});
        }
        CHECK_FALSE(watch2.expired());
      }
      CHECK(watch2.expired());
      CHECK(kept_while_destroying);
    }
  }

  TEST_CASE("without keep, nothing is kept and keeps() is false") {
    asio::io_context ctx;
    auto conn = std::make_shared<int>(1);
    batch_collector c;
    {
      batch_collector::scope s(c, false);
      CHECK_FALSE(batch_collector::keeps(conn.get()));
      post_batched(ctx.get_executor(), [] {});
    }
    CHECK(conn.use_count() == 1);
    ctx.run();
  }

  TEST_CASE("at_once on the executor's own thread runs the group before the scope returns") {
    asio::io_context ctx;
    trace log;
    batch_collector c;
    asio::post(ctx, [&] {
      {
        batch_collector::scope s(c, true);
        post_batched(ctx.get_executor(), [&] { log.push_back("job"); });
        log.push_back("scope ends");
      }
      log.push_back("after scope");
      {
        batch_collector::scope s(c, false);
        post_batched(ctx.get_executor(), [&] { log.push_back("posted job"); });
      }
      log.push_back("after posting scope");
    });
    ctx.run();
    CHECK(log == trace{"scope ends", "job", "after scope", "after posting scope", "posted job"});
  }

  TEST_CASE("a group run at once may collect and run a batch of its own") {
    asio::io_context ctx;
    trace log;
    batch_collector c;
    asio::post(ctx, [&] {
      batch_collector::scope s(c, true);
      post_batched(ctx.get_executor(), [&] {
        log.push_back("A starts");
        {
          // The same collector, as a connection read handled inside the batch would.
          batch_collector::scope inner(c, true);
          post_batched(ctx.get_executor(), [&] { log.push_back("C"); });
        }
        log.push_back("A ends");
      });
      post_batched(ctx.get_executor(), [&] { log.push_back("B"); });
    });
    ctx.run();
    CHECK(log == trace{"A starts", "C", "A ends", "B"});
    // The collector still works afterwards.
    {
      batch_collector::scope s(c, false);
      post_batched(ctx.get_executor(), [&] { log.push_back("D"); });
    }
    ctx.restart();
    CHECK(ctx.run() == 1);
    CHECK(log.back() == "D");
  }

  TEST_CASE("a group's writes are done once all its jobs have run") {
    asio::io_context ctx;
    trace log;
    auto conn = std::make_shared<trace*>(&log);
    batch_collector c;
    {
      batch_collector::scope s(c, false);
      for (std::string n : {"1", "2"})
        post_batched(ctx.get_executor(), [&log, conn, n] {
          log.push_back("job " + n);
          CHECK(deferred_writes::defer(conn, [](const std::shared_ptr<void>& who) {
            (*static_cast<trace**>(who.get()))->push_back("write");
          }));
        });
    }
    ctx.run();
    CHECK(log == trace{"job 1", "job 2", "write", "write"});
  }

  TEST_CASE("post_batched_any puts a strand held by any_io_executor in the strand's group") {
    asio::io_context ctx;
    strand st(ctx.get_executor());
    trace log;
    auto conn = std::make_shared<trace*>(&log);
    auto write = [](const std::shared_ptr<void>& who) {
      (*static_cast<trace**>(who.get()))->push_back("write");
    };
    batch_collector c;
    {
      batch_collector::scope s(c, false);
      post_batched(st, [&log, conn, write] {
        log.push_back("direct");
        deferred_writes::defer(conn, write);
      });
      const asio::any_io_executor through_any(st);
      post_batched_any<strand>(through_any, [&] { log.push_back("through any"); });
      // Not a strand: a group of its own, for the type-erased executor.
      const asio::any_io_executor plain(ctx.get_executor());
      post_batched_any<strand>(plain, [&log, conn, write] {
        log.push_back("plain");
        deferred_writes::defer(conn, write);
      });
    }
    ctx.run();
    // One group: the write deferred by the first job waits for the second.
    CHECK(log == trace{"direct", "through any", "write", "plain", "write"});

    // Outside a scope it is a plain post to the strand.
    log.clear();
    post_batched_any<strand>(asio::any_io_executor(st), [&] { log.push_back("posted"); });
    ctx.restart();
    ctx.run();
    CHECK(log == trace{"posted"});
  }

  TEST_CASE("deferred_writes: nothing is deferred without a scope; the outermost scope writes") {
    trace log;
    auto who = std::make_shared<trace*>(&log);
    auto write = [](const std::shared_ptr<void>& w) {
      (*static_cast<trace**>(w.get()))->push_back("write " + std::to_string(w.use_count()));
    };
    CHECK_FALSE(deferred_writes::defer(who, write));
    CHECK(log.empty());
    {
      deferred_writes::scope outer;
      CHECK(deferred_writes::defer(who, write));
      {
        deferred_writes::scope inner;
        CHECK(deferred_writes::defer(who, write));
      }
      CHECK(log.empty());           // the inner scope does not write
      CHECK(who.use_count() == 3);  // each queued write keeps its target
    }
    CHECK(log == trace{"write 3", "write 3"});
    CHECK(who.use_count() == 1);
    CHECK_FALSE(deferred_writes::defer(who, write));
  }

  TEST_CASE("deferred_writes::stage: one flush per key, bytes and extras in order, before writes") {
    trace log;
    auto sink = std::make_shared<staged_sink>();
    sink->log = &log;
    auto write_target = std::make_shared<trace*>(&log);
    int owners = 0, key1 = 0, key2 = 0;
    auto extra = [](int v) { return std::shared_ptr<void>(std::make_shared<int>(v)); };

    std::shared_ptr<void> left = extra(1);
    CHECK_FALSE(stage(&key1, sink, "x", &owners, &left));
    CHECK(left != nullptr);  // left as it was
    CHECK(owners == 0);
    {
      deferred_writes::scope s;
      deferred_writes::defer(write_target, [](const std::shared_ptr<void>& w) {
        (*static_cast<trace**>(w.get()))->push_back("write");
      });
      auto e1 = extra(1), e2 = extra(2), e3 = extra(3);
      CHECK(stage(&key1, sink, "a1 ", &owners, &e1));
      CHECK(e1 == nullptr);  // taken
      CHECK(stage(&key2, sink, "b1 ", &owners));
      CHECK(stage(&key1, sink, "a2 ", &owners, &e2));
      CHECK(stage(&key1, sink, "a3", &owners, &e3));
      CHECK(stage(&key2, sink, "b2", &owners));
      CHECK(owners == 2);  // once per key
      CHECK(sink->flushes.empty());
    }
    REQUIRE(sink->flushes.size() == 2);
    CHECK(sink->flushes[0].bytes == "a1 a2 a3");
    CHECK(sink->flushes[0].extras == std::vector<int>{1, 2, 3});
    CHECK(sink->flushes[1].bytes == "b1 b2");
    CHECK(sink->flushes[1].extras.empty());
    CHECK(log == trace{"flush a1 a2 a3", "flush b1 b2", "write"});
    CHECK(sink.use_count() == 1);  // the owning references are dropped after the flush
  }

  TEST_CASE("deferred_writes::flush_key flushes a key now; later bytes start a new entry") {
    auto sink = std::make_shared<staged_sink>();
    int owners = 0, key1 = 0, key2 = 0, unknown = 0;
    deferred_writes::flush_key(&key1);  // no scope: nothing to do
    {
      deferred_writes::scope s;
      stage(&key1, sink, "early", &owners);
      stage(&key2, sink, "other", &owners);
      deferred_writes::flush_key(&unknown);
      CHECK(sink->flushes.empty());
      deferred_writes::flush_key(&key1);
      REQUIRE(sink->flushes.size() == 1);
      CHECK(sink->flushes[0].bytes == "early");
      deferred_writes::flush_key(&key1);  // nothing more under it
      CHECK(sink->flushes.size() == 1);
      stage(&key1, sink, "late", &owners);
      CHECK(owners == 3);
    }
    REQUIRE(sink->flushes.size() == 3);
    CHECK(sink->flushes[1].bytes == "other");
    CHECK(sink->flushes[2].bytes == "late");
  }

  TEST_CASE("deferred_writes: a flush may stage under new keys and defer writes") {
    // The staged entries grow while one of them is being flushed.
    static trace log;
    log.clear();
    static int keys[40];
    struct chain {
      static void flush_first(const std::shared_ptr<void>& owner, std::span<char> bytes,
                              std::span<std::shared_ptr<void>>) {
        log.push_back("first " + std::string(bytes.data(), bytes.size()));
        for (int& k : keys)
          deferred_writes::stage(
              &k, [&] { return owner; }, &flush_next, std::span<const char>("n", 1));
        deferred_writes::defer(owner, [](const std::shared_ptr<void>&) { log.push_back("write"); });
      }
      static void flush_next(const std::shared_ptr<void>&, std::span<char> bytes,
                             std::span<std::shared_ptr<void>>) {
        log.push_back(std::string(bytes.data(), bytes.size()));
      }
    };
    auto owner = std::make_shared<int>(0);
    int first_key = 0;
    {
      deferred_writes::scope s;
      deferred_writes::stage(
          &first_key, [&] { return std::shared_ptr<void>(owner); }, &chain::flush_first,
          std::span<const char>("go", 2));
    }
    REQUIRE(log.size() == 42);
    CHECK(log.front() == "first go");
    for (std::size_t i = 1; i <= 40; ++i) CHECK(log[i] == "n");
    CHECK(log.back() == "write");
    CHECK(owner.use_count() == 1);
  }

  TEST_CASE("deferred_writes: large staged runs arrive whole, and scopes start empty") {
    auto sink = std::make_shared<staged_sink>();
    int owners = 0, key = 0;
    std::string big(200 * 1024, '\0');
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
    {
      deferred_writes::scope s;
      // In pieces that make the run grow several times.
      for (std::size_t at = 0; at < big.size(); at += 7000)
        stage(&key, sink, std::string_view(big).substr(at, 7000), &owners);
    }
    REQUIRE(sink->flushes.size() == 1);
    CHECK(sink->flushes[0].bytes == big);
    for (std::string small : {"small", "x"}) {
      deferred_writes::scope s;
      stage(&key, sink, small, &owners);
      stage(&key, sink, "!", &owners);
    }
    REQUIRE(sink->flushes.size() == 3);
    CHECK(sink->flushes[1].bytes == "small!");
    CHECK(sink->flushes[2].bytes == "x!");
  }

  TEST_CASE("deferred_writes: staging no bytes, only an extra, on a fresh thread") {
    // A new thread's staging has no buffer yet: appending nothing must not
    // hand memcpy a null pointer (UBSan checks).
    auto sink = std::make_shared<staged_sink>();
    bool staged = false;
    int owners = 0;
    std::thread([&] {
      int key = 0;
      deferred_writes::scope s;
      std::shared_ptr<void> e = std::make_shared<int>(5);
      staged = stage(&key, sink, std::string_view(), &owners, &e);
    }).join();
    CHECK(staged);
    CHECK(owners == 1);
    REQUIRE(sink->flushes.size() == 1);
    CHECK(sink->flushes[0].bytes.empty());
    CHECK(sink->flushes[0].extras == std::vector<int>{5});
  }
}
