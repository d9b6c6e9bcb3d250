// Typed handles: how one node calls another.
//
//   std::int64_t n = co_await counter.call<&Counter::add>(1);      // await the reply
//   auto f = counter.async<&Counter::add>(1);  ...  co_await f.async_wait();
//   counter.sync<&Counter::get>();                                  // from a plain thread
//
// Errors: tlaunch::remote_error (the method threw), tlaunch::unavailable (and its
// tlaunch::stopping: the target stopped with the program), tlaunch::timeout
// (call_options::timeout), tlaunch::cancelled, tlaunch::removed (a resize removed the
// target replica).
#pragma once

#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rpc/runtime.hpp"
#include "detail/small_pool.hpp"
#include "error.hpp"
#include "rpc/call.hpp"
#include "service.hpp"

namespace tlaunch {

template <class R>
class future;
template <class S>
class handle;
template <class S>
class handles;
class context;

namespace detail {

// handles<T> of a node that is not elastic: a fixed set.
inline constexpr std::uint32_t handles_live_none = ~std::uint32_t{0};

// The library's way to bind a handle; handle's constructor is private.
struct handle_access {
  template <class S>
  static handle<S> make(rpc::runtime* rt, std::uint32_t flat, rpc::instance* direct = nullptr) {
    return handle<S>(rt, flat, direct);
  }
  // Every replica's handle (an elastic node's: as many as it may run); `node`, an elastic
  // node's index, makes the set follow the node's running count.
  template <class S>
  static handles<S> make_all(std::vector<handle<S>> hs, rpc::runtime* rt, std::uint32_t node) {
    handles<S> r(std::move(hs));
    if (node != handles_live_none) {
      r.rt_ = rt;
      r.node_ = node;
    }
    return r;
  }
};

template <auto M>
using result_of = typename call_traits<M>::result;


// ---- Checks of a call, reported as service.hpp explains: the error line names the
// method and the argument position (from 1). Given is the argument's type as forwarded.
template <auto Method, std::size_t Expected, std::size_t Given>
inline constexpr bool argument_count_matches = Expected == Given;
template <auto Method, std::size_t Argument, class Given, class Parameter>
inline constexpr bool argument_converts_to_parameter_type =
    std::is_constructible_v<Parameter, Given>;
#if defined(__clang__)
template <auto Method, std::size_t Expected, std::size_t Given>
void wrong_number_of_arguments() {
  static_assert(argument_count_matches<Method, Expected, Given>,
                "tlaunch: wrong number of arguments for this method");
}
template <auto Method, std::size_t Argument, class Given, class Parameter>
void argument_does_not_convert_to_parameter_type() {
  static_assert(argument_converts_to_parameter_type<Method, Argument, Given, Parameter>,
                "tlaunch: an argument of this call cannot be converted to the method's "
                "parameter type");
}
#else
template <auto Method, std::size_t Expected, std::size_t Given>
void wrong_number_of_arguments() = delete;  // tlaunch: pass as many arguments as the method takes
template <auto Method, std::size_t Argument, class Given, class Parameter>
void argument_does_not_convert_to_parameter_type() = delete;  // tlaunch: pass what the method's parameter can be made from
#endif

// The position (from 1) of the first argument A the parameter of M cannot be made
// from; 0 when all can. Only for as many arguments as M takes.
template <auto M, class... A>
constexpr std::size_t first_unconvertible_argument() {
  using params = typename call_traits<M>::args;
  return []<std::size_t... I>(std::index_sequence<I...>) {
    constexpr bool ok[] = {std::is_constructible_v<std::tuple_element_t<I, params>, A>..., true};
    for (std::size_t i = 0; i < sizeof...(I); ++i)
      if (!ok[i]) return i + 1;
    return std::size_t{0};
  }(std::index_sequence_for<A...>{});
}

template <auto M, class... A>
constexpr bool call_arguments_ok() {
  if constexpr (sizeof...(A) != call_traits<M>::arity)
    return false;
  else
    return first_unconvertible_argument<M, A...>() == 0;
}

// Whether handle<S>::call<M>(a...) with arguments of types A&&... is well-formed.
// A method listed as batched whose signature cannot be batched (it is then called one
// request at a time, so that the call site sees the types it expects and tlaunch's error
// is the only one).
template <auto M>
inline constexpr bool batched_signature_ok_for_call =
    !call_traits<M>::is_batched || batch_signature_ok<M>;

template <class S, auto M, class... A>
inline constexpr bool call_ok = exposure_ok<S, M> && batched_signature_ok_for_call<M> &&
                                method_serializable_ok<M> && call_arguments_ok<M, A...>();

// Reports the first reason call_ok is false.
template <class S, auto M, class... A>
void report_call() {
  using traits = call_traits<M>;
  if constexpr (!exposure_ok<S, M>) {
    report_exposure<S, M>();
  } else if constexpr (!batched_signature_ok_for_call<M>) {
    // The service's own report, instantiated once with the program's: one error.
    report_service<S>();
  } else if constexpr (!method_serializable_ok<M>) {
    report_method_serializable<M>();
  } else if constexpr (sizeof...(A) != traits::arity) {
    wrong_number_of_arguments<M, traits::arity, sizeof...(A)>();
  } else {
    constexpr std::size_t bad = first_unconvertible_argument<M, A...>();
    using given = std::tuple_element_t<bad - 1, std::tuple<A...>>;
    using parameter = std::tuple_element_t<bad - 1, typename traits::args>;
    argument_does_not_convert_to_parameter_type<M, bad, given, parameter>();
  }
}

// A call through a handle the library never bound.
[[noreturn]] inline void throw_unbound(std::string_view method) {
  throw std::logic_error("tlaunch: call of " + std::string(method) + " through an unbound handle");
}

struct future_access {
  template <class R>
  static future<R> make(std::shared_ptr<future_state<R>> s) {
    return future<R>(std::move(s));
  }
};

}  // namespace detail

// A call in flight, started by handle::async. Await it with
// `co_await f.async_wait()` or block a plain thread with `f.get()`.
template <class R>
class future {
 public:
  future() = default;

  bool ready() const { return s_->ready(); }

  // Completion signature: void(std::exception_ptr[, R]). One waiter per future.
  template <class Token = asio::use_awaitable_t<>>
  auto async_wait(Token&& token = {}) {
    return asio::async_initiate<Token, detail::completion_signature<R>>(
        [s = s_](auto handler) {
          s->wait_with(std::make_unique<detail::future_waiter_for<R, decltype(handler)>>(
              std::move(handler)));
        },
        token);
  }

  // Blocks until the reply; rethrows the call's error. Not on an io thread.
  R get() {
    s_->block();
    // Taken out of the shared state, so the exception dies on this thread.
    if (s_->error) std::rethrow_exception(std::exchange(s_->error, nullptr));
    if constexpr (!std::is_void_v<R>) return std::move(s_->value);
  }

 private:
  friend struct detail::future_access;
  explicit future(std::shared_ptr<detail::future_state<R>> s) : s_(std::move(s)) {}
  std::shared_ptr<detail::future_state<R>> s_;
};

namespace detail {

// The argument tuple of a call of M (called only once call_ok holds).
template <auto M, class... A>
auto call_args(A&&... args) {
  return typename call_traits<M>::args(std::forward<A>(args)...);
}

// A plain method of an instance in this process, without a deadline. On the
// process's only io thread it runs as soon as this is awaited, when its strand
// is idle, and the caller goes on at once: no trip through the io_context,
// whose every turn with work queued also polls the reactor (a syscall).
template <class R, class Args>
asio::awaitable<R> call_colocated(rpc::runtime* rt, std::uint32_t flat, rpc::instance* inst,
                                  const rpc::method_ops<R, Args, rpc::method_kind::plain>& m,
                                  Args args) {
  if (!rt->on_only_io_thread())
    co_return co_await rpc::awaited_call(*rt, flat, inst, {}, m, std::move(args));
  std::exception_ptr e;
  rpc::result_holder<R> r{};
  bool ran = false;
  rpc::run_local(
      m, *inst, rpc::call_target{rt, flat, m.name}, std::move(args),
      [&](std::exception_ptr x, rpc::result_holder<R>&& v) {
        e = std::move(x);
        r = std::move(v);
        ran = true;
      },
      {}, true);
  // Its strand was busy: the method is queued there, behind what came first,
  // and this resumes after it.
  if (!ran) co_await asio::post(inst->strand, asio::use_awaitable);
  if (e) std::rethrow_exception(e);
  if constexpr (!std::is_void_v<R>) co_return std::move(r);
}

// handle::call's body, per result and argument types.
template <class R, class Args, rpc::method_kind K>
asio::awaitable<R> call_method(rpc::runtime* rt, std::uint32_t flat, rpc::instance* direct,
                               call_options opt, const rpc::method_ops<R, Args, K>& m,
                               Args&& args) {
  if constexpr (K == rpc::method_kind::plain) {
    if (opt.timeout.count() == 0)
      if (rpc::instance* inst = direct ? direct : rt->local(flat))
        return call_colocated<R, Args>(rt, flat, inst, m, std::move(args));
  }
  return rpc::awaited_call(*rt, flat, direct, opt.timeout, m, std::move(args));
}

// handle::async's body, per result and argument types.
template <class R, class Args, rpc::method_kind K>
future<R> start_future(rpc::runtime* rt, std::uint32_t flat, rpc::instance* direct, call_options opt,
                       const rpc::method_ops<R, Args, K>& m, Args&& args);

template <class R>
using broadcast_result = std::conditional_t<std::is_void_v<R>, void, std::vector<R>>;

// Where a handle's calls go.
struct call_endpoint {
  rpc::runtime* rt;
  std::uint32_t flat;
  rpc::instance* direct;
};

// An elastic node's running set, read when a broadcast starts.
struct live_set {
  rpc::runtime* rt = nullptr;  // null: every endpoint
  std::uint32_t node = 0;
};

// handles::broadcast's body, per result and argument types: a call to every endpoint
// (each with its own copy of the arguments), then every reply awaited in order. An elastic
// node's calls go to the replicas running when it starts, all sent before a resize that
// removes one of them is applied here (rpc::runtime::membership_guard).
template <class R, class Args, rpc::method_kind K>
asio::awaitable<broadcast_result<R>> broadcast_call(std::vector<call_endpoint> to, live_set live,
                                                     const rpc::method_ops<R, Args, K>& m,
                                                     Args args) {
  std::vector<future<R>> fs;
  {
    std::optional<rpc::runtime::membership_guard> guard;
    if (live.rt) {
      guard.emplace(*live.rt);
      to.resize(std::min<std::size_t>(to.size(), live.rt->running(live.node)));
    }
    fs.reserve(to.size());
    for (const auto& e : to) {
      if (!e.rt) throw_unbound(m.name);
      fs.push_back(start_future(e.rt, e.flat, e.direct, call_options{}, m, Args(args)));
    }
  }
  std::exception_ptr first;
  if constexpr (std::is_void_v<R>) {
    for (auto& f : fs) {
      try {
        co_await f.async_wait();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  } else {
    std::vector<R> out;
    out.reserve(fs.size());
    for (auto& f : fs) {
      try {
        out.push_back(co_await f.async_wait());
      } catch (...) {
        if (!first) first = std::current_exception();
        out.emplace_back();
      }
    }
    if (first) std::rethrow_exception(first);
    co_return out;
  }
}

// handle::async's body, per result and argument types.
template <class R, class Args, rpc::method_kind K>
future<R> start_future(rpc::runtime* rt, std::uint32_t flat, rpc::instance* direct, call_options opt,
                       const rpc::method_ops<R, Args, K>& m, Args&& args) {
  auto s = std::allocate_shared<future_state<R>>(pool_allocator<future_state<R>>{});
  rpc::start_future_call(*rt, flat, direct, opt.timeout, m, std::move(args), s);
  return future_access::make(std::move(s));
}

}  // namespace detail

// A handle to one node instance serving S.
template <class S>
class handle {
 public:
  using service_type = S;
  // Unbound: valid() is false until the library gives the node a bound one.
  handle() = default;

  bool valid() const noexcept { return rt_ != nullptr; }
  // "counter/0"
  std::string id() const { return rt_ ? rt_->instance_id(flat_) : std::string("(unbound)"); }

  // Calls M and awaits the result.
  template <auto M, class... A>
  asio::awaitable<detail::result_of<M>> call(A&&... args) const {
    return call<M>(call_options{}, std::forward<A>(args)...);
  }
  template <auto M, class... A>
  asio::awaitable<detail::result_of<M>> call(call_options opt, A&&... args) const {
    if constexpr (!detail::call_ok<S, M, A&&...>) {
      // Only the report is instantiated: one error, naming the method.
      detail::report_call<S, M, A&&...>();
      return {};
    } else {
      check_bound<M>();
      // What is left per method is this shell: the rest is per result and argument types.
      return detail::call_method(rt_, flat_, direct_, opt, rpc::ops_of<M>,
                                 detail::call_args<M>(std::forward<A>(args)...));
    }
  }

  // Starts M now; the reply is awaited later through the future.
  template <auto M, class... A>
  future<detail::result_of<M>> async(A&&... args) const {
    return async<M>(call_options{}, std::forward<A>(args)...);
  }
  template <auto M, class... A>
  future<detail::result_of<M>> async(call_options opt, A&&... args) const {
    if constexpr (!detail::call_ok<S, M, A&&...>) {
      detail::report_call<S, M, A&&...>();
      return {};
    } else {
      check_bound<M>();
      return detail::start_future(rt_, flat_, direct_, opt, rpc::ops_of<M>,
                                  detail::call_args<M>(std::forward<A>(args)...));
    }
  }

  // Calls M from a plain thread and blocks for the result.
  template <auto M, class... A>
  detail::result_of<M> sync(A&&... args) const {
    return sync<M>(call_options{}, std::forward<A>(args)...);
  }
  template <auto M, class... A>
  detail::result_of<M> sync(call_options opt, A&&... args) const {
    check_bound<M>();
    if (rt_->on_io_thread())
      throw std::logic_error(
          "tlaunch::handle::sync called on an io thread (it would block the node); use "
          "co_await handle.call<...>() in a coroutine instead");
    return async<M>(opt, std::forward<A>(args)...).get();
  }

 private:
  template <auto M>
  void check_bound() const {
    if (!rt_) detail::throw_unbound(detail::member_name<M>());
  }

  template <class T>
  friend class handles;
  friend struct detail::handle_access;
  friend class context;  // context::spawn
  handle(rpc::runtime* rt, std::uint32_t flat, rpc::instance* direct = nullptr)
      : rt_(rt), flat_(flat), direct_(direct) {}

  rpc::runtime* rt_ = nullptr;
  std::uint32_t flat_ = 0;
  rpc::instance* direct_ = nullptr;
};

// The handles of every replica of a node. An elastic node's (node<...>().elastic(max)) follow
// its running count: size(), the handles iterated and a broadcast are those of the replicas
// running now (0 to size() - 1), and change with each resize.
template <class S>
class handles {
 public:
  handles() = default;
  explicit handles(std::vector<handle<S>> hs) : hs_(std::move(hs)) {}

  std::size_t size() const noexcept {
    return rt_ ? std::min<std::size_t>(hs_.size(), rt_->running(node_)) : hs_.size();
  }
  bool empty() const noexcept { return size() == 0; }
  const handle<S>& operator[](std::size_t i) const {
    if (i >= size()) throw std::out_of_range("tlaunch::handles: no replica " + std::to_string(i));
    return hs_[i];
  }
  auto begin() const { return hs_.begin(); }
  auto end() const { return hs_.begin() + static_cast<std::ptrdiff_t>(size()); }

  // Calls M on every replica at once and awaits all replies; results in replica
  // order. If any call fails, the first error (by replica) is rethrown after
  // every call has finished.
  template <auto M, class... A>
  auto broadcast(const A&... args) const
      -> asio::awaitable<detail::broadcast_result<detail::result_of<M>>> {
    if constexpr (!detail::call_ok<S, M, const A&...>) {
      detail::report_call<S, M, const A&...>();
      return {};
    } else {
      std::vector<detail::call_endpoint> to;
      to.reserve(hs_.size());
      for (const auto& h : hs_) to.push_back({h.rt_, h.flat_, h.direct_});
      return detail::broadcast_call(std::move(to), detail::live_set{rt_, node_}, rpc::ops_of<M>,
                                    detail::call_args<M>(args...));
    }
  }

 private:
  friend struct detail::handle_access;
  std::vector<handle<S>> hs_;
  rpc::runtime* rt_ = nullptr;  // an elastic node's runtime, whose running count size() follows
  std::uint32_t node_ = 0;
};

}  // namespace tlaunch
