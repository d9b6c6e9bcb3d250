// k8s: the program as Kubernetes manifests. `--launch=k8s` starts nothing: it writes (to
// --k8s-out=DIR, or stdout) an Indexed Job, a headless Service and a Secret, which
// `kubectl apply` runs. Every pod runs this binary with --tlaunch-role=k8s and takes its
// role from its completion index (JOB_COMPLETION_INDEX, which the Job controller sets):
// index i < N (the program's node processes, colocation_processes) is process i: an
// instance, or a colocation group whose pod hosts every member, in program order of their
// first members (without groups, instance i, as --launch=slurm's SLURM_PROCID); index N is
// the coordinator. The pods get --colocate/--no-colocate, so they map indices alike.
//
// Why the coordinator is the Job's last index and not a pod of its own: one Job then holds
// the whole program, so its completion is the program's (every pod exits 0), one failed pod
// fails the Job (backoffLimit 0) and Kubernetes ends the others; a gang scheduler sees one
// group of N+1 pods; and the instance indices stay the ones Slurm uses. Its address is
// stable before anything runs: an Indexed Job's pod i is named `<job>-<i>`, and with the
// Service as its subdomain `<job>-<N>.<service>` resolves inside the namespace.
//
// The launch secret is a Secret mounted as a file (0400) whose path the pods get in
// TLAUNCH_SECRET_FILE. A node pod hands it to the node process on its stdin, as a launcher
// would, from a pipe this process keeps open: a pod's stop comes from the coordinator's stop
// message, the loss of its connection, or the kubelet's SIGTERM, never from stdin's EOF.
// The coordinator cannot see a pod exit; it takes the close of the pod's connection as its
// end (exit 0 once stopped; before that, a lost node), and cannot kill one: a node that
// does not stop ends itself after the grace period.
//
// Gang start: node pods wait for the coordinator to listen, and the coordinator for every
// node to register, both at most --start-timeout; what is not there by then fails the Job,
// and Kubernetes removes the rest. --k8s-volcano adds a Volcano PodGroup whose minMember
// (Volcano's minAvailable) is every pod, so none is bound before all can be.
//
// The pod template is one for every index: the per-node environment (.env() and --env)
// is written into it as --env flags of the container's args, which each pod applies to
// itself; resource hints become the template's requests and limits, the largest of any
// node. TLAUNCH_K8S_HOSTS="name=ip,..." makes a pod resolve those names to those addresses
// (as /etc/hosts entries would): the tests run the pods on one machine with it.
//
// Restarts: the processes whose instances all have a restart policy run in a second
// Indexed Job, <name>-restart (k8s_layout), with restartPolicy OnFailure: the kubelet
// restarts a failed container in its pod, and the coordinator (external_restarts) counts
// the loss of its connection against the policy and takes its next registration as the
// restart. The main Job keeps Never and backoffLimit 0, and the coordinator its last index.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "../../detail/secret.hpp"
#include "../../detail/self_exe.hpp"
#include "../../program_view.hpp"
#include "../colocation.hpp"
#include "../process/coordinator.hpp"
#include "../decl.hpp"
#include "../entry_points.hpp"
#include "../flags.hpp"
#include "../launcher.hpp"
#include "../process/local_child.hpp"
#include "../node_env.hpp"
#include "../process/node_process.hpp"
#include "../terminal/output.hpp"
#include "../placement.hpp"
#include "slurm_task.hpp"

namespace tlaunch::launch {

// What --launch=k8s writes, from its flags.
// The secret's directory inside a pod; the file is <dir>/secret.
inline constexpr std::string_view k8s_secret_dir = "/etc/tlaunch";

namespace detail {


// A YAML double-quoted scalar (JSON's string syntax, which YAML includes).
inline std::string yaml_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
        else
          out += c;
    }
  }
  out += '"';
  return out;
}


// TLAUNCH_K8S_HOSTS="name=ip,...": the address `host` maps to, if any.
inline std::optional<std::string> k8s_host_override(std::string_view host) {
  const char* v = std::getenv("TLAUNCH_K8S_HOSTS");
  if (v == nullptr) return std::nullopt;
  for (const auto& item : split(v, ',')) {
    auto eq = item.find('=');
    if (eq != std::string::npos && std::string_view(item).substr(0, eq) == host)
      return item.substr(eq + 1);
  }
  return std::nullopt;
}

// "host:port" with the host mapped through TLAUNCH_K8S_HOSTS.
inline std::string k8s_mapped_address(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) return address;
  if (auto ip = k8s_host_override(address.substr(0, colon))) return *ip + address.substr(colon);
  return address;
}

// True once a TCP connection to host:port opens (it is closed at once).
inline bool tcp_reachable(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) return false;
  bool ok = false;
  for (auto* a = res; a != nullptr && !ok; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return ok;
}

// A pod as the coordinator sees a node process: no process of its own to watch or kill,
// only its connection, whose close is its end.
class k8s_pod final : public child {
 public:
  k8s_pod(std::string pod, child_callbacks cb) : pod_(std::move(pod)), cb_(std::move(cb)) {}
  void write_stdin(std::string_view) override {}     // the secret is the pod's Secret
  void close_stdin() override { stopping_ = true; }  // the stop message went on its connection
  void kill() override {
    exit_status st;
    st.unknown = "did not stop; its pod ends itself after the grace period, or with the Job";
    end(st);
  }
  bool running() const override { return !ended_; }
  std::string host() const override { return pod_; }
  long pid() const override { return -1; }
  void connection_closed() override {
    exit_status st;  // exited 0 when told to stop; the pod's own status is Kubernetes'
    if (!stopping_)
      st.unknown = fmt::format(
          "its connection closed (pod {} ended or lost its network; "
          "`kubectl logs` tells why)",
          pod_);
    end(st);
  }

 private:
  void end(const exit_status& st) {
    if (ended_) return;
    ended_ = true;
    if (cb_.on_exit) cb_.on_exit(st);
  }
  std::string pod_;
  child_callbacks cb_;
  bool stopping_ = false, ended_ = false;  // the coordinator's thread only
};

}  // namespace detail

// The settings from --k8s-* flags; a launch_error for what is missing or malformed.
inline k8s_flags k8s_resolved(const options& o) {
  k8s_flags k = o.k8s;
  std::string exe = tlaunch::detail::self_exe<launch_error>();
  k.name = detail::dns_label(
      k.name.empty() ? fmt::format("tlaunch-{}", std::filesystem::path(exe).filename().string())
                     : k.name);
  if (k.binary.empty()) k.binary = exe;
  if (k.image.empty())
    throw launch_error(fmt::format(
        "--launch=k8s needs --k8s-image=IMAGE, an image that holds this program (at {}, or say "
        "where with --k8s-binary=PATH)",
        k.binary));
  return k;
}

// Which Job runs which node process. Processes whose every instance has a restart policy
// (after --restart) run in a second Job, `<name>-restart`, whose pods have restartPolicy
// OnFailure: the kubelet restarts a failed container in the same pod, and the coordinator
// takes its new registration as the restart (counted against the policy). The others and
// the coordinator stay in the main Job (restartPolicy Never, backoffLimit 0). Without any
// policy there is no second Job and completion index i is process i.
struct k8s_layout {
  std::vector<std::uint32_t> main;     // completion index -> process; the last: the coordinator
  std::vector<std::uint32_t> restart;  // completion index of <name>-restart -> process
  std::uint32_t restarts = 0;          // the restart Job's backoffLimit: the policies' sum
};
// nodes: the plan's (launch/plan.hpp), with --restart applied.
inline k8s_layout k8s_layout_of(const std::vector<tlaunch::rpc::node_info>& nodes,
                                const std::vector<colocation_group>& groups) {
  std::vector<std::uint32_t> max_of;  // flat id -> its node's max_restarts
  for (const auto& n : nodes)
    for (std::uint32_t r = 0; r < n.replicas; ++r) max_of.push_back(n.restart.max_restarts);
  auto processes = colocation_processes(groups, static_cast<std::uint32_t>(max_of.size()));
  k8s_layout l;
  for (std::uint32_t i = 0; i < processes.size(); ++i) {
    std::uint32_t most = UINT32_MAX;  // a group restarts only when every member may
    for (std::uint32_t f : processes[i]) most = std::min(most, max_of[f]);
    if (most > 0 && most != UINT32_MAX) {
      l.restart.push_back(i);
      l.restarts += most;
    } else {
      l.main.push_back(i);
    }
  }
  l.main.push_back(static_cast<std::uint32_t>(processes.size()));
  return l;
}

// "<job>-<C>.<service>:<port>": where every pod reaches the coordinator, the main Job's pod
// of completion index C (its last; without a restart Job, the number of node processes).
inline std::string k8s_coordinator_address(std::size_t coordinator_index, const k8s_flags& k) {
  return fmt::format("{}-{}.{}:{}", k.name, coordinator_index, k.name, k.port);
}

// The container's args: the pod role (k8s-restart in the restart Job), the coordinator,
// the flags every process of the program must see, each node's environment as --env flags,
// then the program's arguments. --colocate, --no-colocate and --restart go along: every pod
// maps its index to a process as the manifests did, and the coordinator applies --restart.
inline std::vector<std::string> k8s_pod_args(const std::vector<tlaunch::rpc::node_info>& nodes,
                                             std::size_t coordinator_index, const options& o,
                                             const k8s_flags& k, bool restart_job = false) {
  std::vector<std::string> args = {
      restart_job ? "--tlaunch-role=k8s-restart" : "--tlaunch-role=k8s",
      "--tlaunch-watch",  // a stopped node process is killed, as under local_mp and ssh
      fmt::format("--tlaunch-coordinator={}", k8s_coordinator_address(coordinator_index, k)),
      fmt::format("--start-timeout={}", static_cast<double>(o.start_timeout.count()) / 1000.0)};
  for (const auto& c : o.colocate) args.push_back(fmt::format("--colocate={}", c));
  if (o.no_colocate) args.push_back("--no-colocate");
  for (const auto& [name, n] : o.restart) args.push_back(fmt::format("--restart={}={}", name, n));
  auto tail = std::find(o.passthrough.begin(), o.passthrough.end(), "--");
  for (auto it = o.passthrough.begin(); it != tail; ++it)
    if (it->rfind("--env=", 0) != 0) args.push_back(*it);  // --env: merged below
  for (const auto& n : nodes)
    for (const auto& [key, value] : node_env_vars(n, o))
      args.push_back(fmt::format("--env={}:{}={}", n.name, key, value));
  args.insert(args.end(), tail, o.passthrough.end());
  return args;
}

struct k8s_manifest {
  std::string file;  // its name under --k8s-out
  std::string text;  // one YAML document
};

// The manifests for `nodes`: a Secret holding `secret_hex`, a headless Service, an Indexed
// Job of one pod per node process (an instance or a colocation group of `groups`) plus the
// coordinator, and with --k8s-volcano a PodGroup.
inline std::vector<k8s_manifest> k8s_manifests(const std::vector<tlaunch::rpc::node_info>& nodes,
                                               const std::vector<colocation_group>& groups,
                                               const options& o, const k8s_flags& k,
                                               std::string_view secret_hex) {
  using detail::yaml_quote;
  const auto layout = k8s_layout_of(nodes, groups);
  const auto pods = layout.main.size() + layout.restart.size();
  const std::string labels = fmt::format(
      "    app.kubernetes.io/name: {}\n    app.kubernetes.io/managed-by: tlaunch\n", k.name);
  auto meta = [&](std::string_view name) {
    return fmt::format("metadata:\n  name: {}\n  namespace: {}\n  labels:\n{}", name, k.ns, labels);
  };
  std::vector<k8s_manifest> out;

  out.push_back(
      {"secret.yaml",
       fmt::format("# The launch secret: every pod reads it from {}/secret.\n"
                   "apiVersion: v1\nkind: Secret\n{}type: Opaque\nstringData:\n  secret: {}\n",
                   k8s_secret_dir, meta(k.name + "-secret"), yaml_quote(secret_hex))});

  out.push_back(
      {"service.yaml", fmt::format("# Stable names: pod i is <job>-<i>.<service>; the last is the "
                                   "coordinator.\napiVersion: v1\nkind: Service\n{}spec:\n"
                                   "  clusterIP: None\n  publishNotReadyAddresses: true\n"
                                   "  selector:\n    tlaunch/job: {}\n  ports:\n"
                                   "  - name: coordinator\n    port: {}\n    targetPort: {}\n",
                                   meta(k.name), k.name, k.port, k.port)});

  if (k.volcano)
    out.push_back({"podgroup.yaml",
                   fmt::format("# Gang scheduling: Volcano binds no pod before all {} can be.\n"
                               "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\n{}"
                               "spec:\n  minMember: {}\n",
                               pods, meta(k.name), pods)});

  auto args_of = [&](bool restart_job) {
    std::string args;
    for (const auto& a : k8s_pod_args(nodes, layout.main.size() - 1, o, k, restart_job))
      args += fmt::format("        - {}\n", yaml_quote(a));
    return args;
  };
  std::string resources;
  if (auto r = largest_resources(nodes); r.any()) {
    std::string each;
    if (r.cpus) each += fmt::format("            cpu: \"{}\"\n", r.cpus);
    if (r.memory_mb) each += fmt::format("            memory: \"{}Mi\"\n", r.memory_mb);
    if (r.gpus) each += fmt::format("            nvidia.com/gpu: \"{}\"\n", r.gpus);
    resources =
        fmt::format("        resources:\n          requests:\n{}          limits:\n{}", each, each);
  }
  std::string scheduling, annotations;
  if (k.volcano) {
    scheduling = "      schedulerName: volcano\n";
    annotations =
        fmt::format("      annotations:\n        scheduling.k8s.io/group-name: {}\n", k.name);
  }
  // One Job, or two (see k8s_layout): the same pod template but for the role and the
  // restart policy.
  auto job = [&](const std::string& name, std::size_t completions, std::uint32_t backoff,
                 bool restart_job, const std::string& comment) {
    return fmt::format(
        "{0}apiVersion: batch/v1\nkind: Job\n{1}spec:\n"
        "  completionMode: Indexed\n  completions: {2}\n  parallelism: {2}\n"
        "  backoffLimit: {13}\n"
        "  template:\n    metadata:\n      labels:\n        tlaunch/job: {3}\n{4}"
        "    spec:\n      restartPolicy: {14}\n      subdomain: {3}\n{5}"
        "      containers:\n      - name: node\n        image: {6}\n"
        "        command:\n        - {7}\n        args:\n{8}"
        "        env:\n        - name: TLAUNCH_SECRET_FILE\n          value: {9}\n"
        "        ports:\n        - name: coordinator\n          containerPort: {10}\n{11}"
        "        volumeMounts:\n        - name: launch-secret\n          mountPath: {12}\n"
        "          readOnly: true\n"
        "      volumes:\n      - name: launch-secret\n        secret:\n"
        "          secretName: {3}-secret\n          defaultMode: 256  # 0400\n",
        comment, meta(name), completions, k.name, annotations, scheduling, yaml_quote(k.image),
        yaml_quote(k.binary), args_of(restart_job),
        yaml_quote(std::string(k8s_secret_dir) + "/secret"), k.port, resources, k8s_secret_dir,
        backoff, restart_job ? "OnFailure" : "Never");
  };
  auto list = [](const std::vector<std::uint32_t>& v, std::size_t n) {
    std::string s;
    for (std::size_t i = 0; i < n; ++i) s += fmt::format("{}{}", i ? "," : "", v[i]);
    return s;
  };
  if (layout.restart.empty())
    out.push_back(
        {"job.yaml",
         job(k.name, pods, 0, false,
             fmt::format("# Pod i < {0} is node process i (an instance, or a colocation group at "
                         "its first\n# member's place, in program order); pod {0} is the "
                         "coordinator.\n",
                         pods - 1))});
  else {
    out.push_back(
        {"job.yaml",
         job(k.name, layout.main.size(), 0, false,
             layout.main.size() == 1
                 ? fmt::format("# Pod 0 is the coordinator; every node process has a restart "
                               "policy and runs in {}-restart.\n",
                               k.name)
                 : fmt::format("# Pod i < {0} is node process L[i], L = [{1}] (in program "
                               "order; the others have a\n# restart policy and run in "
                               "{2}-restart); pod {0} is the coordinator.\n",
                               layout.main.size() - 1, list(layout.main, layout.main.size() - 1),
                               k.name))});
    out.push_back(
        {"job-restart.yaml",
         job(k.name + "-restart", layout.restart.size(), layout.restarts, true,
             fmt::format("# The node processes whose nodes have a restart policy: pod i is node "
                         "process L[i],\n# L = [{1}]. The kubelet restarts a failed container "
                         "(restartPolicy OnFailure), at most {2} times\n# in all (backoffLimit, "
                         "the sum of the policies); the coordinator applies each policy.\n",
                         layout.restart.size(), list(layout.restart, layout.restart.size()),
                         layout.restarts))});
  }
  return out;
}

// --launch=k8s: writes the manifests with a fresh secret; returns 0.
inline int write_k8s_manifests(const std::vector<tlaunch::rpc::node_info>& nodes,
                               const std::vector<colocation_group>& groups, const options& o,
                               output_printer& out) {
  auto k = k8s_resolved(o);
  if (auto w = largest_resources_warning(nodes, "k8s"); !w.empty())
    out.print("launcher", stream::err, w);
  auto secret = tlaunch::detail::random_secret();
  auto manifests = k8s_manifests(nodes, groups, o, k, tlaunch::detail::to_hex(secret));
  if (k.out_dir.empty()) {
    for (const auto& m : manifests) std::printf("---\n%s", m.text.c_str());
    std::fflush(stdout);
    return 0;
  }
  std::error_code ec;
  std::filesystem::create_directories(k.out_dir, ec);
  for (const auto& m : manifests) {
    auto path = std::filesystem::path(k.out_dir) / m.file;
    // Owner-only from the start: the secret is in one of them.
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    bool ok =
        fd >= 0 && ::write(fd, m.text.data(), m.text.size()) == static_cast<ssize_t>(m.text.size());
    if (fd >= 0) ::close(fd);
    if (!ok)
      throw launch_error(
          fmt::format("--k8s-out: cannot write {}: {}", path.string(), detail::errno_text(errno)));
  }
  out.print(
      "launcher", stream::err,
      fmt::format("wrote {} manifests for {} pods to {}; run them with `kubectl apply -f {}`",
                  manifests.size(),
                  colocation_processes(groups, rpc::instance_count(nodes)).size() + 1,
                  k.out_dir, k.out_dir));
  return 0;
}

// What a pod started with --tlaunch-role=k8s is.
struct k8s_pod_role {
  bool coordinator = false;
  std::string role;                 // "name/i" of a node pod, "name/i,other/j" of a group's
  std::string coordinator_address;  // mapped through TLAUNCH_K8S_HOSTS
  std::vector<std::uint8_t> secret;
};

// From JOB_COMPLETION_INDEX (of the main Job, or with --tlaunch-role=k8s-restart of the
// restart Job: k8s_layout) and TLAUNCH_SECRET_FILE; a launch_error when either is wrong.
inline k8s_pod_role k8s_pod_role_of(const std::vector<tlaunch::rpc::node_info>& nodes,
                                    const std::vector<colocation_group>& groups,
                                    const options& o) {
  k8s_pod_role r;
  const char* index = std::getenv("JOB_COMPLETION_INDEX");
  if (index == nullptr)
    throw launch_error("--tlaunch-role=k8s outside an Indexed Job's pod (no JOB_COMPLETION_INDEX)");
  auto processes = colocation_processes(groups, rpc::instance_count(nodes)).size();
  auto layout = k8s_layout_of(nodes, groups);
  const auto& job = o.role == "k8s-restart" ? layout.restart : layout.main;
  // The completion index as the process it stands for (role_of_process_index's checks).
  std::string process = index;
  std::optional<unsigned long> i;
  try {
    std::size_t pos = 0;
    if (!process.empty() && process.front() != '-') i = std::stoul(process, &pos);
    if (pos != process.size()) i.reset();
  } catch (const std::exception&) {
  }
  if (i && *i >= job.size())
    throw launch_error(fmt::format(
        "JOB_COMPLETION_INDEX={} names no node process: the Job{} has {} pods (started with "
        "more pods than its completions?)",
        index, o.role == "k8s-restart" ? " of the restart policies" : "", job.size()));
  if (i) process = std::to_string(job[*i]);
  if (std::to_string(processes) == process)
    r.coordinator = true;
  else
    r.role = role_of_process_index(nodes, groups, "JOB_COMPLETION_INDEX", process);
  r.coordinator_address = detail::k8s_mapped_address(o.coordinator);
  const char* file = std::getenv("TLAUNCH_SECRET_FILE");
  if (file == nullptr) throw launch_error("--tlaunch-role=k8s: TLAUNCH_SECRET_FILE is not set");
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  auto secret = tlaunch::detail::from_hex(line);
  if (!in || !secret || secret->empty())
    throw launch_error(fmt::format("--tlaunch-role=k8s: no launch secret in {}", file));
  r.secret = std::move(*secret);
  return r;
}

// The coordinator pod: runs the program's lifecycle over the node pods; its exit code.
inline int run_k8s_coordinator(const std::vector<tlaunch::rpc::node_info>& nodes,
                               const std::vector<colocation_group>& groups, const options& o,
                               const k8s_pod_role& r, output_printer& out) {
  auto colon = o.coordinator.rfind(':');
  auto port = static_cast<std::uint16_t>(std::stoul(o.coordinator.substr(colon + 1)));
  std::string host = o.coordinator.substr(0, colon);
  std::string pod = host.substr(0, host.find('.'));  // "<job>-<N>"
  std::string job = pod.substr(0, pod.rfind('-'));
  auto own = detail::k8s_host_override(host);
  coordinator coord(nodes, o, out);
  // A failed pod of the restart Job comes back by the kubelet (restartPolicy OnFailure).
  coord.external_restarts();
  coord.use_secret(r.secret);
  coord.colocate(groups);
  coord.listen(own ? *own : "0.0.0.0", port);
  // Every member's place is its process's pod: "<job>-<i>", or "<job>-restart-<i>".
  const auto total = rpc::instance_count(nodes);
  std::vector<std::string> pod_of(total);
  auto processes = colocation_processes(groups, total);
  auto layout = k8s_layout_of(nodes, groups);
  for (std::size_t i = 0; i + 1 < layout.main.size(); ++i)
    for (std::uint32_t f : processes[layout.main[i]]) pod_of[f] = fmt::format("{}-{}", job, i);
  for (std::size_t i = 0; i < layout.restart.size(); ++i)
    for (std::uint32_t f : processes[layout.restart[i]])
      pod_of[f] = fmt::format("{}-restart-{}", job, i);
  std::vector<placement> places;
  std::uint32_t flat = 0;
  for (const auto& n : nodes)
    for (std::uint32_t i = 0; i < n.replicas; ++i, ++flat)
      places.push_back({flat, fmt::format("{}/{}", n.name, i), pod_of[flat]});
  int code = coord.run(places,
                       [](const placement& pl, std::uint16_t, const std::vector<std::string>&,
                          child_callbacks cb) -> child_ptr {
                         return std::make_unique<detail::k8s_pod>(pl.host, std::move(cb));
                       });
  // The pod's log is all a user sees of the coordinator: say how it ended.
  auto registered = coord.time_to_registered().count();  // 0: not all of them did
  out.print("launcher", stream::err,
            fmt::format("the program ended with exit code {} ({} node pods{})", code,
                        processes.size(),
                        registered > 0 ? fmt::format("; all registered after {} ms", registered)
                                       : std::string()));
  return code;
}

// A node pod, before its node process starts: waits (at most --start-timeout) for the
// coordinator to listen, then puts the secret on stdin from a pipe kept open. Returns the
// options the node process runs with, or nothing when the coordinator never came.
inline std::optional<options> k8s_prepare_node(const options& o, const k8s_pod_role& r) {
  auto deadline = std::chrono::steady_clock::now() + o.start_timeout;
  while (!detail::tcp_reachable(r.coordinator_address)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::fprintf(stderr,
                   "tlaunch: pod of %s: the coordinator at %s did not listen within %.1f s\n",
                   r.role.c_str(), r.coordinator_address.c_str(),
                   static_cast<double>(o.start_timeout.count()) / 1000.0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw launch_error(fmt::format("--tlaunch-role=k8s: pipe: {}", detail::errno_text(errno)));
  std::string line = tlaunch::detail::to_hex(r.secret) + "\n";
  if (::write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size()) ||
      ::dup2(fds[0], 0) < 0)
    throw launch_error(fmt::format("--tlaunch-role=k8s: cannot hand the secret over: {}",
                                   detail::errno_text(errno)));
  if (fds[0] != 0) ::close(fds[0]);  // fds[1] stays open for the process's life: no EOF
  options node = o;
  node.role = r.role;
  node.coordinator = r.coordinator_address;
  return node;
}

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_CLUSTER)
TLAUNCH_DECL int run_k8s(const launch_plan& plan, output_printer& out) {
  // One pod per node process: a colocation group's pod hosts all its members.
  for (const auto& n : plan.nodes)
    if (n.elastic)
      throw launch_error("--launch=k8s: node '" + std::string(n.name) +
                         "' is elastic, which --launch=k8s does not support yet (its manifests "
                         "run a fixed set of pods); launch it with local_mp, ssh or slurm");
  return write_k8s_manifests(plan.nodes, plan.groups, plan.opt, out);
}
#endif

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_CLUSTER)
TLAUNCH_DECL int run_k8s_pod(const tlaunch::detail::program_view& p, const options& o) {
  try {
    // The pod resolves the program as its launcher did: the same flags.
    auto plan = plan_launch(p, o);
    auto r = k8s_pod_role_of(plan.nodes, plan.groups, o);
    if (r.coordinator) {
      output_printer out(o.color, o.log_dir);
      return run_k8s_coordinator(plan.nodes, plan.groups, o, r, out);
    }
    auto node = k8s_prepare_node(o, r);
    return node ? run_node_process(p, *node) : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tlaunch: %s\n", e.what());
    return 2;
  }
}
#endif


}  // namespace tlaunch::launch
