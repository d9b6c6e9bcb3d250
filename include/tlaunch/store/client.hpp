// Client side of a data_store node: a writer that batches inserts and a sampler that
// prefetches, over a handle<data_store>. Items are tlaunch::bytes, or any type cereal
// serializes (written with cereal's binary archive into bytes).
//
//   tlaunch::store::writer<step> w(replay, "replay", 32);  // 32 items per insert call
//   co_await w.append(s, priority);  ...  co_await w.flush();
//   tlaunch::store::sampler<step> r(replay, "replay", 64);  // up to 64 items per sample call
//   tlaunch::store::sampled<step> x = co_await r.next();
#pragma once

#include <asio/awaitable.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <cereal/archives/binary.hpp>
#include <deque>
#include <memory>
#include <system_error>
#include <sstream>
#include <streambuf>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../handle.hpp"
#include "data_store.hpp"

namespace tlaunch::store {

template <class T>
tlaunch::bytes encode(const T& value) {
  if constexpr (std::is_same_v<T, tlaunch::bytes>) {
    return value;
  } else {
    std::ostringstream os;
    {
      cereal::BinaryOutputArchive ar(os);
      ar(value);
    }
    return tlaunch::bytes(std::move(os).str());
  }
}

template <class T>
T decode(const tlaunch::bytes& b) {
  if constexpr (std::is_same_v<T, tlaunch::bytes>) {
    return b;
  } else {
    // Reads the bytes where they are.
    struct view_buf : std::streambuf {
      view_buf(const char* p, std::size_t n) {
        char* q = const_cast<char*>(p);
        setg(q, q, q + n);
      }
    } buf(b.data(), b.size());
    std::istream in(&buf);
    cereal::BinaryInputArchive ar(in);
    T value{};
    ar(value);
    return value;
  }
}

namespace detail {

// The reply of a call in flight, delivered on the caller's executor. Awaiting it can be
// cancelled without losing it: the call stays in flight and the next await takes its
// reply. cancel() cancels the call itself (on the node too).
template <class R>
class pending_reply {
 public:
  pending_reply() = default;
  pending_reply(asio::awaitable<R> call, const asio::any_io_executor& ex) : s_(std::make_shared<state>()) {
    asio::co_spawn(ex, std::move(call),
                   asio::bind_cancellation_slot(s_->cancel.slot(), [s = s_](std::exception_ptr e, R v) {
                     s->error = std::move(e);
                     s->value = std::move(v);
                     s->done = true;
                     if (s->waiting) s->waiting->cancel();
                   }));
  }
  // On the caller's executor.
  void cancel() {
    if (s_ && !s_->done) s_->cancel.emit(asio::cancellation_type::terminal);
  }
  bool active() const { return s_ != nullptr; }

  // Throws operation_aborted when cancelled; the reply is still awaited next time.
  asio::awaitable<R> take() {
    if (!s_->done) {
      asio::steady_timer t(co_await asio::this_coro::executor, asio::steady_timer::time_point::max());
      struct waiting_on {
        state& s;
        ~waiting_on() { s.waiting = nullptr; }
      } guard{*s_};
      s_->waiting = &t;
      std::error_code ec;
      co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (!s_->done) throw std::system_error(asio::error::operation_aborted, "tlaunch::store: wait cancelled");
    }
    auto s = std::move(s_);
    if (s->error) std::rethrow_exception(s->error);
    co_return std::move(s->value);
  }

 private:
  struct state {
    std::exception_ptr error;
    R value{};
    bool done = false;
    asio::steady_timer* waiting = nullptr;
    asio::cancellation_signal cancel;
  };
  std::shared_ptr<state> s_;
};

}  // namespace detail

// One sampled item, decoded.
template <class T>
struct sampled {
  T value;
  item_key key = 0;
  double priority = 0;
  std::uint32_t times_sampled = 0;
  double probability = 1;
  std::uint64_t table_size = 0;
};

// Batches inserts into one table: append() sends a batch of `batch` items as one
// insert call and keeps one call in flight while the next batch fills; the node's rate
// limiter holds the call (and so append) when inserts must wait. flush() sends the
// rest and waits until the node has every item. A failed call (timeout, unavailable)
// throws from the append or flush after it; a cancelled append or flush leaves its
// call in flight, awaited by the next one.
template <class T = tlaunch::bytes>
class writer {
 public:
  writer(tlaunch::handle<data_store> store, std::string table, std::size_t batch = 16,
         call_options opt = {})
      : store_(std::move(store)), table_(std::move(table)), batch_(batch ? batch : 1), opt_(opt) {}

  asio::awaitable<void> append(const T& value, double priority = 1.0, item_key key = 0) {
    pending_.push_back(insert_item{encode(value), priority, key});
    if (pending_.size() >= batch_) co_await send();
  }

  asio::awaitable<void> flush() {
    if (!pending_.empty()) co_await send();
    co_await settle();
  }

  // Items the node has confirmed.
  std::uint64_t written() const { return written_; }

 private:
  asio::awaitable<void> send() {
    co_await settle();
    std::vector<insert_item> batch;
    batch.swap(pending_);
    in_flight_ = detail::pending_reply<std::vector<item_key>>(
        store_.call<&data_store::insert>(opt_, table_, std::move(batch)),
        co_await asio::this_coro::executor);
  }
  asio::awaitable<void> settle() {
    if (!in_flight_.active()) co_return;
    std::vector<item_key> keys = co_await in_flight_.take();
    written_ += keys.size();
  }

  tlaunch::handle<data_store> store_;
  std::string table_;
  std::size_t batch_;
  call_options opt_;
  std::vector<insert_item> pending_;
  detail::pending_reply<std::vector<item_key>> in_flight_;
  std::uint64_t written_ = 0;
};

// Samples one table ahead of its reader: each sample call asks for up to `prefetch`
// items, and the next call is in flight while the reader takes the last batch. Items
// fetched count as sampled in the table whether or not next() hands them out; a
// cancelled next() (e.g. `co_await (s.next() || timer)`) leaves its call in flight and
// the next next() takes its items. Destroying the sampler cancels its call (items the
// node has already sent back by then are lost).
template <class T = tlaunch::bytes>
class sampler {
 public:
  sampler(tlaunch::handle<data_store> store, std::string table, std::uint32_t prefetch = 16,
          call_options opt = {})
      : store_(std::move(store)), table_(std::move(table)), prefetch_(prefetch ? prefetch : 1), opt_(opt) {}
  sampler(const sampler&) = delete;
  sampler& operator=(const sampler&) = delete;
  // Cancels the call in flight, so that it takes no more items; destroy it on the
  // executor that called next().
  ~sampler() { in_flight_.cancel(); }

  asio::awaitable<sampled<T>> next() {
    auto ex = co_await asio::this_coro::executor;
    if (buffer_.empty()) {
      if (!in_flight_.active()) request(ex);
      std::vector<sampled_item> items = co_await in_flight_.take();
      for (auto& i : items) buffer_.push_back(std::move(i));
    }
    sampled_item i = std::move(buffer_.front());
    buffer_.pop_front();
    if (!in_flight_.active() && buffer_.size() < prefetch_) request(ex);
    co_return sampled<T>{decode<T>(i.data), i.key, i.priority, i.times_sampled, i.probability,
                         i.table_size};
  }

 private:
  void request(const asio::any_io_executor& ex) {
    in_flight_ = detail::pending_reply<std::vector<sampled_item>>(
        store_.call<&data_store::sample>(opt_, table_, prefetch_), ex);
  }

  tlaunch::handle<data_store> store_;
  std::string table_;
  std::uint32_t prefetch_;
  call_options opt_;
  std::deque<sampled_item> buffer_;
  detail::pending_reply<std::vector<sampled_item>> in_flight_;
};

}  // namespace tlaunch::store
