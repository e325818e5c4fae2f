// `ssmjit inspect`: prints one stage of a kernel: the generic IR the DSL builds, the IR after any
// pass, the CUDA C++, the PTX, SASS (through cuobjdump or nvdisasm, where installed) or the
// resource report. Needs no GPU. The kernel is one the op builds for a call given by options
// (--op: a selective-state-update call, a Mamba-1 selective scan, a Mamba-2 decode step or SSD
// chunked scan; compiled for --arch), or any kernel's specialisation read from a manifest
// (--spec: an SSMJIT_RECORD line, e.g. of a conv call, compiled for its arch).
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cache/Manifest.h"
#include "compiler/Nvrtc.h"
#include "compiler/Pipeline.h"
#include "kernels_dsl/CompileKernel.h"
#include "kernels_dsl/Registry.h"
#include "runtime/OpSpecializations.h"
#include "ssmjit/error.h"
#include "tools/CallOptions.h"
#include "tools/PtxAccesses.h"
#include "tools/SsuCall.h"
#include "tools/ToolSupport.h"

extern char** environ;

namespace ssmjit::tool {
namespace {

struct InspectOptions {
  CallOptions call;
  std::string stage;
  std::string specFile;  // set: inspect a manifest's specialisation instead of the call options
  int entry = 1;         // which entry of specFile (1-based)
  int launch = 0;        // which of the call's launches (1-based; 0: the last)
  const CLI::App* app = nullptr;
};

// --spec names the whole kernel: a call option beside it would be silently ignored, so refuse it.
void refuseCallOptionsBesideSpec(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options())
    if (opt->count() > 0 && opt->get_name() != "--stage" && opt->get_name() != "--spec" && opt->get_name() != "--entry")
      throw UsageError(opt->get_name() +
                       " describes an op call; --spec gives the whole specialisation (its "
                       "arch included), so leave the call options out");
}

// Entry `entry` of the manifest `path`, which must be a specialisation (as SSMJIT_RECORD writes).
Specialization manifestSpecialization(const std::string& path, int entry) {
  const cache::Manifest m = cache::parseManifest(readManifestFile(path), path);
  if (m.entries.empty()) throw UsageError("--spec '" + path + "' has no entries, expected at least one specialisation");
  if (entry < 1 || static_cast<size_t>(entry) > m.entries.size())
    throw UsageError(strf("--entry %d: '%s' has %zu entries, expected 1..%zu", entry, path.c_str(), m.entries.size(),
                          m.entries.size()));
  const cache::ManifestEntry& e = m.entries[entry - 1];
  if (e.kind != cache::ManifestEntry::Kind::Specialization)
    throw UsageError(
        strf("--entry %d: %s:%d is an op call (\"op\": \"%s\"), expected a specialisation "
             "({\"kernel\": ..., \"bindings\": ...}); give an op call's shape as options instead",
             entry, path.c_str(), e.line, e.call.op.c_str()));
  dsl::findKernel(e.spec.kernel);  // names an unknown kernel and lists the known ones
  checkArch(e.spec.arch, "--spec arch");
  return e.spec;
}

// --stage, resolved: the name the pipeline reports the stage under (onStage), or a stage that
// needs NVRTC's output.
struct Stage {
  enum Kind { Ir, Cuda, Ptx, Sass, Resources } kind = Ir;
  std::string pipelineName;  // for Ir: "generic" or a pass name
};

// Returns "" if `s` is a valid --stage, else the reason (CLI11 prints it as a usage error).
std::string stageError(const std::string& s) {
  static const char* fixed[] = {"generic", "specialized", "cuda", "ptx", "sass", "resources"};
  for (const char* f : fixed)
    if (s == f) return "";
  if (s.rfind("after:", 0) == 0) {
    const std::string pass = s.substr(6);
    for (const std::string& p : pipelinePassNames())
      if (p == pass) return "";
    return "unknown pass '" + pass + "' in '" + s + "', expected one of: " + passList();
  }
  return "'" + s + "' is not a stage, expected generic, specialized, after:<pass> (pass one of: " + passList() +
         "), cuda, ptx, sass or resources";
}

Stage parseStage(const std::string& s) {
  const std::string err = stageError(s);
  if (!err.empty()) throw UsageError("--stage: " + err);
  if (s == "generic") return {Stage::Ir, "generic"};
  if (s == "specialized") return {Stage::Ir, "specialize"};
  if (s == "cuda") return {Stage::Cuda, "cuda"};
  if (s == "ptx") return {Stage::Ptx, ""};
  if (s == "sass") return {Stage::Sass, ""};
  if (s == "resources") return {Stage::Resources, ""};
  return {Stage::Ir, s.substr(6)};
}

// ---------------------------------------------------------------------------------------------
// SASS through the CUDA toolkit's disassemblers.

bool executable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

// The first of cuobjdump, nvdisasm found on PATH, then in the CUDA toolkit directories.
std::string findDisassembler(std::string* tried) {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    size_t start = 0;
    while (start <= p.size()) {
      const size_t end = p.find(':', start);
      const std::string dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
      if (!dir.empty()) dirs.push_back(dir);
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  std::vector<std::string> toolkit;
#ifdef SSMJIT_CUDA_HOME
  toolkit.push_back(std::string(SSMJIT_CUDA_HOME) + "/bin");
#endif
  if (std::find(toolkit.begin(), toolkit.end(), "/usr/local/cuda/bin") == toolkit.end())
    toolkit.push_back("/usr/local/cuda/bin");
  dirs.insert(dirs.end(), toolkit.begin(), toolkit.end());
  for (const char* tool : {"cuobjdump", "nvdisasm"})
    for (const std::string& d : dirs) {
      const std::string candidate = d + "/" + tool;
      if (executable(candidate)) return candidate;
    }
  *tried = "cuobjdump and nvdisasm on PATH and in";
  for (size_t i = 0; i < toolkit.size(); ++i) *tried += (i ? ", " : " ") + toolkit[i];
  return "";
}

// A temporary file removed when this goes out of scope.
class TempFile {
 public:
  explicit TempFile(const std::vector<char>& bytes) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir && *dir ? dir : "/tmp") + "/ssmjit-inspect-XXXXXX.cubin";
    const int fd = ::mkstemps(path_.data(), 6);
    if (fd < 0)
      throw Error(Error::Kind::Internal,
                  "inspect: cannot create a temporary file " + path_ + ": " + std::strerror(errno));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int e = errno;
        ::close(fd);
        ::unlink(path_.c_str());
        throw Error(Error::Kind::Internal, "inspect: cannot write the CUBIN to " + path_ + ": " + std::strerror(e));
      }
      done += static_cast<size_t>(n);
    }
    ::close(fd);
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `argv` with our stdout and stderr; returns its exit status (or throws if it cannot start).
int runProgram(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ);
  if (rc != 0) throw Error(Error::Kind::Internal, "inspect: cannot start " + argv[0] + ": " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw Error(Error::Kind::Internal, "inspect: waitpid for " + argv[0] + ": " + std::strerror(errno));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int printSass(const CompiledKernel& k) {
  if (k.cubin.empty()) {
    std::fprintf(stderr,
                 "ssmjit inspect: no CUBIN for --arch %s (a compute_ target yields PTX only): SASS "
                 "needs an sm_ target, e.g. sm_90a\n",
                 k.arch.c_str());
    return kExitFailure;
  }
  std::string tried;
  const std::string tool = findDisassembler(&tried);
  if (tool.empty()) {
    std::fprintf(stderr,
                 "ssmjit inspect: no SASS disassembler found (looked for %s); install the CUDA "
                 "toolkit's cuobjdump or nvdisasm (PyPI's nvidia-cuda-nvdisasm holds nvdisasm: put its "
                 "nvidia/cu13/bin on PATH), or use --stage ptx\n",
                 tried.c_str());
    return kExitFailure;
  }
  const TempFile cubin(k.cubin);
  const bool isCuobjdump = tool.size() >= 9 && tool.compare(tool.size() - 9, 9, "cuobjdump") == 0;
  const std::vector<std::string> argv = isCuobjdump ? std::vector<std::string>{tool, "--dump-sass", cubin.path()}
                                                    : std::vector<std::string>{tool, "--print-code", cubin.path()};
  const int rc = runProgram(argv);
  if (rc != 0) {
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    std::fprintf(stderr, "ssmjit inspect: `%s` exited with status %d\n", cmd.c_str(), rc);
    return kExitFailure;
  }
  return kExitOk;
}

// ---------------------------------------------------------------------------------------------

std::string figure(int v, const char* unit) {
  if (v >= 0) return std::to_string(v) + unit;
  return cudaJitCacheMayServe() ? "n/a (ptxas printed no report: " + cudaJitCacheNote() + ")"
                                : std::string("n/a (ptxas printed no report)");
}

// `call` is set for an op call given by options (it has a call label; a selective-state-update
// call also a grid); `launch` is the 1-based launch of it shown.
void printResources(const CompiledKernel& k, const Specialization& spec, const CheckedCall* call, size_t launch,
                    double wallMs) {
  const ResourceUsage& r = k.resources;
  const auto lines = std::count(k.ptx.begin(), k.ptx.end(), '\n');
  std::printf("kernel      %s\n", k.entry.c_str());
  std::printf("arch        %s\n", k.arch.c_str());
  if (call) std::printf("call        %s\n", call->label.c_str());
  if (call && call->specs.size() > 1) std::printf("launch      %zu of %zu (--launch)\n", launch, call->specs.size());
  std::printf("key         %s\n", spec.canonical().c_str());
  std::printf("block       %d threads\n", k.numThreads);
  if (call && call->ssu) {
    const int64_t bp = spec.get("meta:BLOCK_P");
    const opspec::Grid grid = opspec::ssuGrid(call->dims, bp);
    std::printf("grid        (%lld, %lld, batch) = (cdiv(P %lld, BLOCK_P %lld), H, batch)\n",
                static_cast<long long>(grid.x), static_cast<long long>(grid.y), static_cast<long long>(call->dims.P),
                static_cast<long long>(bp));
  }
  std::printf("registers   %s\n", figure(r.registers, " per thread").c_str());
  std::printf("shared      %s\n", figure(r.sharedBytes, " bytes per block (static)").c_str());
  if (k.dynamicSharedBytes > 0)
    std::printf("dyn shared  %d bytes per block (passed at launch)\n", k.dynamicSharedBytes);
  std::printf("local       %s\n", figure(r.localBytes, " bytes per thread (stack, callees included)").c_str());
  std::printf("spill st    %s\n", figure(r.spillStoreBytes, " bytes").c_str());
  std::printf("spill ld    %s\n", figure(r.spillLoadBytes, " bytes").c_str());
  std::printf("compile     %.1f ms (DSL + MLIR pipeline + NVRTC, wall); pipeline + NVRTC %.1f ms\n", wallMs,
              k.compileMs);
  std::printf("PTX         %lld lines\n", static_cast<long long>(lines));
  std::printf("global      %s (PTX instructions by bytes each moves)\n", describe(globalAccesses(k.ptx)).c_str());
  std::printf("CUBIN       %s\n",
              k.cubin.empty() ? "none (PTX-only target)" : (std::to_string(k.cubin.size()) + " bytes").c_str());
}

int runInspect(const InspectOptions& o) {
  const Stage stage = parseStage(o.stage);
  std::unique_ptr<CheckedCall> call;
  Specialization spec;
  size_t launch = 1;
  if (o.specFile.empty()) {
    call = std::make_unique<CheckedCall>(checkCallOptions(o.call));
    const size_t n = call->specs.size();
    launch = o.launch == 0 ? n : static_cast<size_t>(o.launch);
    if (launch > n)
      throw UsageError(
          strf("--launch %d: the call has %zu launch%s, expected 1..%zu", o.launch, n, n == 1 ? "" : "es", n));
    spec = call->specs[launch - 1];
  } else {
    refuseCallOptionsBesideSpec(*o.app);
    spec = manifestSpecialization(o.specFile, o.entry);
  }

  const bool needNvrtc = stage.kind == Stage::Ptx || stage.kind == Stage::Sass || stage.kind == Stage::Resources;
  if (needNvrtc) {
    std::string why;
    if (!nvrtcAvailable(&why)) {
      std::fprintf(stderr,
                   "ssmjit inspect: NVRTC is not available (%s): --stage %s needs it; "
                   "the IR and cuda stages work without it\n",
                   why.c_str(), o.stage.c_str());
      return kExitFailure;
    }
  }

  std::string text;
  bool seen = false;
  PipelineOptions po;
  po.runNvrtc = needNvrtc;
  if (!stage.pipelineName.empty())
    po.onStage = [&](const std::string& name, const std::string& t) {
      if (name == stage.pipelineName) {
        text = t;
        seen = true;
      }
    };
  const WallTimer timer;
  const CompiledKernel k = compileKernel(spec, po);
  const double wallMs = timer.ms();

  switch (stage.kind) {
    case Stage::Ir:
    case Stage::Cuda:
      if (!seen)
        throw Error(Error::Kind::Internal, "inspect: the pipeline never reported stage '" + stage.pipelineName +
                                               "' (passes: " + passList() + ")");
      // The CUDA source carries its own header line naming the specialisation.
      if (stage.kind == Stage::Ir)
        std::printf("// ssmjit inspect --stage %s: %s\n", o.stage.c_str(), spec.canonical().c_str());
      std::fwrite(text.data(), 1, text.size(), stdout);
      if (!text.empty() && text.back() != '\n') std::printf("\n");
      return kExitOk;
    case Stage::Ptx:
      std::printf("// ssmjit inspect --stage ptx: %s\n", spec.canonical().c_str());
      std::fwrite(k.ptx.data(), 1, k.ptx.size(), stdout);
      return kExitOk;
    case Stage::Sass:
      return printSass(k);
    case Stage::Resources:
      printResources(k, spec, call.get(), launch, wallMs);
      return kExitOk;
  }
  return kExitFailure;
}

}  // namespace

CommandRun defineInspectCommand(CLI::App* app) {
  auto o = std::make_shared<InspectOptions>();
  app->add_option("--stage", o->stage,
                  "generic | specialized | after:<pass> (" + passList() + ") | cuda | ptx | sass | resources")
      ->required()
      ->check(CLI::Validator([](std::string& s) { return stageError(s); }, "STAGE", "stage"));
  CLI::Option* spec =
      app->add_option("--spec", o->specFile,
                      "Manifest file (JSON Lines as SSMJIT_RECORD writes them, or a manifest document) whose "
                      "specialisation to inspect instead of a selective-state-update call; its arch applies");
  app->add_option("--entry", o->entry, "Which entry of --spec, counted from 1 (default 1)")
      ->check(atLeast(1))
      ->needs(spec);
  addCallOptions(app, o->call);
  app->add_option("--launch", o->launch,
                  "Which of the call's launches, counted from 1 (default: the last; a scan whose sequences span "
                  "several spans runs a states pass before its main pass, a packed scan from D 4096 its parallel "
                  "class before its serial one, the backward a checkpoint pass (and its fold, for sequences over a "
                  "span) first and its sums last; ssd runs "
                  "chunk_cumsum, bmm, chunk_state (passing the states), chunk_scan; ssd-backward that forward (without "
                  "chunk_scan under --saved-y), "
                  "then its gradient kernels)")
      ->check(atLeast(1));
  o->app = app;
  return [o] { return runInspect(*o); };
}

}  // namespace ssmjit::tool
