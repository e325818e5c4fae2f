// One disk-cache entry as bytes: the on-disk format of the kernel cache. A blob holds a header
// (magic, format version, payload size, payload checksum) and a payload: the full key text (checked
// on read, so a file-name collision is a miss), the entry name, launch metadata (parameters, block
// size), resource usage, the compile time, the dynamic shared bytes, the arch, the PTX and the CUBIN. Little-endian.
// Decoding is bounds-checked everywhere: any byte string, however damaged, decodes to a status.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/CompiledKernel.h"

namespace ssmjit::cache {

// 2: the dynamic shared bytes follow the compile time.
inline constexpr uint32_t kBlobFormatVersion = 2;

// Serialises `kernel` (cudaSource and compileLog are not stored) under `keyText`.
std::vector<char> encodeBlob(const std::string& keyText, const CompiledKernel& kernel);

enum class BlobStatus {
  Ok,
  Empty,           // zero bytes
  Truncated,       // shorter than its header says
  BadMagic,        // not an ssmjit blob
  ForeignVersion,  // another format version
  BadChecksum,     // payload does not match its checksum
  Malformed,       // checksum fine but the payload does not parse (or has trailing bytes)
};
const char* blobStatusName(BlobStatus s);  // "ok", "empty", "truncated", ...

struct DecodedBlob {
  BlobStatus status = BlobStatus::Empty;
  std::string detail;     // why, for anything but Ok (e.g. "payload is 1200 bytes, header says 5000")
  uint32_t version = 0;   // the header's format version, when the header was readable
  std::string keyText;    // Ok only
  CompiledKernel kernel;  // Ok only; cudaSource and compileLog empty
};

DecodedBlob decodeBlob(const void* data, size_t size);

}  // namespace ssmjit::cache
