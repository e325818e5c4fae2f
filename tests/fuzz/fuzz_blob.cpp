// libFuzzer target for the blob decoder: any bytes decode to a status without a crash or an
// out-of-bounds read, a failure always says why, and what decodes re-encodes to the same bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cache/Blob.h"
#include "compiler/Hash.h"

using namespace ssmjit;
using namespace ssmjit::cache;

namespace {

constexpr size_t kHeader = 32;

[[noreturn]] void bug(const char* what, const DecodedBlob& d, size_t size) {
  std::fprintf(stderr, "%s (%zu bytes): %s: %s\n", what, size, blobStatusName(d.status), d.detail.c_str());
  std::abort();
}

void check(const char* data, size_t size, bool validHeader) {
  const DecodedBlob d = decodeBlob(data, size);
  if (d.status != BlobStatus::Ok) {
    if (d.detail.empty()) bug("a failure without a detail", d, size);
    if (validHeader && d.status != BlobStatus::Malformed) bug("a valid header, yet not Ok or Malformed", d, size);
    return;
  }
  // Every field of an Ok blob is checked (sizes exact, no trailing bytes, reserved 0), so its
  // content has exactly one encoding: re-encoding gives the input back byte for byte, which is
  // decode(encode(k)) == k and more.
  const std::vector<char> again = encodeBlob(d.keyText, d.kernel);
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0)
    bug("re-encoding an Ok blob gave different bytes", d, size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check(reinterpret_cast<const char*>(data), size, false);
  // Mutations almost never keep the checksum right, so the payload parser would hardly be reached:
  // decode the same bytes again behind a header made valid for them.
  if (size < kHeader) return 0;
  std::vector<char> b(data, data + size);
  const uint32_t version = kBlobFormatVersion, reserved = 0;
  const uint64_t payload = size - kHeader;
  const uint64_t sum = hash::bytes64(b.data() + kHeader, payload);
  std::memcpy(b.data(), "SSMJITK", 8);
  std::memcpy(b.data() + 8, &version, 4);
  std::memcpy(b.data() + 12, &reserved, 4);
  std::memcpy(b.data() + 16, &payload, 8);
  std::memcpy(b.data() + 24, &sum, 8);
  check(b.data(), b.size(), true);
  return 0;
}
