// Just enough JSON writing for the dashboard's state (launch/observe/dashboard.hpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace tlaunch::launch::observe {

// s as a JSON string, quotes included; bytes below 0x20 escaped, the rest as they are.
inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        else
          out += c;
    }
  }
  out += '"';
  return out;
}

inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  return fmt::format("{}", v);
}

// Writes an array or object element by element, commas between them.
class json_list {
 public:
  explicit json_list(char open) : text_(1, open), close_(open == '[' ? ']' : '}') {}
  // An array element, or for an object "\"key\":value" (see field).
  json_list& raw(std::string_view v) {
    if (!first_) text_ += ',';
    first_ = false;
    text_ += v;
    return *this;
  }
  json_list& field(std::string_view key, std::string_view raw_value) {
    if (!first_) text_ += ',';
    first_ = false;
    text_ += json_string(key);
    text_ += ':';
    text_ += raw_value;
    return *this;
  }
  json_list& field(std::string_view key, const std::string& s) {
    return field(key, std::string_view(json_string(s)));
  }
  json_list& field(std::string_view key, const char* s) { return field(key, std::string(s)); }
  json_list& field(std::string_view key, double v) { return field(key, std::string_view(json_number(v))); }
  json_list& field(std::string_view key, std::uint64_t v) {
    return field(key, std::string_view(std::to_string(v)));
  }
  json_list& field(std::string_view key, bool v) { return field(key, std::string_view(v ? "true" : "false")); }
  std::string done() { return text_ + close_; }

 private:
  std::string text_;
  char close_;
  bool first_ = true;
};

}  // namespace tlaunch::launch::observe
