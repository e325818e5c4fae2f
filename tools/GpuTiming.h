// GPU timing shared by the benchmarks: CUDA events, device attributes, the device-to-device copy
// bandwidth every "% of copy" figure divides by, and an in-place pass (the floor at a call's size).
#pragma once
#include <cuda.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/Driver.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {

class Event {
 public:
  Event() { driver::check(driver::api().cuEventCreate(&e_, CU_EVENT_DEFAULT), "cuEventCreate"); }
  ~Event() {
    if (e_) driver::api().cuEventDestroy(e_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(CUstream s) { driver::check(driver::api().cuEventRecord(e_, s), "cuEventRecord"); }
  // Milliseconds from `start` to this event (waits for this event).
  float since(const Event& start) const {
    driver::check(driver::api().cuEventSynchronize(e_), "cuEventSynchronize");
    float ms = 0;
    driver::check(driver::api().cuEventElapsedTime(&ms, start.e_, e_), "cuEventElapsedTime");
    return ms;
  }

 private:
  CUevent e_ = nullptr;
};

// Microseconds per call: the median over `trials` of the mean of `iters` back-to-back calls,
// after one call that compiles and loads; device errors are checked at the end. `wait`, when
// given, waits for the stream after the warm-up and after each trial in place of
// cuStreamSynchronize (a multi-rank benchmark waits through its communicator, boundedly).
double callTimeUs(const std::function<void(CUstream)>& call, CUstream s, int iters, int trials,
                  const std::function<void(CUstream)>& wait = {});

// Host microseconds per eager call: the median over `trials` of the mean of `calls` back-to-back
// calls, each trial starting from an idle stream (so that a full launch queue never blocks the
// host and counts as host time).
double hostCallUs(const std::function<void()>& call, CUstream s, int calls, int trials);

// The driver's own floor for the same measurement: cuLaunchKernel of an empty kernel (one block,
// no parameters) on `s`. `cubin` is that kernel for the current device ("ssmjit_empty").
double driverLaunchFloorUs(const std::vector<char>& cubin, CUstream s, int calls, int trials);

int deviceAttribute(CUdevice_attribute attr, const char* what);

// Device-to-device copy bandwidth: cuMemcpyDtoDAsync of 1 GiB, bytes read + written, median of
// five trials of three copies.
double measureCopyGBs(CUstream s);
// measureCopyGBs, printed as a benchmark's first line; the line under its table; and a Markdown
// table with that line under it.
double reportCopyGBs(CUstream s);
void printCopyFooter(double copyGBs);
void printTableAndCopy(const Table& table, double copyGBs);

// A bare in-place pass over 16-byte vectors: what a call that reads a buffer and writes it back
// (the state update's state) takes without its math, at the call's size.
class InPlacePass {
 public:
  explicit InPlacePass(const std::string& arch);  // compiles it for `arch` and loads it
  ~InPlacePass();
  InPlacePass(const InPlacePass&) = delete;
  InPlacePass& operator=(const InPlacePass&) = delete;

  // Reads and writes back `vectors` 16-byte vectors at `p` (the same bytes).
  void launch(CUdeviceptr p, size_t vectors, CUstream s) const;

 private:
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
};

// A benchmark command's run: run(*o), then exit 0 (failures throw).
template <class Options>
CommandRun benchRun(std::shared_ptr<Options> o, void (*run)(const Options&)) {
  return [o, run] {
    run(*o);
    return kExitOk;
  };
}

}  // namespace ssmjit::tool
