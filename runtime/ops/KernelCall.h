// One launch of a generic DSL kernel from an op: the argument values in the kernel's schema order
// and the bindings the specialisation depends on (dtypes, alignment classes, bound sizes, strides
// 0/1 or their divisibility class, flags, meta values). A per-thread memo of recent binding lists
// finds the loaded kernel without building the Specialization; a miss specialises, completes the
// meta values and loads (compiling through the cache). Internal to the runtime.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "compiler/Specialization.h"
#include "runtime/LoadedKernel.h"
#include "ssmjit/tensor.h"

namespace ssmjit::detail {

// An optional tensor's stride along `axis`, 0 when it is absent (the kernel never reads it).
inline int64_t strideOr0(const TensorView& t, int axis) { return t.defined() ? t.strides[axis] : 0; }

class KernelCall {
 public:
  static constexpr int kMaxArgs = 96;
  KernelCall(const char* kernel, const ArgSchema& schema) : kernel_(kernel), schema_(schema) {}

  ArgValue v[kMaxArgs] = {};

  // A tensor's data pointer: its dtype binds (an absent tensor binds `absent`, and is never read),
  // and a data pointer's alignment class binds.
  void pointer(int arg, const TensorView& t, DType absent, bool data);
  // A metadata pointer of a fixed dtype (the device status record).
  void pointer(int arg, void* p, DType dtype);
  void size(int arg, int64_t value, bool bound);  // bound: on the value, else its "div:" class
  // A count or bound the kernel only compares against or loops to (rows, slots, sequences): no
  // class binds, so calls that differ in it share one kernel (its class never changed the code).
  void count(int arg, int64_t value);
  void stride(int arg, int64_t value);            // 0 and 1 bind; others bind a "div:" class
  void flag(int arg, bool value);
  void meta(const char* name, int64_t value);     // `name` must outlive the call (a literal)

  // The specialisation of these bindings on `arch`, completed (meta values chosen); no GPU needed.
  Specialization specialization(const std::string& arch) const;
  // The loaded kernel and its completed specialisation (for grid sizes from meta values).
  const LoadedKernel& kernel();
  int64_t metaValue(const char* name);
  void launch(const unsigned grid[3], CUstream stream);

 private:
  struct Bind {
    int kind;  // 0 plain, 1 div, 2 dtype, 3 align, 4 meta
    int arg;   // schema index, or (meta) index into metaNames_
    int64_t value;
  };
  static constexpr int kMaxMeta = 16;
  static constexpr int kMaxBinds = 3 * kMaxArgs + kMaxMeta;
  void bind(int kind, int arg, int64_t value) { binds_[nb_++] = Bind{kind, arg, value}; }
  const char* kernel_;
  ArgSchema schema_;
  Bind binds_[kMaxBinds];
  int nb_ = 0;
  const char* metaNames_[kMaxMeta];
  int nMeta_ = 0;
  const void* memo_ = nullptr;  // the memo slot found by kernel()
};

int64_t alignClass(const void* p);
// Divisibility class of a dynamic size or stride: the largest of 16, 8, 4, 2 dividing it, else 1.
// Finer than 16-or-1 because a bf16 row stride divisible by 8 still takes 16-byte vectors (scalar
// accesses make a packed row of 8 x 2049 tokens 1.5x slower).
int64_t divClass(int64_t v);

// Argument indices by name in a kernel's schema (the names are the kernels' contract). Call sites
// pass literals, so each is resolved once and then found by its address (ops on the serving hot
// path bind every call). Throws Error(Internal) for a name the schema lacks.
struct ArgIndex {
  const char* const* names;
  int count;
  mutable const char* seen[KernelCall::kMaxArgs] = {};
  mutable int index[KernelCall::kMaxArgs] = {};
  int operator()(const char* name) const;
};

// 32-bit offsets do for a launch when every given tensor's reach and every stride fits.
bool fits32(std::initializer_list<const TensorView*> tensors);

}  // namespace ssmjit::detail
