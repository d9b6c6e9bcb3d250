// A small HTTP/1.1 server for what the launcher shows (--metrics): GET (and the dashboard's
// POST, with its token), one request
// per connection, answered from a handler on the launcher's own thread.
//
// What a client may cost is bounded: at most max_clients connections at once (more are
// closed at once), a request of at most max_request bytes, read and answered within
// `timeout` (a client that sends or reads too slowly is closed). A malformed request gets
// 400 and the connection closes; nothing a client sends stops the server accepting.
// Off loopback a token is required (Authorization: Bearer TOKEN, or ?token=TOKEN).
#pragma once

#include <fcntl.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "../../detail/crypto.hpp"

namespace tlaunch::launch::observe {

struct http_response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// "ADDR:PORT" ("[::1]:9100" for IPv6): the endpoint, or a reason it is not one.
inline std::optional<asio::ip::tcp::endpoint> parse_endpoint(const std::string& s,
                                                             std::string& why) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
    why = "'" + s + "' is not ADDR:PORT";
    return std::nullopt;
  }
  std::string host = s.substr(0, colon), port = s.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  unsigned long p = 0;
  std::size_t used = 0;
  try {
    p = std::stoul(port, &used);
  } catch (...) {
    used = 0;
  }
  if (used != port.size() || p > 65535) {
    why = "'" + port + "' is not a port (0 to 65535)";
    return std::nullopt;
  }
  std::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) {
    why = "'" + host + "' is not an IP address";
    return std::nullopt;
  }
  return asio::ip::tcp::endpoint(addr, static_cast<std::uint16_t>(p));
}

class http_endpoint {
 public:
  using handler = std::function<http_response(std::string_view path)>;
  static constexpr std::size_t max_clients = 32;
  static constexpr std::size_t max_request = 16 * 1024;

  // Binds ep (throws std::system_error when it cannot); token "" means none required.
  http_endpoint(asio::io_context& io, const asio::ip::tcp::endpoint& ep, std::string token,
                handler h, std::chrono::milliseconds timeout = std::chrono::seconds(5))
      : io_(io), acceptor_(io), token_(std::move(token)), handler_(std::move(h)),
        timeout_(timeout), state_(std::make_shared<shared>()) {
    acceptor_.open(ep.protocol());
    // Not inherited by the node processes the launcher starts.
    ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    acceptor_.bind(ep);
    acceptor_.listen();
    accept();
  }
  ~http_endpoint() {
    state_->open = false;
    std::error_code ec;
    acceptor_.close(ec);
  }
  http_endpoint(const http_endpoint&) = delete;
  http_endpoint& operator=(const http_endpoint&) = delete;

  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }

  // The request's answer: the handler's, or an error status. Public for the tests.
  http_response answer(std::string_view request) const {
    auto line_end = request.find("\r\n");
    if (line_end == std::string_view::npos) return error(400, "malformed request line");
    std::string_view line = request.substr(0, line_end);
    auto sp1 = line.find(' ');
    auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0)
      return error(400, "malformed request line");
    std::string_view method = line.substr(0, sp1);
    std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    const bool post = method == "POST" && post_;
    if (method != "GET" && method != "HEAD" && !post)
      return error(405, post_ ? "only GET and POST are served" : "only GET is served");
    std::string_view path = target, query;
    if (auto q = target.find('?'); q != std::string_view::npos) {
      path = target.substr(0, q);
      query = target.substr(q + 1);
    }
    // A POST changes the program: it needs its token even on loopback.
    const std::string& token = post ? post_token_ : token_;
    if (!token.empty() && !authorized(request.substr(line_end + 2), query, token))
      return error(401, "a token is required: Authorization: Bearer TOKEN (the launcher "
                        "printed it), or ?token=TOKEN");
    return post ? post_(path, query) : handler_(path);
  }

  // POST requests (the dashboard's resize), answered by `h` with the path and the query;
  // each must carry `token` (not empty), wherever the endpoint listens.
  using post_handler = std::function<http_response(std::string_view path, std::string_view query)>;
  void serve_post(std::string token, post_handler h) {
    post_token_ = std::move(token);
    post_ = std::move(h);
  }

 private:
  struct shared {
    bool open = true;
    std::size_t clients = 0;
  };

  static http_response error(int status, std::string text) {
    return {status, "text/plain; charset=utf-8", std::move(text) + "\n"};
  }

  static std::string_view reason(int status) {
    switch (status) {
      case 200: return "OK";
      case 202: return "Accepted";
      case 400: return "Bad Request";
      case 401: return "Unauthorized";
      case 404: return "Not Found";
      case 405: return "Method Not Allowed";
      case 413: return "Content Too Large";
      default: return "Error";
    }
  }

  static bool equal_token(std::string_view given, const std::string& token) {
    return tlaunch::detail::constant_time_equal(
        {reinterpret_cast<const std::uint8_t*>(given.data()), given.size()},
        {reinterpret_cast<const std::uint8_t*>(token.data()), token.size()});
  }

  static bool authorized(std::string_view headers, std::string_view query,
                         const std::string& token) {
    for (std::string_view q = query; !q.empty();) {
      auto amp = q.find('&');
      std::string_view kv = q.substr(0, amp);
      if (kv.rfind("token=", 0) == 0 && equal_token(kv.substr(6), token)) return true;
      if (amp == std::string_view::npos) break;
      q.remove_prefix(amp + 1);
    }
    while (!headers.empty()) {
      auto end = headers.find("\r\n");
      std::string_view h = headers.substr(0, end);
      auto colon = h.find(':');
      if (colon != std::string_view::npos) {
        std::string name(h.substr(0, colon));
        for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::string_view value = h.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
        if (name == "authorization" && value.rfind("Bearer ", 0) == 0 &&
            equal_token(value.substr(7), token))
          return true;
      }
      if (end == std::string_view::npos) break;
      headers.remove_prefix(end + 2);
    }
    return false;
  }

  struct client : std::enable_shared_from_this<client> {
    client(http_endpoint& e, asio::ip::tcp::socket s)
        : owner(&e), state(e.state_), socket(std::move(s)), timer(e.io_) {}
    ~client() { --state->clients; }
    http_endpoint* owner;  // valid while state->open
    std::shared_ptr<shared> state;
    asio::ip::tcp::socket socket;
    asio::steady_timer timer;
    std::string request;
    char buf[4096];
    std::string out;

    void start(std::chrono::milliseconds timeout) {
      timer.expires_after(timeout);
      timer.async_wait([self = shared_from_this()](std::error_code ec) {
        if (ec) return;
        std::error_code ignored;
        self->socket.close(ignored);
      });
      read();
    }
    void read() {
      socket.async_read_some(asio::buffer(buf), [self = shared_from_this()](std::error_code ec,
                                                                              std::size_t n) {
        if (ec) return;
        self->request.append(self->buf, n);
        if (self->request.find("\r\n\r\n") != std::string::npos) return self->respond(false);
        if (self->request.size() > max_request) return self->respond(true);
        self->read();
      });
    }
    void respond(bool too_large) {
      if (!state->open) return;
      http_response r = too_large ? error(413, "request larger than 16 KiB")
                                  : owner->answer(request);
      const bool head = request.rfind("HEAD ", 0) == 0;
      out = "HTTP/1.1 " + std::to_string(r.status) + " " + std::string(reason(r.status)) +
            "\r\nContent-Type: " + r.content_type +
            "\r\nContent-Length: " + std::to_string(r.body.size()) +
            "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
      if (!head) out += r.body;
      asio::async_write(socket, asio::buffer(out),
                        [self = shared_from_this()](std::error_code, std::size_t) {
                          std::error_code ignored;
                          self->socket.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
                          self->socket.close(ignored);
                          self->timer.cancel();
                        });
    }
  };

  void accept() {
    acceptor_.async_accept([this, state = state_](std::error_code ec, asio::ip::tcp::socket s) {
      if (!state->open) return;
      if (!ec) {
        if (state->clients >= max_clients) {
          std::error_code ignored;
          s.close(ignored);
        } else {
          ++state->clients;
          ::fcntl(s.native_handle(), F_SETFD, FD_CLOEXEC);
          std::make_shared<client>(*this, std::move(s))->start(timeout_);
        }
      }
      // Errors (EMFILE, a connection reset before it was taken) never stop the loop; a
      // short pause keeps an exhausted descriptor table from spinning it.
      if (ec && ec != asio::error::operation_aborted) {
        auto t = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(50));
        t->async_wait([this, t, state](std::error_code) {
          if (state->open) accept();
        });
        return;
      }
      if (ec) return;
      accept();
    });
  }

  asio::io_context& io_;
  asio::ip::tcp::acceptor acceptor_;
  std::string token_;
  handler handler_;
  std::string post_token_;
  post_handler post_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<shared> state_;
};

}  // namespace tlaunch::launch::observe
