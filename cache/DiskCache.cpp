// The on-disk kernel cache (see DiskCache.h). Entries are written without fsync: a blob torn by a
// crash or power loss fails its checksum and is a miss, which is all the cache promises.
#include "cache/DiskCache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <thread>

#include "compiler/Hash.h"
#include "compiler/Knobs.h"
#include "ssmjit/error.h"

namespace ssmjit::cache {
namespace {

constexpr const char* kTempPrefix = ".tmp-";
constexpr int64_t kStaleTempNs = 3600ll * 1000000000ll;  // an hour: no writer takes that long

bool endsWith(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

int64_t mtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000ll + st.st_mtim.tv_nsec;
}

int64_t nowNs() {
  struct timespec ts {};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000ll + ts.tv_nsec;
}

// mkdir -p. Returns 0 or the errno of the first component that could not be made.
int makeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string part = dir.substr(0, pos);
    if (::mkdir(part.c_str(), 0777) != 0 && errno != EEXIST) return errno;
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

// Reads a whole file; false on any error (errno set).
bool readFile(const std::string& path, std::vector<char>* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return false;
  }
  out->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out->size()) {
    const ssize_t n = ::read(fd, out->data() + done, out->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // shrank under us: decode sees the short read as truncated
    done += static_cast<size_t>(n);
  }
  out->resize(done);
  ::close(fd);
  return true;
}

// The value of "name=" in a key text, "" if absent.
std::string keyField(const std::string& text, const char* name) {
  const std::string tag = std::string(name) + "=";
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    const size_t stop = end == std::string::npos ? text.size() : end;
    if (text.compare(pos, tag.size(), tag) == 0) return text.substr(pos + tag.size(), stop - pos - tag.size());
    pos = stop + 1;
  }
  return "";
}

uint64_t parseSize(const std::string& v) {
  const std::string bad =
      "SSMJIT_CACHE_MAX_BYTES is '" + v + "', expected a byte count such as 2147483648, 512M or 2G (0: no bound)";
  size_t i = 0;
  uint64_t n = 0;
  while (i < v.size() && v[i] >= '0' && v[i] <= '9') {
    const uint64_t d = static_cast<uint64_t>(v[i] - '0');
    if (n > (UINT64_MAX - d) / 10) throw Error(Error::Kind::InvalidArgument, bad);
    n = n * 10 + d;
    ++i;
  }
  if (i == 0) throw Error(Error::Kind::InvalidArgument, bad);
  std::string unit = v.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (!unit.empty() && std::strchr("KMGT", unit[0])) {
    shift = 10 * (1 + static_cast<int>(std::strchr("KMGT", unit[0]) - "KMGT"));
    unit.erase(0, 1);
    if (unit == "IB") unit = "B";
  }
  if (!(unit.empty() || unit == "B")) throw Error(Error::Kind::InvalidArgument, bad);
  if (shift && n > (UINT64_MAX >> shift)) throw Error(Error::Kind::InvalidArgument, bad);
  return n << shift;
}

// Calls fn(name, stat) for every regular file of `dir`.
void forEachFile(const std::string& dir, const std::function<void(const std::string&, const struct stat&)>& fn) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    if (::stat((dir + "/" + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    fn(name, st);
  }
  ::closedir(d);
}

}  // namespace

DiskCacheConfig DiskCacheConfig::fromEnvironment() {
  DiskCacheConfig c;
  c.dir = knobValue("SSMJIT_CACHE_DIR");
  if (c.dir.empty()) {
    // XDG: a relative XDG_CACHE_HOME is invalid and must be ignored.
    const std::string xdg = knobValue("XDG_CACHE_HOME");
    const std::string home = knobValue("HOME");
    if (!xdg.empty() && xdg[0] == '/')
      c.dir = xdg + "/ssmjit";
    else if (!home.empty())
      c.dir = home + "/.cache/ssmjit";
  }
  while (c.dir.size() > 1 && c.dir.back() == '/') c.dir.pop_back();
  const std::string max = knobValue("SSMJIT_CACHE_MAX_BYTES");
  if (!max.empty()) c.maxBytes = parseSize(max);
  return c;
}

DiskCache::DiskCache(DiskCacheConfig config) : config_(std::move(config)) {
  if (config_.dir.empty()) {
    reason_ = "no cache directory (SSMJIT_CACHE_DIR, XDG_CACHE_HOME and HOME are unset)";
    warnOnce(reason_);
    return;
  }
  if (const int err = makeDirs(config_.dir)) {
    reason_ = "cannot create " + config_.dir + ": " + std::strerror(err);
    warnOnce(reason_);
    return;
  }
  readable_ = ::access(config_.dir.c_str(), R_OK | X_OK) == 0;
  writable_ = ::access(config_.dir.c_str(), W_OK | X_OK) == 0;
  if (!writable_) {
    reason_ = config_.dir + " is not writable (" + std::strerror(errno) + ")";
    warnOnce(reason_);
  }
}

bool DiskCache::writable() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writable_;
}

std::string DiskCache::degradedReason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

void DiskCache::warnOnce(const std::string& what) {
  // Called with mu_ held or from the constructor.
  if (warned_) return;
  warned_ = true;
  std::fprintf(stderr, "ssmjit: warning: kernel cache: %s; %s\n", what.c_str(),
               readable_ ? "existing entries still load, new kernels stay in memory for this process"
                         : "kernels stay in memory for this process");
}

std::string DiskCache::pathFor(const CacheKey& key) const { return config_.dir + "/" + key.fileStem + kBlobSuffix; }

std::shared_ptr<const CompiledKernel> DiskCache::load(const CacheKey& key) {
  if (!readable_) return nullptr;
  const std::string path = pathFor(key);
  std::vector<char> bytes;
  if (!readFile(path, &bytes)) return nullptr;
  DecodedBlob b = decodeBlob(bytes.data(), bytes.size());
  // A bad blob, or another key under the same name (a hash collision), is a miss; store() replaces
  // the file.
  if (b.status != BlobStatus::Ok || b.keyText != key.text) return nullptr;
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // LRU; fails harmlessly on a read-only cache
  return std::make_shared<const CompiledKernel>(std::move(b.kernel));
}

bool DiskCache::store(const CacheKey& key, const CompiledKernel& kernel) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!writable_) return false;
  }
  const std::vector<char> blob = encodeBlob(key.text, kernel);
  static std::atomic<unsigned> counter{0};
  const std::string temp = config_.dir + "/" + kTempPrefix + key.fileStem + "." + std::to_string(::getpid()) + "." +
                           std::to_string(counter++);
  int err = 0;
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    err = errno;
  } else {
    size_t done = 0;
    while (done < blob.size()) {
      const ssize_t n = ::write(fd, blob.data() + done, blob.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        err = n < 0 ? errno : EIO;
        break;
      }
      done += static_cast<size_t>(n);
    }
    if (::close(fd) != 0 && !err) err = errno;
    // Only a complete temp file is renamed into place: readers see all of an entry or none of it.
    if (!err && ::rename(temp.c_str(), pathFor(key).c_str()) != 0) err = errno;
    if (err) ::unlink(temp.c_str());
  }
  if (err) {
    std::lock_guard<std::mutex> lock(mu_);
    writable_ = false;
    reason_ = "cannot write to " + config_.dir + ": " + std::strerror(err);
    warnOnce(reason_);
    return false;
  }
  if (config_.maxBytes > 0 && totalBytes() > config_.maxBytes) evictTo(config_.maxBytes);
  return true;
}

std::vector<EntryInfo> DiskCache::list() const {
  std::vector<EntryInfo> out;
  forEachFile(config_.dir, [&](const std::string& name, const struct stat& st) {
    if (!endsWith(name, kBlobSuffix) || name.rfind(kTempPrefix, 0) == 0) return;
    EntryInfo e;
    e.path = config_.dir + "/" + name;
    e.bytes = static_cast<uint64_t>(st.st_size);
    e.mtimeNs = mtimeNs(st);
    std::vector<char> bytes;
    if (!readFile(e.path, &bytes)) {
      e.status = BlobStatus::Truncated;
      e.detail = std::string("cannot read: ") + std::strerror(errno);
    } else {
      DecodedBlob b = decodeBlob(bytes.data(), bytes.size());
      e.status = b.status;
      e.detail = b.detail;
      if (b.status == BlobStatus::Ok) {
        e.kernel = keyField(b.keyText, "kernel");
        e.arch = keyField(b.keyText, "arch");
        e.spec = keyField(b.keyText, "spec");
        const std::string stem = name.substr(0, name.size() - std::strlen(kBlobSuffix));
        e.keyMatchesName = hash::hex(b.keyText, 128) == stem;
      }
    }
    out.push_back(std::move(e));
  });
  return out;
}

uint64_t DiskCache::totalBytes() const {
  uint64_t total = 0;
  forEachFile(config_.dir, [&](const std::string& name, const struct stat& st) {
    if (endsWith(name, kBlobSuffix) && name.rfind(kTempPrefix, 0) != 0) total += static_cast<uint64_t>(st.st_size);
  });
  return total;
}

uint64_t DiskCache::evictTo(uint64_t targetBytes) {
  struct File {
    std::string path;
    uint64_t bytes;
    int64_t mtime;
  };
  std::vector<File> blobs;
  uint64_t total = 0, freed = 0;
  const int64_t now = nowNs();
  forEachFile(config_.dir, [&](const std::string& name, const struct stat& st) {
    const std::string path = config_.dir + "/" + name;
    if (name.rfind(kTempPrefix, 0) == 0) {
      if (now - mtimeNs(st) > kStaleTempNs) ::unlink(path.c_str());  // a killed writer's
      return;
    }
    if (!endsWith(name, kBlobSuffix)) return;
    blobs.push_back({path, static_cast<uint64_t>(st.st_size), mtimeNs(st)});
    total += static_cast<uint64_t>(st.st_size);
  });
  std::sort(blobs.begin(), blobs.end(), [](const File& a, const File& b) { return a.mtime < b.mtime; });
  for (const File& f : blobs) {
    if (total <= targetBytes) break;
    // Another process may have removed it already; either way it is gone.
    if (::unlink(f.path.c_str()) == 0) freed += f.bytes;
    total -= f.bytes;
  }
  return freed;
}

size_t DiskCache::removeBad() {
  size_t n = 0;
  for (const EntryInfo& e : list())
    if (!e.good() && ::unlink(e.path.c_str()) == 0) ++n;
  return n;
}

size_t DiskCache::clear() {
  size_t n = 0;
  forEachFile(config_.dir, [&](const std::string& name, const struct stat&) {
    const bool ours = name.rfind(kTempPrefix, 0) == 0 || endsWith(name, kBlobSuffix);
    if (ours && ::unlink((config_.dir + "/" + name).c_str()) == 0) ++n;
  });
  return n;
}

}  // namespace ssmjit::cache
