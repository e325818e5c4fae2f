// `ssmjit`: the command-line tool. Subcommands live one per file (DemoCommand.cpp,
// BenchCommand.cpp, ConvBenchCommand.cpp, ..., CacheCommand.cpp); this file registers them with a
// one-line summary each (the top of `ssmjit --help`), parses the command line and maps outcomes to
// exit codes: 0 ok, 1 failure or mismatch, 2 usage error.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "compiler/BuildInfo.h"
#include "compiler/Knobs.h"
#include "compiler/Nvrtc.h"
#include "compiler/Pipeline.h"
#include "ssmjit/error.h"
#include "tools/ToolSupport.h"

namespace {

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

// Every subcommand, in the order --help lists them.
struct Subcommand {
  ssmjit::tool::Command (*add)(CLI::App& parent);
  const char* summary;
};
const Subcommand kSubcommands[] = {
    {ssmjit::tool::addDemoCommand,
     "run every op family on small problems and check it against the float64 CPU reference (no GPU: compile "
     "the kernels and run the reference)"},
    {ssmjit::tool::addBenchCommand,
     "time selective_state_update(_tokens): us per call, bandwidth, host overhead, compile time"},
    {ssmjit::tool::addConvBenchCommand, "time causal_conv1d forward, backward (dense, packed) and update"},
    {ssmjit::tool::addDecodeBenchCommand, "time mamba2_decode_step: fused replay+verify against split and snapshots"},
    {ssmjit::tool::addScanBenchCommand,
     "time selective_scan and its backward (dense rows, a long sequence, a packed row)"},
    {ssmjit::tool::addSsdBenchCommand, "time ssd, the Mamba-2 SSD chunked scan forward (dense shapes, packed rows)"},
    {ssmjit::tool::addInspectCommand,
     "print one stage of a kernel (IR, CUDA C++, PTX, SASS, resources) for an op call or a recorded one; no GPU"},
    {ssmjit::tool::addPrewarmCommand, "compile the kernels of a manifest into the disk cache; no GPU"},
    {ssmjit::tool::addCacheCommand, "ls | stats | verify | clear the disk cache"},
};

std::string description(const std::vector<ssmjit::tool::Command>& commands) {
  std::string s =
      "ssmjit: JIT-compiled Mamba-1 / Mamba-2 GPU kernels (selective state update, Mamba-2 decode step, causal "
      "conv1d, selective scan, SSD chunked scan; C++ DSL -> MLIR -> CUDA C++ -> NVRTC -> CUBIN -> CUDA Driver API).\n";
  for (size_t i = 0; i < commands.size(); ++i)
    s += ssmjit::tool::strf("  %-13s %s\n", commands[i].app->get_name().c_str(), kSubcommands[i].summary);
  return s +
         "Run 'ssmjit <command> --help' for each command's options.\n"
         "Exit codes: 0 ok, 1 failure or mismatch, 2 usage error.\n"
         "Sets CUDA_CACHE_DISABLE=1 unless the environment sets it, so that every NVRTC compile is cold and reports "
         "its resources (CUDA's JIT cache would otherwise serve repeat CUBINs).";
}

const char* errorKindName(ssmjit::Error::Kind k) {
  switch (k) {
    case ssmjit::Error::Kind::InvalidArgument:
      return "invalid argument";
    case ssmjit::Error::Kind::Compile:
      return "compile error";
    case ssmjit::Error::Kind::Cuda:
      return "CUDA error";
    case ssmjit::Error::Kind::Unavailable:
      return "unavailable";
    case ssmjit::Error::Kind::Internal:
      return "internal error";
  }
  return "error";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ssmjit::tool;
  // Before anything can load NVRTC or the driver (they read it once): see ToolSupport.h.
  disableCudaJitCacheUnlessSet();
  CLI::App app{"", "ssmjit"};
  app.set_version_flag("--version", versionText, "Print the build id and the NVRTC version, then exit");
  app.require_subcommand(1);
  std::vector<Command> commands;
  for (const Subcommand& s : kSubcommands) commands.push_back(s.add(app));
  app.description(description(commands));
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
    for (const Command& c : commands) {
      if (!c.app->parsed()) continue;
      name = c.app->get_name().c_str();
      const int rc = c.run();
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
    return kExitFailure;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "ssmjit %s: error: %s\n", name, e.what());
    return kExitFailure;
  }
}
