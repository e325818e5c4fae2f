// One op call described by command-line options (a selective-state-update call, a Mamba-1
// selective scan forward or backward, a Mamba-2 decode step or SSD chunked scan): `inspect` takes
// them on its command line and `prewarm` manifests use the same words (one parser for both), so
// an op entry of a manifest compiles exactly the kernels `ssmjit inspect` with those options
// shows.
#pragma once
#include <cstdint>
#include <string>

#include "compiler/Specialization.h"
#include "runtime/OpSpecializations.h"
#include "tools/DecodeStepCall.h"
#include "tools/ScanCall.h"
#include "tools/SsdCall.h"
#include "tools/problems/SsuProblem.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace ssmjit::tool {

// The options that pick the op and the Mamba-2 head shape (`bench`, and `inspect` through
// CallOptions): --op, --heads, --head-dim, --dstate, --groups, registered in that order. `bench`
// takes the selective-state-update ops only; CallOptions also the scan's and the decode step
// (allOps).
struct OpShapeOptions {
  std::string op = "ssu";
  int64_t heads = 80, headDim = 64, dstate = 128, groups = 1;

  bool tokens() const { return op == "ssu-tokens"; }
  bool scan() const { return op == "scan" || op == "scan-backward"; }
  bool decodeStep() const { return op == "decode-step"; }
  bool ssd() const { return op == "ssd" || op == "ssd-backward"; }
  // A Mamba-2 call of the op on these heads: tokens, H, P, N, G set; no spare slots (the state has
  // one slot per row, or per row and token for PerToken writes); the rest at SsuCase's defaults.
  testing::SsuCase call() const;
};
void addOpShapeOptions(CLI::App* app, OpShapeOptions& o, bool allOps = false);

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
  int64_t seqlen = 2048;               // the scan's and the SSD scan's dense rows
  std::vector<int64_t> packedLengths;  // the scan's and the SSD scan's packed row
  int64_t serialSeqlen = 0;            // the scan forward's serial_seqlen
  bool train = false;                  // the scan's and the SSD scan's forward: compile_backward
  std::string bc = "varying";          // the scan's B and C
  int64_t width = 4;                   // the decode step's conv width
  int64_t cacheTokens = 0;             // the decode step's cache depth (0: as --tokens)
  int64_t ringDepth = 0;               // the decode step's ring depth (0: no ring, commit every step)
  std::string parts = "fused";         // the decode step's parts
  bool noConvBias = false;
  int64_t chunk = 256;             // the SSD scan's chunk size
  std::string ssdStates = "none";  // the SSD scan's states
  bool savedY = false;             // the SSD scan's forward keeps y for its backward
  std::string arch = "sm_90a";

  // Set by addCallOptions: which options the command line gave (some only apply to one form/op).
  const CLI::Option *tokensOpt = nullptr, *channelsOpt = nullptr;
  const CLI::Option *headsOpt = nullptr, *headDimOpt = nullptr, *groupsOpt = nullptr;
  const CLI::Option *formOpt = nullptr, *batchOpt = nullptr, *stateDtypeOpt = nullptr, *outDtypeOpt = nullptr,
                    *stateWriteOpt = nullptr, *noStateIdxOpt = nullptr;
  const CLI::Option *seqlenOpt = nullptr, *packedOpt = nullptr, *bcOpt = nullptr, *serialOpt = nullptr,
                    *trainOpt = nullptr;
  const CLI::Option *widthOpt = nullptr, *cacheTokensOpt = nullptr, *partsOpt = nullptr, *noConvBiasOpt = nullptr,
                    *ringDepthOpt = nullptr;
  const CLI::Option *chunkOpt = nullptr, *ssdStatesOpt = nullptr, *savedYOpt = nullptr;
};
void addCallOptions(CLI::App* app, CallOptions& o);

// A call checked as the op checks it, and the specialisations the op compiles for it in launch
// order (one for a selective-state-update call or a decode step; `call` and `dims` describe only
// selective-state-update calls).
struct CheckedCall {
  std::string label;  // callLabel, scanCallLabel, decodeStepCallLabel or ssdCallLabel
  std::vector<Specialization> specs;
  bool ssu = true;
  testing::SsuCase call;
  opspec::SsuSizes dims;
};
// Throws UsageError naming the option for contradicting options and for calls the op rejects.
CheckedCall checkCallOptions(const CallOptions& o);

// "m2 H80 P64 N128 G1 ssu-tokens L=4 b=256 state bf16 in bf16 no-z": the shape, caseLabel and the
// optional inputs a call leaves out, so that distinct calls get distinct labels.
std::string callLabel(const testing::SsuCase& s);

}  // namespace ssmjit::tool
