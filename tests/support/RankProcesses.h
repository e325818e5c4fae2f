// Multi-GPU tests as one process per GPU: a parent test runs a worker test of the same binary
// (a DISABLED_ test, so that it never runs on its own) in N processes, rank r on GPU r, with
// SSMJIT_RANK / SSMJIT_WORLD_SIZE / SSMJIT_LOCAL_RANK / SSMJIT_RENDEZVOUS set as `ssmjit launch`
// sets them and NCCL_NVLS_ENABLE=0 unless the environment sets it. N is SSMJIT_TEST_GPUS, else 2.
// The parent skips (saying why) with fewer GPUs or without libnccl, waits at most a bound for the
// workers (killing them past it) and expects every one to exit 0; each worker's output is printed.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/Driver.h"
#include "ssmjit/parallel.h"
#include "tests/support/ScratchDir.h"

extern char** environ;  // the parent's environment, passed on to the ranks

namespace ssmjit::testing {

inline int testGpus() {
  const char* v = std::getenv("SSMJIT_TEST_GPUS");
  return v && *v ? std::atoi(v) : 2;
}

// Why a multi-GPU test cannot run here, or "" when it can.
inline std::string multiGpuSkipReason(int n) {
  std::string why;
  if (n < 2) return "SSMJIT_TEST_GPUS is " + std::to_string(n) + ", expected >= 2";
  if (!driver::available(&why)) return "no GPU: " + why;
  int count = 0;
  driver::check(driver::api().cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (count < n) return std::to_string(count) + " CUDA device(s), the test needs " + std::to_string(n);
  if (!ncclAvailable(&why)) return "NCCL not loadable: " + why;
  return "";
}

struct RankExit {
  int status = -1;  // exit code, 128 + signal, or -1 when killed at the bound
  std::string output;
};

// SSMJIT_TEST_RANK0_PREFIX: a command (words split at spaces) that rank 0 runs under, such as
// "compute-sanitizer --tool memcheck --error-exitcode 3": one rank sanitized, the others plain.
inline std::vector<std::string> rank0Prefix() {
  std::vector<std::string> words;
  std::istringstream in(std::getenv("SSMJIT_TEST_RANK0_PREFIX") ? std::getenv("SSMJIT_TEST_RANK0_PREFIX") : "");
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

inline std::string selfPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "/proc/self/exe";
}

// Runs ParallelWorker.DISABLED_<worker> in n processes; returns each rank's exit and output.
inline std::vector<RankExit> runRankProcesses(const std::string& worker, int n, double boundSeconds) {
  ScratchDir dir;
  const std::string filter = "--gtest_filter=ParallelWorker.DISABLED_" + worker;
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    // Everything the child needs is built here: between fork and exec in a process with threads
    // (the driver's) only async-signal-safe calls are allowed.
    const std::string log = dir.path() + "/rank" + std::to_string(r) + ".log";
    std::vector<std::string> env = {"SSMJIT_RANK=" + std::to_string(r), "SSMJIT_LOCAL_RANK=" + std::to_string(r),
                                    "SSMJIT_WORLD_SIZE=" + std::to_string(n),
                                    "SSMJIT_RENDEZVOUS=" + dir.path() + "/nccl-id"};
    if (!std::getenv("NCCL_NVLS_ENABLE")) env.push_back("NCCL_NVLS_ENABLE=0");
    // The parent's environment but the rank variables and gtest's sharding (a sharded parent would
    // otherwise shard the worker's one test away, and the worker would run none).
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      bool keep = true;
      for (const char* drop : {"SSMJIT_RANK=", "SSMJIT_LOCAL_RANK=", "SSMJIT_WORLD_SIZE=", "SSMJIT_RENDEZVOUS=",
                               "GTEST_TOTAL_SHARDS=", "GTEST_SHARD_INDEX=", "GTEST_SHARD_STATUS_FILE="})
        keep = keep && kv.rfind(drop, 0) != 0;
      if (keep) env.push_back(kv);
    }
    std::vector<char*> envp, argv;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string self = "/proc/self/exe", name = "ssmjit_gpu_tests", all = "--gtest_also_run_disabled_tests";
    std::string f = filter;
    // Rank 0 under the wrapper (found on PATH through env), given this binary's real path.
    std::vector<std::string> wrapped = rank0Prefix();
    if (r == 0 && !wrapped.empty()) {
      wrapped.insert(wrapped.begin(), "env");
      wrapped.push_back(selfPath());
      self = "/usr/bin/env";
    }
    if (r == 0 && !wrapped.empty())
      for (std::string& w : wrapped) argv.push_back(w.data());
    else
      argv.push_back(name.data());
    for (char* a : {f.data(), all.data(), static_cast<char*>(nullptr)}) argv.push_back(a);
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      execve(self.c_str(), argv.data(), envp.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<RankExit> out(n);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(boundSeconds * 1000));
  int live = n;
  while (live > 0) {
    for (int r = 0; r < n; ++r) {
      if (pids[r] <= 0) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        out[r].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        pids[r] = 0;
        --live;
      }
    }
    if (live > 0 && std::chrono::steady_clock::now() >= deadline) {
      for (int r = 0; r < n; ++r)
        if (pids[r] > 0) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          pids[r] = 0;
          out[r].status = -1;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < n; ++r) {
    std::ifstream f(dir.path() + "/rank" + std::to_string(r) + ".log");
    std::stringstream s;
    s << f.rdbuf();
    out[r].output = s.str();
  }
  return out;
}

// The parent half: skips where it cannot run, else runs the worker and expects every rank to pass.
// A rank under SSMJIT_TEST_RANK0_PREFIX (a sanitizer) runs several times slower: 4x the bound.
inline void expectRanksPass(const std::string& worker, double boundSeconds, int n = testGpus()) {
  const std::string why = multiGpuSkipReason(n);
  if (!why.empty()) GTEST_SKIP() << why;
  if (!rank0Prefix().empty()) boundSeconds *= 4;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<RankExit> ranks = runRankProcesses(worker, n, boundSeconds);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int r = 0; r < n; ++r) {
    std::fprintf(stderr, "---- rank %d of %d (exit %d) ----\n%s", r, n, ranks[r].status, ranks[r].output.c_str());
    EXPECT_EQ(ranks[r].status, 0) << "rank " << r << (ranks[r].status == -1 ? " was killed at the bound" : " failed");
    EXPECT_NE(ranks[r].output.find("[  PASSED  ] 1 test"), std::string::npos) << "rank " << r << " did not pass";
  }
  std::fprintf(stderr, "[ measured ] %s: %d ranks in %.1f s (bound %.0f s)\n", worker.c_str(), n, s, boundSeconds);
}

// The worker half: this process's rank from the environment the parent set; false when not run
// by a parent (the worker then skips).
struct WorkerRank {
  int rank = -1, size = 0;
  std::string rendezvous;
};
inline bool workerRank(WorkerRank* w) {
  const char* r = std::getenv("SSMJIT_RANK");
  const char* n = std::getenv("SSMJIT_WORLD_SIZE");
  const char* z = std::getenv("SSMJIT_RENDEZVOUS");
  const char* l = std::getenv("SSMJIT_LOCAL_RANK");
  if (!r || !n || !z) return false;
  w->rank = std::atoi(r);
  w->size = std::atoi(n);
  w->rendezvous = z;
  driver::useDevice(l ? std::atoi(l) : w->rank);
  return true;
}

}  // namespace ssmjit::testing
