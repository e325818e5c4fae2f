// `ssmjit prewarm`: compiles every kernel of pre-warm manifests (cache/Manifest.h) into the disk
// cache ahead of serving, with no GPU, over a pool of threads. A second run finds them all cached.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/KernelCache.h"
#include "cache/Manifest.h"
#include "compiler/Hash.h"
#include "compiler/Nvrtc.h"
#include "kernels_dsl/Registry.h"
#include "runtime/model/Mamba2Kernels.h"
#include "ssmjit/error.h"
#include "tools/CallOptions.h"
#include "tools/ToolSupport.h"

namespace ssmjit {
extern const char* const kDefaultManifest;  // tools/default_manifest.json, embedded at build time
}

namespace ssmjit::tool {
namespace {

constexpr const char* kDefaultSource = "default-manifest";

struct PrewarmOptions {
  std::vector<std::string> files;
  bool printDefault = false;
  int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool quiet = false;
  // --model: the kernels a Mamba-2 checkpoint's model runs with these options.
  std::string model;
  std::vector<std::string> archs{"sm_90a"};
  std::string dtype = "bf16", stateDtype = "fp32";
  int64_t maxBatch = 64, maxPrefillTokens = 16384, maxDraftTokens = 0;
  int tp = 1;
};

// One row of the closing table: a kernel of some manifest entry.
struct Job {
  std::string entry;  // "<file>:<line>"
  std::string label;
  std::string arch;
  Specialization spec;
  std::string error;       // set: failed (before compiling, or compiling)
  size_t original = 0;     // index of the first job with an equal spec (itself when not a duplicate)
  bool attempted = false;  // went to the compiler (else failed before, or a duplicate)
  KernelSource source = KernelSource::Compiled;
  double ms = 0;
};

// The first line of a message, for a table cell.
std::string firstLine(const std::string& msg) {
  std::string line = msg.substr(0, msg.find('\n'));
  constexpr size_t kMax = 160;
  if (line.size() > kMax) line = line.substr(0, kMax - 3) + "...";
  return line;
}

// One combination of an op entry, parsed as `ssmjit inspect` parses its command line: a fresh
// parser with exactly the call options, so the manifest's vocabulary is the command line's.
CheckedCall parseCall(std::vector<std::string> args) {
  CLI::App app{"", "prewarm-entry"};
  app.set_help_flag();  // "help" in a manifest is an unknown option, not a request
  CallOptions o;
  addCallOptions(&app, o);
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector last argument first
  app.parse(args);
  return checkCallOptions(o);
}

std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) s += (s.empty() ? "" : " ") + a;
  return s;
}

// The jobs of an op entry: the cartesian product over its list values and its archs.
void expandOpCall(const cache::OpCall& call, const std::string& where, std::vector<Job>& jobs) {
  std::vector<std::vector<std::string>> combos{{"--op=" + call.op}};
  auto multiply = [&combos](const std::string& name, const std::vector<std::string>& values) {
    std::vector<std::vector<std::string>> next;
    for (const auto& c : combos)
      for (const std::string& v : values) {
        next.push_back(c);
        if (v == "true")
          next.back().push_back("--" + name);
        else if (v != "false")  // a false flag is the default: nothing to pass
          next.back().push_back("--" + name + "=" + v);
      }
    combos = std::move(next);
  };
  for (const auto& [name, values] : call.options) multiply(name, values);
  multiply("arch", call.archs);
  std::set<std::string> reported;  // an unknown option fails every combination: say so once
  for (const auto& args : combos) {
    Job j;
    j.entry = where;
    try {
      const CheckedCall c = parseCall(args);
      for (size_t i = 0; i < c.specs.size(); ++i) {  // one job a launch of the call
        Job l = j;
        l.label = c.specs.size() == 1 ? c.label : strf("%s [launch %zu/%zu]", c.label.c_str(), i + 1, c.specs.size());
        l.arch = c.specs[i].arch;
        l.spec = c.specs[i];
        jobs.push_back(std::move(l));
      }
      continue;
    } catch (const CLI::ParseError& e) {
      j.error = e.what();
    } catch (const UsageError& e) {
      j.error = e.what();
    } catch (const Error& e) {
      j.error = e.what();
    }
    if (!j.error.empty()) {
      j.label = joined(args);
      j.arch = args.back().substr(args.back().find('=') + 1);  // the last argument is --arch=
      if (reported.insert(j.error).second)
        std::fprintf(stderr, "ssmjit prewarm: %s: %s: %s\n", where.c_str(), j.label.c_str(), j.error.c_str());
    }
    jobs.push_back(std::move(j));
  }
}

// A recorded specialisation, used as it is.
Job specJob(const Specialization& spec, const std::string& where) {
  Job j;
  j.entry = where;
  j.spec = spec;
  j.arch = spec.arch;
  const std::string canonical = spec.canonical();
  j.label = spec.kernel + " " +
            strf("%08llx", static_cast<unsigned long long>(hash::bytes64(canonical.data(), canonical.size()) >> 32));
  try {
    dsl::findKernel(spec.kernel);  // names the unknown kernel and lists the known ones
    checkArch(spec.arch, "arch");
  } catch (const Error& e) {
    j.error = e.what();
  } catch (const UsageError& e) {
    j.error = e.what();
  }
  if (!j.error.empty()) std::fprintf(stderr, "ssmjit prewarm: %s: %s\n", where.c_str(), j.error.c_str());
  return j;
}

// "[#####.....] 12/30 compiled 10, cached 2, failed 0", redrawn in place on a terminal.
class Progress {
 public:
  Progress(bool show, size_t total, size_t failedBefore)
      : show_(show), total_(total), failed_(failedBefore), done_(failedBefore) {
    draw();
  }
  void add(const Job& j) {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    if (!j.error.empty())
      ++failed_;
    else if (j.source == KernelSource::Compiled)
      ++compiled_;
    else
      ++cached_;
    draw();
  }
  void finish() {
    if (show_) std::fprintf(stderr, "\n");
  }

 private:
  void draw() const {
    if (!show_) return;
    constexpr size_t kWidth = 30;
    const size_t filled = total_ ? done_ * kWidth / total_ : kWidth;
    std::fprintf(stderr, "\r[%s%s] %zu/%zu compiled %zu, cached %zu, failed %zu", std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), done_, total_, compiled_, cached_, failed_);
    std::fflush(stderr);
  }
  std::mutex mu_;
  const bool show_;
  const size_t total_;
  size_t failed_, done_, compiled_ = 0, cached_ = 0;
};

// Compiles jobs[i] for every i in `todo` on `threads` threads.
void compileAll(std::vector<Job>& jobs, const std::vector<size_t>& todo, int threads, Progress& progress) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t t = next++; t < todo.size(); t = next++) {
      Job& j = jobs[todo[t]];
      j.attempted = true;
      const WallTimer timer;
      try {
        j.source = lookupOrCompileKernel(j.spec).source;
      } catch (const std::exception& e) {  // ssmjit::Error with NVRTC's log, or anything else
        j.error = e.what();
        if (j.error.empty()) j.error = "unknown error";
      }
      j.ms = timer.ms();
      progress.add(j);
    }
  };
  std::vector<std::thread> pool;
  const size_t n = std::min<size_t>(static_cast<size_t>(threads), todo.size());
  for (size_t i = 1; i < n; ++i) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
}

std::string resultCell(const Job& j, bool duplicate) {
  if (!j.error.empty()) return "failed: " + firstLine(j.error);
  if (duplicate) return "cached (memory)";
  if (j.source == KernelSource::Compiled) return "compiled";
  return std::string("cached (") + kernelSourceName(j.source) + ")";
}

int runPrewarm(const PrewarmOptions& o) {
  if (o.tp > 1 && o.model.empty()) throw UsageError("--tp " + std::to_string(o.tp) + " needs --model DIR");
  if (o.printDefault) {
    std::fputs(kDefaultManifest, stdout);
    return kExitOk;
  }
  // Read and parse every manifest before compiling anything: a bad file stops the run.
  std::vector<std::pair<std::string, std::string>> sources;  // name, text
  if (o.files.empty() && o.model.empty()) sources.emplace_back(kDefaultSource, kDefaultManifest);
  for (const std::string& f : o.files) sources.emplace_back(f, readManifestFile(f));
  std::vector<Job> jobs;
  for (const auto& [name, text] : sources)
    for (const cache::ManifestEntry& e : cache::parseManifest(text, name).entries) {
      const std::string where = name + ":" + std::to_string(e.line);
      if (e.kind == cache::ManifestEntry::Kind::OpCall)
        expandOpCall(e.call, where, jobs);
      else
        jobs.push_back(specJob(e.spec, where));
    }
  if (!o.model.empty()) {
    Mamba2ModelOptions mo;
    mo.dtype = parseFloatDType(o.dtype, "--dtype");
    mo.state_dtype = parseFloatDType(o.stateDtype, "--state-dtype");
    mo.max_batch = o.maxBatch;
    mo.max_prefill_tokens = o.maxPrefillTokens;
    mo.max_draft_tokens = o.maxDraftTokens;
    for (const std::string& arch : o.archs) {
      checkArch(arch, "--arch");
      for (const Specialization& s : detail::mamba2ModelSpecializations(o.model, mo, arch, o.tp))
        jobs.push_back(specJob(s, "model " + o.model + (o.tp > 1 ? " (tp " + std::to_string(o.tp) + ")" : "")));
    }
  }

  std::string why;
  if (!nvrtcAvailable(&why)) {
    std::fprintf(stderr, "ssmjit prewarm: NVRTC is not available (%s): cannot compile kernels\n", why.c_str());
    return kExitFailure;
  }
  cache::DiskCache& disk = processDiskCache();  // configured now: its warnings come before the bar

  // Equal specialisations compile once; later copies report the first one's result.
  std::unordered_map<Specialization, size_t, SpecializationHash> first;
  std::vector<size_t> todo;
  size_t failedBefore = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].original = i;
    if (!jobs[i].error.empty()) {
      ++failedBefore;
      continue;
    }
    const auto [it, isNew] = first.emplace(jobs[i].spec, i);
    if (isNew)
      todo.push_back(i);
    else
      jobs[i].original = it->second;
  }

  const WallTimer total;
  Progress progress(!o.quiet && ::isatty(STDERR_FILENO), todo.size() + failedBefore, failedBefore);
  compileAll(jobs, todo, o.jobs, progress);
  progress.finish();
  const double seconds = total.ms() / 1000.0;

  size_t compiled = 0, cached = 0, failed = 0;
  double summed = 0, longest = 0;  // over the kernels compiled or loaded: the serial time and the longest chain
  for (const size_t i : todo) summed += jobs[i].ms, longest = std::max(longest, jobs[i].ms);
  Table table({"entry", "kernel", "arch", "ms", "result"});  // the result, maybe long, last
  for (size_t i = 0; i < jobs.size(); ++i) {
    const bool duplicate = jobs[i].original != i;
    const Job& j = jobs[jobs[i].original];
    const Job& row = jobs[i];
    if (!j.error.empty())
      ++failed;
    else if (duplicate || j.source != KernelSource::Compiled)
      ++cached;
    else
      ++compiled;
    if (row.attempted && !row.error.empty())  // the table shows its first line
      std::fprintf(stderr, "ssmjit prewarm: %s: %s (%s) failed: %s\n", row.entry.c_str(), row.label.c_str(),
                   row.arch.c_str(), row.error.c_str());
    table.add({row.entry, row.label, row.arch, row.attempted ? strf(row.ms < 10 ? "%.2f" : "%.1f", row.ms) : "",
               resultCell(j, duplicate)});
  }
  if (!table.empty()) table.printText();

  const std::string dir = disk.config().dir.empty() ? "(none)" : disk.config().dir;
  std::printf(
      "prewarm: %s: %zu compiled, %zu cached, %zu failed in %.1f s with %s (%.1f s summed over the kernels, "
      "the longest %.1f s); cache %s (%s)\n",
      counted(jobs.size(), "kernel", "kernels").c_str(), compiled, cached, failed, seconds,
      counted(static_cast<size_t>(o.jobs), "job", "jobs").c_str(), summed / 1000.0, longest / 1000.0, dir.c_str(),
      diskCacheState(disk).c_str());
  if (compiled > 0 && !disk.writable())
    std::printf("prewarm: the disk cache is not writable: %s NOT persisted\n",
                counted(compiled, "compiled kernel was", "compiled kernels were").c_str());
  return failed ? kExitFailure : kExitOk;
}

}  // namespace

CommandRun definePrewarmCommand(CLI::App* app) {
  auto o = std::make_shared<PrewarmOptions>();
  CLI::Option* files = app->add_option("MANIFEST", o->files, "Manifest files (default: the embedded one)");
  app->add_flag("--print-default", o->printDefault, "Print the embedded default manifest and exit")->excludes(files);
  app->add_option("--jobs,-j", o->jobs, "Kernels compiled at once (default: the number of cores)")
      ->check(atLeast(1))
      ->capture_default_str();
  app->add_flag("--quiet,-q", o->quiet, "No progress bar on stderr");
  app->add_option("--model", o->model,
                  "A Mamba-2 checkpoint directory: compile every kernel its model runs (prefill of any length "
                  "up to --max-prefill-tokens, decode at each power-of-two batch up to --max-batch, sampling); only "
                  "its config.json is read")
      ->check(CLI::ExistingDirectory);
  app->add_option("--arch", o->archs, "With --model: NVRTC targets")->capture_default_str();
  addFloatDTypeOption(app, "--dtype", o->dtype, "With --model: activations and weights (fp32, bf16, fp16)");
  addFloatDTypeOption(app, "--state-dtype", o->stateDtype, "With --model: the SSM state (fp32, bf16, fp16)");
  app->add_option("--max-batch", o->maxBatch, "With --model: sequences decoded at once")
      ->check(atLeast(1))
      ->capture_default_str();
  app->add_option("--max-prefill-tokens", o->maxPrefillTokens, "With --model: the largest packed prefill")
      ->check(atLeast(1))
      ->capture_default_str();
  app->add_option("--draft", o->maxDraftTokens,
                  "With --model: speculative decoding's verify of this many drafts (generate --draft)")
      ->check(CLI::Range(int64_t{0}, int64_t{kMaxTokens - 1}))
      ->capture_default_str();
  app->add_option("--tp", o->tp,
                  "With --model: the kernels of one rank of the model split over N GPUs by tensor parallelism "
                  "(generate --tp N; the same on every rank)")
      ->check(atLeast(1))
      ->capture_default_str();
  return [o] { return runPrewarm(*o); };
}

}  // namespace ssmjit::tool
