// Where to log in over SSH: one host as the user writes it on the command line.
#pragma once

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <string_view>

#include "../../error.hpp"

namespace tlaunch::ssh {

// Where to log in: "host", "user@host", "host:2222", "user@host:2222", "[::1]:2222".
struct host_spec {
  std::string user;  // defaults to the local user name
  std::string host;  // as written (name or address)
  int port = 22;

  // Throws launch_error naming the text and the forms accepted.
  static host_spec parse(std::string_view text);
  // "user@host", with ":port" when it is not 22.
  std::string display() const {
    // Appends only: '":" + std::to_string(port)' inlined at -O3 trips g++ 12's
    // -Werror=restrict false positive in the user's translation unit.
    std::string out = user;
    out += '@';
    if (host.find(':') != std::string::npos) {
      out += '[';
      out += host;
      out += ']';
    } else {
      out += host;
    }
    if (port != 22) {
      out += ':';
      out += std::to_string(port);
    }
    return out;
  }
};

namespace detail {

inline std::string local_user_name() {
  if (const char* u = std::getenv("USER"); u != nullptr && *u != '\0') return u;
  if (const passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_name != nullptr) {
    return pw->pw_name;
  }
  return "root";
}

}  // namespace detail

inline host_spec host_spec::parse(std::string_view text) {
  auto bad = [&](const std::string& why) -> tlaunch::launch_error {
    return tlaunch::launch_error("bad ssh host '" + std::string(text) + "': " + why +
                                 " (expected host, user@host, host:port or user@host:port)");
  };
  host_spec h;
  std::string_view rest = text;
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    h.user = std::string(rest.substr(0, at));
    if (h.user.empty()) throw bad("empty user name before '@'");
    rest.remove_prefix(at + 1);
  } else {
    h.user = detail::local_user_name();
  }
  std::string_view port_text;
  if (!rest.empty() && rest.front() == '[') {  // [v6 address]:port
    auto close = rest.find(']');
    if (close == std::string_view::npos) throw bad("missing ']'");
    h.host = std::string(rest.substr(1, close - 1));
    rest.remove_prefix(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') throw bad("unexpected text after ']'");
      port_text = rest.substr(1);
      if (port_text.empty()) throw bad("empty port after ':'");
    }
  } else if (auto colon = rest.find(':'); colon != std::string_view::npos) {
    if (rest.find(':', colon + 1) != std::string_view::npos) {
      throw bad("an IPv6 address needs brackets, as in [::1]:22");
    }
    h.host = std::string(rest.substr(0, colon));
    port_text = rest.substr(colon + 1);
    if (port_text.empty()) throw bad("empty port after ':'");
  } else {
    h.host = std::string(rest);
  }
  if (h.host.empty()) throw bad("no host name");
  if (h.host.find_first_of(" \t\n/@") != std::string::npos) throw bad("invalid host name");
  if (!port_text.empty()) {
    int port = 0;
    for (char c : port_text) {
      if (c < '0' || c > '9' || port > 65535) throw bad("the port must be a number 1-65535");
      port = port * 10 + (c - '0');
    }
    if (port < 1 || port > 65535) throw bad("the port must be a number 1-65535");
    h.port = port;
  }
  return h;
}

}  // namespace tlaunch::ssh
