// Runs a DSL test kernel of its own on the current device: compiled for this device's arch,
// launched with the kernel's dynamic shared bytes (raising the function's limit past 48 KiB, as
// the runtime does) over `programs` programs, pointer and int32 arguments by name; waits for it.
// GPU tests only (the driver must be there).
#pragma once
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "kernels_dsl/CompileKernel.h"
#include "kernels_dsl/Registry.h"
#include "runtime/Driver.h"

namespace ssmjit::testing {

inline CompiledKernel launchOwnKernel(const dsl::KernelDef& def, Specialization spec,
                                      const std::map<std::string, CUdeviceptr>& ptrs,
                                      const std::map<std::string, int32_t>& ints, unsigned programs = 1) {
  spec.kernel = def.name;
  spec.arch = driver::currentArch();
  const CompiledKernel ck = compileKernel(def, spec);
  const driver::Api& api = driver::api();
  CUmodule mod = nullptr;
  CUfunction fn = nullptr;
  driver::check(api.cuModuleLoadDataEx(&mod, ck.cubin.data(), 0, nullptr, nullptr), "cuModuleLoadDataEx");
  driver::check(api.cuModuleGetFunction(&fn, mod, ck.entry.c_str()), "cuModuleGetFunction");
  if (ck.dynamicSharedBytes > 48 * 1024)
    driver::check(api.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, ck.dynamicSharedBytes),
                  "cuFuncSetAttribute");
  std::vector<CUdeviceptr> p(ck.params.size());
  std::vector<int32_t> iv(ck.params.size());
  std::vector<void*> args;
  for (size_t i = 0; i < ck.params.size(); ++i) {
    const KernelParam& q = ck.params[i];
    if (q.kind == KernelParam::Kind::Ptr) {
      p[i] = ptrs.at(q.name);
      args.push_back(&p[i]);
    } else {
      EXPECT_EQ(q.kind, KernelParam::Kind::I32) << q.name;
      iv[i] = ints.at(q.name);
      args.push_back(&iv[i]);
    }
  }
  driver::check(api.cuLaunchKernel(fn, programs, 1, 1, ck.numThreads, 1, 1, ck.dynamicSharedBytes, nullptr,
                                   args.data(), nullptr),
                "cuLaunchKernel");
  driver::check(api.cuCtxSynchronize(), "cuCtxSynchronize");
  api.cuModuleUnload(mod);
  return ck;
}

}  // namespace ssmjit::testing
