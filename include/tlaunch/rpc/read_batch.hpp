// Work that the frames of one read hand to executors, posted once per executor.
//
// A read often carries many frames: a burst of calls to one node, or the replies
// to a burst of calls. Posting each onto its strand costs an allocation and a
// strand turn apiece, and worse, the first reply's write is queued before the
// strand runs the rest, so replies leave in fragments. While a connection handles
// a read, a batch_collector gathers what each frame would have posted; when the
// read is done it posts one handler per executor that runs them all, in order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/dispatch.hpp>
#include <asio/post.hpp>

#include "../detail/config.hpp"
#include "../detail/small_pool.hpp"
#include "metrics.hpp"

namespace tlaunch::rpc {

// Writes that connections would post while a batch of work runs on this
// thread: queued here and done when the outermost scope ends, so everything the
// batch sent leaves in one write per connection, without another queue hop.
class deferred_writes {
 public:
  using write_fn = void (*)(const std::shared_ptr<void>&);
  struct item {
    std::shared_ptr<void> who;
    write_fn fn;
  };

  // Queues fn(who) for the end of the current scope; false when none is open.
  static bool defer(std::shared_ptr<void> who, write_fn fn) {
    if (!current_) return false;
    current_->push_back({std::move(who), fn});
    return true;
  }

  // Bytes gathered per key while a scope is open and handed to
  // flush(owner, bytes, extras) once, when it ends, before the deferred writes
  // run: a batch's replies (or calls) to one connection then cost one lock, not
  // one each. Each stage() may add one `extra` (a call's pending state), handed
  // over in the same order. `owner` makes the owning reference, only for the
  // first bytes a key stages. False when no scope is open; `extra` is then
  // left as it was.
  using flush_fn = void (*)(const std::shared_ptr<void>& owner, std::span<char> bytes,
                            std::span<std::shared_ptr<void>> extras);
  template <class Owner>
  static bool stage(const void* key, Owner&& owner, flush_fn flush, std::span<const char> bytes,
                    std::shared_ptr<void>* extra = nullptr) {
    staging* st = staging_;
    if (!st) return false;
    // Mostly one key per batch (the connection the read came from).
    staged* e = st->used > 0 && st->entries[st->used - 1].key == key ? &st->entries[st->used - 1]
                                                                      : find(*st, key);
    if (!e) {
      if (st->used == st->entries.size()) st->entries.emplace_back();
      e = &st->entries[st->used++];
      e->key = key;
      e->who = owner();
      e->flush = flush;
    }
    e->bytes.append(bytes);
    if (extra) e->extras.push_back(std::move(*extra));
    return true;
  }

  // Flushes what is staged under key now, if anything (a frame that must not
  // overtake it is about to be queued).
  static void flush_key(const void* key) {
    staging* st = staging_;
    if (!st || st->used == 0) return;
    for (std::size_t i = 0; i < st->used; ++i)
      if (st->entries[i].key == key) return flush_entry(*st, i);
  }

  // Counts a served call's end (rpc/metrics.hpp) as its reply of `bytes` leaves: when the
  // current scope ends, timed by one clock read for all of its replies, or now when no
  // scope is open.
  static void count_served_end(const served_call& c, call_outcome o, std::size_t bytes) {
    if (!c.stats) return;
    if (staging* st = staging_) {
      st->ends.push_back({c, o, bytes});
      return;
    }
    const std::int64_t ns = metrics_now() - c.arrived;
    c.stats->update([&](served_shard& s) { s.end(o, bytes, ns); });
  }

  // Flushes everything staged on this thread now (calls that a frame another thread
  // queues next must not be overtaken by: a resize's fence, rpc/runtime.hpp).
  static void flush_all() {
    if (staging* st = staging_; st && st->used > 0) flush_staged(*st);
  }

  // Opens a scope unless one is open already (the outermost one writes).
  class scope {
   public:
    scope() : owner_(current_ == nullptr) {
      if (owner_) {
        current_ = &items_;
        staging_ = &thread_staging();
      }
    }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;
    TLAUNCH_DECL ~scope();

   private:
    bool owner_;
    std::vector<item> items_;
  };

 private:
  // Bytes appended in place; the capacity is kept from scope to scope.
  class byte_run {
   public:
    byte_run() = default;
    byte_run(const byte_run&) = delete;
    byte_run& operator=(const byte_run&) = delete;
    byte_run(byte_run&& o) noexcept
        : data_(std::exchange(o.data_, nullptr)),
          size_(std::exchange(o.size_, 0)),
          cap_(std::exchange(o.cap_, 0)) {}
    ~byte_run() { std::free(data_); }
    void swap(byte_run& o) noexcept {
      std::swap(data_, o.data_);
      std::swap(size_, o.size_);
      std::swap(cap_, o.cap_);
    }
    void append(std::span<const char> b) {
      if (b.empty()) return;  // memcpy must not see a null data_ (a run not grown yet)
      if (cap_ - size_ < b.size()) grow(size_ + b.size());
      std::memcpy(data_ + size_, b.data(), b.size());
      size_ += b.size();
    }
    std::span<char> view() { return {data_, size_}; }
    // Empties it; a rare huge batch gives its memory back.
    void reset() {
      size_ = 0;
      if (cap_ > 64 * 1024) {
        std::free(std::exchange(data_, nullptr));
        cap_ = 0;
      }
    }

   private:
    void grow(std::size_t need) {
      std::size_t c = std::max<std::size_t>({need, cap_ * 2, 1024});
      char* d = static_cast<char*>(std::realloc(data_, c));
      if (!d) throw std::bad_alloc();
      data_ = d;
      cap_ = c;
    }
    char* data_ = nullptr;
    std::size_t size_ = 0, cap_ = 0;
  };

  struct staged {
    const void* key = nullptr;
    std::shared_ptr<void> who;
    flush_fn flush = nullptr;
    byte_run bytes;  // emptied, not freed: reused by the next scope
    std::vector<std::shared_ptr<void>> extras;
  };
  struct served_end {
    served_call call;
    call_outcome outcome;
    std::size_t bytes;
  };
  struct staging {
    std::vector<staged> entries;
    std::size_t used = 0;
    std::vector<served_end> ends;  // emptied, not freed
  };

  // Counts the served calls' ends staged by count_served_end.
  static void count_ends(staging& st) {
    if (st.ends.empty()) [[likely]]
      return;
    const std::int64_t now = metrics_now();
    for (const auto& e : st.ends)
      e.call.stats->update(
          [&](served_shard& s) { s.end(e.outcome, e.bytes, now - e.call.arrived); });
    st.ends.clear();
  }

  static staged* find(staging& st, const void* key) {
    for (std::size_t i = 0; i < st.used; ++i)
      if (st.entries[i].key == key) return &st.entries[i];
    return nullptr;
  }

  // Flushes entry i. Its key is cleared before the flush runs, so bytes staged
  // by the flush start an entry of their own (flush_staged reaches it too).
  static void flush_entry(staging& st, std::size_t i) {
    byte_run bytes;
    bytes.swap(st.entries[i].bytes);
    std::vector<std::shared_ptr<void>> extras;
    extras.swap(st.entries[i].extras);
    std::shared_ptr<void> who = std::move(st.entries[i].who);
    st.entries[i].key = nullptr;
    st.entries[i].flush(who, bytes.view(), extras);
    bytes.reset();
    extras.clear();
    // Indexed again: the flush may have grown the entries. Keeps the capacity.
    st.entries[i].bytes.swap(bytes);
    st.entries[i].extras.swap(extras);
  }

  static void flush_staged(staging& st) {
    for (std::size_t i = 0; i < st.used; ++i)
      if (st.entries[i].key) flush_entry(st, i);
    st.used = 0;
  }

  // The thread's staging area, reached through a plain pointer while a scope
  // is open (a thread_local with a constructor costs a guard check per use).
  static staging& thread_staging() {
    thread_local staging s;
    return s;
  }

  static inline thread_local std::vector<item>* current_ = nullptr;
  static inline thread_local staging* staging_ = nullptr;
};

namespace detail {

// A job stored in a group: run, then destroyed in place (nothing to destroy
// for a job whose captures are trivially destructible, the common case: a
// served call's job holds pointers and numbers).
struct batch_job {
  void (*run)(batch_job*);
  void (*destroy)(batch_job*);  // null: nothing to destroy
  batch_job* next = nullptr;
};

template <class F>
struct batch_job_for final : batch_job {
  static void do_run(batch_job* j) { static_cast<batch_job_for*>(j)->fn(); }
  static void do_destroy(batch_job* j) { static_cast<batch_job_for*>(j)->~batch_job_for(); }
  explicit batch_job_for(F&& f)
      : batch_job{&do_run, std::is_trivially_destructible_v<F> ? nullptr : &do_destroy},
        fn(std::move(f)) {}
  F fn;
};

// The jobs for one executor, stored in place: a first block inside the group,
// then more blocks as needed, all freed with the group.
class batch_group {
 public:
  explicit batch_group(const void* tag) : tag_(tag) {}
  static void* operator new(std::size_t n) { return tlaunch::detail::small_pool::allocate(n); }
  static void operator delete(void* p, std::size_t n) noexcept {
    tlaunch::detail::small_pool::deallocate(p, n);
  }
  batch_group(const batch_group&) = delete;
  batch_group& operator=(const batch_group&) = delete;
  virtual ~batch_group() {
    for (batch_job* j = head_; j;) {
      batch_job* n = j->next;
      if (j->destroy) j->destroy(j);
      j = n;
    }
    for (block* b = extra_; b;) {
      block* n = b->next;
      ::operator delete(b);
      b = n;
    }
  }

  template <class F>
  void add(F&& f) {
    using job = batch_job_for<std::decay_t<F>>;
    // Jobs take whole slots of max_align_t: a bump of a constant size.
    constexpr std::size_t size = (sizeof(job) + slot - 1) / slot * slot;
    static_assert(alignof(job) <= slot, "tlaunch: an over-aligned job cannot be batched");
    if (static_cast<std::size_t>(end_ - cur_) < size) new_block(size);
    auto* j = ::new (cur_) job(std::forward<F>(f));
    cur_ += size;
    if (tail_)
      tail_->next = j;
    else
      head_ = j;
    tail_ = j;
  }

  // Runs every job in order, each destroyed as soon as it has run; what they
  // send is written once they all have.
  TLAUNCH_DECL void run();

  const void* tag() const { return tag_; }
  // A reference the group's jobs rely on, dropped after the jobs.
  void keep(const std::shared_ptr<void>& k) { keep_ = k; }
  // Hands the group to its executor: posted, or with at_once dispatched (run
  // right here when the executor's strand is idle).
  virtual void submit(std::unique_ptr<batch_group> self, bool at_once) = 0;

 private:
  // A block's bytes follow its header, at an offset of one slot.
  struct alignas(std::max_align_t) block {
    block* next;
  };
  static constexpr std::size_t slot = alignof(std::max_align_t);
  static constexpr std::size_t first_size = 1024, block_size = 4096;

  // Once the current block is full, jobs go to a new one (the rest of the old
  // block stays unused).
  void new_block(std::size_t need) {
    std::size_t size = std::max(block_size, need);
    auto* b = static_cast<block*>(::operator new(sizeof(block) + size));
    b->next = extra_;
    extra_ = b;
    cur_ = reinterpret_cast<std::byte*>(b + 1);
    end_ = cur_ + size;
  }

  const void* tag_;
  std::shared_ptr<void> keep_;  // released after the jobs (the destructor's body ends those)
  batch_job *head_ = nullptr, *tail_ = nullptr;
  block* extra_ = nullptr;
  alignas(std::max_align_t) std::byte first_[first_size];
  std::byte* cur_ = first_;
  std::byte* end_ = first_ + first_size;
};

template <class Ex>
inline constexpr char executor_tag = 0;

template <class Ex>
class batch_group_for final : public batch_group {
 public:
  explicit batch_group_for(const Ex& ex) : batch_group(&executor_tag<Ex>), ex_(ex) {}
  bool is_for(const Ex& ex) const { return ex_ == ex; }
  void submit(std::unique_ptr<batch_group> self, bool at_once) override;

 private:
  Ex ex_;
};

// Not inline: with TLAUNCH_SEPARATE_COMPILATION, instantiated once in the library for a
// node's strand and for any_io_executor (call_paths.hpp), not in every file.
template <class Ex>
void batch_group_for<Ex>::submit(std::unique_ptr<batch_group> self, bool at_once) {
  if (at_once)
    asio::dispatch(ex_, [g = std::move(self)] { g->run(); });
  else
    asio::post(ex_, [g = std::move(self)] { g->run(); });
}

}  // namespace detail

// Owned by a connection (reader-only state); active on the reader's thread
// while a read is handled, flushed when it is done.
class batch_collector {
 public:
  batch_collector() = default;
  batch_collector(const batch_collector&) = delete;
  batch_collector& operator=(const batch_collector&) = delete;

  // Makes c the current collector until the scope ends, then hands over its
  // groups, also when the handling threw. With at_once (the process's only io
  // thread, where nothing else could run meanwhile) a group whose strand is
  // idle runs at once instead of waiting for another turn of the queue.
  // With keep, every group the scope collects holds that reference until it
  // has run (see keeps()).
  class scope {
   public:
    scope(batch_collector& c, bool at_once, const std::shared_ptr<void>* keep = nullptr)
        : c_(c), prev_(current_), at_once_(at_once), prev_keep_(c.keep_) {
      current_ = &c;
      c.keep_ = keep;
    }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;
    ~scope() {
      current_ = prev_;
      c_.keep_ = prev_keep_;
      c_.flush(at_once_);
    }

   private:
    batch_collector& c_;
    batch_collector* prev_;
    bool at_once_;
    const std::shared_ptr<void>* prev_keep_;
  };

  // The collector of the read being handled on this thread, if any.
  static batch_collector* current() noexcept { return current_; }

  // Whether what is batched now lands in groups that keep p alive until they
  // have run (p: what the current scope's keep reference points to).
  static bool keeps(const void* p) noexcept {
    return current_ && current_->keep_ && current_->keep_->get() == p;
  }

  template <class Ex, class F>
  void add(const Ex& ex, F&& f) {
    using group = detail::batch_group_for<Ex>;
    for (auto& g : groups_)
      if (g->tag() == &detail::executor_tag<Ex> && static_cast<group*>(g.get())->is_for(ex))
        return g->add(std::forward<F>(f));
    groups_.push_back(std::make_unique<group>(ex));
    if (keep_) groups_.back()->keep(*keep_);
    groups_.back()->add(std::forward<F>(f));
  }

  // Hands over every group collected so far (one handler each).
  void flush(bool at_once = false) {
    // Taken out first: a group run at once may handle frames of its own.
    std::vector<std::unique_ptr<detail::batch_group>> groups;
    groups.swap(groups_);
    for (auto& g : groups) {
      auto* raw = g.get();
      raw->submit(std::move(g), at_once);
    }
    groups.clear();
    if (groups_.empty()) groups_.swap(groups);  // keeps the capacity
  }

 private:
  static inline thread_local batch_collector* current_ = nullptr;
  std::vector<std::unique_ptr<detail::batch_group>> groups_;
  const std::shared_ptr<void>* keep_ = nullptr;
};

// asio::post, or into the current read's batch for that executor.
template <class Ex, class F>
void post_batched(const Ex& ex, F&& f) {
  if (auto* c = batch_collector::current())
    c->add(ex, std::forward<F>(f));
  else
    asio::post(ex, std::forward<F>(f));
}

// The same for a handler's type-erased executor: when it holds a node's strand
// (a coroutine's executor does), posted to the strand itself, which saves the
// type erasure's allocation and lets it share a batch with calls to that node.
template <class Strand, class F>
void post_batched_any(const asio::any_io_executor& ex, F&& f) {
#if !defined(ASIO_NO_TYPEID)
  // target<T>() does not check the type itself.
  if (ex && ex.target_type() == typeid(Strand))
    return post_batched(*ex.target<Strand>(), std::forward<F>(f));
#endif
  post_batched(ex, std::forward<F>(f));
}

}  // namespace tlaunch::rpc

// The definitions: inline in every translation unit, or, with TLAUNCH_SEPARATE_COMPILATION,
// compiled once in the library (tlaunch/impl/src/rpc.hpp).
#if TLAUNCH_HEADER_DEFINITIONS

namespace tlaunch::rpc {

TLAUNCH_DECL deferred_writes::scope::~scope() {
  if (!owner_) return;
  count_ends(*staging_);    // the replies staged leave now
  flush_staged(*staging_);  // may defer writes, so the scope is still open
  current_ = nullptr;
  staging_ = nullptr;
  for (auto& [who, fn] : items_) fn(who);
}

TLAUNCH_DECL void detail::batch_group::run() {
  deferred_writes::scope writes;
  while (batch_job* j = head_) {
    head_ = j->next;
    if (!head_) tail_ = nullptr;
    struct destroy {
      batch_job* j;
      ~destroy() {
        if (j->destroy) j->destroy(j);
      }
    } d{j};
    j->run(j);
  }
}

}  // namespace tlaunch::rpc

#endif
