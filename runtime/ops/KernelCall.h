// One launch of a generic DSL kernel from an op, bound through the kernel's signature
// (kernels_dsl/Signature.h): the argument values in parameter order and the bindings the
// specialisation depends on (dtypes, alignment classes, bound sizes, strides 0/1 or their
// divisibility class, flags, meta values). Every declared argument is bound exactly once (an
// Error(Internal) names the kernel and the argument otherwise). A per-thread memo of recent
// binding lists finds the loaded kernel without building the Specialization; a miss specialises
// in parameter order, completes the meta values and loads (compiling through the cache; a missing
// kernel first lets the op's CompileAhead, if it holds one, compile the whole call's kernels).
// Internal to the runtime.
#pragma once
#include <cuda.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "compiler/Specialization.h"
#include "kernels_dsl/Signature.h"
#include "runtime/LoadedKernel.h"
#include "ssmjit/tensor.h"

namespace ssmjit::detail {

// In a tensor's axis map: the kernel's stride along that axis is 0 (a broadcast, or an axis the
// view lacks).
inline constexpr int kNoAxis = -1;
// The view's axis for each of the kernel's axes of a tensor.
using Axes = std::array<int, dsl::kMaxAxes>;
inline constexpr Axes kSameAxes{0, 1, 2, 3, 4, 5};

class KernelCall {
 public:
  static constexpr int kMaxArgs = 128;
  explicit KernelCall(const dsl::Signature& sig);

  // A tensor: its pointer, its dtype (an absent tensor binds float32 or int32 by its class, and
  // is never read), a data pointer's alignment class, and its strides: the kernel's axis j takes
  // the view's axis axes[j], kNoAxis gives 0 (an absent tensor's, TensorView{}, are all 0).
  void tensor(dsl::TensorId t, const TensorView& view, const Axes& axes = kSameAxes);
  // A metadata pointer of a fixed dtype (the device status record).
  void pointer(dsl::TensorId t, void* p, DType dtype);
  void size(int arg, int64_t value);  // as the signature's SizeUse says
  void scalar(int arg, float value);
  void flag(int arg, bool value);
  void mode(int arg, int64_t value);
  void meta(const char* name, int64_t value);  // `name` must outlive the call (a literal)
  // An argument's value after binding (an op may set one the specialisation never depends on,
  // such as a count chosen at launch).
  ArgValue& value(int arg) { return v_[arg]; }
  // Every argument's value, in parameter order (sig.count() of them).
  const ArgValue* values() const { return v_; }

  // The specialisation of these bindings on `arch`, completed (meta values chosen); no GPU needed.
  Specialization specialization(const std::string& arch) const;
  // The loaded kernel and its completed specialisation (for grid sizes from meta values).
  const LoadedKernel& kernel();
  // A meta value of the completed specialisation. The memo keeps the last few asked for by the
  // name's address (a literal), so a repeated call looks up no string.
  int64_t metaValue(const char* name);
  void launch(const unsigned grid[3], CUstream stream);

 private:
  struct Bind {
    int32_t kind;  // BindKind (KernelCall.cpp)
    int32_t aux;   // a pointer's dtype
    int64_t value;
  };
  static constexpr int kMaxMeta = 16;
  void bind(int arg, int kind, int64_t value, int32_t aux = 0);
  void stride(int arg, int64_t value);
  void checkComplete() const;
  const dsl::Signature& sig_;
  int n_;
  int bound_ = 0;
  ArgValue v_[kMaxArgs] = {};
  Bind binds_[kMaxArgs + kMaxMeta] = {};
  const char* metaNames_[kMaxMeta] = {};
  int nMeta_ = 0;
  void* memo_ = nullptr;  // the memo slot found by kernel()
};

int64_t alignClass(const void* p);
// Divisibility class of a dynamic size or stride: the largest power of two up to `most` (16, or 64
// for SizeUse::TileDiv) dividing it, else 1. Finer than 16-or-1 because a bf16 row stride
// divisible by 8 still takes 16-byte vectors (scalar accesses make a packed row of 8 x 2049 tokens
// much slower: docs/performance.md).
int64_t divClass(int64_t v, int64_t most = 16);

// 32-bit offsets do for a launch when every given tensor's reach and every stride fits.
bool fits32(std::initializer_list<const TensorView*> tensors);

}  // namespace ssmjit::detail
