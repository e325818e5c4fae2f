// The disk-cache blob format: the exact byte layout, round trips, and every class of damage
// (empty, each truncation, each flipped byte, foreign version, trailing bytes, bad payloads).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "cache/Blob.h"
#include "compiler/Hash.h"

using namespace ssmjit;
using namespace ssmjit::cache;
using ::testing::HasSubstr;

namespace {

constexpr size_t kHeader = 32;

// A kernel as the compiler returns it: parameters of every kind, a CUBIN of `cubinBytes` holding every
// byte value, PTX, resources with unknowns (-1).
CompiledKernel sampleKernel(size_t cubinBytes) {
  CompiledKernel k;
  k.entry = "ssmjit_selective_state_update_9f3c";
  k.params = {{"state", KernelParam::Kind::Ptr},
              {"x", KernelParam::Kind::Ptr},
              {"batch", KernelParam::Kind::I32},
              {"stride_state_batch", KernelParam::Kind::I64},
              {"dt_softplus_threshold", KernelParam::Kind::F32}};
  k.numThreads = 256;
  k.cudaSource = "extern \"C\" __global__ void f() {}";
  k.ptx =
      ".version 8.8\n.target sm_90a\n.address_size 64\n.visible .entry "
      "ssmjit_selective_state_update_9f3c()\n";
  k.cubin.resize(cubinBytes);
  for (size_t i = 0; i < cubinBytes; ++i) k.cubin[i] = static_cast<char>((i * 131 + i / 256) & 0xff);
  k.arch = "sm_90a";
  k.compileLog = "ptxas info: not stored";
  k.resources = ResourceUsage{40, 2048, -1, -1, 0};
  k.compileMs = 123.456;
  k.dynamicSharedBytes = 100352;
  return k;
}

void expectSameKernel(const CompiledKernel& want, const CompiledKernel& got) {
  EXPECT_EQ(got.entry, want.entry);
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t i = 0; i < want.params.size(); ++i) {
    EXPECT_EQ(got.params[i].name, want.params[i].name) << i;
    EXPECT_EQ(got.params[i].kind, want.params[i].kind) << i;
  }
  EXPECT_EQ(got.numThreads, want.numThreads);
  EXPECT_EQ(got.ptx, want.ptx);
  EXPECT_TRUE(got.cubin == want.cubin) << "cubin differs (" << got.cubin.size() << " vs " << want.cubin.size()
                                       << " bytes)";
  EXPECT_EQ(got.arch, want.arch);
  EXPECT_EQ(got.resources.registers, want.resources.registers);
  EXPECT_EQ(got.resources.sharedBytes, want.resources.sharedBytes);
  EXPECT_EQ(got.resources.localBytes, want.resources.localBytes);
  EXPECT_EQ(got.resources.spillStoreBytes, want.resources.spillStoreBytes);
  EXPECT_EQ(got.resources.spillLoadBytes, want.resources.spillLoadBytes);
  EXPECT_EQ(got.compileMs, want.compileMs);
  EXPECT_EQ(got.dynamicSharedBytes, want.dynamicSharedBytes);
  EXPECT_TRUE(got.cudaSource.empty());
  EXPECT_TRUE(got.compileLog.empty());
}

// Little-endian bytes written field by field, independently of Blob.cpp: the format as documented.
class Bytes {
 public:
  template <typename T>
  Bytes& put(T v) {
    char b[sizeof v];
    std::memcpy(b, &v, sizeof v);
    data.insert(data.end(), b, b + sizeof v);
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    data.insert(data.end(), s.begin(), s.end());
    return *this;
  }
  std::vector<char> data;
};

// The payload of `k` under `key`, per the documented layout.
Bytes payloadOf(const std::string& key, const CompiledKernel& k) {
  Bytes p;
  p.str(key).str(k.entry).str(k.arch);
  p.put<uint32_t>(static_cast<uint32_t>(k.numThreads)).put<uint32_t>(static_cast<uint32_t>(k.params.size()));
  for (const KernelParam& q : k.params) p.str(q.name).put<uint8_t>(static_cast<uint8_t>(q.kind));
  const ResourceUsage& r = k.resources;
  p.put<int32_t>(r.registers).put<int32_t>(r.sharedBytes).put<int32_t>(r.localBytes);
  p.put<int32_t>(r.spillStoreBytes).put<int32_t>(r.spillLoadBytes);
  p.put<double>(k.compileMs).put<uint32_t>(static_cast<uint32_t>(k.dynamicSharedBytes)).str(k.ptx);
  p.str(std::string(k.cubin.begin(), k.cubin.end()));
  return p;
}

// A header with the right size and checksum in front of `payload`.
std::vector<char> withHeader(const std::vector<char>& payload, uint32_t version = kBlobFormatVersion) {
  Bytes h;
  for (char c : std::string("SSMJITK", 8)) h.put(c);
  h.put<uint32_t>(version).put<uint32_t>(0).put<uint64_t>(payload.size());
  h.put<uint64_t>(hash::bytes64(payload.data(), payload.size()));
  std::vector<char> out = h.data;
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

DecodedBlob decode(const std::vector<char>& b) { return decodeBlob(b.data(), b.size()); }

TEST(Blob, LayoutIsTheDocumentedOne) {
  const CompiledKernel k = sampleKernel(300);
  const std::string key = "v1;selective_state_update;sm_90a;H=80";
  const std::vector<char> blob = encodeBlob(key, k);
  EXPECT_TRUE(blob == withHeader(payloadOf(key, k).data)) << "encodeBlob differs from the documented layout";
  EXPECT_EQ(std::string(blob.data(), 8), std::string("SSMJITK", 8));
}

TEST(Blob, RoundTripsARealisticKernel) {
  const CompiledKernel k = sampleKernel(150 * 1024);
  const std::string key = "ssmjit-key v1\nkernel=selective_state_update\narch=sm_90a\nspec=H=80;P=64\n";
  const std::vector<char> blob = encodeBlob(key, k);
  ASSERT_GT(blob.size(), k.cubin.size() + k.ptx.size() + kHeader);
  const DecodedBlob d = decode(blob);
  ASSERT_EQ(d.status, BlobStatus::Ok) << d.detail;
  EXPECT_EQ(d.detail, "");
  EXPECT_EQ(d.version, kBlobFormatVersion);
  EXPECT_EQ(d.keyText, key);
  expectSameKernel(k, d.kernel);
}

TEST(Blob, RoundTripsEmptyFields) {
  CompiledKernel k;  // PTX-only compile of a kernel without parameters
  k.numThreads = 1;
  k.compileMs = -0.0;
  const DecodedBlob d = decode(encodeBlob("", k));
  ASSERT_EQ(d.status, BlobStatus::Ok) << d.detail;
  EXPECT_EQ(d.keyText, "");
  expectSameKernel(k, d.kernel);
  k.numThreads = 1024;
  EXPECT_EQ(decode(encodeBlob("k", k)).status, BlobStatus::Ok);
}

TEST(Blob, EmptyInput) {
  const DecodedBlob d = decodeBlob(nullptr, 0);
  EXPECT_EQ(d.status, BlobStatus::Empty);
  EXPECT_STREQ(blobStatusName(d.status), "empty");
  EXPECT_EQ(d.detail, "0 bytes");
}

TEST(Blob, EveryTruncationIsReported) {
  const std::vector<char> blob = encodeBlob("key", sampleKernel(64));
  const uint64_t payload = blob.size() - kHeader;
  for (size_t n = 1; n < blob.size(); ++n) {
    const DecodedBlob d = decodeBlob(blob.data(), n);
    ASSERT_EQ(d.status, BlobStatus::Truncated) << "prefix of " << n << " bytes: " << d.detail;
    if (n < kHeader) {
      EXPECT_EQ(d.detail, "blob is " + std::to_string(n) + " bytes, shorter than the 32-byte header");
    } else {
      EXPECT_EQ(d.detail,
                "payload is " + std::to_string(n - kHeader) + " bytes, header says " + std::to_string(payload));
      EXPECT_EQ(d.version, kBlobFormatVersion);
    }
  }
}

TEST(Blob, EveryFlippedByteIsReported) {
  const std::vector<char> blob = encodeBlob("key", sampleKernel(64));
  const uint64_t payload = blob.size() - kHeader;
  for (const unsigned char mask : {0x01, 0x80, 0xff}) {
    for (size_t i = 0; i < blob.size(); ++i) {
      std::vector<char> b = blob;
      b[i] = static_cast<char>(b[i] ^ mask);
      const DecodedBlob d = decode(b);
      SCOPED_TRACE("byte " + std::to_string(i) + " ^ " + std::to_string(mask) + ": " + blobStatusName(d.status) + ": " +
                   d.detail);
      EXPECT_FALSE(d.detail.empty());
      if (i < 8) {
        EXPECT_EQ(d.status, BlobStatus::BadMagic);
      } else if (i < 12) {
        EXPECT_EQ(d.status, BlobStatus::ForeignVersion);
        EXPECT_NE(d.version, kBlobFormatVersion);
      } else if (i < 16) {
        EXPECT_EQ(d.status, BlobStatus::Malformed);
        EXPECT_THAT(d.detail, HasSubstr("reserved"));
      } else if (i < 24) {
        uint64_t declared;
        std::memcpy(&declared, b.data() + 16, 8);
        EXPECT_EQ(d.status, declared > payload ? BlobStatus::Truncated : BlobStatus::Malformed);
        EXPECT_THAT(d.detail, HasSubstr("header says " + std::to_string(declared)));
      } else {
        EXPECT_EQ(d.status, BlobStatus::BadChecksum);
      }
    }
  }
}

TEST(Blob, ForeignVersionIsReportedBeforeAnythingElse) {
  std::vector<char> b = withHeader(payloadOf("k", sampleKernel(16)).data, 7);
  b.back() ^= 1;  // a bad checksum too: the version is what a reader needs to know
  const DecodedBlob d = decode(b);
  EXPECT_EQ(d.status, BlobStatus::ForeignVersion);
  EXPECT_EQ(d.version, 7u);
  EXPECT_EQ(d.detail, "format version 7, this build reads " + std::to_string(kBlobFormatVersion));
}

TEST(Blob, BadMagicNamesTheBytes) {
  std::vector<char> b = encodeBlob("k", sampleKernel(16));
  std::memcpy(b.data(),
              "\x7f"
              "ELF\x02\x01\x01\x00",
              8);
  const DecodedBlob d = decode(b);
  EXPECT_EQ(d.status, BlobStatus::BadMagic);
  EXPECT_THAT(d.detail, HasSubstr("magic is 7f 45 4c 46 02 01 01 00"));
}

TEST(Blob, TrailingBytesAreMalformed) {
  std::vector<char> b = encodeBlob("k", sampleKernel(16));
  const size_t payload = b.size() - kHeader;
  b.insert(b.end(), {'x', 'y', 'z'});
  const DecodedBlob d = decode(b);
  EXPECT_EQ(d.status, BlobStatus::Malformed);
  EXPECT_EQ(d.detail, "payload is " + std::to_string(payload + 3) + " bytes, header says " + std::to_string(payload) +
                          " (3 trailing bytes)");
}

TEST(Blob, BadChecksumNamesBothSums) {
  std::vector<char> b = encodeBlob("k", sampleKernel(16));
  b[kHeader + 9] ^= 0x10;
  const DecodedBlob d = decode(b);
  EXPECT_EQ(d.status, BlobStatus::BadChecksum);
  EXPECT_THAT(d.detail, HasSubstr("payload checksum is 0x"));
  EXPECT_THAT(d.detail, HasSubstr("header says 0x"));
}

// Payloads that pass the checksum but do not parse: each names what was wrong and where.
TEST(Blob, MalformedPayloadsWithValidChecksums) {
  const CompiledKernel k = sampleKernel(16);
  struct Case {
    const char* name;
    std::vector<char> payload;
    const char* detail;
  };
  std::vector<Case> cases;

  CompiledKernel zero = k;
  zero.numThreads = 0;
  cases.push_back({"numThreads 0", payloadOf("k", zero).data, "numThreads is 0, expected 1..1024"});
  CompiledKernel big = k;
  big.numThreads = 1025;
  cases.push_back({"numThreads 1025", payloadOf("k", big).data, "numThreads is 1025, expected 1..1024"});

  Bytes badKind;
  badKind.str("k").str("e").str("sm_90a").put<uint32_t>(128).put<uint32_t>(2);
  badKind.str("a").put<uint8_t>(3).str("b").put<uint8_t>(4);
  cases.push_back({"param kind 4", badKind.data, "parameter #1 kind is 4, expected 0..3"});

  Bytes hugeString;
  hugeString.str("k").put<uint64_t>(uint64_t{1} << 62).str("e");
  cases.push_back({"entry length 2^62", hugeString.data, "entry name length 4611686018427387904 exceeds the"});

  Bytes hugeCount;  // must be refused before anything is allocated for 4 billion parameters
  hugeCount.str("k").str("e").str("sm_90a").put<uint32_t>(128).put<uint32_t>(0xffffffffu).put<uint64_t>(0);
  cases.push_back({"param count 2^32-1", hugeCount.data, "parameter count 4294967295 needs at least"});

  Bytes shortResources;
  shortResources.str("k").str("e").str("sm_90a").put<uint32_t>(128).put<uint32_t>(0).put<int32_t>(1);
  cases.push_back({"resources cut", shortResources.data, "resources needs 4 bytes, 0 left"});

  CompiledKernel hugeShared = k;
  hugeShared.dynamicSharedBytes = (1 << 20) + 1;
  cases.push_back({"dynamic shared 1 MiB + 1", payloadOf("k", hugeShared).data,
                   "dynamic shared bytes are 1048577, expected 0..1048576"});

  Bytes trailing = payloadOf("k", k);
  trailing.put<uint16_t>(0);
  cases.push_back({"payload trailing bytes", trailing.data, "2 trailing bytes after the cubin"});

  std::vector<char> noCubin = payloadOf("k", k).data;
  noCubin.resize(noCubin.size() - k.cubin.size() - 8);
  cases.push_back({"cubin missing", noCubin, "cubin needs 8 bytes, 0 left"});

  for (const Case& c : cases) {
    const DecodedBlob d = decode(withHeader(c.payload));
    EXPECT_EQ(d.status, BlobStatus::Malformed) << c.name << ": " << d.detail;
    EXPECT_THAT(d.detail, HasSubstr(c.detail)) << c.name;
    EXPECT_THAT(d.detail, HasSubstr("at payload offset ")) << c.name;
    EXPECT_EQ(d.keyText, "") << c.name << ": only an Ok decode fills the key";
  }
}

TEST(Blob, StatusNames) {
  EXPECT_STREQ(blobStatusName(BlobStatus::Ok), "ok");
  EXPECT_STREQ(blobStatusName(BlobStatus::Truncated), "truncated");
  EXPECT_STREQ(blobStatusName(BlobStatus::BadMagic), "bad-magic");
  EXPECT_STREQ(blobStatusName(BlobStatus::ForeignVersion), "foreign-version");
  EXPECT_STREQ(blobStatusName(BlobStatus::BadChecksum), "bad-checksum");
  EXPECT_STREQ(blobStatusName(BlobStatus::Malformed), "malformed");
}

// A sanity bound, loose enough for a loaded CI machine: the real cost is tens of microseconds.
TEST(Blob, DecodesA200KBBlobQuickly) {
  const CompiledKernel k = sampleKernel(200 * 1024);
  const std::vector<char> blob = encodeBlob("key", k);
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 20; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const DecodedBlob d = decode(blob);
    const auto t1 = std::chrono::steady_clock::now();
    ASSERT_EQ(d.status, BlobStatus::Ok);
    best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  EXPECT_LT(best, 5.0) << "decoding " << blob.size() << " bytes";
}

}  // namespace
