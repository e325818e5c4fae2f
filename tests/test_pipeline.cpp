// The JIT pipeline on the CPU: DSL -> generic IR -> specialised IR -> CUDA C++ -> NVRTC.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>

#include "compiler/Nvrtc.h"
#include "kernels_dsl/CompileKernel.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/ssu/SelectiveStateUpdate.h"
#include "ssmjit/error.h"

namespace ssmjit {
namespace {

// A Mamba-2 2.7B decode specialisation as the op builds it (contiguous tensors, batch dynamic).
// `chunked` >= 0 binds meta:chunked (the L-token form) instead of the kernel's choice.
Specialization mamba2Spec(int L, DType stateDtype, bool hasZ, const std::string& arch, int64_t P = 64, int64_t N = 128,
                          int chunked = -1) {
  Specialization s;
  s.kernel = kernels::kSsu.kernel;
  s.arch = arch;
  const int64_t H = 80, G = 1;
  for (auto [k, v] : std::map<std::string, int64_t>{{"H", H}, {"P", P}, {"N", N}, {"G", G}, {"L", L}}) s.set(k, v);
  s.set("has_D", 1).set("has_z", hasZ).set("has_dt_bias", 1).set("dt_softplus", 1).set("has_clamp", 0);
  s.set("has_state_idx", 1).set("per_head", 1).set("state_write", 0);
  s.set("s_state_n", 1).set("s_x_p", 1).set("s_dt_p", 0).set("s_dt_h", 1).set("s_A_p", 0).set("s_A_n", 0);
  s.set("s_A_h", 1).set("s_B_n", 1).set("s_C_n", 1).set("s_D_p", 0).set("s_D_h", 1).set("s_z_p", 1);
  s.set("s_dtb_p", 0).set("s_dtb_h", 1).set("s_out_p", 1).set("s_idx_b", 1);
  for (const char* d : {"s_state_slot", "s_state_h", "s_state_p", "s_x_b",   "s_x_l",   "s_x_h",  "s_dt_b", "s_dt_l",
                        "s_B_b",        "s_B_l",     "s_B_g",     "s_C_b",   "s_C_l",   "s_C_g",  "s_z_b",  "s_z_l",
                        "s_z_h",        "s_out_b",   "s_out_l",   "s_out_h", "s_dst_b", "s_dst_l"})
    s.set(std::string("div:") + d, 16);
  s.set("dtype:state", (int)stateDtype);
  for (const char* p : {"x", "dt", "A", "B", "C", "D", "z", "dt_bias", "out"})
    s.set(std::string("dtype:") + p, (int)DType::F32);
  s.set("dtype:state_idx", (int)DType::I32).set("dtype:dst_idx", (int)DType::I32);
  s.set("dtype:err", (int)DType::I64);
  for (const char* p : {"state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "out"})
    s.set(std::string("align:") + p, 16);
  if (chunked >= 0) s.set("meta:chunked", chunked);
  dsl::completeSpecialization(s);
  return s;
}

TEST(Pipeline, StagesOfTheStateUpdate) {
  std::map<std::string, std::string> stages;
  PipelineOptions o;
  o.runNvrtc = false;
  o.onStage = [&](const std::string& k, const std::string& v) { stages[k] = v; };
  CompiledKernel k = compileKernel(mamba2Spec(4, DType::F32, true, "sm_90a"), o);
  ASSERT_TRUE(stages.count("generic"));
  EXPECT_NE(stages["generic"].find("sj.load"), std::string::npos);
  EXPECT_NE(stages["generic"].find("scf.for"), std::string::npos) << "the token loop is generic";
  EXPECT_NE(stages["generic"].find("has_z"), std::string::npos);
  // Bound flags and sizes are gone from the signature; batch stays dynamic.
  EXPECT_EQ(stages["specialize"].find("\"has_z\""), std::string::npos);
  EXPECT_NE(stages["specialize"].find("\"nslots\""), std::string::npos) << "nslots stays dynamic";
  EXPECT_NE(stages["assign-layouts"].find("sj.layouts"), std::string::npos);
  const std::string& cuda = stages["cuda"];
  EXPECT_NE(cuda.find("__global__"), std::string::npos);
  EXPECT_NE(cuda.find("ssm_ld<4>"), std::string::npos) << "fp32 state rows load as 16-byte vectors\n" << cuda;
  bool hasBatch = false;
  for (auto& p : k.params) hasBatch |= p.name == "batch";
  EXPECT_FALSE(hasBatch) << "batch is unused by the kernel body (the grid carries it)";
}

TEST(Pipeline, OneTokenLoopIsPromotedAndLongLoopsStayRolled) {
  for (int L : {1, 16}) {
    std::map<std::string, std::string> stages;
    PipelineOptions o;
    o.runNvrtc = false;
    o.onStage = [&](const std::string& k, const std::string& v) { stages[k] = v; };
    compileKernel(mamba2Spec(L, DType::F32, true, "sm_90a", 64, 128, /*chunked=*/0), o);
    bool rolled = stages["unroll-loops"].find("scf.for") != std::string::npos;
    EXPECT_EQ(rolled, L > 1) << "L = " << L;
    EXPECT_EQ(stages["cuda"].find("#pragma unroll 1") != std::string::npos, L > 1) << "L = " << L;
  }
}

// The generated CUDA of the L-token state update with x, dt, B, C, z and out in `in`.
std::string tokensCuda(int L, DType in) {
  Specialization spec = mamba2Spec(L, DType::F32, true, "sm_90a");
  for (const char* p : {"x", "dt", "B", "C", "z", "out"}) spec.set(std::string("dtype:") + p, (int)in);
  std::string cuda;
  PipelineOptions o;
  o.runNvrtc = false;
  o.onStage = [&](const std::string& k, const std::string& v) {
    if (k == "cuda") cuda = v;
  };
  compileKernel(spec, o);
  return cuda;
}

// 16-bit inputs prefetched for the next token cross the rolled token loop as their storage bits and
// are converted where they are used: converting at the load makes every prefetch wait where it is
// issued (bf16 inputs, batch 16, L 16: 1.5x slower).
TEST(Pipeline, SixteenBitPrefetchesCrossTheTokenLoopUnconverted) {
  for (DType in : {DType::BF16, DType::F16}) {
    // 32 tokens do not fit in shared memory: the loop prefetches the next token from memory.
    const std::string cuda = tokensCuda(32, in);
    const std::string T = in == DType::BF16 ? "ssm_bf16" : "ssm_f16";
    const size_t loop = cuda.find("#pragma unroll 1");
    ASSERT_NE(loop, std::string::npos);
    const std::string before = cuda.substr(0, loop);
    // Carried arrays (x: 4 values a thread, loaded one by one; B and C: 16, loaded in vectors, so
    // kept as the words that hold them) and the per-head dt scalar, as raw bits.
    for (const std::string decl : {T + " v\\d+\\[4\\];", std::string("unsigned v\\d+\\[16\\];"), T + " v\\d+ = v\\d+;"})
      EXPECT_TRUE(std::regex_search(before, std::regex(decl))) << decl << " before the token loop:\n" << cuda;
    EXPECT_NE(cuda.find("ssm_ld_words<4>"), std::string::npos);
    EXPECT_NE(cuda.find("ssm_word_to_float<" + T + ">("), std::string::npos);
  }
}

// Several tokens that fit: every token's inputs are staged into shared memory before the token
// loop (one barrier), and the loop reads only shared memory (it stores out and the state).
TEST(Pipeline, TokensAreStagedBeforeTheTokenLoop) {
  for (DType in : {DType::F32, DType::BF16}) {
    const std::string cuda = tokensCuda(8, in);
    const size_t loop = cuda.find("#pragma unroll 1");
    ASSERT_NE(loop, std::string::npos) << cuda;
    const std::string before = cuda.substr(0, loop), body = cuda.substr(loop);
    EXPECT_NE(before.find("__shared__"), std::string::npos);
    EXPECT_NE(before.find("__syncthreads();"), std::string::npos);
    for (const char* p : {"p_x", "p_dt", "p_B", "p_C", "p_z"}) {
      EXPECT_NE(before.find(std::string(p) + " +"), std::string::npos) << p << " is staged";
      EXPECT_EQ(body.find(std::string(p) + " +"), std::string::npos) << p << " is read in the token loop:\n" << cuda;
    }
  }
}

// form-fma: each fused multiply-add takes one multiply and one add/subtract away; NVRTC fuses
// nothing else (--fmad=false), so rounding is decided on the IR.
TEST(Pipeline, FusedMultiplyAddsAreFormedOnTheIr) {
  std::map<std::string, std::string> stages;
  PipelineOptions o;
  o.runNvrtc = false;
  o.onStage = [&](const std::string& k, const std::string& v) { stages[k] = v; };
  compileKernel(mamba2Spec(4, DType::F32, true, "sm_90a"), o);
  auto count = [&](const std::string& stage, const std::string& what) {
    const std::string& t = stages[stage];
    int64_t n = 0;
    for (size_t at = t.find(what); at != std::string::npos; at = t.find(what, at + 1)) ++n;
    return n;
  };
  const int64_t fmas = count("form-fma", "math.fma");
  const int64_t dots = count("form-fma", "weight %");  // y = sum(state * C), the product fused
  EXPECT_GT(fmas, 0);
  EXPECT_GE(dots, 1);  // one a token (the token loop may be unrolled)
  EXPECT_EQ(count("form-fma", "sj.reduce"), count("cse", "sj.reduce"));
  EXPECT_EQ(count("cse", "math.fma"), 0);
  EXPECT_EQ(count("cse", "arith.mulf") - count("form-fma", "arith.mulf"), fmas + dots);
  EXPECT_EQ(count("cse", "arith.addf") + count("cse", "arith.subf") - count("form-fma", "arith.addf") -
                count("form-fma", "arith.subf"),
            fmas);
  EXPECT_NE(stages["cuda"].find("__fmaf_rn("), std::string::npos);
  const std::vector<std::string> opts = nvrtcOptions("sm_90a");
  EXPECT_NE(std::find(opts.begin(), opts.end(), "--fmad=false"), opts.end());
}

TEST(Pipeline, CompilesThroughNvrtcForHopperAndAmpere) {
  std::string why;
  if (!nvrtcAvailable(&why)) GTEST_SKIP() << "NVRTC not loadable: " << why;
  for (const char* arch : {"sm_90a", "sm_80"})
    for (DType st : {DType::F32, DType::BF16, DType::F16})
      for (int L : {1, 8, 16}) {  // 16: the chunked form (mma) with every state dtype
        CompiledKernel k = compileKernel(mamba2Spec(L, st, L == 1, arch));
        EXPECT_FALSE(k.cubin.empty()) << arch;
        EXPECT_FALSE(k.ptx.empty()) << arch;
        EXPECT_GT(k.resources.registers, 0) << k.compileLog;
        EXPECT_EQ(k.resources.spillStoreBytes, 0) << "spills for " << arch << " L=" << L << "\n" << k.compileLog;
      }
}

// The chunked form (tensor cores) serves Mamba-2 tokens from the measured L (bf16 state 6, fp32
// 12), with 64 rows a program up to N 128 and 32 beyond; N 512 does not fit its shared buffer
// and stays on the token loop. None spills.
TEST(Pipeline, ChunkedFormServesWhatFits) {
  std::string why;
  PipelineOptions o;
  o.runNvrtc = nvrtcAvailable(&why);
  struct Case {
    int L;
    DType st;
    int64_t N;
    int chunked, blockP;
  };
  for (const Case& c :
       {Case{4, DType::BF16, 128, 0, 64}, Case{6, DType::BF16, 128, 1, 64}, Case{8, DType::F32, 128, 0, 64},
        Case{12, DType::F32, 128, 1, 64}, Case{16, DType::BF16, 256, 1, 32}, Case{16, DType::BF16, 512, 0, 16}}) {
    SCOPED_TRACE("L " + std::to_string(c.L) + " N " + std::to_string(c.N));
    Specialization s = mamba2Spec(c.L, c.st, true, "sm_90a", 64, c.N);
    EXPECT_EQ(s.get("meta:chunked"), c.chunked);
    EXPECT_EQ(s.get("meta:BLOCK_P"), c.blockP);
    CompiledKernel k = compileKernel(s, o);
    if (o.runNvrtc) EXPECT_EQ(k.resources.spillStoreBytes, 0) << k.compileLog;
  }
  if (!o.runNvrtc) GTEST_SKIP() << "emitted only; NVRTC not loadable: " << why;
}

// One token's tiles depend on the head's size (8 warps of 16 fp32 values only for heads that fill
// them; 8 warps over a small head's tile left a reduction with fewer values than threads): every
// shape emits, and compiles where NVRTC is.
TEST(Pipeline, OneTokenTilesFitSmallHeads) {
  std::string why;
  PipelineOptions emitOnly;
  emitOnly.runNvrtc = nvrtcAvailable(&why);
  for (auto [P, N] : {std::pair<int64_t, int64_t>{64, 128}, {8, 16}, {16, 32}, {3, 5}, {96, 128}})
    for (DType st : {DType::F32, DType::BF16}) {
      SCOPED_TRACE("P " + std::to_string(P) + " N " + std::to_string(N) + " state " + std::to_string((int)st));
      EXPECT_NO_THROW(compileKernel(mamba2Spec(1, st, true, "sm_90a", P, N), emitOnly));
    }
  if (!emitOnly.runNvrtc) GTEST_SKIP() << "emitted only; NVRTC not loadable: " << why;
}

}  // namespace
}  // namespace ssmjit
