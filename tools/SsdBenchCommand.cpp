// `ssmjit bench-ssd`: the Mamba-2 SSD chunked scan forward (ssd) on the GPU at Mamba-2 2.7B's
// heads by default (H 80, P 64, N 128, G 1, chunk 256; bf16 x, dt, B, C, z, out; fp32 A, D,
// dt_bias; dt_softplus), over dense shapes BxL (the defaults are scripts/peers/ssd.py's, so that
// rows compare with mamba_ssm's Triton SSD timed there) and packed rows of given or drawn lengths.
// Reports ms per call (CUDA events around back-to-back calls with one workspace, median of
// trials), the bytes the call must move over the time as GB/s and % of the device-to-device copy
// bandwidth measured in the same run, and TFLOP/s of the chunked algorithm's products. A packed
// row is compared with the dense cases of as many tokens that ran. Ends with a Markdown table.
//
// Byte model (the floor: every input read once, out written once): per token x, z, out (H P
// each), dt (H) and B, C (G N each), in their dtypes; A, D, dt_bias and the states are not
// counted, nor the workspace (per-chunk dt', cumsums, states and C.B), which is the op's own
// traffic above the floor. FLOP model, per token: 2 Q N per group (C.B, the causal half of a
// chunk), and per head 2 P N (the chunk's state), 2 P N (C against the entering state) and Q P
// (C.B against x, the causal half).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "ssmjit/ops.h"
#include "tools/DeviceFill.h"
#include "tools/GpuTiming.h"
#include "tools/SsdCall.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {
namespace {

struct SsdBenchOptions {
  int64_t heads = 80, headdim = 64, dstate = 128, ngroups = 1, chunk = 256;
  std::string dtype = "bf16", dtDtype = "bf16", bcDtype = "bf16";
  std::vector<std::string> shapes{"1x2048", "8x2048", "1x16384", "4x8192"};
  std::vector<std::string> packed;  // each: one packed row's lengths, comma-separated
  int64_t mixedTokens = 16384, minLen = 57, maxLen = 2048;
  int iters = 10, trials = 5;
  uint64_t seed = 1;
  bool backward = false;
  bool savedY = false;          // the forward keeps y (fp32) and the backward reads it
  bool noZ = false;             // without the gate, as the Mamba-2 layer calls the scan
  std::string states = "none";  // none, final or slots (SsdCall.h), fp32 states
};

// "8x2048" -> {8, 2048}; throws UsageError naming --shapes otherwise.
std::pair<int64_t, int64_t> parseShape(const std::string& s) {
  const size_t x = s.find('x');
  try {
    size_t used = 0;
    const int64_t b = std::stoll(s.substr(0, x), &used);
    if (x == std::string::npos || used != x) throw std::invalid_argument(s);
    const std::string rest = s.substr(x + 1);
    const int64_t l = std::stoll(rest, &used);
    if (used != rest.size() || b < 1 || l < 1) throw std::invalid_argument(s);
    return {b, l};
  } catch (const std::logic_error&) {
    throw UsageError("--shapes: '" + s + "' is not BxL, expected e.g. 8x2048 (batch and seqlen >= 1)");
  }
}

// "300,1,256" -> {300, 1, 256}; throws UsageError naming --packed otherwise.
std::vector<int64_t> parseLengths(const std::string& s) {
  std::vector<int64_t> v;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    const std::string item = s.substr(start, end - start);
    size_t used = 0;
    int64_t n = 0;
    try {
      n = std::stoll(item, &used);
    } catch (const std::logic_error&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || n < 1)
      throw UsageError("--packed: '" + s + "' is not a list of lengths >= 1, expected e.g. 300,1,256");
    v.push_back(n);
    start = end + 1;
  }
  return v;
}

// ms per ssd_backward call for the forward call `a` (every gradient; dout random).
double backwardMs(const SsdArgs& a, SsdStates states, std::mt19937_64& rng, const SsdBenchOptions& o) {
  auto like = [&](const TensorView& v, double lo, double hi) { return DeviceTensor(v, lo, hi, rng); };
  DeviceTensor dout = like(a.x, -1, 1), dx = like(a.x, 0, 0), dz = like(a.z, 0, 0), ddt = like(a.dt, 0, 0);
  DeviceTensor dB = like(a.B, 0, 0), dC = like(a.C, 0, 0), dA = like(a.A, 0, 0), dD = like(a.D, 0, 0),
               dbias = like(a.dt_bias, 0, 0);
  SsdBackwardArgs b;
  b.forward = a, b.dout = dout.view, b.dx = dx.view, b.ddt = ddt.view, b.dA = dA.view, b.dB = dB.view;
  b.dC = dC.view, b.dD = dD.view, b.ddt_bias = dbias.view;
  if (a.z.defined()) b.dz = dz.view;
  std::unique_ptr<DeviceTensor> dfinal, dinitial;
  if (states != SsdStates::None) {
    dfinal = std::make_unique<DeviceTensor>(a.final_states, -1, 1, rng);
    b.dfinal_states = dfinal->view;
  }
  if (states == SsdStates::Slots) {
    dinitial = std::make_unique<DeviceTensor>(a.initial_states, 0, 0, rng);
    b.dinitial_states = dinitial->view;
  }
  const int64_t wsElems = ssd_backward_workspace_size(b);
  DeviceBuffer ws(static_cast<size_t>(wsElems) * 4);
  b.workspace = TensorView::contiguous(ws.data(), DType::F32, {wsElems});
  return 1e-3 * callTimeUs([&](CUstream st) { ssd_backward(b, st); }, nullptr, o.iters, o.trials);
}

void runSsdBench(const SsdBenchOptions& o) {
  const DType xt = parseFloatDType(o.dtype, "--dtype"), dtt = parseFloatDType(o.dtDtype, "--dt-dtype"),
              bct = parseFloatDType(o.bcDtype, "--bc-dtype");
  const SsdStates states = parseSsdStates(o.states, "--states");
  const int64_t H = o.heads, P = o.headdim, N = o.dstate, G = o.ngroups, Q = o.chunk;
  struct Row {
    std::string what;
    int64_t rows, L;
    std::vector<int64_t> lens;  // packed when not empty
  };
  std::vector<Row> cases;
  for (const std::string& s : o.shapes) {
    if (s.empty()) continue;
    const auto [b, l] = parseShape(s);
    cases.push_back({strf("dense %lldx%lld", (long long)b, (long long)l), b, l, {}});
  }
  auto addPacked = [&](std::vector<int64_t> lens) {
    const int64_t T = std::accumulate(lens.begin(), lens.end(), int64_t{0});
    cases.push_back({strf("packed %lld tokens, %zu seqs (%lld..%lld)", (long long)T, lens.size(),
                          (long long)*std::min_element(lens.begin(), lens.end()),
                          (long long)*std::max_element(lens.begin(), lens.end())),
                     1, T, std::move(lens)});
  };
  for (const std::string& s : o.packed) addPacked(parseLengths(s));
  if (o.mixedTokens > 0) {
    if (o.minLen > o.maxLen)
      throw UsageError(strf("--min-len %lld exceeds --max-len %lld", (long long)o.minLen, (long long)o.maxLen));
    addPacked(mixedLengths(o.mixedTokens, o.minLen, o.maxLen, o.seed));
  }
  if (cases.empty()) throw UsageError("no case to run: give --shapes, --packed or --mixed-tokens");

  driver::ensureContext();
  CUstream s = nullptr;
  const double copy = reportCopyGBs(s);
  std::mt19937_64 rng(o.seed);
  std::vector<std::string> columns{"case", "tokens", "ms", "GB/s", "% of copy", "TFLOP/s", "vs dense"};
  if (o.backward) columns.insert(columns.end(), {"backward ms", "fwd+bwd ms"});
  Table table(columns);
  struct Dense {
    std::string what;
    int64_t tokens;
    double ms;
  };
  std::vector<Dense> dense;  // the dense cases run so far

  for (const Row& c : cases) {
    const int64_t R = c.rows, L = c.L, tokens = R * L;
    DeviceTensor x(xt, {R, L, H, P}, -1, 1, rng), z(xt, {R, L, H, P}, -2, 2, rng), out(xt, {R, L, H, P}, 0, 0, rng);
    DeviceTensor dt(dtt, {R, L, H}, -4, -3, rng), B(bct, {R, L, G, N}, -1, 1, rng), C(bct, {R, L, G, N}, -1, 1, rng);
    DeviceTensor A(DType::F32, {H}, -4.5, -0.5, rng), Dv(DType::F32, {H}, -1, 1, rng),
        bias(DType::F32, {H}, -2, -1, rng);
    SsdArgs a;
    a.x = x.view, a.dt = dt.view, a.A = A.view, a.B = B.view, a.C = C.view, a.D = Dv.view, a.z = z.view;
    a.dt_bias = bias.view, a.dt_softplus = true, a.chunk_size = static_cast<int>(Q), a.out = out.view;
    if (o.noZ) a.z = {};
    std::unique_ptr<DeviceTensor> y;
    if (o.savedY) {
      y.reset(new DeviceTensor(DType::F32, {R, L, H, P}, 0, 0, rng));
      a.y = y->view;
    }
    std::unique_ptr<DeviceBuffer> cu;
    if (!c.lens.empty()) {
      std::vector<int32_t> v{0};
      for (int64_t l : c.lens) v.push_back(v.back() + static_cast<int32_t>(l));
      cu = std::make_unique<DeviceBuffer>(DeviceBuffer::fromHost(v));
      a.cu_seqlens = TensorView::contiguous(cu->data(), DType::I32, {static_cast<int64_t>(v.size())});
    }
    // One slot a sequence: sequence i's states in slot i (read from it too with slots).
    const int64_t nseq = c.lens.empty() ? R : static_cast<int64_t>(c.lens.size());
    std::unique_ptr<DeviceTensor> stateSlots;
    std::unique_ptr<DeviceBuffer> slotIndices;
    if (states != SsdStates::None) {
      stateSlots =
          std::make_unique<DeviceTensor>(DType::F32, std::initializer_list<int64_t>{nseq, H, P, N}, -1, 1, rng);
      a.final_states = stateSlots->view;
    }
    if (states == SsdStates::Slots) {
      std::vector<int32_t> ids(static_cast<size_t>(nseq));
      std::iota(ids.begin(), ids.end(), 0);
      slotIndices = std::make_unique<DeviceBuffer>(DeviceBuffer::fromHost(ids));
      a.initial_states = stateSlots->view;
      a.initial_state_indices = a.final_state_indices = TensorView::contiguous(slotIndices->data(), DType::I32, {nseq});
    }
    const int64_t wsElems = ssd_workspace_size(a);
    DeviceBuffer ws(static_cast<size_t>(wsElems) * 4);
    a.workspace = TensorView::contiguous(ws.data(), DType::F32, {wsElems});
    const double ms = 1e-3 * callTimeUs([&](CUstream st) { ssd(a, st); }, s, o.iters, o.trials);

    const double perToken = (o.noZ ? 2.0 : 3.0) * double(H * P) * dtypeBytes(xt) + double(H) * dtypeBytes(dtt) +
                            2.0 * double(G * N) * dtypeBytes(bct);
    const double bytes = perToken * double(tokens);
    const double flops = double(tokens) * (2.0 * Q * N * G + double(H) * (4.0 * P * N + double(Q) * P));
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    std::string vsDense;
    if (c.lens.empty()) dense.push_back({c.what, tokens, ms});
    for (const Dense& d : dense)
      if (!c.lens.empty() && d.tokens == tokens)
        vsDense += strf("%s%+.1f%% vs %s", vsDense.empty() ? "" : ", ", 100.0 * (ms / d.ms - 1), d.what.c_str());
    if (!c.lens.empty() && vsDense.empty()) vsDense = "(no dense case of as many tokens)";
    std::vector<std::string> row{c.what,
                                 std::to_string(tokens),
                                 strf("%.3f", ms),
                                 strf("%.0f", gbs),
                                 strf("%.0f%%", 100 * gbs / copy),
                                 strf("%.1f", flops / (ms * 1e-3) / 1e12),
                                 vsDense};
    if (o.backward) {
      const double bwd = backwardMs(a, states, rng, o);
      row.insert(row.end(), {strf("%.3f", bwd), strf("%.3f", ms + bwd)});
    }
    table.add(row);
    std::printf("%-50s %8.3f ms\n", c.what.c_str(), ms);
  }
  std::printf(
      "\nMamba-2 SSD chunked scan forward: H %lld, P %lld, N %lld, G %lld, chunk %lld; %s x/z/out, %s dt, %s B/C; "
      "fp32 A, D (H), dt_bias; dt_softplus; median of %d trials of %d calls\n"
      "GB/s: x, z, dt, B, C read and out written once (the floor; the workspace and states are not counted)%s%s"
      "\nstates: %s\n\n",
      (long long)H, (long long)P, (long long)N, (long long)G, (long long)Q, o.dtype.c_str(), o.dtDtype.c_str(),
      o.bcDtype.c_str(), o.trials, o.iters, o.noZ ? "\n--no-z: no gate (no z read)" : "",
      o.savedY ? "\n--saved-y: the forward also writes y (fp32, not counted in GB/s); the backward reads it" : "",
      o.states.c_str());
  printTableAndCopy(table, copy);
}

}  // namespace

CommandRun defineSsdBenchCommand(CLI::App* app) {
  auto o = std::make_shared<SsdBenchOptions>();
  app->add_option("--heads", o->heads, "Heads H")->check(atLeast(1))->capture_default_str();
  app->add_option("--headdim", o->headdim, "Head dim P")->check(CLI::Range(1, kMaxSsdHeadDim))->capture_default_str();
  app->add_option("--dstate", o->dstate, "State size N")->check(CLI::Range(1, kMaxSsdState))->capture_default_str();
  app->add_option("--ngroups", o->ngroups, "Groups G of B and C (must divide H)")
      ->check(atLeast(1))
      ->capture_default_str();
  app->add_option("--chunk", o->chunk, "Chunk size: 64, 128 or 256")
      ->check(CLI::IsMember(std::vector<int64_t>{64, 128, 256}))
      ->capture_default_str();
  addFloatDTypeOption(app, "--dtype", o->dtype, "x, z, out dtype: fp32, bf16, fp16");
  addFloatDTypeOption(app, "--dt-dtype", o->dtDtype, "dt dtype: fp32, bf16, fp16");
  addFloatDTypeOption(app, "--bc-dtype", o->bcDtype, "B, C dtype: fp32, bf16, fp16");
  app->add_option("--shapes", o->shapes, "Dense shapes BxL (batch x seqlen), comma-separated; '' for none")
      ->delimiter(',')
      ->capture_default_str();
  app->add_option("--packed", o->packed,
                  "A packed row of these sequence lengths, comma-separated (e.g. 300,1,256); repeat for more rows")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app->add_option("--mixed-tokens", o->mixedTokens,
                  "A packed row of this many tokens of mixed lengths drawn in --min-len..--max-len; 0: none")
      ->check(atLeast(0))
      ->capture_default_str();
  app->add_option("--min-len", o->minLen, "Shortest drawn sequence")->check(atLeast(1))->capture_default_str();
  app->add_option("--max-len", o->maxLen, "Longest drawn sequence")->check(atLeast(1))->capture_default_str();
  addTrialOptions(app, o->iters, o->trials, o->seed, "Calls per trial");
  app->add_flag("--backward", o->backward, "Also time ssd_backward (every gradient) for each case");
  app->add_flag("--no-z", o->noZ, "Without the gate z (the Mamba-2 layer's call: its gated norm takes z)");
  app->add_flag("--saved-y", o->savedY,
                "The forward keeps y before the gate (fp32, SsdArgs::y), which the backward reads instead of "
                "recomputing it");
  app->add_option("--states", o->states,
                  "fp32 states a sequence: none; final (written, as a prefill for decode does); slots (initial "
                  "states read from and final states written to the same slot)")
      ->check(CLI::IsMember(ssdStatesNames()))
      ->capture_default_str();
  return benchRun(o, runSsdBench);
}

}  // namespace ssmjit::tool
