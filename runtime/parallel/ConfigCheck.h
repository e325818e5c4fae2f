// The configuration every rank must share (the model, the parallel degrees, the layer sizes), as
// key=value pairs packed in a fixed-size block that the communicator all-gathers right after its
// setup; each rank then compares all blocks and throws the same error, naming what differs.
// Internal to the runtime.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace ssmjit::parallel {

using ConfigPairs = std::vector<std::pair<std::string, std::string>>;
constexpr size_t kConfigBlockBytes = 2048;

// The pairs as "key=value\n" lines, zero-padded to kConfigBlockBytes. Throws naming the length
// when they do not fit, or a key or value holding '=', '\n' or '\0'.
std::vector<char> encodeConfig(const ConfigPairs& pairs);
// Empty when every block (rank order) holds the same pairs; else one line per difference, e.g.
// "groups: rank 1 has 4, rank 0 has 8" or "model: rank 1 has no value, rank 0 has /m".
std::string configMismatch(const std::vector<std::vector<char>>& blocks);

}  // namespace ssmjit::parallel
