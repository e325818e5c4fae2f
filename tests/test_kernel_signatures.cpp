// Kernel signatures on the CPU: every registered kernel declares one, well formed; the builder
// takes exactly its declared arguments; an op that binds an argument twice or leaves one out
// fails naming the kernel and the argument. (That every op binds every declared argument is
// checked on each specialisation the ops build: the kernel tests run them all.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels_dsl/CompileKernel.h"
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/Signature.h"
#include "kernels_dsl/conv/CausalConv1d.h"
#include "kernels_dsl/decode/Mamba2DecodeStep.h"
#include "kernels_dsl/ssu/SelectiveStateUpdate.h"
#include "runtime/ops/KernelCall.h"
#include "ssmjit/error.h"

namespace {

using namespace ssmjit;
using kernels::kConvUpdate;

// Runs `f`, expects ssmjit::Error(Internal) whose message holds every one of `parts`.
template <class F>
void expectInternal(std::initializer_list<const char*> parts, F f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::Internal) << e.what();
    for (const char* p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    return;
  }
  ADD_FAILURE() << "expected ssmjit::Error(Internal), nothing was thrown";
}

// Each family's definition files register their kernels themselves: a family whose registrars
// are dropped (a file left out of the build, or discarded by the linker) is missing here.
TEST(KernelRegistry, EveryFamilyRegistersItsKernelsInNameOrder) {
  const std::vector<std::string> expected = {
      "causal_conv1d_bwd",
      "causal_conv1d_bwd_reduce",
      "causal_conv1d_bwd_states",
      "causal_conv1d_final_state",
      "causal_conv1d_fwd",
      "causal_conv1d_update",
      "cp_state_scan",
      "embedding",
      "mamba2_decode_step",
      "mamba2_decode_step_deferred",
      "rms_norm",
      "rms_norm_bwd",
      "rms_norm_bwd_reduce",
      "sample_advance_step",
      "sample_argmax",
      "sample_draw",
      "scan_cp_correct",
      "scan_cp_decay",
      "scan_cp_dt_sums",
      "scan_cp_state_grad",
      "scan_cp_state_grad_sum",
      "selective_scan_bwd",
      "selective_scan_bwd_sum",
      "selective_scan_ckpt_fold",
      "selective_scan_fwd",
      "selective_state_update",
      "ssd_bmm",
      "ssd_bwd_db",
      "ssd_bwd_dc",
      "ssd_bwd_dcb",
      "ssd_bwd_dstates",
      "ssd_bwd_dt",
      "ssd_bwd_dx",
      "ssd_bwd_sums",
      "ssd_chunk_cumsum",
      "ssd_chunk_scan",
      "ssd_chunk_state",
      "ssd_state_passing",
  };
  EXPECT_EQ(dsl::kernelNames(), expected);
}

// A kernel's definition hash is its family folder's: shared within the family, distinct across.
TEST(KernelRegistry, DefinitionHashesFollowTheFamilyFolders) {
  auto hash = [](const char* kernel) { return dsl::findKernel(kernel).definitionHash; };
  EXPECT_EQ(hash("causal_conv1d_fwd"), hash("causal_conv1d_bwd_reduce"));
  EXPECT_EQ(hash("selective_scan_fwd"), hash("selective_scan_bwd"));
  EXPECT_EQ(hash("sample_argmax"), hash("sample_advance_step"));
  EXPECT_EQ(hash("mamba2_decode_step"), hash("mamba2_decode_step_deferred"));
  EXPECT_EQ(hash("cp_state_scan"), hash("scan_cp_decay"));
  const std::vector<std::string> families = {
      hash("causal_conv1d_update"),   hash("mamba2_decode_step"), hash("rms_norm"),    hash("selective_scan_bwd_sum"),
      hash("selective_state_update"), hash("ssd_chunk_scan"),     hash("sample_draw"), hash("embedding"),
      hash("cp_state_scan")};
  for (size_t i = 0; i < families.size(); ++i) {
    EXPECT_EQ(families[i].size(), 16u) << families[i];
    for (size_t j = 0; j < i; ++j) EXPECT_NE(families[i], families[j]);
  }
}

TEST(KernelSignatures, EveryRegisteredKernelDeclaresAWellFormedSignature) {
  for (const std::string& name : dsl::kernelNames()) {
    SCOPED_TRACE(name);
    const dsl::KernelDef& def = dsl::findKernel(name);
    ASSERT_NE(def.signature, nullptr);
    EXPECT_EQ(std::string(def.signature->kernel), name);
    EXPECT_NO_THROW(dsl::checkSignature(*def.signature));
    EXPECT_LE(def.signature->count(), detail::KernelCall::kMaxArgs);
  }
}

TEST(KernelSignatures, ParametersFollowTheDeclaration) {
  // Pointers, sizes, strides ("s_<short>_<axis>", "s_<short>" for an unnamed axis), flags.
  const auto& p = dsl::parameters(kConvUpdate).names;
  ASSERT_EQ(static_cast<int>(p.size()), kConvUpdate.count());
  EXPECT_STREQ(p[0], "state");
  EXPECT_STREQ(p[kConvUpdate.size("D")], "D");
  const dsl::TensorId idx = kConvUpdate.tensor("state_idx");
  EXPECT_STREQ(p[idx.firstStride], "s_idx_b");
  EXPECT_STREQ(p[kConvUpdate.tensor("weight").firstStride + 1], "s_w_k");
  EXPECT_STREQ(p[kConvUpdate.flag("commit")], "commit");
  EXPECT_STREQ(dsl::parameters(kernels::kConvFwd).names[kernels::kConvFwd.tensor("cu").firstStride], "s_cu");
}

// The deferred decode step takes the commit-every-step kernel's parameters, in their order, and the
// ring's (its tensors, depth R and strides) besides.
TEST(KernelSignatures, DeferredDecodeStepExtendsTheCommitKernel) {
  const auto& commit = dsl::parameters(kernels::kDecodeStep).names;
  const auto& deferred = dsl::parameters(kernels::kDecodeStepDeferred).names;
  std::vector<std::string> kept, added;
  for (const char* n : deferred) {
    bool inCommit = false;
    for (const char* m : commit) inCommit = inCommit || std::string(n) == m;
    (inCommit ? kept : added).push_back(n);
  }
  EXPECT_EQ(kept, std::vector<std::string>(commit.begin(), commit.end()));
  const std::vector<std::string> ring = {"xbc_ring", "dt_ring",   "ring",   "R",      "s_xr_slot", "s_xr_t",
                                         "s_xr_c",   "s_dr_slot", "s_dr_t", "s_dr_h", "s_ring"};
  EXPECT_EQ(added, ring);
}

TEST(KernelSignatures, SelectiveStateUpdateStridesTakeTheirShortNames) {
  using kernels::kSsu;
  const auto& p = dsl::parameters(kSsu).names;
  EXPECT_STREQ(p[kSsu.tensor("state").firstStride], "s_state_slot");
  EXPECT_STREQ(p[kSsu.tensor("dt_bias").firstStride + 1], "s_dtb_p");
  EXPECT_STREQ(p[kSsu.tensor("state_idx").firstStride], "s_idx_b");
  EXPECT_STREQ(p[kSsu.tensor("dst_idx").firstStride + 1], "s_dst_l");
  EXPECT_EQ(kSsu.tensor("err").rank, 0);
  EXPECT_STREQ(p[kSsu.flag("per_head")], "per_head");
  EXPECT_STREQ(p[kSsu.mode("state_write")], "state_write");
  EXPECT_EQ(kSsu.mode("state_write"), kSsu.count() - 1);  // modes come last
}

TEST(KernelSignatures, AnUnknownNameIsAnErrorNamingKernelAndArgument) {
  const char* bad = "stat";  // not a constant expression: the lookup runs, and throws
  expectInternal({"causal_conv1d_update", "'stat'"}, [&] { (void)kConvUpdate.tensor(bad); });
}

TEST(KernelSignatures, BindingTwiceOrMissingAnArgumentFails) {
  const TensorView none;
  detail::KernelCall twice(kConvUpdate);
  twice.flag(kConvUpdate.flag("silu"), true);
  expectInternal({"causal_conv1d_update", "'silu'", "twice"}, [&] { twice.flag(kConvUpdate.flag("silu"), false); });
  detail::KernelCall missing(kConvUpdate);
  missing.tensor(kConvUpdate.tensor("state"), none);
  expectInternal({"causal_conv1d_update", "'commit'", "not bound"}, [&] { (void)missing.specialization("sm_90a"); });
}

TEST(KernelSignatures, ADeclaredKernelTakesNoOtherArgument) {
  dsl::KernelDef def = dsl::findKernel(kConvUpdate.kernel);
  def.build = [](dsl::KernelBuilder& k, const Specialization&) { k.arg("no_such_argument"); };
  Specialization spec;
  spec.kernel = kConvUpdate.kernel;
  expectInternal({"causal_conv1d_update", "'no_such_argument'"}, [&] { (void)compileKernel(def, spec); });
  def.build = [](dsl::KernelBuilder& k, const Specialization&) { k.intArg("extra"); };
  expectInternal({"causal_conv1d_update", "'extra'"}, [&] { (void)compileKernel(def, spec); });
}

}  // namespace
