// What every `ssmjit` subcommand shares: exit codes, the usage-error type, dtype, write-mode and arch
// names on the command line, a wall clock, and number formatting for tables.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/tensor.h"

namespace CLI {
class App;
class Option;
class Validator;
}  // namespace CLI
namespace ssmjit::cache {
class DiskCache;
}

namespace ssmjit::tool {

// Exit codes of every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // a check failed, a mismatch, CUDA or compile error
inline constexpr int kExitUsage = 2;    // bad arguments

// A bad command line found after parsing (e.g. arguments that contradict each other). main()
// prints it with a pointer to --help and exits with kExitUsage.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// f(), whose op rejecting the call the command's options describe (Error::Kind::InvalidArgument)
// is a usage error: "the <options> options give an invalid call: <the op's message>".
template <class F>
auto invalidCallIsUsageError(const std::string& options, F f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    if (e.kind() != Error::Kind::InvalidArgument) throw;
    throw UsageError("the " + options + " options give an invalid call: " + e.what());
  }
}

// A subcommand as its file defines it: adds its options to `app` (named and described by the table
// in ssmjit.cpp) and returns what runs when it is chosen.
using CommandRun = std::function<int()>;
CommandRun defineDemoCommand(CLI::App* app);
CommandRun defineBenchCommand(CLI::App* app);
CommandRun defineConvBenchCommand(CLI::App* app);
CommandRun defineDecodeBenchCommand(CLI::App* app);
CommandRun defineScanBenchCommand(CLI::App* app);
CommandRun defineSsdBenchCommand(CLI::App* app);
CommandRun defineNormBenchCommand(CLI::App* app);
CommandRun defineGenerateCommand(CLI::App* app);
CommandRun defineLaunchCommand(CLI::App* app);
CommandRun defineParallelBenchCommand(CLI::App* app);
CommandRun defineModelBenchCommand(CLI::App* app);
CommandRun defineInspectCommand(CLI::App* app);
CommandRun definePrewarmCommand(CLI::App* app);
CommandRun defineCacheCommand(CLI::App* app);
std::string passList();  // the compiler's passes, for inspect's --stage after:<pass>

// --model (a checkpoint directory, required), --dtype and --state-dtype: every command that loads a
// Mamba-2 model's checkpoint or config.
void addModelOptions(CLI::App* app, std::string& model, std::string& dtype, std::string& stateDtype);

// --iters (help `itersHelp`, at least 1), --trials (at least 1; the median is reported) and --seed:
// every benchmark's.
void addTrialOptions(CLI::App* app, int& iters, int& trials, uint64_t& seed, const char* itersHelp);

// The sequence benchmarks' rows: --batch dense rows of --seqlen tokens, and a packed row of
// --packed-tokens in sequences drawn from --min-len to --max-len tokens. Returns the three packed
// row options (for an option that replaces them to exclude).
std::array<CLI::Option*, 3> addRowOptions(CLI::App* app, int64_t& batch, int64_t& seqlen, int64_t& packedTokens,
                                          int64_t& minLen, int64_t& maxLen);

// CUDA's JIT cache (~/.nv/ComputeCache) also serves NVRTC's PTX -> CUBIN step where a driver is
// installed: a cached CUBIN comes back without ptxas' report (registers, spills: unknown) and in a
// fraction of the compile time, so resource reports and compile times would depend on what ran
// on the machine before. main() therefore sets CUDA_CACHE_DISABLE=1 unless the environment
// already sets CUDA_CACHE_DISABLE. Returns what is in effect, for reports.
void disableCudaJitCacheUnlessSet();
std::string cudaJitCacheNote();
bool cudaJitCacheMayServe();  // CUDA_CACHE_DISABLE is not "1"

// A CLI11 check: the value (each value, for lists) is an integer >= lo.
CLI::Validator atLeast(long long lo);

// Command-line dtype names: fp32, bf16, fp16.
inline const std::vector<std::string>& floatDTypeNames() {
  static const std::vector<std::string> names{"fp32", "bf16", "fp16"};
  return names;
}
// An option taking one of floatDTypeNames(), its default shown in --help.
CLI::Option* addFloatDTypeOption(CLI::App* app, const std::string& name, std::string& dtype, const std::string& help);
// Throws UsageError naming `option` for anything but fp32, bf16 or fp16.
DType parseFloatDType(const std::string& name, const char* option);
const char* shortDTypeName(DType t);  // "fp32", "bf16", "fp16", "i32", "i64"

// "final", "none", "per-token" (in StateWrite's order); parseStateWrite throws UsageError naming
// `option` otherwise.
const std::vector<std::string>& stateWriteNames();
StateWrite parseStateWrite(const std::string& name, const char* option);
const char* stateWriteName(StateWrite w);

// "sm_90a", "sm_80", "compute_90", ...: throws UsageError naming `option` otherwise, so that a
// typo is caught before NVRTC prints a less direct message.
void checkArch(const std::string& arch, const char* option);

// The label words of the --no-D, --no-z, --no-dt-bias and --no-softplus flags that are set, each
// after a space (call labels of every op that takes them).
std::string absentInputsLabel(bool hasD, bool hasZ, bool dtBias, bool softplus);

// Fake device address k MiB (k >= 1): distinct per k and 16-byte-aligned like cuMemAlloc's
// buffers, enough for an op's check and its specialisation with no GPU.
void* fakeDeviceAddress(int k);
// A contiguous device view at fake address k.
TensorView fakeDeviceView(int k, DType t, std::initializer_list<int64_t> shape);

// The text of a manifest file (prewarm, inspect --spec); throws UsageError naming the path and why.
std::string readManifestFile(const std::string& path);

// What a disk cache can do, for reports: "writable", "read-only: <why>" or "memory only: <why>".
std::string diskCacheState(const cache::DiskCache& disk);

class WallTimer {
 public:
  WallTimer() : t0_(std::chrono::steady_clock::now()) {}
  double ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

// printf-style formatting into a std::string (tables, messages).
std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// "1 entry", "3 entries".
std::string counted(size_t n, const char* one, const char* many);

// Sequence lengths in [lo, hi] summing to `total` exactly (the benchmarks' packed rows), drawn
// uniformly with `seed`; the last ones absorb the remainder, every length staying in range.
std::vector<int64_t> mixedLengths(int64_t total, int64_t lo, int64_t hi, uint64_t seed);

// Median of a non-empty list (sorts a copy).
double median(std::vector<double> v);

// A fixed-width text table (for terminals) or a Markdown table, printed to stdout.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void printText() const;
  void printMarkdown() const;
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace ssmjit::tool
