// Views carved from one device allocation: add() records each view's dtype and shape, allocate()
// makes one buffer and points every recorded view into it (256-byte aligned). The views must stay
// where they are (not moved) until allocate() returns. Internal to the runtime.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "ssmjit/tensor.h"

namespace ssmjit {

class DeviceArena {
 public:
  void add(TensorView& view, DType dtype, std::initializer_list<int64_t> shape) {
    view = TensorView::contiguous(nullptr, dtype, shape);
    views_.push_back({&view, bytes_});
    bytes_ += (view.numel() * dtypeBytes(dtype) + kAlign - 1) / kAlign * kAlign;
  }
  int64_t bytes() const { return bytes_; }
  DeviceBuffer allocate() {
    DeviceBuffer buf(static_cast<size_t>(bytes_));
    int device = 0;
    CUdevice dev;
    if (driver::api().cuCtxGetDevice(&dev) == CUDA_SUCCESS) device = static_cast<int>(dev);
    place(buf.data(), device);
    return buf;
  }
  // Points the views at `base` on `device` without allocating: a stand-in address for calls that
  // are only checked and specialised, never launched (prewarm without a GPU).
  void place(void* base, int device = 0) {
    for (auto& [view, offset] : views_) {
      view->data = static_cast<char*>(base) + offset;
      view->deviceId = device;
    }
    views_.clear();
  }

 private:
  static constexpr int64_t kAlign = 256;
  std::vector<std::pair<TensorView*, int64_t>> views_;
  int64_t bytes_ = 0;
};

}  // namespace ssmjit
