// Splits a byte stream into lines, for node output.
#pragma once

#include <string>
#include <string_view>

namespace tlaunch::detail {

class line_splitter {
 public:
  // Calls f(line) for each complete line in data (without '\n', and without a
  // trailing '\r'); keeps the rest for the next call.
  template <class F>
  void feed(std::string_view data, F&& f) {
    while (!data.empty()) {
      auto nl = data.find('\n');
      if (nl == std::string_view::npos) {
        pending_.append(data);
        if (pending_.size() > max_line) {  // a runaway line is cut, not kept forever
          emit(f);
        }
        return;
      }
      pending_.append(data.substr(0, nl));
      emit(f);
      data.remove_prefix(nl + 1);
    }
  }
  // Flushes a final unterminated line.
  template <class F>
  void finish(F&& f) {
    if (!pending_.empty()) emit(f);
  }

  static constexpr std::size_t max_line = 64 * 1024;

 private:
  template <class F>
  void emit(F& f) {
    if (!pending_.empty() && pending_.back() == '\r') pending_.pop_back();
    f(std::string_view(pending_));
    pending_.clear();
  }
  std::string pending_;
};

}  // namespace tlaunch::detail
