// Joining the ranks of a multi-GPU subcommand (ParallelRanks.h).
#include "tools/ParallelRanks.h"

#include "compiler/Knobs.h"
#include "runtime/Driver.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {
namespace {

int envInt(const char* name, int fallback) {
  const std::string v = knobValue(name);
  if (v.empty()) return fallback;
  try {
    size_t used = 0;
    const int n = std::stoi(v, &used);
    if (used == v.size()) return n;
  } catch (const std::logic_error&) {
  }
  throw UsageError(std::string(name) + " is '" + v + "', expected an integer");
}

}  // namespace

void addRankOptions(CLI::App* app, RankOptions& o) {
  app->add_option("--rank", o.rank, "This process's rank (default: $SSMJIT_RANK, set by `ssmjit launch`)");
  app->add_option("--rendezvous", o.rendezvous,
                  "Where the ranks meet: a fresh file path or tcp://host:port (default: $SSMJIT_RENDEZVOUS)");
  app->add_option("--timeout", o.timeout, "Seconds any wait on another rank may take before every rank stops")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

std::unique_ptr<Communicator> joinRanks(const char* degreeOption, int ranks, const RankOptions& o,
                                        std::vector<std::pair<std::string, std::string>> config) {
  if (ranks <= 1) return nullptr;
  CommunicatorOptions c;
  c.size = ranks;
  c.rank = o.rank >= 0 ? o.rank : envInt("SSMJIT_RANK", -1);
  c.rendezvous = o.rendezvous.empty() ? knobValue("SSMJIT_RENDEZVOUS") : o.rendezvous;
  c.timeout_s = o.timeout;
  const std::string hint = std::string(" (or run each rank under `ssmjit launch -n ") + std::to_string(ranks) +
                           " -- ssmjit ...`)";
  if (c.rank < 0 || c.rank >= ranks)
    throw UsageError(std::string(degreeOption) + " " + std::to_string(ranks) + " needs --rank in [0, " +
                     std::to_string(ranks) + "), got " + std::to_string(c.rank) + hint);
  if (c.rendezvous.empty())
    throw UsageError(std::string(degreeOption) + " " + std::to_string(ranks) +
                     " needs --rendezvous PATH|tcp://host:port" + hint);
  const int world = envInt("SSMJIT_WORLD_SIZE", ranks);
  if (world != ranks)
    throw UsageError(std::string(degreeOption) + " is " + std::to_string(ranks) + " but SSMJIT_WORLD_SIZE is " +
                     std::to_string(world) + ": launch as many processes as the degree");
  int count = 0;
  driver::check(driver::api().cuDeviceGetCount(&count), "cuDeviceGetCount");
  const int local = envInt("SSMJIT_LOCAL_RANK", c.rank);
  if (local < 0 || local >= count)
    throw UsageError("SSMJIT_LOCAL_RANK is " + std::to_string(local) + ", expected a GPU of this host's " +
                     std::to_string(count) + " (one rank a GPU: run at most " + std::to_string(count) +
                     " ranks here)");
  driver::useDevice(local);
  config.emplace_back(degreeOption, std::to_string(ranks));
  c.config = std::move(config);
  return Communicator::create(c);
}

}  // namespace ssmjit::tool
