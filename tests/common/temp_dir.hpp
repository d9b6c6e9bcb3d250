// temp_dir: a fresh directory under /tmp for one test, removed with everything in it at the end.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>

namespace tlaunch::test_support {

struct temp_dir {
  std::filesystem::path path;

  explicit temp_dir(const std::string& prefix = "tlaunch-test") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + tmpl);
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

}  // namespace tlaunch::test_support
