// The on-disk kernel cache: one checksummed blob per entry (cache/Blob.h) named by the content hash
// of its key, written to a temp file in the same directory and renamed into place, so readers see
// a whole entry or none, on any POSIX file system, from any number of processes. An existing entry
// is a hit; a damaged, truncated, empty or foreign-version one is a miss that the next store
// replaces. A directory that cannot be created or written degrades to reads only (a read-only
// pre-warmed cache still serves) or to memory only, with one warning on stderr, never an error.
// Size is bounded by LRU eviction on file modification times (a hit touches its entry).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cache/Blob.h"
#include "cache/CacheKey.h"
#include "compiler/CompiledKernel.h"

namespace ssmjit::cache {

inline constexpr uint64_t kDefaultMaxBytes = 2ull << 30;  // 2 GiB
inline constexpr const char* kBlobSuffix = ".sjk";

struct DiskCacheConfig {
  std::string dir;  // empty: no disk cache
  uint64_t maxBytes = kDefaultMaxBytes;
  // SSMJIT_CACHE_DIR, else $XDG_CACHE_HOME/ssmjit, else $HOME/.cache/ssmjit (empty without HOME);
  // SSMJIT_CACHE_MAX_BYTES (a byte count, or with a K/M/G suffix). Throws Error(InvalidArgument)
  // naming SSMJIT_CACHE_MAX_BYTES for a value that is not a size.
  static DiskCacheConfig fromEnvironment();
};

// One blob file as `ssmjit cache ls / verify` see it.
struct EntryInfo {
  std::string path;
  uint64_t bytes = 0;
  int64_t mtimeNs = 0;  // last use (hits touch the file)
  BlobStatus status = BlobStatus::Ok;
  std::string detail;          // why it is not Ok
  std::string kernel, arch;    // Ok only: from the key text
  std::string spec;            // Ok only: the specialisation's canonical text
  bool keyMatchesName = true;  // Ok only: the file name is the hash of the stored key
  // Sound and reachable: decodes, and its name is its key's hash (else no lookup can find it).
  bool good() const { return status == BlobStatus::Ok && keyMatchesName; }
};

class DiskCache {
 public:
  explicit DiskCache(DiskCacheConfig config);

  const DiskCacheConfig& config() const { return config_; }
  bool readable() const { return readable_; }
  bool writable() const;
  // Why the cache reads or writes nothing ("" when it does both).
  std::string degradedReason() const;

  // The entry for `key`, or nullptr (absent or bad; a bad one is left for store() to replace).
  // A hit touches the file (LRU).
  std::shared_ptr<const CompiledKernel> load(const CacheKey& key);
  // Writes `kernel` under `key` atomically, then evicts down to maxBytes. Returns false when the
  // directory cannot take it (the first such failure warns once and stops further writes).
  bool store(const CacheKey& key, const CompiledKernel& kernel);

  // Tools.
  std::vector<EntryInfo> list() const;  // every blob, decoded (verify = check each status)
  uint64_t totalBytes() const;          // sum of blob sizes
  // Deletes least recently used blobs until the total is <= `targetBytes`; returns bytes freed.
  // Also removes temp files older than an hour (left by killed writers).
  uint64_t evictTo(uint64_t targetBytes);
  size_t removeBad();  // deletes every blob that is not good(); returns count
  size_t clear();      // deletes every blob and temp file; returns count

  std::string pathFor(const CacheKey& key) const;

 private:
  void warnOnce(const std::string& what);
  DiskCacheConfig config_;
  bool readable_ = false;
  mutable std::mutex mu_;
  bool writable_ = false;
  bool warned_ = false;
  std::string reason_;
};

}  // namespace ssmjit::cache
