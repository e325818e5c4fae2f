// `ssmjit`: the command-line tool. Subcommands live one per file (DemoCommand.cpp,
// BenchCommand.cpp, ConvBenchCommand.cpp, ..., CacheCommand.cpp), each adding its own options; this
// file declares them in one table (name, one-line summary for `ssmjit --help`, usage text), parses
// the command line and maps outcomes to exit codes: 0 ok, 1 failure or mismatch, 2 usage error.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "compiler/BuildInfo.h"
#include "compiler/Knobs.h"
#include "compiler/Nvrtc.h"
#include "compiler/Pipeline.h"
#include "ssmjit/enum_name.h"
#include "ssmjit/error.h"
#include "ssmjit/parallel.h"
#include "tools/ToolSupport.h"

namespace {

// A failed command's status. With an abandoned NCCL communicator (ssmjit/parallel.h) the process
// ends here with _exit, since NCCL's threads still run and can crash a normal exit's teardown.
int exitAfterFailure() {
  if (ssmjit::ncclAbandoned()) {
    std::fflush(nullptr);
    _exit(ssmjit::tool::kExitFailure);
  }
  return ssmjit::tool::kExitFailure;
}

std::string versionText() {
  std::string nvrtc;
  std::string why;
  if (ssmjit::nvrtcAvailable(&why)) {
    try {
      nvrtc = "NVRTC " + ssmjit::nvrtcVersion();
    } catch (const std::exception& e) {
      nvrtc = std::string("NVRTC version unknown: ") + e.what();
    }
  } else {
    nvrtc = "NVRTC not available (" + why + ")";
  }
  return std::string("ssmjit ") + ssmjit::buildId() + "\n" + nvrtc;
}

// The --help footer: every environment variable ssmjit reads (compiler/Knobs.h).
std::string environmentHelp() {
  std::string s = "Environment:";
  for (const ssmjit::Knob& k : ssmjit::knobs()) {
    s += std::string("\n  ") + k.name + "\n      " + k.help;
    if (k.changesCode) s += " (changes generated code: part of the cache key)";
  }
  return s;
}

// Every subcommand, in the order --help lists them: its name, its line in `ssmjit --help`, the top of its
// own --help and the function of its file that adds its options.
struct Subcommand {
  const char* name;
  const char* summary;
  std::string usage;
  ssmjit::tool::CommandRun (*define)(CLI::App* app);
};
std::vector<Subcommand> subcommands() {
  using namespace ssmjit::tool;
  return {
      {"demo",
       "run every op family on small problems and check it against the float64 CPU reference (no GPU: compile "
       "the kernels and run the reference)",
       "Run every op family on small problems and check each output against the float64 CPU reference: "
       "selective_state_update (one token) and selective_state_update_tokens (L = 4) on Mamba-2 2.7B heads (fp32 "
       "and bf16 state, a pad row), mamba2_decode_step (fused replay and verify), causal_conv1d (a packed row with "
       "states through slots), causal_conv1d_update, causal_conv1d_backward, selective_scan and "
       "selective_scan_backward (packed rows, bf16), ssd (the SSD chunked scan forward: a packed row, bf16, states "
       "through slots). Prints each family's kernels and a table of the worst error "
       "against its bound and the time per call. Without a GPU: compile the same kernels for --arch, print their "
       "resources and run the CPU reference only. Exit 0 when everything passes, 1 otherwise.",
       defineDemoCommand},
      {"bench", "time selective_state_update(_tokens): us per call, bandwidth, host overhead, compile time",
       "Benchmark selective_state_update (--op ssu) or selective_state_update_tokens "
       "(--op ssu-tokens) on the GPU: µs per call (CUDA events over graphs of back-to-back calls, "
       "median of trials, inputs rotated beyond L2), achieved TB/s and % of the device-to-device "
       "copy bandwidth measured in the same run, for the tokens op L one-token calls from one CUDA "
       "graph (the state stays in L2 between them when it fits) and one cold one-token call (its "
       "state from DRAM, as a decode step finds it), host overhead per cached call and compile "
       "time. Ends with a Markdown table.",
       defineBenchCommand},
      {"bench-conv", "time causal_conv1d forward, backward (dense, packed) and update",
       "Benchmark causal_conv1d and causal_conv1d_backward (channel-first and channel-last, dense rows "
       "and one packed row of mixed-length sequences) and causal_conv1d_update on the GPU: µs per call, achieved TB/s "
       "and % of the copy bandwidth measured in the same run. Ends with a Markdown table.",
       defineConvBenchCommand},
      {"bench-decode", "time mamba2_decode_step: fused replay+verify against split and snapshots",
       "Benchmark one Mamba-2 mixer layer's speculative-decoding step (mamba2_decode_step) on the GPU: the verify "
       "pass alone, (a) the fused replay-and-verify launch, (b) replay then verify as two launches, (c) the snapshot "
       "convention (state written after every draft); µs per step (CUDA graphs) and state bytes per accepted token, "
       "with a mixed accept pattern. Ends with a Markdown table.",
       defineDecodeBenchCommand},
      {"bench-scan", "time selective_scan and its backward (dense rows, a long sequence, a packed row)",
       "Benchmark the Mamba-1 selective scan forward (selective_scan) and backward (selective_scan_backward, every "
       "gradient) on the GPU: dense rows, one long sequence and one packed row of mixed lengths; ms, TB/s, % of copy "
       "bandwidth, the forward's ratio to mamba_ssm's CUDA scan (anchors.md) and the packed row's to dense. Ends "
       "with a Markdown table.",
       defineScanBenchCommand},
      {"bench-ssd", "time ssd, the Mamba-2 SSD chunked scan forward (dense shapes, packed rows)",
       "Benchmark the Mamba-2 SSD chunked scan forward (ssd) on the GPU: dense BxL shapes (the defaults are "
       "scripts/peers/ssd.py's) and packed rows; ms per call, GB/s of the bytes the call must move and % of the "
       "copy bandwidth measured in the same run, TFLOP/s of the chunk products, a packed row against the dense "
       "cases of as many tokens. Ends with a Markdown table.",
       defineSsdBenchCommand},
      {"bench-norm",
       "time rms_norm (plain, fp32 residual in place), gated_rms_norm (groups, either gate order) and its backward",
       "Benchmark rms_norm (plain, and with mamba_ssm's pre-norm residual add: an fp32 residual updated in place) "
       "and gated_rms_norm (Mamba-2's grouped gated norm, the gate before and after the norm) and "
       "gated_rms_norm_backward on the GPU: µs per "
       "call, achieved TB/s of the row tensors read and written and % of the copy bandwidth measured in the same "
       "run. Ends with a Markdown table.",
       defineNormBenchCommand},
      {"generate", "load a Mamba-2 checkpoint and generate from token-id prompts on the GPU",
       "Load a Mamba-2 checkpoint directory (config.json and *.safetensors, Hugging Face or mamba_ssm naming, "
       "sharded or not) and generate from prompts given as token ids: the prompts prefilled as one packed row, then "
       "decode steps for all sequences at once as CUDA graphs, sampling on the GPU (greedy by default). Prints each "
       "sequence's new token ids, then prefill and decode tokens/s; a progress line on a terminal.",
       defineGenerateCommand},
      {"launch", "run a command as N processes, one per GPU, that meet as the ranks of a multi-GPU run",
       "Run COMMAND (after --) as N processes on this host, one per GPU, each with SSMJIT_RANK, "
       "SSMJIT_LOCAL_RANK, SSMJIT_WORLD_SIZE and SSMJIT_RENDEZVOUS (a fresh temporary file unless --rendezvous "
       "names one) and NCCL_NVLS_ENABLE=0 unless the environment sets it (NCCL's multicast stays off). "
       "E.g. `ssmjit launch -n 2 -- ssmjit generate --tp 2 --model DIR --prompt-ids 1,2,3`. Across hosts, start "
       "each process yourself with --rank and --rendezvous tcp://host0:port. Waits for all; a rank that fails "
       "makes the others stop with an error of their own within their --timeout; any still running --grace "
       "seconds later are killed. Exits with the first failure's status.",
       defineLaunchCommand},
      {"bench-parallel", "time a Mamba-2 layer's prefill over several GPUs: --tp N (tensor), --cp N (context)",
       "Benchmark one Mamba-2 layer's prefill (random weights, default Mamba-2 2.7B's shape with G 8) on one GPU, "
       "tensor parallel (--tp N, with --sequence-parallel: the residual stream split by tokens; a packed row of "
       "--seqlen sequences) or context parallel (--cp N: one sequence of --tokens, each GPU a contiguous part, "
       "states passed between them). One process per GPU: run it under `ssmjit launch -n N --`. Rank 0 prints ms "
       "per call, tokens/s and the bytes each rank's collectives send per call; under --tp, also the time of those "
       "collectives alone on the same rows and their share of the call. With --backward, also the prefill "
       "followed by the layer's backward (fp32 weight gradients, all-reduced over --cp ranks): ms per training "
       "step of the layer and the backward's share. With --mamba1-scan, the Mamba-1 selective scan of one "
       "sequence of --tokens (D --channels, N --scan-dstate) instead, on one GPU or by --cp (forward; with "
       "--backward, forward and backward); on one GPU also what a context-parallel part of that length adds (the "
       "correction by the incoming state; with --backward, that state's gradient).",
       defineParallelBenchCommand},
      {"bench-model", "time a Mamba-2 checkpoint's packed prefill and its decode steps (graphs and eager)",
       "Benchmark a Mamba-2 checkpoint directory on the GPU (random prompts): packed prefill of B prompts of L "
       "tokens (ms, tokens/s) and decode steps of every sequence at each --decode-batch, replayed as one CUDA graph "
       "a step and launched eagerly (ms a step, tokens/s). Ends with a Markdown table.",
       defineModelBenchCommand},
      {"inspect",
       "print one stage of a kernel (IR, CUDA C++, PTX, SASS, resources) for an op call or a recorded one; no GPU",
       "Print one stage of a kernel (no GPU needed): a kernel of a selective-state-update, Mamba-1 "
       "selective-scan, Mamba-2 decode-step or SSD chunked-scan call (--op), compiled for --arch with the "
       "specialisation the op builds for that call; "
       "or, with --spec, any kernel's specialisation from a manifest (an SSMJIT_RECORD line of a conv or "
       "decode-step call, say), compiled for its own arch. Stages: generic (the "
       "DSL's IR), specialized (after 'specialize'), after:<pass> with <pass> one of: " +
           passList() +
           "; cuda (generated CUDA C++), ptx, sass (via cuobjdump or nvdisasm) and resources "
           "(registers, shared memory, local/stack bytes, spills, compile time, global loads and stores by the "
           "bytes each moves).",
       defineInspectCommand},
      {"prewarm", "compile the kernels of a manifest into the disk cache; no GPU",
       "Compile every kernel of pre-warm manifests into the disk cache (no GPU needed), in parallel, "
       "then print one row per kernel (compiled, cached or failed with the reason) and a summary. "
       "Without MANIFEST: the embedded default manifest (the decode kernels of Mamba-2 2.7B and "
       "Mamba-1 2.8B for sm_90a and sm_80, the SSD scan's kernels of Mamba-2 2.7B, 1.3B and 780M heads for "
       "sm_90a; see --print-default). A manifest is one JSON document "
       "{\"ssmjit_manifest\": 1, \"entries\": [...]} or JSON Lines; an entry is an op call in the "
       "words of `ssmjit inspect`'s options ({\"op\": \"ssu-tokens\", \"archs\": [\"sm_90a\"], "
       "\"tokens\": [2, 4], \"no-z\": true}; lists multiply out) or a specialisation as SSMJIT_RECORD "
       "writes it. Exit 0 when every kernel is compiled or cached, 1 when any failed.",
       definePrewarmCommand},
      {"cache", "ls | stats | verify | clear the disk cache",
       "Look after the on-disk kernel cache: ls (entries, newest use first), stats (directory, state, "
       "size against the limit), verify (decode every blob; exit 1 if any is bad) and clear. "
       "Default directory: SSMJIT_CACHE_DIR, else $XDG_CACHE_HOME/ssmjit, else ~/.cache/ssmjit.",
       defineCacheCommand},
  };
}

std::string description(const std::vector<Subcommand>& commands) {
  std::string s =
      "ssmjit: JIT-compiled Mamba-1 / Mamba-2 GPU kernels (selective state update, Mamba-2 decode step, causal "
      "conv1d, selective scan, SSD chunked scan; C++ DSL -> MLIR -> CUDA C++ -> NVRTC -> CUBIN -> CUDA Driver API).\n";
  for (const Subcommand& c : commands) s += ssmjit::tool::strf("  %-15s %s\n", c.name, c.summary);
  return s +
         "Run 'ssmjit <command> --help' for each command's options.\n"
         "Exit codes: 0 ok, 1 failure or mismatch, 2 usage error.\n"
         "Sets CUDA_CACHE_DISABLE=1 unless the environment sets it, so that every NVRTC compile is cold and reports "
         "its resources (CUDA's JIT cache would otherwise serve repeat CUBINs).";
}

const char* errorKindName(ssmjit::Error::Kind k) {
  return ssmjit::enumName<ssmjit::Error::Kind::Internal>(
      k, {"invalid argument", "compile error", "CUDA error", "unavailable", "internal error"});
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ssmjit::tool;
  // Before anything can load NVRTC or the driver (they read it once): see ToolSupport.h.
  disableCudaJitCacheUnlessSet();
  CLI::App app{"", "ssmjit"};
  app.set_version_flag("--version", versionText, "Print the build id and the NVRTC version, then exit");
  app.require_subcommand(1);
  const std::vector<Subcommand> declared = subcommands();
  std::vector<std::pair<CLI::App*, CommandRun>> commands;
  for (const Subcommand& s : declared) {
    CLI::App* sub = app.add_subcommand(s.name, s.usage);
    commands.emplace_back(sub, s.define(sub));
  }
  app.description(description(declared));
  app.footer(environmentHelp());  // after the subcommands, which would inherit it

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version: printed by exit()
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }

  const char* name = "ssmjit";
  try {
    for (const auto& [sub, run] : commands) {
      if (!sub->parsed()) continue;
      name = sub->get_name().c_str();
      const int rc = run();
      std::fflush(stdout);
      return rc;
    }
    std::fprintf(stderr, "ssmjit: no subcommand given\n");
    return kExitUsage;
  } catch (const UsageError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "ssmjit %s: error: %s\nRun 'ssmjit %s --help' for the options.\n", name, e.what(), name);
    return kExitUsage;
  } catch (const ssmjit::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "ssmjit %s: %s: %s\n", name, errorKindName(e.kind()), e.what());
    return exitAfterFailure();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "ssmjit %s: error: %s\n", name, e.what());
    return exitAfterFailure();
  }
}
