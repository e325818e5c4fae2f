#include "tools/CallOptions.h"

#include <CLI/CLI.hpp>

#include <string>
#include <utility>
#include <vector>

#include "runtime/OpSpecializations.h"
#include "ssmjit/ops.h"
#include "tools/SsuCall.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {

testing::SsuCase OpShapeOptions::call() const {
  testing::SsuCase s;
  s.tokens = tokens();
  s.H = heads, s.P = headDim, s.N = dstate, s.G = groups;
  s.spareSlots = 0;
  return s;
}

void addOpShapeOptions(CLI::App* app, OpShapeOptions& o, bool allOps) {
  if (allOps)
    app->add_option("--op", o.op,
                    "ssu (one token), ssu-tokens (L tokens per sequence), scan or scan-backward (the Mamba-1 "
                    "selective scan: --channels, --dstate, --groups, --batch x --seqlen or --packed-lengths), "
                    "decode-step (mamba2_decode_step: the heads, --width, --batch, --tokens drafts, "
                    "--cache-tokens, --ring-depth, --parts), ssd or ssd-backward (the Mamba-2 SSD chunked scan "
                    "forward or its gradients: the heads, --chunk, --batch x --seqlen or --packed-lengths, --states)")
        ->check(CLI::IsMember({"ssu", "ssu-tokens", "scan", "scan-backward", "decode-step", "ssd", "ssd-backward"}))
        ->capture_default_str();
  else
    app->add_option("--op", o.op, "ssu (one token) or ssu-tokens (L tokens per sequence)")
        ->check(CLI::IsMember({"ssu", "ssu-tokens"}))
        ->capture_default_str();
  app->add_option("--heads", o.heads, "Heads H")->check(atLeast(1))->capture_default_str();
  app->add_option("--head-dim", o.headDim, "Head dim P")->check(atLeast(1))->capture_default_str();
  app->add_option("--dstate", o.dstate, "State size N")->check(atLeast(1))->capture_default_str();
  app->add_option("--groups", o.groups,
                  allOps ? "Groups G of B and C (must divide H; the scan's, D)" : "Groups G of B and C (must divide H)")
      ->check(atLeast(1))
      ->capture_default_str();
}

void addCallOptions(CLI::App* app, CallOptions& o) {
  addOpShapeOptions(app, o.shape, true);
  o.headsOpt = app->get_option("--heads");
  o.headDimOpt = app->get_option("--head-dim");
  o.groupsOpt = app->get_option("--groups");
  o.formOpt = app->add_option("--form", o.form,
                              "mamba2 (state: slots x heads x head dim x dstate) or mamba1 (slots x channels x "
                              "dstate; --heads, --head-dim and --groups do not apply)")
                  ->check(CLI::IsMember({"mamba2", "mamba1"}))
                  ->capture_default_str();
  o.channelsOpt =
      app->add_option("--channels", o.channels, "Channels D of the Mamba-1 form (--form mamba1) or the scan")
          ->check(atLeast(1))
          ->capture_default_str();
  o.batchOpt = app->add_option("--batch", o.batch,
                               "Batch (dynamic in the state update: it only decides 32- or 64-bit indexing; the "
                               "scan's and the SSD scan's dense rows)")
                   ->check(atLeast(1))
                   ->capture_default_str();
  o.tokensOpt = app->add_option("--tokens", o.tokens, "Tokens per sequence L (ssu-tokens; the decode step's drafts)")
                    ->check(CLI::Range(1, kMaxTokens))
                    ->capture_default_str();
  o.stateDtypeOpt = addFloatDTypeOption(app, "--state-dtype", o.stateDtype,
                                        "(SSM) state storage dtype (fp32, bf16, fp16); the SSD scan's --states");
  addFloatDTypeOption(app, "--input-dtype", o.inputDtype,
                      "Dtype of x, dt, B, C, z (fp32, bf16, fp16; the SSD scan's out too); the scan's u, delta, z, out "
                      "and varying B, C; the decode step's drafts, caches, conv state, z and y");
  o.outDtypeOpt = app->add_option("--out-dtype", o.outDtype, "Dtype of out (default: as --input-dtype)")
                      ->check(CLI::IsMember(floatDTypeNames()));
  o.stateWriteOpt = app->add_option("--state-write", o.stateWrite, "final (in place), none (verify only) or per-token")
                        ->check(CLI::IsMember(stateWriteNames()))
                        ->capture_default_str();
  app->add_flag("--no-D", o.noD, "Without the skip connection D");
  app->add_flag("--no-z", o.noZ, "Without the gate z");
  app->add_flag("--no-dt-bias", o.noDtBias, "Without dt_bias (the scan's delta_bias)");
  app->add_flag("--no-softplus", o.noSoftplus, "Without softplus on dt");
  o.noStateIdxOpt = app->add_flag("--no-state-indices", o.noStateIdx, "Without state_batch_indices");
  o.seqlenOpt = app->add_option("--seqlen", o.seqlen, "The dense row length (--op scan, scan-backward, ssd)")
                    ->check(atLeast(1))
                    ->capture_default_str();
  o.packedOpt = app->add_option("--packed-lengths", o.packedLengths,
                                "The packed row: its sequence lengths, comma-separated, instead of --batch x "
                                "--seqlen (--op scan, scan-backward, ssd)")
                    ->delimiter(',')
                    ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  o.serialOpt =
      app->add_option("--serial-seqlen", o.serialSeqlen,
                      "The scan forward's serial_seqlen: sequences of at most this many tokens scanned serially "
                      "(0: every sequence in parallel; --op scan)")
          ->check(atLeast(0))
          ->capture_default_str();
  o.trainOpt = app->add_flag("--train", o.train,
                             "The forward will be trained (compile_backward): its first call compiles the backward's "
                             "kernels too, so they follow the forward's (--op scan, ssd)");
  o.widthOpt = app->add_option("--width", o.width, "The decode step's conv width W (2..8)")
                   ->check(CLI::Range(2, 8))
                   ->capture_default_str();
  o.cacheTokensOpt =
      app->add_option("--cache-tokens", o.cacheTokens, "The decode step's draft-cache depth Lc (default: as --tokens)")
          ->check(atLeast(1));
  o.ringDepthOpt = app->add_option("--ring-depth", o.ringDepth,
                                   "The decode step's ring depth R: deferred commit (default: none, commit every step)")
                       ->check(atLeast(1));
  o.partsOpt =
      app->add_option("--parts", o.parts, "The decode step's parts: fused (replay and verify), replay or verify")
          ->check(CLI::IsMember({"fused", "replay", "verify"}))
          ->capture_default_str();
  o.noConvBiasOpt = app->add_flag("--no-conv-bias", o.noConvBias, "The decode step without conv bias");
  o.bcOpt = app->add_option("--bc", o.bc,
                            "The scan's B and C: varying (batch, G, N, L) in --input-dtype or constant (D, N) fp32")
                ->check(CLI::IsMember({"varying", "constant"}))
                ->capture_default_str();
  o.chunkOpt = app->add_option("--chunk", o.chunk, "The SSD scan's chunk size: 64, 128 or 256 (--op ssd, ssd-backward)")
                   ->check(CLI::IsMember(std::vector<int64_t>{64, 128, 256}))
                   ->capture_default_str();
  o.ssdStatesOpt =
      app->add_option("--states", o.ssdStates,
                      "The SSD scan's states (--op ssd, ssd-backward): none, final (sequence i's final state to slot "
                      "i) or slots (initial and final states in one tensor through slot indices, as a serving "
                      "prefill), in --state-dtype; the backward takes their gradients too")
          ->check(CLI::IsMember(ssdStatesNames()))
          ->capture_default_str();
  o.savedYOpt = app->add_flag("--saved-y", o.savedY,
                              "The SSD scan's forward keeps y before the gate (SsdArgs::y), as training does, and "
                              "the backward reads it instead of rerunning chunk_scan (--op ssd, ssd-backward)");
  app->add_option("--arch", o.arch, "NVRTC target (sm_90a, sm_90, sm_80, compute_90, ...)")->capture_default_str();
}

namespace {
bool given(const CLI::Option* opt) { return opt && opt->count() > 0; }

// Refuses, by name, each given option that `op` does not take (`takers` names the ops that do).
void refuse(std::initializer_list<const CLI::Option*> opts, const std::string& op, const char* takers) {
  for (const CLI::Option* opt : opts)
    if (given(opt)) throw UsageError(opt->get_name() + " applies to --op " + takers + ", not " + op);
}
const char* const kSsuOps = "ssu and ssu-tokens";
const char* const kScanOps = "scan and scan-backward";
const char* const kHeadOps = "ssu, ssu-tokens, decode-step, ssd and ssd-backward";
const char* const kRowOps = "scan, scan-backward, ssd and ssd-backward";
const char* const kSsdOps = "ssd and ssd-backward";

// The checked call of an op other than the SSU ones (no SsuCase).
CheckedCall nonSsuCall(std::string label, std::vector<Specialization> specs) {
  CheckedCall r;
  r.ssu = false;
  r.label = std::move(label);
  r.specs = std::move(specs);
  return r;
}

// --batch beside --packed-lengths (the ops that take rows).
void refuseDenseBesidePacked(const CallOptions& o) {
  if (given(o.packedOpt))
    for (const CLI::Option* opt : {o.batchOpt, o.seqlenOpt})
      if (given(opt))
        throw UsageError(opt->get_name() + " applies to dense rows; --packed-lengths gives the packed row");
}

// A scan call from the options.
CheckedCall checkScanOptions(const CallOptions& o) {
  refuse({o.formOpt, o.stateWriteOpt, o.outDtypeOpt}, o.shape.op, kSsuOps);
  refuse({o.headsOpt, o.headDimOpt, o.stateDtypeOpt}, o.shape.op, kHeadOps);
  refuse({o.tokensOpt, o.noStateIdxOpt}, o.shape.op, "ssu, ssu-tokens and decode-step");
  refuse({o.widthOpt, o.cacheTokensOpt, o.partsOpt, o.noConvBiasOpt, o.ringDepthOpt}, o.shape.op, "decode-step");
  refuse({o.chunkOpt, o.ssdStatesOpt, o.savedYOpt}, o.shape.op, kSsdOps);
  refuseDenseBesidePacked(o);
  ScanCall c;
  c.backward = o.shape.op == "scan-backward";
  if (c.backward) refuse({o.serialOpt, o.trainOpt}, o.shape.op, "scan");
  c.train = o.train;
  c.D = o.channels, c.N = o.shape.dstate, c.G = o.shape.groups;
  c.batch = o.batch, c.seqlen = o.seqlen, c.packedLengths = o.packedLengths, c.serialSeqlen = o.serialSeqlen;
  c.x = parseFloatDType(o.inputDtype, "--input-dtype");
  c.bcVarying = o.bc == "varying";
  c.hasD = !o.noD, c.hasZ = !o.noZ, c.hasDeltaBias = !o.noDtBias, c.softplus = !o.noSoftplus;
  c.arch = o.arch;
  return nonSsuCall(scanCallLabel(c), scanCallSpecializations(c));
}

// A decode step from the options.
CheckedCall checkDecodeStepOptions(const CallOptions& o) {
  refuse({o.formOpt, o.stateWriteOpt, o.outDtypeOpt}, o.shape.op, kSsuOps);
  refuse({o.channelsOpt, o.bcOpt, o.serialOpt}, o.shape.op, kScanOps);
  refuse({o.seqlenOpt, o.packedOpt}, o.shape.op, kRowOps);
  refuse({o.chunkOpt, o.ssdStatesOpt, o.savedYOpt}, o.shape.op, kSsdOps);
  refuse({o.trainOpt}, o.shape.op, "scan and ssd");
  DecodeStepCall c;
  c.H = o.shape.heads, c.P = o.shape.headDim, c.N = o.shape.dstate, c.G = o.shape.groups, c.W = o.width;
  c.batch = o.batch, c.L = o.tokens, c.cacheTokens = o.cacheTokens > 0 ? o.cacheTokens : o.tokens;
  c.ringDepth = o.ringDepth;
  c.state = parseFloatDType(o.stateDtype, "--state-dtype");
  c.drafts = parseFloatDType(o.inputDtype, "--input-dtype");
  c.parts = o.parts == "replay"   ? DecodeStepParts::ReplayOnly
            : o.parts == "verify" ? DecodeStepParts::VerifyOnly
                                  : DecodeStepParts::ReplayAndVerify;
  c.convBias = !o.noConvBias, c.hasD = !o.noD, c.hasZ = !o.noZ, c.dtBias = !o.noDtBias, c.softplus = !o.noSoftplus;
  c.stateIndices = !o.noStateIdx;
  c.arch = o.arch;
  return nonSsuCall(decodeStepCallLabel(c), {decodeStepCallSpecialization(c)});
}

// An SSD scan from the options.
CheckedCall checkSsdOptions(const CallOptions& o) {
  refuse({o.formOpt, o.stateWriteOpt, o.outDtypeOpt}, o.shape.op, kSsuOps);
  refuse({o.tokensOpt, o.noStateIdxOpt}, o.shape.op, "ssu, ssu-tokens and decode-step");
  refuse({o.channelsOpt, o.bcOpt, o.serialOpt}, o.shape.op, kScanOps);
  refuse({o.widthOpt, o.cacheTokensOpt, o.partsOpt, o.noConvBiasOpt, o.ringDepthOpt}, o.shape.op, "decode-step");
  refuseDenseBesidePacked(o);
  SsdCall c;
  c.H = o.shape.heads, c.P = o.shape.headDim, c.N = o.shape.dstate, c.G = o.shape.groups, c.chunk = o.chunk;
  c.batch = o.batch, c.seqlen = o.seqlen, c.packedLengths = o.packedLengths;
  c.x = parseFloatDType(o.inputDtype, "--input-dtype");
  c.states = parseSsdStates(o.ssdStates, "--states");
  if (c.states == SsdStates::None && given(o.stateDtypeOpt))
    throw UsageError("--state-dtype applies to the SSD scan's states: give --states final or slots");
  c.state = parseFloatDType(o.stateDtype, "--state-dtype");
  c.hasD = !o.noD, c.hasZ = !o.noZ, c.dtBias = !o.noDtBias, c.softplus = !o.noSoftplus;
  c.backward = o.shape.op == "ssd-backward";
  if (c.backward) refuse({o.trainOpt}, o.shape.op, "scan and ssd");
  c.train = o.train;
  c.savedY = o.savedY;
  c.arch = o.arch;
  return nonSsuCall(ssdCallLabel(c), ssdCallSpecializations(c));
}
}  // namespace

CheckedCall checkCallOptions(const CallOptions& o) {
  checkArch(o.arch, "--arch");
  if (o.shape.scan()) return checkScanOptions(o);
  if (o.shape.decodeStep()) return checkDecodeStepOptions(o);
  if (o.shape.ssd()) return checkSsdOptions(o);
  refuse({o.bcOpt, o.serialOpt}, o.shape.op, kScanOps);
  refuse({o.seqlenOpt, o.packedOpt}, o.shape.op, kRowOps);
  refuse({o.widthOpt, o.cacheTokensOpt, o.partsOpt, o.noConvBiasOpt, o.ringDepthOpt}, o.shape.op, "decode-step");
  refuse({o.chunkOpt, o.ssdStatesOpt, o.savedYOpt}, o.shape.op, kSsdOps);
  refuse({o.trainOpt}, o.shape.op, "scan and ssd");
  SsuCase s = o.shape.call();
  if (o.form == "mamba1") {
    for (const CLI::Option* opt : {o.headsOpt, o.headDimOpt, o.groupsOpt})
      if (given(opt))
        throw UsageError(opt->get_name() +
                         " applies to --form mamba2 only (Mamba-1 has one channel "
                         "axis: --channels)");
    s.mamba2 = false;
    s.H = s.G = 1;
    s.P = o.channels;
  } else if (given(o.channelsOpt)) {
    throw UsageError("--channels applies to --form mamba1 only (Mamba-2 has --heads x --head-dim)");
  }
  if (!s.tokens && given(o.tokensOpt))
    throw UsageError(strf("--tokens %lld applies to --op ssu-tokens only (the one-token op has L = 1)",
                          static_cast<long long>(o.tokens)));
  s.batch = o.batch;
  s.L = s.tokens ? o.tokens : 1;
  s.stateT = parseFloatDType(o.stateDtype, "--state-dtype");
  s.inT = parseFloatDType(o.inputDtype, "--input-dtype");
  s.outT = o.outDtype.empty() ? s.inT : parseFloatDType(o.outDtype, "--out-dtype");
  s.hasD = !o.noD, s.hasZ = !o.noZ, s.hasDtBias = !o.noDtBias, s.softplus = !o.noSoftplus;
  s.write = parseStateWrite(o.stateWrite, "--state-write");
  // Per-token snapshots are written through destination slots, which need slot indices.
  s.stateIdx = !o.noStateIdx || s.write == StateWrite::PerToken;
  if (o.noStateIdx && s.write == StateWrite::PerToken)
    throw UsageError("--no-state-indices contradicts --state-write per-token (snapshots go to slots)");
  CheckedCall r;
  r.dims = checkShapeOptions(s);
  r.call = s;
  r.label = callLabel(s);
  r.specs = {opspec::ssu(argsWithoutMemory(s), s.tokens, o.arch)};
  return r;
}

std::string callLabel(const SsuCase& s) {
  std::string l = s.mamba2 ? strf("m2 H%lld P%lld N%lld G%lld ", static_cast<long long>(s.H),
                                  static_cast<long long>(s.P), static_cast<long long>(s.N), static_cast<long long>(s.G))
                           : strf("m1 D%lld N%lld ", static_cast<long long>(s.P), static_cast<long long>(s.N));
  l += caseLabel(s);
  l += absentInputsLabel(s.hasD, s.hasZ, s.hasDtBias, s.softplus);
  if (!s.stateIdx) l += " no-state-indices";
  return l;
}

}  // namespace ssmjit::tool
