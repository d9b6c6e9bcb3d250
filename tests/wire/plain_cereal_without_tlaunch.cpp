// The translation unit of plain_cereal_tests that does not include tlaunch.
#include <cereal/archives/binary.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstdint>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

namespace without_tlaunch {
#include "plain_cereal_loads.inc"

std::string vector_of(const std::string& archive) { return vector_outcome(archive); }
std::string string_of(const std::string& archive) { return string_outcome(archive); }
}  // namespace without_tlaunch
