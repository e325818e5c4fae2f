// The rows of a sequence call (ScanCall, SsdCall): `batch` dense rows of `seqlen` tokens, or, when
// `packedLengths` is given, one packed row of those sequences.
#pragma once
#include <cstdint>
#include <numeric>

namespace ssmjit::tool {

template <class Call>
bool packed(const Call& c) {
  return !c.packedLengths.empty();
}
template <class Call>
int64_t rows(const Call& c) {
  return packed(c) ? 1 : c.batch;
}
template <class Call>
int64_t rowLength(const Call& c) {
  return packed(c) ? std::accumulate(c.packedLengths.begin(), c.packedLengths.end(), int64_t{0}) : c.seqlen;
}
template <class Call>
int64_t sequences(const Call& c) {
  return packed(c) ? static_cast<int64_t>(c.packedLengths.size()) : c.batch;
}

}  // namespace ssmjit::tool
