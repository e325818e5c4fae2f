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
        const std::string dst = name(c.getSmem()) + " + " + E(c.getSmemOffsets(), k, "r");
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

// The block's threads in turn, a vector each (consecutive threads along a row): thread t takes
// vectors t, t + threads, ...; a vector past the valid rows reads nothing, one across the valid
// columns reads only those (the source size), and both write zeros for the rest.
void Emitter::emit(sj::CopyTileAsyncOp c) {
  Type to = cast<sj::PtrType>(c.getSmem().getType()).getElementType();
  Type from = cast<sj::PtrType>(c.getPtr().getType()).getElementType();
  if (to != from)
    fail(c, "copyTileAsync copies bits: the buffer holds " + storageCType(to) + ", the source " + storageCType(from));
  const int64_t elem = from.getIntOrFloatBitWidth() / 8, vec = c.getVec(), bytes = vec * elem;
  if (bytes != 4 && bytes != 8 && bytes != 16)
    fail(c, "copyTileAsync copies vectors of 4, 8 or 16 bytes, got " + I(bytes));
  const std::string ix = cType(c.getBase().getType()), rowsValid = name(c.getRowsValid()),
                    colsValid = name(c.getColsValid());
  auto vectorsOf = [&](const std::function<void()>& body) { forTileVectors(c.getRows(), c.getCols(), vec, body); };
  const std::string dst =
      name(c.getSmem()) + " + " + name(c.getSmemBase()) + " + ssm_r * " + I(c.getPitch()) + " + ssm_c";
  const std::string src =
      name(c.getPtr()) + " + (" + name(c.getBase()) + " + (" + ix + ")ssm_r * " + name(c.getRowStride()) + " + ssm_c)";
  // A whole tile (the common case; the values are the block's, so the branch is uniform) copies
  // every vector whole: no per-vector bounds, source-size operand or pointer select.
  line("if (" + rowsValid + " >= " + I(c.getRows()) + " && " + colsValid + " >= " + I(c.getCols()) + ") {");
  ++ind_;
  vectorsOf([&] { line("ssm_cp_async_full<" + I(bytes) + ">(" + dst + ", " + src + ");"); });
  --ind_;
  line("} else {");
  ++ind_;
  vectorsOf([&] {
    line("const int ssm_n = ssm_r < " + rowsValid + " ? min(max((int)(" + colsValid + ") - ssm_c, 0), " + I(vec) +
         ") : 0;");
    line("ssm_cp_async_n<" + I(bytes) + ">(" + dst + ", ssm_n > 0 ? " + src + " : " + name(c.getPtr()) + ", ssm_n * " +
         I(elem) + ");");
  });
  --ind_;
  line("}");
}

// Thread t takes vectors t, t + threads, ... (consecutive threads along a row).
void Emitter::forTileVectors(int64_t rows, int64_t cols, int64_t vec, const std::function<void()>& body) {
  const int64_t perRow = cols / vec, vectors = rows * perRow, threads = 32 * warps_;
  line("#pragma unroll");
  line("for (int ssm_k = 0; ssm_k < " + I((vectors + threads - 1) / threads) + "; ++ssm_k) {");
  ++ind_;
  line("const int ssm_v = threadIdx.x + ssm_k * " + I(threads) + ";");
  if (vectors % threads) line("if (ssm_v < " + I(vectors) + ") {");
  line("const int ssm_r = ssm_v / " + I(perRow) + ", ssm_c = ssm_v % " + I(perRow) + " * " + I(vec) + ";");
  body();
  if (vectors % threads) line("}");
  --ind_;
  line("}");
}

// A whole tile stores every vector whole (the branch is uniform: its values are the block's);
// otherwise a vector within the valid rows stores its valid columns element by element.
void Emitter::emit(sj::StoreTileOp c) {
  Type from = cast<sj::PtrType>(c.getSmem().getType()).getElementType();
  Type to = cast<sj::PtrType>(c.getPtr().getType()).getElementType();
  if (to != from)
    fail(c, "storeTile copies bits: the buffer holds " + storageCType(from) + ", the destination " + storageCType(to));
  const int64_t elem = from.getIntOrFloatBitWidth() / 8, vec = c.getVec(), bytes = vec * elem;
  if (bytes != 4 && bytes != 8 && bytes != 16) fail(c, "storeTile stores vectors of 4, 8 or 16 bytes, got " + I(bytes));
  const std::string ix = cType(c.getBase().getType()), rowsValid = name(c.getRowsValid()),
                    colsValid = name(c.getColsValid()), raw = "ssm_raw<" + I(bytes) + ">::type";
  const std::string src =
      name(c.getSmem()) + " + " + name(c.getSmemBase()) + " + ssm_r * " + I(c.getPitch()) + " + ssm_c";
  const std::string dst =
      name(c.getPtr()) + " + (" + name(c.getBase()) + " + (" + ix + ")ssm_r * " + name(c.getRowStride()) + " + ssm_c)";
  auto vectorsOf = [&](const std::function<void()>& body) { forTileVectors(c.getRows(), c.getCols(), vec, body); };
  line("if (" + rowsValid + " >= " + I(c.getRows()) + " && " + colsValid + " >= " + I(c.getCols()) + ") {");
  ++ind_;
  vectorsOf([&] {
    line("*reinterpret_cast<" + raw + "*>(" + dst + ") = *reinterpret_cast<const " + raw + "*>(" + src + ");");
  });
  --ind_;
  line("} else {");
  ++ind_;
  vectorsOf([&] {
    line("if (ssm_r < " + rowsValid + ") {");
    ++ind_;
    line("#pragma unroll");
    line("for (int ssm_e = 0; ssm_e < " + I(vec) + "; ++ssm_e)");
    line("  if (ssm_c + ssm_e < " + colsValid + ") (" + dst + ")[ssm_e] = (" + src + ")[ssm_e];");
    --ind_;
    line("}");
  });
  --ind_;
  line("}");
}

void Emitter::emit(sj::CommitGroupOp) { line("ssm_cp_async_commit();"); }

void Emitter::emit(sj::WaitGroupOp w) { line("ssm_cp_async_wait<" + I(w.getPending()) + ">();"); }

}  // namespace ssmjit::emit
