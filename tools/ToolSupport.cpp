#include "tools/ToolSupport.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <system_error>

#include "cache/DiskCache.h"
#include "compiler/Pipeline.h"
#include "ssmjit/enum_name.h"

namespace ssmjit::tool {

namespace {
bool gJitCacheDisabledByTool = false;
}

void disableCudaJitCacheUnlessSet() {
  if (std::getenv("CUDA_CACHE_DISABLE") != nullptr) return;
  gJitCacheDisabledByTool = ::setenv("CUDA_CACHE_DISABLE", "1", 0) == 0;
}

bool cudaJitCacheMayServe() {
  const char* v = std::getenv("CUDA_CACHE_DISABLE");
  return !(v && std::string(v) == "1");
}

std::string cudaJitCacheNote() {
  if (gJitCacheDisabledByTool)
    return "CUDA's JIT cache off (CUDA_CACHE_DISABLE=1, set by ssmjit): every compile is cold";
  const char* v = std::getenv("CUDA_CACHE_DISABLE");
  if (v && std::string(v) == "1") return "CUDA's JIT cache off (CUDA_CACHE_DISABLE=1 from the environment)";
  return std::string("CUDA_CACHE_DISABLE=") + (v ? v : "") +
         " from the environment: a CUBIN from CUDA's JIT cache compiles faster and reports no resources";
}

CLI::Validator atLeast(long long lo) {
  return CLI::Validator(
      [lo](std::string& v) -> std::string {
        long long x = 0;
        size_t used = 0;
        try {
          x = std::stoll(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != v.size()) return "'" + v + "' is not an integer";
        if (x < lo) return "is " + v + ", expected at least " + std::to_string(lo);
        return "";
      },
      ">=" + std::to_string(lo), "at least");
}

void addTrialOptions(CLI::App* app, int& iters, int& trials, uint64_t& seed, const char* itersHelp) {
  app->add_option("--iters", iters, itersHelp)->check(atLeast(1))->capture_default_str();
  app->add_option("--trials", trials, "Trials; the median is reported")->check(atLeast(1))->capture_default_str();
  app->add_option("--seed", seed, "Random seed")->capture_default_str();
}

std::array<CLI::Option*, 3> addRowOptions(CLI::App* app, int64_t& batch, int64_t& seqlen, int64_t& packedTokens,
                                          int64_t& minLen, int64_t& maxLen) {
  app->add_option("--batch", batch, "Dense rows")->capture_default_str();
  app->add_option("--seqlen", seqlen, "Dense row length")->capture_default_str();
  return {app->add_option("--packed-tokens", packedTokens, "Tokens of the packed row")->capture_default_str(),
          app->add_option("--min-len", minLen, "Shortest packed sequence")->capture_default_str(),
          app->add_option("--max-len", maxLen, "Longest packed sequence")->capture_default_str()};
}

std::string passList() {
  std::string s;
  for (const std::string& p : pipelinePassNames()) s += (s.empty() ? "" : ", ") + p;
  return s;
}

DType parseFloatDType(const std::string& name, const char* option) {
  if (name == "fp32") return DType::F32;
  if (name == "bf16") return DType::BF16;
  if (name == "fp16") return DType::F16;
  throw UsageError(std::string(option) + " is '" + name + "', expected fp32, bf16 or fp16");
}

const char* shortDTypeName(DType t) { return enumName<DType::I64>(t, {"fp32", "fp16", "bf16", "i32", "i64"}); }

const std::vector<std::string>& stateWriteNames() {
  static const std::vector<std::string> names = {"final", "none", "per-token"};
  return names;
}

StateWrite parseStateWrite(const std::string& name, const char* option) {
  for (StateWrite w : {StateWrite::Final, StateWrite::None, StateWrite::PerToken})
    if (name == stateWriteName(w)) return w;
  throw UsageError(std::string(option) + " is '" + name + "', expected final, none or per-token");
}

const char* stateWriteName(StateWrite w) { return stateWriteNames().at(static_cast<size_t>(w)).c_str(); }

void checkArch(const std::string& arch, const char* option) {
  static const std::regex re("(sm|compute)_[0-9]{2,3}[af]?");
  if (!std::regex_match(arch, re))
    throw UsageError(std::string(option) + " is '" + arch +
                     "', expected an NVRTC target such as sm_90a, sm_90, sm_80 or compute_90");
}

std::string diskCacheState(const cache::DiskCache& disk) {
  if (disk.readable() && disk.writable()) return "writable";
  const std::string why = disk.degradedReason();
  return std::string(disk.readable() ? "read-only" : "memory only") + (why.empty() ? "" : ": " + why);
}

std::string strf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(s.data(), s.size() + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

std::string counted(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {
// Display width of UTF-8 text (µ and × count as one column).
size_t displayWidth(const std::string& s) {
  size_t w = 0;
  for (unsigned char c : s) w += (c & 0xC0) != 0x80;
  return w;
}
}  // namespace

void Table::printText() const {
  std::vector<size_t> width(header_.size(), 0);
  for (size_t i = 0; i < header_.size(); ++i) width[i] = displayWidth(header_[i]);
  for (const auto& r : rows_)
    for (size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max(width[i], displayWidth(r[i]));
  auto line = [&](const std::vector<std::string>& r) {
    std::string out;
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < r.size() ? r[i] : "";
      out += cell + std::string(width[i] - displayWidth(cell) + 2, ' ');
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    std::printf("%s\n", out.c_str());
  };
  line(header_);
  for (const auto& r : rows_) line(r);
}

void Table::printMarkdown() const {
  auto line = [&](const std::vector<std::string>& r) {
    std::string out = "|";
    for (size_t i = 0; i < header_.size(); ++i) out += " " + (i < r.size() ? r[i] : "") + " |";
    std::printf("%s\n", out.c_str());
  };
  line(header_);
  std::string sep = "|";
  for (size_t i = 0; i < header_.size(); ++i) sep += "---|";
  std::printf("%s\n", sep.c_str());
  for (const auto& r : rows_) line(r);
}

std::vector<int64_t> mixedLengths(int64_t total, int64_t lo, int64_t hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> len(lo, hi);
  std::vector<int64_t> v;
  int64_t left = total;
  while (left > hi + lo) {
    const int64_t l = len(rng);
    v.push_back(l);
    left -= l;
  }
  if (left > hi) {
    v.push_back(left / 2);
    left -= left / 2;
  }
  v.push_back(left);
  return v;
}

std::string readManifestFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UsageError("manifest '" + path + "' is a directory, expected a JSON or JSON Lines file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read manifest '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw UsageError("cannot read manifest '" + path + "': " + std::strerror(errno));
  return text.str();
}

std::string absentInputsLabel(bool hasD, bool hasZ, bool dtBias, bool softplus) {
  std::string l;
  if (!hasD) l += " no-D";
  if (!hasZ) l += " no-z";
  if (!dtBias) l += " no-dt-bias";
  if (!softplus) l += " no-softplus";
  return l;
}

void* fakeDeviceAddress(int k) { return reinterpret_cast<void*>(static_cast<uintptr_t>(k) << 20); }

TensorView fakeDeviceView(int k, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fakeDeviceAddress(k), t, shape);
}

CLI::Option* addFloatDTypeOption(CLI::App* app, const std::string& name, std::string& dtype, const std::string& help) {
  return app->add_option(name, dtype, help)->check(CLI::IsMember(floatDTypeNames()))->capture_default_str();
}

void addModelOptions(CLI::App* app, std::string& model, std::string& dtype, std::string& stateDtype) {
  app->add_option("--model", model, "Checkpoint directory: config.json and *.safetensors (Hugging Face or mamba_ssm)")
      ->required()
      ->check(CLI::ExistingDirectory);
  addFloatDTypeOption(app, "--dtype", dtype, "Activations and weights: fp32, bf16, fp16");
  addFloatDTypeOption(app, "--state-dtype", stateDtype, "The SSM state per sequence: fp32, bf16, fp16");
}

}  // namespace ssmjit::tool
