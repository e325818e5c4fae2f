// `ssmjit launch -n N -- CMD ...`: runs N copies of CMD, one per GPU of this host, each with
// SSMJIT_RANK, SSMJIT_LOCAL_RANK, SSMJIT_WORLD_SIZE and SSMJIT_RENDEZVOUS (a fresh file in a
// temporary directory unless --rendezvous names one) and NCCL_NVLS_ENABLE=0 unless set; waits for
// all and exits with the first failure's status. A rank that fails makes the others fail on their
// own (their waits on it are bounded); those still running after --grace seconds are killed.
#include <CLI/CLI.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tools/ToolSupport.h"

namespace ssmjit::tool {
namespace {

struct LaunchOptions {
  int ranks = 2;
  std::string rendezvous;
  double grace = 60;
  std::vector<std::string> command;
};

pid_t spawn(const LaunchOptions& o, int rank, const std::string& rendezvous) {
  const pid_t pid = fork();
  if (pid < 0) throw Error(Error::Kind::Internal, "launch: fork failed");
  if (pid > 0) return pid;
  setenv("SSMJIT_RANK", std::to_string(rank).c_str(), 1);
  setenv("SSMJIT_LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("SSMJIT_WORLD_SIZE", std::to_string(o.ranks).c_str(), 1);
  setenv("SSMJIT_RENDEZVOUS", rendezvous.c_str(), 1);
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  std::vector<char*> argv;
  for (const std::string& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "ssmjit launch: rank %d: cannot run %s\n", rank, argv[0]);
  _exit(127);
}

// The exit status of a wait() result: the code, or 128 + the signal.
int statusOf(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

int run(const LaunchOptions& o) {
  std::string dir, rendezvous = o.rendezvous;
  if (rendezvous.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ssmjit-launch-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw Error(Error::Kind::Internal, "launch: cannot make a temporary directory");
    dir = tmpl;
    rendezvous = dir + "/nccl-id";
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < o.ranks; ++r) pids.push_back(spawn(o, r, rendezvous));
  int rc = 0, live = o.ranks;
  std::chrono::steady_clock::time_point killAt = std::chrono::steady_clock::time_point::max();
  while (live > 0) {
    int st = 0;
    const pid_t done = waitpid(-1, &st, WNOHANG);
    if (done > 0) {
      --live;
      const int code = statusOf(st);
      if (code != 0 && rc == 0) {
        rc = code;
        killAt = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.grace * 1000));
      }
      continue;
    }
    if (std::chrono::steady_clock::now() >= killAt) {
      std::fprintf(stderr, "ssmjit launch: a rank failed; stopping the %d still running after %.0f s\n", live,
                   o.grace);
      for (pid_t p : pids) kill(p, SIGKILL);
      killAt = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!dir.empty()) std::filesystem::remove_all(dir);
  return rc;
}

}  // namespace

CommandRun defineLaunchCommand(CLI::App* app) {
  auto o = std::make_shared<LaunchOptions>();
  app->add_option("-n,--ranks", o->ranks, "Processes to run, one per GPU")->check(atLeast(1))->capture_default_str();
  app->add_option("--rendezvous", o->rendezvous, "Where the ranks meet (default: a fresh temporary file)");
  app->add_option("--grace", o->grace, "Seconds the other ranks get to stop on their own after one fails")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app->add_option("command", o->command, "The command each rank runs, after --")->required();
  return [o] { return run(*o); };
}

}  // namespace ssmjit::tool
