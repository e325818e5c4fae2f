// The disk-cache blob format (cache/Blob.h): a 32-byte header and a checksummed payload, written and
// read with memcpy; decoding checks every length against the bytes left before it allocates.
#include "cache/Blob.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "compiler/Hash.h"
#include "ssmjit/enum_name.h"

// Fields are copied to and from memory as they are: the format is little-endian, and so is every host
// ssmjit builds for (x86-64, aarch64).
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the blob format assumes a little-endian host");

namespace ssmjit::cache {
namespace {

constexpr char kMagic[8] = {'S', 'S', 'M', 'J', 'I', 'T', 'K', '\0'};
constexpr size_t kHeaderBytes = 32;  // magic, version, reserved, payload size, checksum
constexpr uint32_t kMaxThreads = 1024;
constexpr uint32_t kMaxDynamicShared = 1 << 20;  // beyond any GPU's shared memory per block

class Writer {
 public:
  explicit Writer(size_t capacity) { out_.reserve(capacity); }
  template <typename T>
  void put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof v);
    std::memcpy(out_.data() + at, &v, sizeof v);
  }
  void putBytes(const void* p, size_t n) {
    put<uint64_t>(n);
    const char* c = static_cast<const char*>(p);
    out_.insert(out_.end(), c, c + n);
  }
  void putString(const std::string& s) { putBytes(s.data(), s.size()); }
  std::vector<char> take() { return std::move(out_); }

 private:
  std::vector<char> out_;
};

// Reads the payload front to back; a failure says what, in numbers, and at which payload offset.
class Reader {
 public:
  Reader(const char* p, size_t n) : p_(p), n_(n) {}
  template <typename T>
  bool get(T* v, const char* what) {
    if (!need(sizeof(T), what)) return false;
    std::memcpy(v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  // A u64 length then that many bytes, into a std::string or std::vector<char>.
  template <typename Bytes>
  bool getBytes(Bytes* out, const char* what) {
    uint64_t len = 0;
    if (!get(&len, what)) return false;
    if (len > n_ - pos_)
      return fail(std::string(what) + " length " + std::to_string(len) + " exceeds the " + std::to_string(n_ - pos_) +
                  " bytes left");
    out->assign(p_ + pos_, p_ + pos_ + len);
    pos_ += static_cast<size_t>(len);
    return true;
  }
  bool fail(const std::string& why) {
    error = "at payload offset " + std::to_string(pos_) + ": " + why;
    return false;
  }
  size_t left() const { return n_ - pos_; }

  std::string error;

 private:
  bool need(size_t k, const char* what) {
    if (k <= n_ - pos_) return true;
    return fail(std::string(what) + " needs " + std::to_string(k) + " bytes, " + std::to_string(n_ - pos_) + " left");
  }

  const char* p_;
  size_t n_;
  size_t pos_ = 0;
};

void putResources(Writer& w, const ResourceUsage& r) {
  for (int v : {r.registers, r.sharedBytes, r.localBytes, r.spillStoreBytes, r.spillLoadBytes}) w.put<int32_t>(v);
}

bool getResources(Reader& r, ResourceUsage* u) {
  int32_t v[5] = {};
  for (int32_t& x : v)
    if (!r.get(&x, "resources")) return false;
  *u = ResourceUsage{v[0], v[1], v[2], v[3], v[4]};
  return true;
}

// Fills everything but the status; returns false with `r.error` set on the first problem.
bool parsePayload(Reader& r, DecodedBlob* b) {
  CompiledKernel& k = b->kernel;
  if (!r.getBytes(&b->keyText, "key text") || !r.getBytes(&k.entry, "entry name") || !r.getBytes(&k.arch, "arch"))
    return false;
  uint32_t threads = 0;
  if (!r.get(&threads, "numThreads")) return false;
  if (threads < 1 || threads > kMaxThreads)
    return r.fail("numThreads is " + std::to_string(threads) + ", expected 1.." + std::to_string(kMaxThreads));
  k.numThreads = static_cast<int>(threads);
  uint32_t count = 0;
  if (!r.get(&count, "parameter count")) return false;
  // Each parameter takes at least its name's length and its kind: a count the bytes cannot hold
  // is rejected before anything is allocated for it.
  constexpr size_t kMinParamBytes = sizeof(uint64_t) + sizeof(uint8_t);
  if (count > r.left() / kMinParamBytes)
    return r.fail("parameter count " + std::to_string(count) + " needs at least " +
                  std::to_string(uint64_t{count} * kMinParamBytes) + " bytes, " + std::to_string(r.left()) + " left");
  k.params.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    KernelParam& p = k.params[i];
    uint8_t kind = 0;
    if (!r.getBytes(&p.name, "parameter name") || !r.get(&kind, "parameter kind")) return false;
    if (kind > static_cast<uint8_t>(KernelParam::Kind::F32))
      return r.fail("parameter #" + std::to_string(i) + " kind is " + std::to_string(kind) + ", expected 0..3");
    p.kind = static_cast<KernelParam::Kind>(kind);
  }
  uint32_t dynamicShared = 0;
  if (!getResources(r, &k.resources) || !r.get(&k.compileMs, "compile time") ||
      !r.get(&dynamicShared, "dynamic shared bytes"))
    return false;
  if (dynamicShared > kMaxDynamicShared)
    return r.fail("dynamic shared bytes are " + std::to_string(dynamicShared) + ", expected 0.." +
                  std::to_string(kMaxDynamicShared));
  k.dynamicSharedBytes = static_cast<int>(dynamicShared);
  if (!r.getBytes(&k.ptx, "ptx") || !r.getBytes(&k.cubin, "cubin")) return false;
  if (r.left() != 0) return r.fail(std::to_string(r.left()) + " trailing bytes after the cubin");
  return true;
}

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

DecodedBlob failed(BlobStatus s, std::string detail, uint32_t version = 0) {
  DecodedBlob b;
  b.status = s;
  b.detail = std::move(detail);
  b.version = version;
  return b;
}

}  // namespace

std::vector<char> encodeBlob(const std::string& keyText, const CompiledKernel& kernel) {
  // Reserved exactly, so the buffer never grows: lengths of 5 strings/byte arrays, numThreads, the
  // parameter count, 5 resources, the compile time, the dynamic shared bytes, the contents, then
  // each parameter.
  size_t payload = 5 * 8 + 4 + 4 + 5 * 4 + 8 + 4 + keyText.size() + kernel.entry.size() + kernel.arch.size() +
                   kernel.ptx.size() + kernel.cubin.size();
  for (const KernelParam& p : kernel.params) payload += 8 + p.name.size() + 1;
  Writer w(kHeaderBytes + payload);
  for (char c : kMagic) w.put(c);
  w.put<uint32_t>(kBlobFormatVersion);
  w.put<uint32_t>(0);
  w.put<uint64_t>(0);  // payload size and checksum, filled in below
  w.put<uint64_t>(0);
  w.putString(keyText);
  w.putString(kernel.entry);
  w.putString(kernel.arch);
  w.put<uint32_t>(static_cast<uint32_t>(kernel.numThreads));
  w.put<uint32_t>(static_cast<uint32_t>(kernel.params.size()));
  for (const KernelParam& p : kernel.params) {
    w.putString(p.name);
    w.put<uint8_t>(static_cast<uint8_t>(p.kind));
  }
  putResources(w, kernel.resources);
  w.put<double>(kernel.compileMs);
  w.put<uint32_t>(static_cast<uint32_t>(kernel.dynamicSharedBytes));
  w.putString(kernel.ptx);
  w.putBytes(kernel.cubin.data(), kernel.cubin.size());

  std::vector<char> out = w.take();
  const uint64_t size = out.size() - kHeaderBytes;
  const uint64_t sum = hash::bytes64(out.data() + kHeaderBytes, size);
  std::memcpy(out.data() + 16, &size, 8);
  std::memcpy(out.data() + 24, &sum, 8);
  return out;
}

const char* blobStatusName(BlobStatus s) {
  return enumName<BlobStatus::Malformed>(
      s, {"ok", "empty", "truncated", "bad-magic", "foreign-version", "bad-checksum", "malformed"});
}

DecodedBlob decodeBlob(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  if (size == 0) return failed(BlobStatus::Empty, "0 bytes");
  if (size < kHeaderBytes)
    return failed(BlobStatus::Truncated, "blob is " + std::to_string(size) + " bytes, shorter than the " +
                                             std::to_string(kHeaderBytes) + "-byte header");
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0) {
    std::string got;
    for (size_t i = 0; i < sizeof kMagic; ++i) {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%s%02x", i ? " " : "", static_cast<unsigned char>(p[i]));
      got += buf;
    }
    return failed(BlobStatus::BadMagic, "magic is " + got + ", expected 53 53 4d 4a 49 54 4b 00 (\"SSMJITK\\0\")");
  }
  uint32_t version = 0, reserved = 0;
  uint64_t declared = 0, sum = 0;
  std::memcpy(&version, p + 8, 4);
  std::memcpy(&reserved, p + 12, 4);
  std::memcpy(&declared, p + 16, 8);
  std::memcpy(&sum, p + 24, 8);
  if (version != kBlobFormatVersion)
    return failed(
        BlobStatus::ForeignVersion,
        "format version " + std::to_string(version) + ", this build reads " + std::to_string(kBlobFormatVersion),
        version);
  // Checked so that every header byte is significant: a damaged one never decodes as Ok.
  if (reserved != 0)
    return failed(BlobStatus::Malformed, "reserved header field is " + std::to_string(reserved) + ", expected 0",
                  version);
  const uint64_t actual = size - kHeaderBytes;
  if (actual < declared)
    return failed(BlobStatus::Truncated,
                  "payload is " + std::to_string(actual) + " bytes, header says " + std::to_string(declared), version);
  if (actual > declared)
    return failed(BlobStatus::Malformed,
                  "payload is " + std::to_string(actual) + " bytes, header says " + std::to_string(declared) + " (" +
                      std::to_string(actual - declared) + " trailing bytes)",
                  version);
  const uint64_t got = hash::bytes64(p + kHeaderBytes, actual);
  if (got != sum)
    return failed(BlobStatus::BadChecksum, "payload checksum is " + hex64(got) + ", header says " + hex64(sum),
                  version);

  DecodedBlob b;
  b.version = version;
  Reader r(p + kHeaderBytes, actual);
  if (!parsePayload(r, &b)) return failed(BlobStatus::Malformed, r.error, version);
  b.status = BlobStatus::Ok;
  return b;
}

}  // namespace ssmjit::cache
