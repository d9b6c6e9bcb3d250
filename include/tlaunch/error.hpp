// The errors tlaunch throws to a caller: a call's (each names the node and method it
// concerns) and a launch's. A header of the vocabulary layer (docs/ARCHITECTURE.md): the
// rpc layer and everything above it throw these.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace tlaunch {

// Base of every error tlaunch throws to a caller.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Identifies a call for error messages: "counter/0 Counter::add".
struct call_site {
  std::string node;    // "counter/0"
  std::string method;  // "Counter::add"
};

// An error of one call: what() starts with "<node> <method>", and the node and
// method are kept for the caller.
class call_error : public error {
 public:
  call_error(call_site site, const std::string& what_follows)
      : error(site.node + " " + site.method + what_follows), site_(std::move(site)) {}
  const std::string& node() const noexcept { return site_.node; }
  const std::string& method() const noexcept { return site_.method; }

 private:
  call_site site_;
};

// The remote method threw; what() is "<node> <method> threw: <remote message>".
class remote_error : public call_error {
 public:
  remote_error(call_site site, std::string remote_what)
      : call_error(std::move(site), " threw: " + remote_what),
        remote_what_(std::move(remote_what)) {}
  const std::string& remote_what() const noexcept { return remote_what_; }

 private:
  std::string remote_what_;
};

// The target could not be reached, refused us, or went away mid-call.
class unavailable : public call_error {
 public:
  unavailable(call_site site, const std::string& why)
      : call_error(std::move(site), " unavailable: " + why) {}

 protected:
  struct worded {};  // what() follows the call site as given
  unavailable(call_site site, const std::string& what_follows, worded)
      : call_error(std::move(site), what_follows) {}
};

// The target went away because the program is stopping: its process told this one so
// before it closed the connection (or this process knew already). An unavailable
// (catching unavailable catches it too) that the stop caused: a run() that ends with it
// is not a failure. what() is "<node> <method> ended by the program's stop: <why>".
class stopping : public unavailable {
 public:
  stopping(call_site site, const std::string& why)
      : unavailable(std::move(site), " ended by the program's stop: " + why, worded{}) {}
};

// The target is a replica that a resize removed (or has not started yet): its node runs
// fewer replicas now (docs/guide/elastic.md). Thrown at once, without a wait; not an
// unavailable. what() is "<node> <method> removed: <why>".
class removed : public call_error {
 public:
  removed(call_site site, const std::string& why) : call_error(std::move(site), " removed: " + why) {}
};

// The call's deadline passed before a reply came.
class timeout : public call_error {
 public:
  explicit timeout(call_site site) : call_error(std::move(site), ": deadline exceeded") {}
};

// The caller cancelled the call (Asio cancellation) or the program is stopping.
class cancelled : public call_error {
 public:
  explicit cancelled(call_site site) : call_error(std::move(site), ": cancelled") {}
};

// Bad command line or program description found at launch time.
class launch_error : public error {
 public:
  using error::error;
};

namespace detail {
// An exception_ptr to an E built in place. std::make_exception_ptr(E(...))
// would copy E, and copies of std::runtime_error share their message through a
// reference count inside libstdc++ that ThreadSanitizer cannot see, which made
// it report errors handed from io threads to callers.
template <class E, class... A>
std::exception_ptr make_error(A&&... args) {
  try {
    throw E(std::forward<A>(args)...);
  } catch (...) {
    return std::current_exception();
  }
}
}  // namespace detail

}  // namespace tlaunch
