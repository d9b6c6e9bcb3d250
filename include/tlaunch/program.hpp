// The program graph, described at compile time.
//
//   constexpr auto program = tlaunch::program(
//       tlaunch::node<"counter", Counter>(),
//       tlaunch::node<"producer", Producer>(tlaunch::ref<"counter">).replicas(4));
//
// A ref<"x"> argument becomes a tlaunch::handle<T> (or handles<T> for every
// replica) of node x when the node is constructed; other arguments are copied.
#pragma once

#include <asio/bind_cancellation_slot.hpp>
#include <asio/co_spawn.hpp>
#include <array>
#include <concepts>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "context.hpp"
#include "detail/fixed_string.hpp"
#include "detail/type_name.hpp"
#include "error.hpp"
#include "handle.hpp"
#include "node_options.hpp"
#include "rpc/dispatch.hpp"
#include "rpc/runtime.hpp"
#include "state.hpp"

namespace tlaunch {

// A reference to another node of the program by name.
template <detail::fixed_string Name>
struct ref_t {
  static constexpr auto name = Name;
};
template <detail::fixed_string Name>
inline constexpr ref_t<Name> ref{};

template <detail::fixed_string Name, class T, class... Args>
struct node_spec {
  using type = T;
  static constexpr auto name = Name;
  std::tuple<Args...> args;
  std::uint32_t replica_count = 1;
  restart_policy restart_limits{};

  // Runs n instances of this node (overridable with --replicas name=n).
  constexpr node_spec replicas(std::uint32_t n) const {
    node_spec c = *this;
    c.replica_count = n;
    return c;
  }
  // Lets the program change how many replicas run while it runs, up to max
  // (running_program::resize, ctx.resize, the launcher's dashboard): docs/guide/elastic.md.
  // replicas(n) (or --replicas name=n) is how many run at launch.
  std::uint32_t elastic_max = 0;
  constexpr node_spec elastic(std::uint32_t max) const {
    node_spec c = *this;
    c.elastic_max = max;
    return c;
  }
  // Under launchers of node processes, a failed instance is restarted in a fresh
  // process instead of stopping the program, within these limits (the count is
  // overridable with --restart name=n). docs/guide/faults.md, "Restarts".
  constexpr node_spec restart(restart_policy p) const {
    node_spec c = *this;
    c.restart_limits = p;
    return c;
  }

  // With --state-dir, snapshots this node's state (a type with state(Archive&):
  // tlaunch/state.hpp) every policy.every and keeps the newest policy.keep (default: no
  // periodic snapshots, 3 kept; --snapshot-every overrides the period).
  // docs/guide/state.md.
  snapshot_policy snapshot_settings{};
  constexpr node_spec snapshot(snapshot_policy p) const {
    if constexpr (!detail::has_state<T>)
      throw launch_error("node<...>().snapshot: the node's type has no state(Archive&) to snapshot");
    node_spec c = *this;
    c.snapshot_settings = p;
    return c;
  }

  // Sets KEY=VALUE in each process of this node, "{index}" in VALUE becoming the replica's
  // index; --env NAME:KEY=VALUE wins over it. Literals: the program is a constant.
  static constexpr std::size_t max_env = 16;
  std::array<std::pair<std::string_view, std::string_view>, max_env> env_vars{};
  std::size_t env_count = 0;
  constexpr node_spec env(std::string_view key, std::string_view value) const {
    if (key.empty() || key.find('=') != std::string_view::npos)
      throw launch_error("node<...>().env: a variable name, not empty and without '='");
    if (env_count == max_env) throw launch_error("node<...>().env: at most 16 variables a node");
    node_spec c = *this;
    c.env_vars[c.env_count++] = {key, value};
    return c;
  }

  // Hints of what each instance needs (launchers that place on a cluster honour them).
  node_resources resource_hints{};
  constexpr node_spec resources(node_resources r) const {
    node_spec c = *this;
    c.resource_hints = r;
    return c;
  }
};

namespace detail {

// A node name as a pack of chars. clang prints a fixed_string template argument
// as its bytes ({{99, 111, ...}}) but a char pack as 'c', 'o', ..., so the
// checks below carry both to name the node under g++ and clang alike.
template <char... C>
struct spelled {};
template <fixed_string S, std::size_t... I>
spelled<S.value[I]...> spell(std::index_sequence<I...>);
template <fixed_string S>
using spelling = decltype(spell<S>(std::make_index_sequence<S.view().size()>{}));

// A std::string or std::vector keeps its contents on the heap, so a constexpr program
// cannot hold one as a node argument. The compiler alone says so inconsistently (g++ 12
// accepts a string short enough to be stored inline and rejects a longer one with "refers
// to a result of operator new"), so node() reports either as one error naming the node,
// by reaching this non-constexpr function while the program is a constant expression
// (as node_takes_a_handle_to_a_replicated_node below). A program built at run time (for
// tlaunch::start) may take them: there it is never called.
template <class T>
inline constexpr bool keeps_contents_on_the_heap = false;
template <class C, class Traits, class Alloc>
inline constexpr bool keeps_contents_on_the_heap<std::basic_string<C, Traits, Alloc>> = true;
template <class T, class Alloc>
inline constexpr bool keeps_contents_on_the_heap<std::vector<T, Alloc>> = true;
template <fixed_string Node, std::size_t Argument, class Type
#if defined(__clang__)
          ,
          class NodeSpelled = spelling<Node>
#endif
          >
void constexpr_node_argument_is_a_std_string_or_vector() {}  // tlaunch::node: a constexpr program's node arguments are constants; pass a string literal or std::string_view, a std::array, or the value at run time (after --, ctx.args())

// The call under a run-time condition, in a function template (not a lambda): a function
// that always calls a non-constexpr one is not constexpr itself, and g++ would name it
// instead.
template <fixed_string Name, std::size_t I, class Arg>
constexpr void check_constexpr_node_argument() {
  if constexpr (keeps_contents_on_the_heap<Arg>)
    if (std::is_constant_evaluated())
      constexpr_node_argument_is_a_std_string_or_vector<Name, I, Arg>();
}
template <fixed_string Name, class... Args, std::size_t... I>
constexpr void check_constexpr_node_arguments(std::index_sequence<I...>) {
  (check_constexpr_node_argument<Name, I, Args>(), ...);
}

}  // namespace detail

template <detail::fixed_string Name, class T, class... Args>
constexpr node_spec<Name, T, std::decay_t<Args>...> node(Args&&... args) {
  static_assert(!Name.view().empty(), "tlaunch::node: a node name cannot be empty");
  if constexpr ((detail::keeps_contents_on_the_heap<std::decay_t<Args>> || ...))
    detail::check_constexpr_node_arguments<Name, std::decay_t<Args>...>(
        std::index_sequence_for<Args...>{});
  return {{std::forward<Args>(args)...}, 1, {}};
}

// Instances hosted by one process under launchers of node processes (docs/guide/
// colocation.md): each member names a node (all its replicas) or one replica ("worker/0").
struct colocation_group {
  static constexpr std::size_t max_members = 16;
  std::array<std::string_view, max_members> members{};
  std::size_t size = 0;
};

template <class... Nodes>
struct program_t {
  std::tuple<Nodes...> nodes;
  static constexpr std::size_t size = sizeof...(Nodes);
  static constexpr std::size_t max_groups = 16;
  std::array<colocation_group, max_groups> groups{};
  std::size_t group_count = 0;

  // Hosts these nodes (or replicas) in one process: calls between them take the direct
  // path. A member that names no node of the program is a compile error naming it;
  // --colocate replaces it at launch.
  template <detail::fixed_string... Members>
  constexpr program_t colocate() const;
};

namespace detail {

template <class T>
struct is_ref : std::false_type {};
template <fixed_string N>
struct is_ref<ref_t<N>> : std::true_type {};

template <fixed_string Name, class... Nodes>
constexpr std::size_t count_named() {
  return ((Nodes::name.view() == Name.view() ? 1 : 0) + ... + 0);
}

// Each check is a pure predicate, tested with `if constexpr` so that nothing else is
// instantiated once it fails, and a report named for the problem whose template
// arguments name the nodes, so the error line itself says which node is wrong (as
// service.hpp explains): deleted for g++, a static_assert for clang, whose condition
// carries the names spelled.
template <fixed_string Node, std::size_t Count, class NodeSpelled = spelling<Node>>
inline constexpr bool node_name_is_unique = Count == 1;
template <fixed_string Node, fixed_string Target, class NodeSpelled = spelling<Node>,
          class TargetSpelled = spelling<Target>>
inline constexpr bool ref_names_a_node = false;  // only reached when it does not
template <fixed_string Owner, fixed_string Target, class Taken, class TargetType,
          class OwnerSpelled = spelling<Owner>, class TargetSpelled = spelling<Target>>
inline constexpr bool ref_handle_type_matches = std::is_same_v<Taken, TargetType>;
#if defined(__clang__)
template <fixed_string Node, std::size_t Count>
void two_nodes_have_the_same_name() {
  static_assert(node_name_is_unique<Node, Count, spelling<Node>>, "tlaunch::program: two nodes have the same name");
}
template <fixed_string Node, fixed_string Target>
void ref_names_no_node() {
  static_assert(ref_names_a_node<Node, Target, spelling<Node>, spelling<Target>>,
                "tlaunch::program: ref<\"...\"> names a node that is not in the program");
}
// Taken is the handle type node Owner's constructor takes for ref<Target>.
template <fixed_string Owner, fixed_string Target, class Taken, class TargetType>
void ref_takes_a_handle_of_another_type() {
  static_assert(ref_handle_type_matches<Owner, Target, Taken, TargetType, spelling<Owner>,
                                        spelling<Target>>,
                "tlaunch::program: a node's constructor takes a handle of another service type "
                "than the node its ref<\"...\"> names (<node, ref target, type taken, target's "
                "type>)");
}
#else
template <fixed_string Node, std::size_t Count>
void two_nodes_have_the_same_name() = delete;  // tlaunch::program: give each node a name of its own
template <fixed_string Node, fixed_string Target>
void ref_names_no_node() = delete;  // tlaunch::program: ref<"..."> must name a node of the program
template <fixed_string Owner, fixed_string Target, class Taken, class TargetType>
void ref_takes_a_handle_of_another_type() = delete;  // tlaunch::program: take a handle of the type of the node the ref names
#endif

// A colocate<...> member: "name" or "name/INDEX" with name a node of the program.
template <fixed_string Member, class... Nodes>
constexpr bool colocate_member_resolves() {
  constexpr std::string_view m = Member.view();
  constexpr std::size_t slash = m.find('/');
  if constexpr (slash != std::string_view::npos) {
    if (slash + 1 == m.size()) return false;
    for (char c : m.substr(slash + 1))
      if (c < '0' || c > '9') return false;
  }
  return ((Nodes::name.view() == m.substr(0, slash)) || ... || false);
}
template <fixed_string Member, class MemberSpelled = spelling<Member>>
inline constexpr bool colocate_names_a_node = false;  // only reached when it does not
#if defined(__clang__)
template <fixed_string Member>
void colocate_names_no_node() {
  static_assert(colocate_names_a_node<Member, spelling<Member>>,
                "tlaunch::program::colocate<...>: a member names no node of the program "
                "(write \"node\" or \"node/INDEX\")");
}
#else
template <fixed_string Member>
void colocate_names_no_node() = delete;  // tlaunch::program::colocate<...>: name a node of the program ("node" or "node/INDEX")
#endif
template <fixed_string Member, class... Nodes>
void report_colocate() {
  if constexpr (!colocate_member_resolves<Member, Nodes...>()) colocate_names_no_node<Member>();
}

template <class A, class... Nodes>
constexpr bool ref_resolves() {
  if constexpr (is_ref<A>::value)
    return count_named<A::name, Nodes...>() > 0;
  else
    return true;
}
template <class Spec, class... Nodes>
constexpr bool refs_resolve() {
  return []<class... A>(std::tuple<A...>*) {
    return (ref_resolves<A, Nodes...>() && ... && true);
  }(static_cast<decltype(Spec::args)*>(nullptr));
}

template <class... Nodes>
inline constexpr bool program_ok = ((count_named<Nodes::name, Nodes...>() == 1) && ... && true) &&
                                   (refs_resolve<Nodes, Nodes...>() && ... && true);

template <class Spec, class A, class... Nodes>
void report_ref() {
  if constexpr (!ref_resolves<A, Nodes...>()) ref_names_no_node<Spec::name, A::name>();
}
template <class Spec, class... Nodes>
void report_node() {
  constexpr std::size_t count = count_named<Spec::name, Nodes...>();
  // The same specialization for every node of that name: reported once.
  if constexpr (count != 1) two_nodes_have_the_same_name<Spec::name, count>();
  []<class... A>(std::tuple<A...>*) {
    (report_ref<Spec, A, Nodes...>(), ...);
  }(static_cast<decltype(Spec::args)*>(nullptr));
}
// Reports every reason program_ok is false.
template <class... Nodes>
void report_program() {
  (report_node<Nodes, Nodes...>(), ...);
}

template <fixed_string Name, class... Nodes>
struct node_index;
template <fixed_string Name, class First, class... Rest>
struct node_index<Name, First, Rest...> {
  static constexpr std::size_t value =
      First::name.view() == Name.view() ? 0 : 1 + node_index<Name, Rest...>::value;
};
template <fixed_string Name>
struct node_index<Name> {
  static constexpr std::size_t value = 0;
};

template <class T>
concept has_run = requires(T& t, context& c) {
  { t.run(c) } -> std::same_as<asio::awaitable<void>>;
};

// What a ref<Target> argument of node Owner becomes; converts to the handle
// type the constructor takes, and checks that it is the target's type.
template <fixed_string Owner, fixed_string Target, class TargetType>
struct ref_arg {
  rpc::runtime* rt;
  std::uint32_t first, count;
  // An elastic node's index: its handles<T> follow its running count.
  std::uint32_t elastic_node = handles_live_none;

  template <class U>
  operator handle<U>() const {
    if constexpr (!std::is_same_v<U, TargetType>) {
      ref_takes_a_handle_of_another_type<Owner, Target, handle<U>, handle<TargetType>>();
      return {};
    } else {
      return bind<U>();
    }
  }
  template <class U>
  operator handles<U>() const {
    if constexpr (!std::is_same_v<U, TargetType>) {
      ref_takes_a_handle_of_another_type<Owner, Target, handles<U>, handles<TargetType>>();
      return {};
    } else {
      std::vector<handle<U>> hs;
      for (std::uint32_t i = 0; i < count; ++i) hs.push_back(handle_access::make<U>(rt, first + i));
      return handle_access::make_all<U>(std::move(hs), rt, elastic_node);
    }
  }

 private:
  template <class U>
  handle<U> bind() const {
    if (count != 1 || elastic_node != handles_live_none)
      throw launch_error("node '" + std::string(Owner.view()) + "' takes a tlaunch::handle to '" +
                         std::string(Target.view()) + "', which " +
                         (elastic_node != handles_live_none
                              ? std::string("is elastic")
                              : "has " + std::to_string(count) + " replicas") +
                         ": take tlaunch::handles<" + std::string(type_name<U>()) +
                         "> instead");
    return handle_access::make<U>(rt, first);
  }
};

// Stands in for a ref to a node that is not in the program.
struct unresolved_ref {
  template <class H>
  operator H() const {
    return H{};
  }
};

template <class Spec, class Program, class A>
decltype(auto) map_arg(rpc::runtime& rt, const A& a) {
  if constexpr (is_ref<A>::value) {
    return [&]<class... Nodes>(program_t<Nodes...>*) {
      constexpr std::size_t idx = node_index<A::name, Nodes...>::value;
      if constexpr (idx < sizeof...(Nodes)) {
        using target = std::tuple_element_t<idx, std::tuple<Nodes...>>;
        const rpc::node_info& n = rt.nodes()[idx];
        return ref_arg<Spec::name, A::name, typename target::type>{
            &rt, n.first, n.replicas,
            n.elastic ? static_cast<std::uint32_t>(idx) : handles_live_none};
      } else {
        // No such node: program() has already said so. This converts to whatever the
        // constructor takes, so that no second error follows.
        return unresolved_ref{};
      }
    }(static_cast<Program*>(nullptr));
  } else {
    return (a);
  }
}

template <class T, class... M>
T* construct(M&&... m) {
  if constexpr (std::is_aggregate_v<T>)
    return new T{std::forward<M>(m)...};
  else
    return new T(std::forward<M>(m)...);
}

template <class T>
asio::awaitable<void> run_body(std::shared_ptr<void> obj, context* ctx) {
  co_await static_cast<T*>(obj.get())->run(*ctx);
}

// Constructs replica `replica` of node Spec in this process.
template <class Spec, class Program>
void host_node(rpc::runtime& rt, const Spec& spec, std::uint32_t flat) {
  using T = typename Spec::type;
  if constexpr (!service_ok<T>) {
    // Only the report is instantiated, not the dispatch table that would serialize.
    report_service<T>();
  } else {
    rpc::instance& inst = rt.host(flat);
    T* obj = std::apply(
        [&](const auto&... a) { return construct<T>(map_arg<Spec, Program>(rt, a)...); },
        spec.args);
    inst.object = std::shared_ptr<void>(obj, [](void* p) { delete static_cast<T*>(p); });
    rt.serve_methods(inst, rpc::dispatch_table<T>::get());
    inst.state = state_ops_of<T>();
    inst.run_context = context_access::make(rt, inst);
    // A node type that reports its own state (the data store) gets its node's metrics.
    if constexpr (requires(T& t, const node_metrics& m) { t.use_metrics(m); })
      obj->use_metrics(context_access::of(inst).metrics());
    if constexpr (has_run<T>) {
      inst.start_run = [&rt](rpc::instance& i) {
        rpc::spawn_run(rt, i, run_body<T>(i.object, &context_access::of(i)));
      };
    }
  }
}

// ---- A handle<T> taken for a replicated node ----
//
// Which of handle<T> or handles<T> a constructor takes for a ref is a property of its
// type; the replica count is a value of the program. program() checks both while the
// compiler evaluates `constexpr auto program = tlaunch::program(...)`, by reaching this
// non-constexpr function: g++'s error line is "call to non-'constexpr' function '...
// node_takes_a_handle_to_a_replicated_node() [with ... Node = "producer"; ... Replicated =
// "counter"; TakeInstead = tlaunch::handles<Counter>; ...]'", clang's is "constexpr
// variable 'program' must be initialized by a constant expression" followed by a note
// naming this function and its arguments. A program built at run time gets the message
// as a launch_error; a count changed by --replicas is checked at launch (ref_arg).
// clang prints a fixed_string argument as its bytes, so there the names come spelled too.
template <fixed_string Node, fixed_string Replicated, class TakeInstead
#if defined(__clang__)
          ,
          class NodeSpelled = spelling<Node>, class ReplicatedSpelled = spelling<Replicated>
#endif
          >
void node_takes_a_handle_to_a_replicated_node() {
  throw launch_error("node '" + std::string(Node.view()) + "' takes a tlaunch::handle to '" +
                     std::string(Replicated.view()) +
                     "', which the program declares replicated: take " +
                     std::string(type_name<TakeInstead>()) + " instead");
}

// Stand-ins for a node's constructor arguments, to learn what it takes for a ref.
template <class TargetType>
struct single_handle_probe {
  operator handle<TargetType>() const;
};
struct any_handle_probe {
  template <class H>
  operator H() const;
};
template <bool Probed, class TargetType, class A>
struct probe_for {
  using type = std::conditional_t<is_ref<A>::value, any_handle_probe, const A&>;
};
template <class TargetType, class A>
struct probe_for<true, TargetType, A> {
  using type = single_handle_probe<TargetType>;
};

template <class T, class... P>
constexpr bool constructible_from() {
  if constexpr (std::is_aggregate_v<T>)
    return requires { T{std::declval<P>()...}; };
  else
    return std::is_constructible_v<T, P...>;
}

// Whether node Spec's constructor takes a single handle<TargetType> for argument I.
template <class Spec, std::size_t I, class TargetType>
constexpr bool takes_single_handle() {
  using args = decltype(Spec::args);
  return []<std::size_t... J>(std::index_sequence<J...>) {
    return constructible_from<
        typename Spec::type,
        typename probe_for<J == I, TargetType, std::tuple_element_t<J, args>>::type...>();
  }(std::make_index_sequence<std::tuple_size_v<args>>{});
}

// Plain function templates, not lambdas: clang's notes print a lambda's whole body.
template <class Spec, std::size_t I, class... Nodes>
constexpr void check_handle_argument(const std::tuple<const Nodes&...>& all) {
  using A = std::tuple_element_t<I, decltype(Spec::args)>;
  if constexpr (is_ref<A>::value) {
    constexpr std::size_t t = node_index<A::name, Nodes...>::value;
    if constexpr (t < sizeof...(Nodes)) {
      using target = typename std::tuple_element_t<t, std::tuple<Nodes...>>::type;
      if constexpr (takes_single_handle<Spec, I, target>())
        if (std::get<t>(all).replica_count != 1)
          node_takes_a_handle_to_a_replicated_node<Spec::name, A::name, handles<target>>();
    }
  }
}

template <class Spec, class... Nodes, std::size_t... I>
constexpr void check_handles_of(const std::tuple<const Nodes&...>& all,
                                std::index_sequence<I...>) {
  (check_handle_argument<Spec, I>(all), ...);
}

template <class... Nodes>
constexpr void check_replicated_handles(const Nodes&... nodes) {
  const std::tuple<const Nodes&...> all{nodes...};
  (check_handles_of<Nodes>(
       all, std::make_index_sequence<std::tuple_size_v<decltype(Nodes::args)>>{}),
   ...);
}

}  // namespace detail

template <class... Nodes>
constexpr program_t<Nodes...> program(Nodes... nodes) {
  static_assert(sizeof...(Nodes) > 0, "tlaunch::program: a program needs at least one node");
  if constexpr (!detail::program_ok<Nodes...>)
    // Named, not called: instantiating it reports, and program() stays a constant expression.
    static_cast<void>(&detail::report_program<Nodes...>);
  else
    detail::check_replicated_handles(nodes...);
  return {.nodes = {nodes...}};
}

template <class... Nodes>
template <detail::fixed_string... Members>
constexpr program_t<Nodes...> program_t<Nodes...>::colocate() const {
  static_assert(sizeof...(Members) >= 1, "tlaunch::program::colocate<...>: name the members");
  static_assert(sizeof...(Members) <= colocation_group::max_members,
                "tlaunch::program::colocate<...>: at most 16 members in a group");
  if constexpr (!(detail::colocate_member_resolves<Members, Nodes...>() && ...))
    // Named, not called, as in program(): instantiating reports each wrong member once.
    (static_cast<void>(&detail::report_colocate<Members, Nodes...>), ...);
  program_t p = *this;
  if (p.group_count == max_groups)
    throw launch_error("tlaunch::program::colocate: at most 16 colocation groups");
  colocation_group& g = p.groups[p.group_count++];
  ((g.members[g.size++] = Members.view()), ...);
  return p;
}

namespace detail {

// The runtime's view of a program, with --replicas overrides applied.
template <class... Nodes>
std::vector<rpc::node_info> describe(const program_t<Nodes...>& p,
                                const std::map<std::string, std::uint32_t>& overrides) {
  std::vector<rpc::node_info> out;
  std::apply(
      [&](const auto&... spec) {
        (out.push_back(rpc::node_info{
             .name = std::remove_cvref_t<decltype(spec)>::name.view(),
             .type_name = type_name<typename std::remove_cvref_t<decltype(spec)>::type>(),
             .replicas = spec.elastic_max > 0 ? spec.elastic_max : spec.replica_count,
             .initial = spec.replica_count,
             .elastic = spec.elastic_max > 0,
             .has_run = has_run<typename std::remove_cvref_t<decltype(spec)>::type>,
             .env = {spec.env_vars.begin(),
                     spec.env_vars.begin() + static_cast<std::ptrdiff_t>(spec.env_count)},
             .resources = spec.resource_hints,
             .restart = spec.restart_limits,
             .snapshot = spec.snapshot_settings}),
         ...);
      },
      p.nodes);
  for (const auto& [name, n] : overrides) {
    bool found = false;
    for (auto& i : out)
      if (i.name == name) {
        if (!i.elastic) i.replicas = n;
        i.initial = n;
        found = true;
      }
    if (!found) {
      std::string names;
      for (auto& i : out) names += (names.empty() ? "" : ", ") + std::string(i.name);
      throw launch_error("--replicas names node '" + name + "', which is not in the program (nodes: " +
                         names + ")");
    }
  }
  for (auto& i : out) {
    if (i.initial == 0)
      throw launch_error("node '" + std::string(i.name) + "' has 0 replicas");
    if (i.initial > i.replicas)
      throw launch_error("node '" + std::string(i.name) + "' starts " + std::to_string(i.initial) +
                         " replicas, more than its .elastic(" + std::to_string(i.replicas) +
                         ") allows");
  }
  return out;
}

// Constructs every instance for which want(flat) is true, in program order.
template <class Want, class... Nodes>
void host_program(rpc::runtime& rt, const program_t<Nodes...>& p, Want&& want) {
  using P = program_t<Nodes...>;
  std::size_t idx = 0;
  std::apply(
      [&](const auto&... spec) {
        (
            [&] {
              const rpc::node_info& n = rt.nodes()[idx++];
              for (std::uint32_t r = 0; r < n.replicas; ++r)
                if (want(n.first + r))
                  host_node<std::remove_cvref_t<decltype(spec)>, P>(rt, spec, n.first + r);
            }(),
            ...);
      },
      p.nodes);
}

}  // namespace detail
}  // namespace tlaunch
