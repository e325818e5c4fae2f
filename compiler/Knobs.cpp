#include "compiler/Knobs.h"

#include <cstdlib>
#include <cstring>

#include "ssmjit/error.h"

namespace ssmjit {

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> k = {
      {"SSMJIT_CACHE_DIR", false,
       "Disk kernel cache directory (default $XDG_CACHE_HOME/ssmjit, else ~/.cache/ssmjit). Missing and "
       "uncreatable, or read-only: kernels stay in memory (a read-only cache still serves hits); one warning."},
      {"SSMJIT_CACHE_MAX_BYTES", false,
       "Size bound of the disk cache, bytes or with K/M/G suffix (default 2G); least recently used entries go first."},
      {"SSMJIT_ALWAYS_COMPILE", false, "1: bypass the disk cache (neither read nor write); always run the compiler."},
      {"SSMJIT_RECORD", false,
       "FILE: append every specialisation this process uses to FILE (JSON Lines manifest for `ssmjit prewarm`)."},
      {"SSMJIT_DUMP_DIR", false,
       "DIR: write the CUDA C++ of every kernel the pipeline generates to DIR/<kernel>-<key hash>.cu (the first "
       "line names the specialisation)."},
      {"SSMJIT_FORCE_PTX", false, "1: load kernels from their PTX (driver JIT) instead of the CUBIN."},
      {"SSMJIT_NVRTC_OPTIONS", true, "Extra NVRTC options, space-separated (e.g. -lineinfo for profilers)."},
      {"SSMJIT_META", false,
       "KERNEL:NAME=V,...[;KERNEL:...]: set meta values (BLOCK_D, BLOCK_T, num_warps, ...) of a kernel instead "
       "of its heuristic, for tuning (e.g. causal_conv1d_fwd:BLOCK_D=256,num_warps=2). They are part of the "
       "specialisation, so of its cache key. A value the op binds itself for a call (all but min_blocks and "
       "num_warps) is refused when it differs."},
      {"XDG_CACHE_HOME", false, "Base of the default disk cache directory ($XDG_CACHE_HOME/ssmjit)."},
      {"HOME", false, "Base of the default disk cache directory without XDG_CACHE_HOME (~/.cache/ssmjit)."},
      {"CUDA_HOME", false, "Where NVRTC is looked for after the loader path (its version and build are in the key)."},
      {"CUDA_PATH", false, "As CUDA_HOME."},
      {"SSMJIT_RANK", false,
       "This process's rank in a multi-GPU run (set by `ssmjit launch`; --rank overrides it)."},
      {"SSMJIT_WORLD_SIZE", false, "The number of processes of a multi-GPU run (set by `ssmjit launch`)."},
      {"SSMJIT_LOCAL_RANK", false,
       "This process's GPU on its host (set by `ssmjit launch`; default: the rank modulo the GPU count)."},
      {"SSMJIT_RENDEZVOUS", false,
       "Where the ranks of a multi-GPU run meet: a fresh file path or tcp://host:port (set by `ssmjit launch`; "
       "--rendezvous overrides it)."},
      {"SSMJIT_TP_OVERLAP_PIECES", false,
       "N >= 1: a tensor-parallel prefill runs out_proj in N row pieces, each piece's all-reduce overlapping the "
       "next piece's GEMM (default: 4 from 4096 rows on, else 1; 1: one all-reduce after out_proj)."},
  };
  return k;
}

std::string knobValue(const char* name) {
  for (const Knob& k : knobs())
    if (std::strcmp(k.name, name) == 0) {
      const char* v = std::getenv(name);
      return v ? v : "";
    }
  throw Error(Error::Kind::Internal, std::string("knobValue: '") + name +
                                         "' is not declared in compiler/Knobs.cpp (every environment variable "
                                         "ssmjit reads must be, as code-changing or neutral)");
}

std::string codeChangingKnobs() {
  std::string out;
  for (const Knob& k : knobs())
    if (k.changesCode) out += std::string(k.name) + "=" + knobValue(k.name) + "\n";
  return out;
}

}  // namespace ssmjit
