// The ssmjit kernel DSL: Triton-style block programs over tiles, written once in C++ against
// symbolic sizes, strides and flags. Building a kernel yields the generic IR (sj dialect); the
// compiler, not the author, maps tiles onto threads. No MLIR or CUDA in this header.
//
// Tiles have static power-of-two shapes (from "meta:*" block sizes). Scalars are uniform per
// program. Binary operators broadcast like NumPy (scalar with tile, unit axes); C++ literals
// take the other operand's element type. Integer math uses the kernel's index type (i32, or i64
// when meta:index_bits = 64); float math is f32; conditions are i1.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compiler/IntMath.h"
#include "kernels_dsl/Signature.h"
#include "ssmjit/dtype.h"

namespace ssmjit {
struct Specialization;
}

namespace ssmjit::dsl {

class KernelBuilder;

// The most f32 a kernel's static shared buffers may hold: 48 KiB, the static shared-memory limit.
constexpr int64_t kMaxSharedBufferFloats = 12288;
// The most bytes a kernel's dynamic shared buffers may take together: 227 KiB, the most a block
// may opt into on sm_90 (sm_80: 163 KiB; the launch checks the device's own figure).
constexpr int64_t kMaxDynamicSharedBytes = 232448;
// log2(e): exp(x) = exp2(x kLog2e), for KernelBuilder::exp2.
constexpr double kLog2e = 1.4426950408889634;

class Value {
 public:
  Value() = default;
  Value(KernelBuilder* b, void* v) : b_(b), v_(v) {}
  bool valid() const { return v_ != nullptr; }
  KernelBuilder* builder() const { return b_; }
  void* raw() const { return v_; }
  std::vector<int64_t> shape() const;  // {} for a scalar
  bool isFloat() const;
  bool isBool() const;

 private:
  KernelBuilder* b_ = nullptr;
  void* v_ = nullptr;  // an mlir::Value as an opaque pointer
};

class KernelBuilder {
 public:
  // `mlirContext` is an mlir::MLIRContext* with the sj dialects loaded (sj::registerDialects).
  KernelBuilder(void* mlirContext, const std::string& name, int indexBits, int numWarps);
  ~KernelBuilder();
  KernelBuilder(const KernelBuilder&) = delete;
  KernelBuilder& operator=(const KernelBuilder&) = delete;

  // A registered kernel's arguments: its signature's parameters, in order (compileKernel declares
  // them before the build runs); `arg` finds one by name, throwing Error(Internal) naming the
  // kernel and the name when the signature lacks it.
  void declare(const Signature& sig);
  Value arg(const std::string& name) const;
  // A test kernel's arguments, one at a time, in order (not once a signature is declared). Names
  // are what the runtime fills by name.
  Value ptrArg(const std::string& name, PtrClass cls, PtrRole role = PtrRole::Data);
  Value intArg(const std::string& name);    // a size or a stride (index type)
  Value floatArg(const std::string& name);  // an f32 scalar
  Value flagArg(const std::string& name);   // an i1 flag, always bound by specialisation

  Value programId(int axis);
  Value range(int64_t n);     // [0, n), n a power of two
  Value constInt(int64_t v);  // index type
  Value constFloat(double v);
  Value constBool(bool v);

  Value splat(Value scalar, const std::vector<int64_t>& shape);
  Value expandDims(Value t, int axis);
  Value broadcastTo(Value t, const std::vector<int64_t>& shape);

  Value load(Value ptr, Value offsets, Value mask = {}, Value other = {});
  void store(Value ptr, Value offsets, Value value, Value mask = {});
  Value reduce(Value t, int axis, const std::string& kind);  // "sum", "max", "min"
  // acc + a . b on the tensor cores: a an [M, K] tile, acc [M, N]; b read from memory (a shared
  // buffer or a tensor: every warp needs all of it), b[k][n] = ptr[offset + k * strideK +
  // n * strideN]. K and N are multiples of 8. Each operand is multiplied as a sum of
  // aPieces / bPieces bf16 terms (1: exact for bf16 data; 2: fp16 data; 3: any f32, exact to its
  // 24 bits), the products of terms down to 2^-24 summed in f32, so 3 / 3 is f32 accuracy with
  // every product exact. A kernel with a dot takes an mma layout as its parent (rows over 8 lane
  // groups and the warps, columns in runs over the 4 lanes of a group).
  // b in a 16-bit dynamic shared buffer (sharedBuffer(n, BF16 or F16)) is read with ldmatrix, its
  // values the mma's B fragments as stored (bPieces 1), the mma taking b's dtype (f16 or bf16 in,
  // f32 accumulate; a is split into aPieces terms of that dtype): strideK or strideN the constant
  // 1 (b stored n-major or k-major), the other a constant multiple of 8 (a row pitch of
  // 8 (2 j + 1) halves, an odd number of 16-byte units, reads each 8 rows from distinct banks),
  // the offset a multiple of 8, K and N multiples of 16. The mma layout's column runs are then
  // pairs, as the fragments hold them.
  Value dot(Value a, Value ptr, Value offset, Value strideK, Value strideN, Value acc, int aPieces, int bPieces);
  // acc + a . b with a read from a 16-bit dynamic shared buffer as well (the dtype of b's):
  // a[m][k] = aBuf[aOffset + m * aStrideM + k * aStrideK] for m < M (acc's rows), k < K, by
  // ldmatrix as b is (one stride the constant 1, the other a constant multiple of 8, the offset
  // a multiple of 8). aStrideM = 1 reads a transposed operand (x^T from x stored [k][m]). M a
  // multiple of 8, K and N of 16.
  Value dot(Value aBuf, Value aOffset, Value aStrideM, Value aStrideK, int64_t K, Value ptr, Value offset,
            Value strideK, Value strideN, Value acc);
  // Inclusive scan along `axis` of k tiles of one shape (f32 or index), combined elementwise by
  // `combine`: an associative function of (lhs[0..k), rhs[0..k)) scalars returning k scalars,
  // built with these same ops (lhs is the earlier element). Returns the k scanned tiles, then
  // the k totals (the whole axis combined: a 1-D tile along the other axis, or a scalar for 1-D
  // tiles). `inits` (optional, k values shaped like the totals) come before the axis' first
  // element: a carry from an earlier tile, folded in without a pass over the result. Each thread combines its
  // contiguous run of the axis in order, then lanes and warps combine their runs: the order depends on the layout only,
  // never on the data. Along the axis each thread holds one contiguous run (the layout keeps it so; setShiftLanes sets
  // the lanes). `reverse`: the scan runs from the axis' last element to its first (lhs is the later element, the inits
  // come after the last element, the totals end at the first): the adjoint recurrence of a backward pass, with no
  // flipped loads.
  using ScanCombine = std::function<std::vector<Value>(const std::vector<Value>& lhs, const std::vector<Value>& rhs)>;
  std::vector<Value> associativeScan(const std::vector<Value>& tiles, int axis, const ScanCombine& combine,
                                     const std::vector<Value>& inits = {}, bool reverse = false);
  // associativeScan with +: the inclusive sums of t along `axis` (reverse: from its last element
  // down), then the whole axis' sum.
  std::vector<Value> cumulativeSum(Value t, int axis, bool reverse = false);
  // The sliding window of a 2-D tile streamed along `axis` (extent S there): `cur` moved by s
  // places, the vacated places taken from the neighbour tile `fill` (same shape). s > 0:
  // result[i] = i >= s ? cur[i - s] : fill[S + i - s] (fill = the previous tile); s < 0:
  // result[i] = i - s < S ? cur[i - s] : fill[i - s - S] (fill = the next tile). 0 < |s| < S.
  // Register moves and warp shuffles: the layout keeps the axis inside one warp.
  // `period` P > 0 (dividing S) cuts the axis into segments of P places, each moved on its own:
  // S above reads P, fill is the tile P places later (s < 0) or earlier (s > 0), 0 < |s| < P.
  // With P a thread's run along the axis (S / shift lanes), register moves only.
  Value shift(Value cur, Value fill, int axis, int s, int period = 0);
  // Lanes of a warp along the shifted or scanned axis (a power of two, default: as many as the
  // axis needs for one contiguous run a thread). 1: each thread holds the whole axis, every shift
  // or scan is register work only and the warp's lanes all go along the other axis.
  void setShiftLanes(int lanes);
  // Lanes of a warp along axis 1 of the 2-D tiles (a power of two <= 32; default: as many as one
  // 128-byte segment needs, the rest of the warp down axis 0). More lanes along axis 1 spread a
  // 1-D tile broadcast along axis 0 (a row vector) over more threads: fewer registers for each,
  // at the price of more shuffles in a reduction along axis 1.
  void setInnerLanes(int lanes);
  // Blocks of this kernel that should fit on one SM at once (__launch_bounds__' second figure):
  // caps the registers a thread may take, trading spills for occupancy.
  void setMinBlocksPerSM(int blocks);
  // Loops over a thread's registers of more than four iterations that the CUDA source repeats
  // (a block with a constant index each) rather than leaving to `#pragma unroll`: those whose
  // repeated text stays within `lines` lines. More unrolled source gives the compiler's scheduler
  // more to work with where registers are to spare, and costs NVRTC time.
  void setUnrollLines(int lines);

  // Elementwise.
  Value add(Value a, Value b);
  Value sub(Value a, Value b);
  Value mul(Value a, Value b);
  Value div(Value a, Value b);  // float division, or signed integer division
  Value rem(Value a, Value b);  // signed integer remainder
  Value maximum(Value a, Value b);
  Value minimum(Value a, Value b);
  Value lt(Value a, Value b);
  Value le(Value a, Value b);
  Value gt(Value a, Value b);
  Value ge(Value a, Value b);
  Value eq(Value a, Value b);
  Value ne(Value a, Value b);
  Value logicalAnd(Value a, Value b);
  Value logicalOr(Value a, Value b);
  Value logicalNot(Value a);
  Value select(Value c, Value a, Value b);
  Value neg(Value a);
  Value exp(Value a);
  Value exp2(Value a);  // the hardware's approximation (2 ulp); results below 2^-126 are 0
  // a / b as a times the hardware's reciprocal of b (2 ulp; 0 where |b| > 2^126), floats only.
  Value divApprox(Value a, Value b);
  Value log(Value a);
  Value log1p(Value a);
  Value rsqrt(Value a);    // 1 / sqrt(a): the hardware's approximation (rsqrtf, 2 ulp), floats only
  Value toFloat(Value a);  // index -> f32
  Value toIndex(Value a);  // i32/i64/i1 -> index type
  Value literalLike(Value like, double v);

  // Control flow. Conditions are scalars (uniform per program).
  void ifThen(Value cond, const std::function<void()>& body);
  std::vector<Value> ifElse(Value cond, const std::function<std::vector<Value>()>& thenBody,
                            const std::function<std::vector<Value>()>& elseBody);
  // for (iv = lo; iv < hi; iv += step) with loop-carried values; body returns the next values.
  std::vector<Value> forLoop(Value lo, Value hi, Value step, const std::vector<Value>& inits,
                             const std::function<std::vector<Value>(Value iv, const std::vector<Value>&)>& body);
  void returnIf(Value cond);
  // The programs of a group (`count` of them, each calling this once, at the top level, after
  // its last access of the data the group shares) count themselves in at the int32 counter
  // ptr[offset]; returns true (a uniform scalar) in the last to arrive, which may then write what
  // the others read, and leaves the counter 0 for the next launch. The counter must start at 0.
  Value arriveLast(Value counterPtr, Value offset, Value count);
  // Chains of programs, each handing a result to the next through global memory. ticket: the
  // program's place (a uniform scalar) in the order programs take one from the int32 counter
  // ptr[offset], which must start at 0: a program that waits only on lower tickets waits on
  // programs already running, so the chain cannot deadlock. setFlag: after every thread's
  // accesses above, the int32 flag ptr[offset] = 1 (release); waitFlag: every thread waits until
  // the flag is nonzero (acquire), and then sees what the setter wrote before it. Top level or
  // uniform branches; the flags must start at 0.
  Value ticket(Value counterPtr, Value offset);
  void waitFlag(Value flagPtr, Value offset);
  void setFlag(Value flagPtr, Value offset);
  // Every thread of the program gets here before any goes on: orders accesses of the same memory
  // through tiles that spread it differently over the threads. Top level or uniform branches.
  // asyncProxy: the shared memory written above is read below by a wgmma (a dot whose b is a
  // swizzled buffer), so each thread first fences its writes to the async proxy.
  void barrier(bool asyncProxy = false);
  // A buffer of `elements` f32 in the program's shared memory (16-byte aligned), used like a
  // pointer argument: store a tile, barrier(), load it in another shape or spread. Staging a tile
  // every thread needs (a row broadcast over channels) converts and fetches each element once for
  // the program. A buffer written again in a loop needs a barrier before the rewrite as well.
  Value sharedBuffer(int64_t elements);  // 1..kMaxSharedBufferFloats elements
  // A buffer of `elements` of `dtype` (F32, F16 or BF16) in the program's dynamic shared memory,
  // 128-byte aligned: stores narrow to dtype, loads widen to f32, as with a pointer argument. The
  // buffers of a kernel take up to kMaxDynamicSharedBytes together (beyond 48 KiB the launch
  // raises the kernel's limit; a device with less refuses the launch, naming the kernel).
  Value sharedBuffer(int64_t elements, DType dtype);
  // The same with `swizzle` 0, or 16-bit in the XOR pattern of Hopper's tensor-core layouts of
  // `swizzle` (32, 64 or 128: compiler/Swizzle.h) bytes a row, 1024-byte aligned: loads, stores and
  // copies take logical offsets. A dot whose b lies there in rows of `swizzle` bytes runs on wgmma
  // (sm_90a; a kernel of 4 warps, each thread's rows in pairs), reading b by a matrix descriptor
  // where ldmatrix reads it once a warp: k-contiguous (strideK 1, strideN swizzle / 2, K up to a
  // row) or n-contiguous (strideN 1, strideK swizzle / 2, N a whole row), its offset a multiple of
  // 8 rows (checked where constant). No views of it. Its writes reach a dot after barrier(true).
  Value sharedBuffer(int64_t elements, DType dtype, int64_t swizzle);
  // A view of `elements` of `dtype` over the bytes of `buffer` (a sharedBuffer(elements, dtype))
  // from its element `at`: no memory of its own, so that a phase of the program that does not use
  // the buffer's bytes there can stage another dtype in them (barrier() between the phases). The
  // view starts at a multiple of 16 bytes and ends within the buffer.
  Value sharedView(Value buffer, int64_t at, int64_t elements, DType dtype);
  // Starts copying ptr[offsets] into the dynamic shared buffer smem[smemOffsets] (the same
  // storage dtype once specialised, bits unchanged), zeros where `mask` is false: cp.async, 16 bytes a thread where the
  // offsets allow (4 or 8 otherwise; narrower vectors copy synchronously). The copies a thread
  // started since its last commitGroup() form one group; waitGroup(n) waits until at most n of
  // its newest groups are in flight, then a barrier() makes every thread's copies visible to all.
  // A ring of stages: copy stage s + S - 1, commitGroup(), waitGroup(S - 1), barrier(), compute
  // on stage s, barrier() before stage s is copied into again.
  void copyAsync(Value smem, Value smemOffsets, Value ptr, Value offsets, Value mask = {});
  // Starts copying a row-major [rows, cols] tile, its columns contiguous in ptr, into smem:
  //   smem[smemBase + r pitch + c] = ptr[base + r rowStride + c]  for r < rowsValid, c < colsValid,
  // zeros for the rest of the tile. The block's threads share it in vectors of `vec` elements
  // (4, 8 or 16 bytes), consecutive threads along a row, whatever the kernel's layout: whole
  // vectors into consecutive banks, where copyAsync follows the layout's runs. The caller
  // guarantees base, rowStride and the pointer aligned to vec elements. Grouped and waited for as
  // copyAsync.
  void copyTileAsync(Value smem, Value smemBase, int64_t pitch, Value ptr, Value base, Value rowStride, int64_t rows,
                     int64_t cols, Value rowsValid, Value colsValid, int64_t vec);
  // Stores a row-major [rows, cols] tile of smem to ptr, its columns contiguous there:
  //   ptr[base + r rowStride + c] = smem[smemBase + r pitch + c]  for r < rowsValid, c < colsValid,
  // nothing else written. The block's threads share it in vectors of `vec` elements (4, 8 or 16
  // bytes), consecutive threads along a row, whatever the kernel's layout: whole sectors where a
  // tile in the accumulators' layout stores pairs (write it to smem first, then barrier()). The
  // caller guarantees base, rowStride and the pointer aligned to vec elements; the buffer holds
  // ptr's dtype.
  void storeTile(Value smem, Value smemBase, int64_t pitch, Value ptr, Value base, Value rowStride, int64_t rows,
                 int64_t cols, Value rowsValid, Value colsValid, int64_t vec);
  void commitGroup();
  void waitGroup(int pending);  // 0..7
  void reportError(Value errPtr, Value code, Value a, Value b, Value c);

  // Finishes the kernel and returns its module (an mlir::ModuleOp) as an opaque pointer owned by
  // the caller's MLIRContext. Used by compileKernel.
  void* finish();
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Composite math, written once for every kernel. sigmoid takes the hardware's exp2 and reciprocal
// (a few ulp, as --use_fast_math builds of causal-conv1d and mamba_ssm do): the precise expf and
// division cost ~25 instructions an element and bound the conv's issue rate.
Value sigmoid(Value x);
Value silu(Value x);
Value softplus(Value x);  // x > 20 ? x : log1p(exp(x)), as mamba_ssm computes it
// dt' of dt (a tile or a scalar): softplus when `softplusOn`, then clamped to [dtMin, dtMax] when
// `hasClamp`, each under a branch on the flag.
Value dtTransform(Value dt, Value softplusOn, Value hasClamp, Value dtMin, Value dtMax);
Value cdiv(Value a, Value b);

// The bf16 terms of a dot operand (KernelBuilder::dot) that hold a value of the tensor's storage
// dtype (the specialisation's "dtype:<tensor>") exactly: 1 bf16, 2 fp16, 3 fp32.
int dotPieces(const Specialization& s, const char* tensor);

// Operators (NumPy broadcasting; literals take the other side's type).
Value operator+(Value a, Value b);
Value operator-(Value a, Value b);
Value operator*(Value a, Value b);
Value operator/(Value a, Value b);
Value operator%(Value a, Value b);
Value operator-(Value a);
Value operator<(Value a, Value b);
Value operator<=(Value a, Value b);
Value operator>(Value a, Value b);
Value operator>=(Value a, Value b);
Value operator==(Value a, Value b);
Value operator!=(Value a, Value b);
Value operator&&(Value a, Value b);
Value operator||(Value a, Value b);
Value operator!(Value a);
#define SSMJIT_DSL_LITERAL_OPS(T) \
  Value operator+(Value a, T b);  \
  Value operator+(T a, Value b);  \
  Value operator-(Value a, T b);  \
  Value operator-(T a, Value b);  \
  Value operator*(Value a, T b);  \
  Value operator*(T a, Value b);  \
  Value operator/(Value a, T b);  \
  Value operator/(T a, Value b);  \
  Value operator%(Value a, T b);  \
  Value operator<(Value a, T b);  \
  Value operator<=(Value a, T b); \
  Value operator>(Value a, T b);  \
  Value operator>=(Value a, T b); \
  Value operator==(Value a, T b); \
  Value operator!=(Value a, T b);
SSMJIT_DSL_LITERAL_OPS(int)
SSMJIT_DSL_LITERAL_OPS(int64_t)
SSMJIT_DSL_LITERAL_OPS(double)
#undef SSMJIT_DSL_LITERAL_OPS

}  // namespace ssmjit::dsl
