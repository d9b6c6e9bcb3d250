// The errors a call can end with. Each names the node and method it concerns.
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

// The remote method threw; what() is "<node> <method>: <remote message>".
class remote_error : public error {
 public:
  remote_error(call_site site, std::string remote_what)
      : error(site.node + " " + site.method + " threw: " + remote_what),
        site_(std::move(site)),
        remote_what_(std::move(remote_what)) {}
  const std::string& node() const noexcept { return site_.node; }
  const std::string& method() const noexcept { return site_.method; }
  const std::string& remote_what() const noexcept { return remote_what_; }

 private:
  call_site site_;
  std::string remote_what_;
};

// The target could not be reached, refused us, or went away mid-call.
class unavailable : public error {
 public:
  unavailable(call_site site, const std::string& why)
      : error(site.node + " " + site.method + " unavailable: " + why), site_(std::move(site)) {}
  const std::string& node() const noexcept { return site_.node; }
  const std::string& method() const noexcept { return site_.method; }

 private:
  call_site site_;
};

// The call's deadline passed before a reply came.
class timeout : public error {
 public:
  explicit timeout(call_site site)
      : error(site.node + " " + site.method + ": deadline exceeded"), site_(std::move(site)) {}
  const std::string& node() const noexcept { return site_.node; }
  const std::string& method() const noexcept { return site_.method; }

 private:
  call_site site_;
};

// The caller cancelled the call (Asio cancellation) or the program is stopping.
class cancelled : public error {
 public:
  explicit cancelled(call_site site)
      : error(site.node + " " + site.method + ": cancelled"), site_(std::move(site)) {}
  const std::string& node() const noexcept { return site_.node; }
  const std::string& method() const noexcept { return site_.method; }

 private:
  call_site site_;
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
