// A strict JSON reader for the tests of --trace: the whole text must be one JSON value
// (RFC 8259), or parse_json throws naming the offset. Numbers are doubles; strings keep
// \uXXXX escapes below 0x80 only (the trace file writes no others).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tlaunch::test_support {

struct json_value {
  using array = std::vector<json_value>;
  using object = std::map<std::string, json_value>;
  std::variant<std::nullptr_t, bool, double, std::string, std::shared_ptr<array>,
               std::shared_ptr<object>>
      v;

  bool is_object() const { return std::holds_alternative<std::shared_ptr<object>>(v); }
  bool is_array() const { return std::holds_alternative<std::shared_ptr<array>>(v); }
  const array& arr() const { return *std::get<std::shared_ptr<array>>(v); }
  const object& obj() const { return *std::get<std::shared_ptr<object>>(v); }
  const std::string& str() const { return std::get<std::string>(v); }
  double num() const { return std::get<double>(v); }
  bool has(const std::string& k) const { return is_object() && obj().count(k) > 0; }
  const json_value& operator[](const std::string& k) const {
    auto it = obj().find(k);
    if (it == obj().end()) throw std::runtime_error("no member \"" + k + "\"");
    return it->second;
  }
};

namespace json_detail {

class parser {
 public:
  explicit parser(std::string_view s) : s_(s) {}
  json_value document() {
    json_value v = value();
    ws();
    if (i_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(i_));
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  bool word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  json_value value() {
    ws();
    if (i_ >= s_.size()) fail("unexpected end");
    const char c = s_[i_];
    if (c == '{') return object();
    if (c == '[') return array();
    if (c == '"') return {string()};
    if (word("true")) return {true};
    if (word("false")) return {false};
    if (word("null")) return {nullptr};
    return {number()};
  }
  json_value object() {
    auto o = std::make_shared<json_value::object>();
    expect('{');
    if (!eat('}')) {
      do {
        ws();
        std::string k = string();
        expect(':');
        (*o)[k] = value();
      } while (eat(','));
      expect('}');
    }
    return {o};
  }
  json_value array() {
    auto a = std::make_shared<json_value::array>();
    expect('[');
    if (!eat(']')) {
      do a->push_back(value());
      while (eat(','));
      expect(']');
    }
    return {a};
  }
  std::string string() {
    if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string");
    ++i_;
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (i_ + 4 > s_.size()) fail("short \\u escape");
          const unsigned long cp = std::stoul(std::string(s_.substr(i_, 4)), nullptr, 16);
          i_ += 4;
          if (cp >= 0x80) fail("\\u escape above 0x7f");
          out += static_cast<char>(cp);
          break;
        }
        default: fail("bad escape");
      }
    }
  }
  double number() {
    const std::size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    auto digits = [&] {
      const std::size_t d = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      if (i_ == d) fail("expected a digit");
    };
    digits();
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      digits();
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      digits();
    }
    return std::stod(std::string(s_.substr(start, i_ - start)));
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace json_detail

inline json_value parse_json(std::string_view text) { return json_detail::parser(text).document(); }

}  // namespace tlaunch::test_support
