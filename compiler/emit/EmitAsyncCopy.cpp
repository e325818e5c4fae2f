// Asynchronous copies into shared memory: cp.async per vector, its commit groups and waits.
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

void Emitter::emit(sj::CommitGroupOp) { line("ssm_cp_async_commit();"); }

void Emitter::emit(sj::WaitGroupOp w) { line("ssm_cp_async_wait<" + I(w.getPending()) + ">();"); }

}  // namespace ssmjit::emit
