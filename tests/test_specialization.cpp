// Specialization: canonical text, hash and equality are the identity of a compiled kernel in the
// memory and disk caches, so they must agree with each other and be stable.
#include <gtest/gtest.h>

#include <unordered_set>

#include "compiler/Specialization.h"
#include "ssmjit/error.h"

using ssmjit::Specialization;

namespace {
Specialization sample() {
  Specialization s;
  s.kernel = "selective_state_update";
  s.arch = "sm_90a";
  s.set("dtype:state", static_cast<int64_t>(ssmjit::DType::BF16)).set("N", 128).set("align:x", 16);
  return s;
}
}  // namespace

TEST(Specialization, CanonicalIsKernelArchThenBindingsInInsertionOrder) {
  EXPECT_EQ(sample().canonical(), "selective_state_update;sm_90a;dtype:state=2;N=128;align:x=16");
  Specialization empty;
  empty.kernel = "k";
  EXPECT_EQ(empty.canonical(), "k;sm_90a");
  Specialization neg = empty;
  neg.set("s_x_b", -3);
  EXPECT_EQ(neg.canonical(), "k;sm_90a;s_x_b=-3");
}

TEST(Specialization, SetOverwritesInPlace) {
  Specialization s = sample();
  s.set("dtype:state", 0);
  EXPECT_EQ(s.canonical(), "selective_state_update;sm_90a;dtype:state=0;N=128;align:x=16");
  EXPECT_EQ(s.values.size(), 3u);
}

TEST(Specialization, FindAndGet) {
  Specialization s = sample();
  ASSERT_NE(s.find("N"), nullptr);
  EXPECT_EQ(*s.find("N"), 128);
  EXPECT_EQ(s.find("P"), nullptr);
  EXPECT_EQ(s.get("N"), 128);
  EXPECT_EQ(s.get("P", 7), 7);
  EXPECT_EQ(s.get("N", 7), 128);
  try {
    s.get("P");
    FAIL() << "get of an absent name must throw";
  } catch (const ssmjit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'P'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("selective_state_update"), std::string::npos) << e.what();
  }
}

// A bound value proves what divides it (0: everything); a divisibility class what divides the
// class; an argument with neither proves nothing.
TEST(Specialization, ProvesMultiplesFromBoundValuesAndDivisibilityClasses) {
  Specialization s;
  s.set("N", 128).set("zero", 0).set("odd", 33).set("div:s_x_l", 8);
  EXPECT_TRUE(s.provesMultiple("N", 16));
  EXPECT_TRUE(s.provesMultiple("zero", 8));
  EXPECT_FALSE(s.provesMultiple("odd", 2));
  EXPECT_TRUE(s.provesMultiple("s_x_l", 8));
  EXPECT_FALSE(s.provesMultiple("s_x_l", 16));
  EXPECT_FALSE(s.provesMultiple("s_x_h", 2));
  EXPECT_TRUE(s.provesMultiple("s_x_h", 1));
}

TEST(Specialization, NamesThatWouldBreakCanonicalAreRejected) {
  Specialization s = sample();
  EXPECT_THROW(s.set("a;b", 1), ssmjit::Error);
  EXPECT_THROW(s.set("a=b", 1), ssmjit::Error);
  EXPECT_THROW(s.set("", 1), ssmjit::Error);
}

TEST(Specialization, EqualityComparesKernelArchAndValues) {
  Specialization a = sample(), b = sample();
  EXPECT_TRUE(a == b);
  EXPECT_EQ(a.hash(), b.hash());

  Specialization c = sample();
  c.arch = "sm_80";
  EXPECT_FALSE(a == c);
  EXPECT_NE(a.hash(), c.hash());

  Specialization d = sample();
  d.kernel = "causal_conv1d";
  EXPECT_FALSE(a == d);
  EXPECT_NE(a.hash(), d.hash());

  Specialization e = sample();
  e.set("N", 64);
  EXPECT_FALSE(a == e);
  EXPECT_NE(a.hash(), e.hash());

  Specialization f = sample();
  f.set("extra", 0);
  EXPECT_FALSE(a == f);
  EXPECT_NE(a.hash(), f.hash());
}

TEST(Specialization, HashSeparatesFieldBoundaries) {
  // The same characters split differently between fields must not collide.
  Specialization a, b;
  a.kernel = "ab";
  a.arch = "c";
  b.kernel = "a";
  b.arch = "bc";
  EXPECT_NE(a.hash(), b.hash());
  Specialization x, y;
  x.kernel = y.kernel = "k";
  x.set("ab", 1);
  y.set("a", 1);
  EXPECT_NE(x.hash(), y.hash());
  EXPECT_NE(x.canonical(), y.canonical());
}

TEST(Specialization, HashIsDeterministicAndSpreads) {
  // Equal content -> equal hash, independent of how the object was built.
  Specialization a = sample();
  Specialization b;
  b.kernel = a.kernel;
  b.arch = a.arch;
  for (const auto& kv : a.values) b.set(kv.first, kv.second);
  EXPECT_EQ(a.hash(), b.hash());

  // Values that differ in one bit give distinct hashes and distinct low bits (bucket index).
  std::unordered_set<size_t> hashes, low;
  for (int64_t v = 0; v < 4096; ++v) {
    Specialization s = sample();
    s.set("batch_stride", v);
    hashes.insert(s.hash());
    low.insert(s.hash() & 0xfff);
  }
  EXPECT_EQ(hashes.size(), 4096u);
  EXPECT_GT(low.size(), 2300u);  // a random function fills ~2589 of 4096 buckets
}

TEST(Specialization, WorksAsUnorderedMapKey) {
  std::unordered_set<Specialization, ssmjit::SpecializationHash> set;
  set.insert(sample());
  set.insert(sample());
  Specialization other = sample();
  other.set("N", 16);
  set.insert(other);
  EXPECT_EQ(set.size(), 2u);
  EXPECT_EQ(set.count(sample()), 1u);
}
