// The options of a multi-GPU subcommand (--tp or --cp with --rank and --rendezvous, else the
// SSMJIT_RANK / SSMJIT_WORLD_SIZE / SSMJIT_RENDEZVOUS that `ssmjit launch` sets) and joining the
// other ranks: this process takes its GPU and a Communicator (ssmjit/parallel.h).
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ssmjit/parallel.h"

namespace ssmjit::tool {

struct RankOptions {
  int rank = -1;  // -1: $SSMJIT_RANK
  std::string rendezvous;
  double timeout = 120;
};

// --rank, --rendezvous and --timeout (the degree option, --tp or --cp, is the command's own).
void addRankOptions(CLI::App* app, RankOptions& o);
// For a run over `ranks` processes (the degree option's value; 1: none): takes this rank's GPU
// (SSMJIT_LOCAL_RANK, else the rank modulo the device count) and joins the others, checking that
// every rank has `config`. nullptr for one rank. Throws UsageError naming what is missing.
std::unique_ptr<Communicator> joinRanks(const char* degreeOption, int ranks, const RankOptions& o,
                                        std::vector<std::pair<std::string, std::string>> config);

}  // namespace ssmjit::tool
