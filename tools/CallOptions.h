// One selective-state-update call described by command-line options: `inspect` takes them on its
// command line and `prewarm` manifests use the same words (one parser for both), so an op entry of a
// manifest compiles exactly the kernel `ssmjit inspect` with those options shows.
#pragma once
#include <cstdint>
#include <string>

#include "compiler/Specialization.h"
#include "runtime/ops/SelectiveStateUpdateCheck.h"
#include "tests/support/SsuProblem.h"

namespace CLI {
class App;
class Option;
}

namespace ssmjit::tool {

// The options that pick the op and the Mamba-2 head shape (`bench`, and `inspect` through
// CallOptions): --op, --heads, --head-dim, --dstate, --groups, registered in that order.
struct OpShapeOptions {
  std::string op = "ssu";
  int64_t heads = 80, headDim = 64, dstate = 128, groups = 1;

  bool tokens() const { return op == "ssu-tokens"; }
  // A Mamba-2 call of the op on these heads: tokens, H, P, N, G set; no spare slots (the state has
  // one slot per row, or per row and token for PerToken writes); the rest at SsuCase's defaults.
  testing::SsuCase call() const;
};
void addOpShapeOptions(CLI::App* app, OpShapeOptions& o);

// Every option of a call, with the defaults `ssmjit inspect` documents.
struct CallOptions {
  OpShapeOptions shape;
  std::string form = "mamba2";
  int64_t channels = 5120;  // Mamba-1's D (Mamba-1 2.8B: 5120)
  int64_t batch = 16;
  int64_t tokens = 4;
  std::string stateDtype = "fp32";
  std::string inputDtype = "fp32";
  std::string outDtype;  // empty: as --input-dtype
  std::string stateWrite = "final";
  bool noD = false, noZ = false, noDtBias = false, noSoftplus = false, noStateIdx = false;
  std::string arch = "sm_90a";

  // Set by addCallOptions: which options the command line gave (some only apply to one form/op).
  const CLI::Option *tokensOpt = nullptr, *channelsOpt = nullptr;
  const CLI::Option *headsOpt = nullptr, *headDimOpt = nullptr, *groupsOpt = nullptr;
};
void addCallOptions(CLI::App* app, CallOptions& o);

// A call checked as the op checks it, and the specialisation the op compiles for it.
struct CheckedCall {
  testing::SsuCase call;
  detail::SsuDims dims;
  Specialization spec;
};
// Throws UsageError naming the option for contradicting options and for calls the op rejects.
CheckedCall checkCallOptions(const CallOptions& o);

// "m2 H80 P64 N128 G1 ssu-tokens L=4 b=256 state bf16 in bf16 no-z": the shape, caseLabel and the
// optional inputs a call leaves out, so that distinct calls get distinct labels.
std::string callLabel(const testing::SsuCase& s);

}  // namespace ssmjit::tool
