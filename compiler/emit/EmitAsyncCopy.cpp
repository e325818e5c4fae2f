// Copies between memory and shared memory: asynchronous ones into it (cp.async per vector, its
// commit groups and waits) and tile stores out of it.
#include <functional>

#include "compiler/emit/EmitterCore.h"

namespace ssmjit::emit {
using namespace mlir;

// Each element once (replicas of the layout skip it, as stores do), in the vectors of sj.vec:
// 16 bytes by cp.async.cg (through L2 only), 4 or 8 by cp.async.ca, narrower ones by a plain
// load and store. A masked-off vector reads nothing (source size 0, from the pointer itself) and
// writes zeros.
void Emitter::emit(sj::CopyAsyncOp c) {
  Type to = cast<sj::PtrType>(c.getSmem().getType()).getElementType();
  Type from = cast<sj::PtrType>(c.getPtr().getType()).getElementType();
  if (to != from)
    fail(c, "copyAsync copies bits: the buffer holds " + storageCType(to) + ", the source " + storageCType(from));
  Kind k = opLayout(c);
  auto shape = shapeOf(c.getOffsets());
  auto v = c->getAttrOfType<IntegerAttr>("sj.vec");
  const int64_t vec = v ? v.getInt() : 1;
  const int64_t bytes = vec * (cast<sj::PtrType>(c.getPtr().getType()).getElementType().getIntOrFloatBitWidth() / 8);
  forOwnedRegs(
      k, shape,
      [&] {
        const std::string dst = address(c.getSmem(), E(c.getSmemOffsets(), k, "r"));
        std::string src = name(c.getPtr()) + " + " + E(c.getOffsets(), k, "r");
        const std::string pred = c.getMask() ? E(c.getMask(), k, "r") : "true";
        if (bytes < 4) {
          line("ssm_copy_sync<" + I(vec) + ">(" + dst + ", " + src + ", " + pred + ");");
          return;
        }
        if (c.getMask()) src = pred + " ? " + src + " : " + name(c.getPtr());
        line("ssm_cp_async<" + I(bytes) + ">(" + dst + ", " + src + ", " + pred + ");");
      },
      vec);
}

template <class TileOp>
void Emitter::emitTileCopy(TileOp c, const std::string& what, const TileVectorBody& whole, const TileVectorBody& part) {
  Type buffer = cast<sj::PtrType>(c.getSmem().getType()).getElementType();
  Type memory = cast<sj::PtrType>(c.getPtr().getType()).getElementType();
  if (buffer != memory)
    fail(c, what + " copies bits: the buffer holds " + storageCType(buffer) + ", the memory " + storageCType(memory));
  const int64_t vec = c.getVec(), bytes = vec * (memory.getIntOrFloatBitWidth() / 8);
  if (bytes != 4 && bytes != 8 && bytes != 16) fail(c, what + " moves vectors of 4, 8 or 16 bytes, got " + I(bytes));
  const std::string smem = address(c.getSmem(), name(c.getSmemBase()) + " + ssm_r * " + I(c.getPitch()) + " + ssm_c");
  const std::string global = name(c.getPtr()) + " + (" + name(c.getBase()) + " + (" + cType(c.getBase().getType()) +
                             ")ssm_r * " + name(c.getRowStride()) + " + ssm_c)";
  // Thread t takes vectors t, t + threads, ... (consecutive threads along a row).
  auto vectors = [&](const TileVectorBody& body) {
    const int64_t perRow = c.getCols() / vec, count = c.getRows() * perRow, threads = 32 * warps_;
    line("#pragma unroll");
    line("for (int ssm_k = 0; ssm_k < " + I((count + threads - 1) / threads) + "; ++ssm_k) {");
    ++ind_;
    line("const int ssm_v = threadIdx.x + ssm_k * " + I(threads) + ";");
    if (count % threads) line("if (ssm_v < " + I(count) + ") {");
    line("const int ssm_r = ssm_v / " + I(perRow) + ", ssm_c = ssm_v % " + I(perRow) + " * " + I(vec) + ";");
    body(smem, global);
    if (count % threads) line("}");
    --ind_;
    line("}");
  };
  // A whole tile (the common case; the values are the block's, so the branch is uniform) moves
  // every vector whole, without per-vector bounds.
  line("if (" + name(c.getRowsValid()) + " >= " + I(c.getRows()) + " && " + name(c.getColsValid()) +
       " >= " + I(c.getCols()) + ") {");
  ++ind_;
  vectors(whole);
  --ind_;
  line("} else {");
  ++ind_;
  vectors(part);
  --ind_;
  line("}");
}

// Into shared memory: a vector past the valid rows reads nothing, one across the valid columns
// reads only those (the source size), and both write zeros for the rest.
void Emitter::emit(sj::CopyTileAsyncOp c) {
  const int64_t elem = cast<sj::PtrType>(c.getPtr().getType()).getElementType().getIntOrFloatBitWidth() / 8,
                vec = c.getVec(), bytes = vec * elem;
  const std::string rowsValid = name(c.getRowsValid()), colsValid = name(c.getColsValid());
  emitTileCopy(
      c, "copyTileAsync",
      [&](const std::string& smem, const std::string& global) {
        line("ssm_cp_async_full<" + I(bytes) + ">(" + smem + ", " + global + ");");
      },
      [&](const std::string& smem, const std::string& global) {
        line("const int ssm_n = ssm_r < " + rowsValid + " ? min(max((int)(" + colsValid + ") - ssm_c, 0), " + I(vec) +
             ") : 0;");
        line("ssm_cp_async_n<" + I(bytes) + ">(" + smem + ", ssm_n > 0 ? " + global + " : " + name(c.getPtr()) +
             ", ssm_n * " + I(elem) + ");");
      });
}

// Out of shared memory: a vector within the valid rows stores its valid columns element by
// element; nothing else is written.
void Emitter::emit(sj::StoreTileOp c) {
  const int64_t bytes =
      c.getVec() * (cast<sj::PtrType>(c.getPtr().getType()).getElementType().getIntOrFloatBitWidth() / 8);
  const std::string raw = "ssm_raw<" + I(bytes) + ">::type", rowsValid = name(c.getRowsValid()),
                    colsValid = name(c.getColsValid());
  emitTileCopy(
      c, "storeTile",
      [&](const std::string& smem, const std::string& global) {
        line("*reinterpret_cast<" + raw + "*>(" + global + ") = *reinterpret_cast<const " + raw + "*>(" + smem + ");");
      },
      [&](const std::string& smem, const std::string& global) {
        line("if (ssm_r < " + rowsValid + ") {");
        ++ind_;
        line("#pragma unroll");
        line("for (int ssm_e = 0; ssm_e < " + I(c.getVec()) + "; ++ssm_e)");
        line("  if (ssm_c + ssm_e < " + colsValid + ") (" + global + ")[ssm_e] = (" + smem + ")[ssm_e];");
        --ind_;
        line("}");
      });
}

void Emitter::emit(sj::CommitGroupOp) { line("ssm_cp_async_commit();"); }

void Emitter::emit(sj::WaitGroupOp w) { line("ssm_cp_async_wait<" + I(w.getPending()) + ">();"); }

}  // namespace ssmjit::emit
