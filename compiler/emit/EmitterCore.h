// The CUDA emitter's state and shared machinery, internal to compiler/emit: value names, output
// lines, layout arithmetic and element access (EmitterCore.cpp), and one emit(XOp) per op,
// defined by concern in EmitMath.cpp, EmitMemory.cpp, EmitControl.cpp, EmitCollectives.cpp and
// EmitDot.cpp. A tile is a per-thread register array in the layout sj-assign-layouts gave it.
#pragma once
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/dialect/SJDialect.h"
#include "compiler/emit/CudaEmitter.h"
#include "compiler/passes/Layout.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace ssmjit::emit {

[[noreturn]] void fail(mlir::Operation* op, const std::string& msg);
std::string cType(mlir::Type t);         // the C type of a value (its element type for a tile)
std::string storageCType(mlir::Type t);  // the C type of a pointer's storage
std::vector<int64_t> shapeOf(mlir::Value v);
// Ranges, splats and tile constants: made in whatever layout each use needs (#sj.any).
bool isRemat(mlir::Value v);
// The value of a scalar constant or of every element of a splat tile constant; null otherwise.
mlir::Attribute splatValue(mlir::arith::ConstantOp c);

class Emitter {
 public:
  explicit Emitter(mlir::func::FuncOp f);
  EmittedKernel run();

 private:
  using Kind = layout::Kind;
  using Value = mlir::Value;
  using Operation = mlir::Operation;

  mlir::func::FuncOp f_;
  layout::Parent P_;
  int64_t warps_ = 4;
  int64_t unrollLines_ = 0;  // sj.unroll_lines: see forConst
  std::ostringstream os_;
  int ind_ = 0;
  int counter_ = 0;
  std::map<void*, std::string> names_;
  std::map<void*, Kind> kinds_;  // layout of array-valued tiles
  // The result of the last wgmma dot while its group is still in flight (chainsWgmma): the next
  // dot accumulates into the same registers, then one wait serves the chain.
  void* openWgmma_ = nullptr;
  // Dynamic shared buffers: each one's byte offset in the kernel's one extern array, in op order
  // at multiples of 128 bytes (as the DSL counts them), and the array's extent.
  std::map<Operation*, int64_t> dynamicOffsets_;
  int64_t dynamicBytes_ = 0;

  // 16-bit float loads kept as their storage bits (name and C type of the raw array or scalar);
  // each use converts. Why: a conversion right after the load makes the thread wait for the load
  // there, and a load issued early (the next token's inputs, prefetched through a rolled loop) then
  // stalls where it is issued instead of where its value is first used.
  // An array loaded V >= 2 elements at a time keeps, for each element, the 32-bit word that holds it
  // (element r in half r % 2): its conversion is then one shift or mask, where a 16-bit element
  // would first be extracted from the word (an extra instruction and a move).
  struct Raw {
    std::string name, storage;  // storage: the C type of the variable's elements
    std::string elem;           // the 16-bit float type (ssm_bf16 or ssm_f16)
    bool words = false;
  };
  // Values of one form may be carried through a loop in one variable.
  static bool sameForm(const Raw& a, const Raw& b) {
    return a.storage == b.storage && a.elem == b.elem && a.words == b.words;
  }
  std::map<void*, Raw> raw_;
  const Raw* rawOf(Value v) const {
    auto it = raw_.find(v.getAsOpaquePointer());
    return it == raw_.end() ? nullptr : &it->second;
  }
  // EmitMemory.cpp: which loads are kept raw, and how.
  static mlir::Type rawLoadStorage(Value v);
  static Raw rawForm(Value v, const std::string& name);

  // A block's cross-warp reductions are deferred: each writes its warps' partials to its own
  // shared words where it stands, and the block passes one __syncthreads before the first use of
  // any of them, reading each result just before its first use. Why: a barrier per reduction
  // serialised the scan backward's 2N per-token dB/dC reductions (64 barriers a tile at N 16),
  // where now the shuffles of all of them overlap. The words of a reduction are written again
  // only when its block runs again, so a block that read any ends with a barrier (not the
  // kernel's body, which runs once).
  struct Pending {
    Operation* op;
    bool synced;                 // a barrier followed its shared-memory writes
    std::function<void()> read;  // declares the result and reads it from shared memory
  };
  std::vector<std::vector<Pending>> pending_;  // per block being emitted, innermost last

  // ---- names, lines, layout arithmetic (EmitterCore.cpp) ------------------------------------
  void line(const std::string& s) { os_ << std::string(2 * ind_, ' ') << s << "\n"; }
  std::string fresh() { return "v" + std::to_string(counter_++); }
  static std::string I(int64_t v) { return std::to_string(v); }
  std::string name(Value v);
  // Names a scalar result and declares it const: `const <type> <name> = <expr>;`.
  void defineScalar(Value v, const std::string& expr);
  // Declares the result of op (array or scalar) and returns its name.
  std::string declare(Value v, Kind k);
  // Ends the innermost `n` blocks (one indent level and a closing brace each).
  void closeBlocks(int n = 1) {
    while (n-- > 0) {
      --ind_;
      line("}");
    }
  }
  // Emits body for `var` = begin, begin + step, ... below end (constants): a loop, or unrolled.
  void forConst(const std::string& var, int64_t begin, int64_t end, int64_t step, const std::function<void()>& body);
  // Emits body once for every `step`-th register r of R (forConst over `r`).
  void forRegs(int64_t R, const std::function<void()>& body, int64_t step = 1);
  // forRegs over the registers of a `shape` tile of layout `k`, each element once: a thread whose
  // elements a replica of the layout with a smaller thread id holds too skips them (stores,
  // copies).
  void forOwnedRegs(Kind k, const std::vector<int64_t>& shape, const std::function<void()>& body, int64_t step);

  int64_t n(int d, int64_t S) const { return layout::perThread(P_, d, S); }
  std::string coord(int d, int64_t S, const std::string& j, const std::string& thread = "") const;
  std::string owner(Kind k, const std::vector<int64_t>& shape) const;
  int64_t regs(Kind k, const std::vector<int64_t>& s) const;
  std::vector<std::string> coords(Kind k, const std::vector<int64_t>& s, const std::string& r) const;
  Kind layoutOf(Value v);
  Kind opLayout(Operation* op);
  // Element r of value v, seen in layout k (scalars ignore r).
  std::string E(Value v, Kind k, const std::string& r);
  std::string broadcastSource(sj::BroadcastOp b, const std::string& r) const;
  std::string constLiteral(mlir::arith::ConstantOp c);

  void emitBlock(mlir::Block& b);
  bool readPendingUsedBy(Operation* op);
  void emitOp(Operation* op);

  // ---- one emit per op ---------------------------------------------------------------------
  // EmitMath.cpp
  std::string exprOf(Operation* op, const std::vector<std::string>& a);
  void emitElementwise(Operation* op);
  void emit(mlir::arith::ConstantOp c);
  void emit(sj::ProgramIdOp p);
  void emit(sj::ExpandDimsOp e);
  // EmitMemory.cpp
  void emit(sj::LoadOp l);
  void emitRawLoad(sj::LoadOp l);
  void emit(sj::StoreOp s);
  void emit(sj::SharedBufferOp b);
  // An element offset into ptr as C (a swizzled buffer's swizzled), and ptr + that offset.
  std::string offsetIn(Value ptr, const std::string& offset);
  std::string address(Value ptr, const std::string& offset);
  void carveDynamicShared();
  void emit(sj::ArriveLastOp a);
  void emit(sj::TicketOp t);
  void emit(sj::WaitFlagOp w);
  void emit(sj::SetFlagOp f);
  void emit(sj::ReportErrorOp r);
  // EmitControl.cpp
  void assignYield(mlir::scf::YieldOp y, const std::vector<std::string>& targets, const std::vector<Value>& results);
  void emit(mlir::scf::IfOp i);
  void emit(mlir::scf::ForOp fo);
  void emit(sj::ReturnIfOp r);
  void emit(sj::BarrierOp);
  // EmitCollectives.cpp
  void emit(sj::ReduceOp r);
  void emit(sj::ShiftOp sh);
  void emit(sj::ScanOp sc);
  // EmitAsyncCopy.cpp
  void emit(sj::CopyAsyncOp c);
  void emit(sj::CopyTileAsyncOp c);
  void emit(sj::StoreTileOp s);
  // A tile copy between shared memory and memory (copy_tile_async, store_tile): checks that both
  // sides hold one dtype and that a vector is 4, 8 or 16 bytes, then emits `whole` for a tile
  // within its valid rows and columns and `part` otherwise, each once a vector of the block's
  // threads, given the vector's shared and global addresses (row ssm_r, column ssm_c).
  using TileVectorBody = std::function<void(const std::string& smem, const std::string& global)>;
  template <class TileOp>
  void emitTileCopy(TileOp c, const std::string& what, const TileVectorBody& whole, const TileVectorBody& part);
  void emit(sj::CommitGroupOp);
  void emit(sj::WaitGroupOp w);
  // EmitDot.cpp (b gathered) and EmitDotFragments.cpp (b by ldmatrix)
  void emit(sj::DotOp d);
  void emitAFragments(sj::DotOp d, const std::string& mmaType, bool halfStep);
  // One ssm_mma_<mmaType> of pair i (the thread's rows 2 i and 2 i + 1 of nr, nn accumulator
  // registers `nm` a row) on the accumulators at column registers `col` + {0, 1} (a missing second
  // row takes zeros, declared here), a's piece x and the B registers b0, b1.
  void emitMma(const std::string& mmaType, const std::string& nm, int64_t i, int64_t nr, int64_t nn,
               const std::string& col, int x, const std::string& b0, const std::string& b1);
  void emit(sj::DotSharedOp d);
  // emitFragmentDot's form for b in a swizzled buffer: wgmma, b by a matrix descriptor.
  void emitWgmmaDot(Operation* op, const std::string& nm, int64_t K, int aPieces, sj::SharedBufferOp buf, Value offset,
                    const std::function<void()>& aFragments);
  static std::string wgmmaAsm(int64_t N, const std::string& type, bool kMajor);
  // Whether wgmma dot `op`'s result is the accumulator of the next wgmma dot of its block, its
  // only use, with nothing between that writes memory: that dot then joins its commit group.
  static bool chainsWgmma(Operation* op);
  // The ldmatrix dot: acc + a . b with b in `b` at offset with strides (k, n); `aFragments`
  // emits k-step ks's ssm_a[pair][register][piece] (aPieces terms of the mma's type).
  void emitFragmentDot(Operation* op, Value acc, Value result, int64_t K, int aPieces, sj::SharedBufferOp b,
                       Value offset, Value strideK, Value strideN, const std::function<void()>& aFragments);
};

}  // namespace ssmjit::emit
