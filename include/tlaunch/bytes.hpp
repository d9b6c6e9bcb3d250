// tlaunch::bytes: an immutable, shared byte buffer for large payloads.
//
// Passed by value through calls without copying its contents: a large buffer is
// sent from where it is (a gather write), received straight into a buffer of its
// own and handed to the method as a view of it, and shared between nodes of one
// process. std::string and std::vector<char> arguments are copied once on each
// side instead; use bytes when payloads are megabytes.
#pragma once

#include <cereal/cereal.hpp>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "wire/codec.hpp"

namespace tlaunch {

class bytes {
 public:
  bytes() = default;
  // Takes the memory of s (no copy).
  explicit bytes(std::string s) {
    auto p = std::make_shared<const std::string>(std::move(s));
    data_ = p->data();
    size_ = p->size();
    owner_ = std::move(p);
  }
  explicit bytes(std::vector<char> v) {
    auto p = std::make_shared<const std::vector<char>>(std::move(v));
    data_ = p->data();
    size_ = p->size();
    owner_ = std::move(p);
  }
  // A view of memory that `owner` keeps alive.
  bytes(std::shared_ptr<const void> owner, const char* data, std::size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}
  static bytes copy_of(std::span<const char> s) { return bytes(std::string(s.data(), s.size())); }

  const char* data() const noexcept { return size_ ? data_ : nullptr; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::span<const char> span() const noexcept { return {data_, size_}; }
  std::string_view view() const noexcept { return {data_, size_}; }
  const char* begin() const noexcept { return data_; }
  const char* end() const noexcept { return data_ + size_; }
  char operator[](std::size_t i) const { return data_[i]; }

  friend bool operator==(const bytes& a, const bytes& b) noexcept { return a.view() == b.view(); }

  // Through tlaunch's own archive a large buffer goes out from where it is and
  // comes in as a view of the received frame; other archives copy it.
  template <class Archive>
  void save(Archive& ar) const {
    ar(cereal::make_size_tag(static_cast<cereal::size_type>(size_)));
    if constexpr (std::is_same_v<Archive, wire::output_archive>) {
      if (size_ >= wire::external_threshold && owner_) {
        ar.frame().append_external(owner_, data_, size_);
        return;
      }
    }
    if (size_) ar(cereal::binary_data(data_, size_));
  }

  template <class Archive>
  void load(Archive& ar) {
    cereal::size_type n = 0;
    ar(cereal::make_size_tag(n));
    if constexpr (std::is_same_v<Archive, wire::input_archive>) {
      if (n > ar.remaining())
        throw std::runtime_error("bytes: size " + std::to_string(n) + " exceeds the payload");
      if (ar.payload_owner() && n >= wire::external_threshold) {
        data_ = ar.take(static_cast<std::size_t>(n));  // a view of the received frame
        size_ = static_cast<std::size_t>(n);
        owner_ = *ar.payload_owner();
        return;
      }
    }
    auto s = std::make_shared<std::string>(static_cast<std::size_t>(n), '\0');
    if (n) ar(cereal::binary_data(s->data(), static_cast<std::size_t>(n)));
    data_ = s->data();
    size_ = s->size();
    owner_ = std::move(s);
  }

 private:
  std::shared_ptr<const void> owner_;
  const char* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace tlaunch
