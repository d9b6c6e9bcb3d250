// A blocking HTTP/1.1 client for the tests of the launcher's endpoints: one request on a
// fresh loopback connection, the whole answer read until the server closes it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace tlaunch::test_support {

struct http_reply {
  int status = 0;  // 0: no answer (connection refused or closed first)
  std::string headers, body;
};

// Sends `request` as it is (a whole HTTP request) to ip:port; waits at most 10 s.
inline http_reply http_raw(const std::string& ip, std::uint16_t port, const std::string& request) {
  http_reply r;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return r;
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return r;
  }
  for (std::size_t at = 0; at < request.size();) {
    ssize_t n = ::send(fd, request.data() + at, request.size() - at, MSG_NOSIGNAL);
    if (n <= 0) break;
    at += static_cast<std::size_t>(n);
  }
  std::string all;
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    all.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  auto end = all.find("\r\n\r\n");
  if (all.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) return r;
  r.status = std::stoi(all.substr(9, 3));
  r.headers = all.substr(0, end);
  r.body = all.substr(end + 4);
  return r;
}

inline http_reply http_get(const std::string& ip, std::uint16_t port, const std::string& path,
                           const std::string& extra_headers = "") {
  return http_raw(ip, port,
                  "GET " + path + " HTTP/1.1\r\nHost: " + ip + "\r\n" + extra_headers + "\r\n");
}

}  // namespace tlaunch::test_support
