// What the disk-cache tests share: scratch directories, child processes (so that each check of
// the process-wide caches starts from an empty process), and small real specialisations.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "runtime/ops/SelectiveStateUpdateSpec.h"
#include "ssmjit/error.h"
#include "tests/support/ScratchDir.h"
#include "tools/problems/SsuProblem.h"

namespace cachetest {

using ssmjit::testing::ScratchDir;

// Runs `body` in a forked child and returns its exit code (128 + signal if killed). The child
// reports failures on stderr and returns non-zero; exceptions count as failures. The process-wide
// caches (memory and disk) start empty in each child as long as the parent never used them.
inline int inChild(const std::function<int()>& body) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int rc = 1;
    try {
      rc = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: exception: %s\n", e.what());
    }
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(rc);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// A child-side check: prints what failed and makes the child exit with 1.
#define CHILD_CHECK(cond, ...)                                 \
  do {                                                         \
    if (!(cond)) {                                             \
      std::fprintf(stderr, "child check failed: %s: ", #cond); \
      std::fprintf(stderr, __VA_ARGS__);                       \
      std::fprintf(stderr, "\n");                              \
      return 1;                                                \
    }                                                          \
  } while (0)

// The specialisation the multi-token op builds for a small Mamba-2 call (fast to compile), made
// distinct by `variant` (state size 16 + 8 * variant).
inline ssmjit::Specialization smallSpec(int variant, const std::string& arch = "sm_90a") {
  ssmjit::testing::SsuCase c = ssmjit::testing::mamba2Heads(4, 8, 16 + 8 * variant, 2);
  c.batch = 2;
  c.L = 2;
  const ssmjit::testing::SsuProblem p = ssmjit::testing::makeProblem(c);
  return ssmjit::detail::ssuSpecialization(p.args(), true, arch);
}

}  // namespace cachetest
