// Dots with operands in 16-bit shared buffers: fragments by ldmatrix, the mma in their type.
#include "compiler/emit/EmitterCore.h"

namespace ssmjit::emit {
using namespace mlir;

// In the mma parent layout with column runs of a pair (assign-layouts), a thread's registers
// 4 ks + {0, 1} and 4 ks + {2, 3} along a row are columns 16 ks + 2 q + {0, 1} and + 8 of a,
// and its accumulator registers 2 m + {0, 1} columns 8 m + 2 q + {0, 1}: the mma's fragment
// slots in their natural order. So one ldmatrix.x4 gives the B fragments of one k-step for the
// n-tiles 2 mp and 2 mp + 1: matrices (k 0-7, n-tile 2 mp), (k 8-15, 2 mp), (k 0-7, 2 mp + 1),
// (k 8-15, 2 mp + 1), lane 8 j + i giving row i of matrix j. With k contiguous (stride_k 1) a
// matrix row is one n and 8 consecutive k, and lane g q receives n g, k 2 q + {0, 1}: b0 as it
// is; with n contiguous (.trans) a row is one k and 8 consecutive n, transposed on the way.
void Emitter::emitFragmentDot(Operation* op, Value acc, Value result, int64_t K, int aPieces, sj::SharedBufferOp buf,
                              Value offset, Value strideK, Value strideN, const std::function<void()>& aFragments) {
  if (!(P_.spt[1] == 2 && P_.tpw[0] == 8 && P_.tpw[1] == 4 && P_.wpc[1] == 1))
    fail(op, "dot with b in shared memory outside the mma parent layout of column pairs (" + P_.str() + ")");
  auto cs = shapeOf(acc);
  const int64_t N = cs[1];
  const int64_t nr = n(0, cs[0]), nn = n(1, N), pairs = (nr + 1) / 2;
  const int pa = aPieces;
  const bool f16 = cast<sj::PtrType>(buf.getType()).getElementType().isF16();
  const std::string type = f16 ? "f16" : "bf16";
  const bool kUnit = sj::constantInt(strideK) == std::optional<int64_t>(1);
  const int64_t pitch = *sj::constantInt(kUnit ? strideN : strideK);
  if (buf.getSwizzle() && openWgmma_ == acc.getAsOpaquePointer()) {
    // The chain's registers, still in flight: no copy may touch them before the wait.
    const std::string nm = name(acc);
    names_[result.getAsOpaquePointer()] = nm;
    kinds_[result.getAsOpaquePointer()] = Kind::Blocked;
    return emitWgmmaDot(op, nm, K, aPieces, buf, offset, aFragments);
  }
  const std::string nm = declare(result, Kind::Blocked);
  forRegs(nr * nn, [&] { line(nm + "[r] = " + E(acc, Kind::Blocked, "r") + ";"); });
  if (buf.getSwizzle()) return emitWgmmaDot(op, nm, K, aPieces, buf, offset, aFragments);
  line("{");
  ++ind_;
  // This lane's row of the four matrices at k-step 0 and n-tiles 0 and 1.
  const std::string laneRow =
      kUnit ? "8 * (ssm_lane >> 4) * " + I(pitch) + " + (ssm_lane & 7) * " + I(pitch) + " + 8 * ((ssm_lane >> 3) & 1)"
            : "((ssm_lane & 7) + 8 * ((ssm_lane >> 3) & 1)) * " + I(pitch) + " + 8 * (ssm_lane >> 4)";
  line("const " + storageCType(cast<sj::PtrType>(buf.getType()).getElementType()) +
       "* const ssm_brow = " + name(buf.getResult()) + " + " + name(offset) + " + " + laneRow + ";");
  line("#pragma unroll");
  line("for (int ks = 0; ks < " + I(K / 16) + "; ++ks) {");
  ++ind_;
  aFragments();
  line("#pragma unroll");
  line("for (int mp = 0; mp < " + I(N / 16) + "; ++mp) {");
  ++ind_;
  line("unsigned ssm_b[4];");
  const std::string step = kUnit ? "16 * ks + 16 * mp * " + I(pitch) : "16 * ks * " + I(pitch) + " + 16 * mp";
  line(std::string("ssm_ldmatrix_x4<") + (kUnit ? "false" : "true") + ">(ssm_b, ssm_brow + " + step + ");");
  for (int h = 0; h < 2; ++h) {
    line("{");
    ++ind_;
    for (int64_t i = 0; i < pairs; ++i) {
      const std::string m2 = "4 * mp + " + I(2 * h);  // 2 m for n-tile m = 2 mp + h
      if (2 * i + 1 >= nr) line("float ssm_z0 = 0.0f, ssm_z1 = 0.0f;");
      for (int x = pa - 1; x >= 0; --x)  // a's terms, smallest first
        emitMma(type, nm, i, nr, nn, m2, x, "ssm_b[" + I(2 * h) + "]", "ssm_b[" + I(2 * h + 1) + "]");
    }
    closeBlocks();
  }
  closeBlocks(3);
}

// One wgmma.m64nNk16 a k-step, a term and a pair: the warpgroup's warps w hold the mma's rows
// 16 w .. 16 w + 15 as mma.sync's m16 tile (each thread's pair i its rows g and g + 8), and its
// accumulators per n-tile j the registers 4 j .. 4 j + 3 of mma.sync's order, so the parent
// layout's fragments and accumulators are wgmma's as they are, pair i of every warp the
// warpgroup's instruction i. b is read from shared memory once for the warpgroup where ldmatrix
// reads it once a warp: k-contiguous (N rows of K) or n-contiguous (K rows of N, transposed on
// the way), rows of the swizzle's bytes, a k-step 16 elements along a row or 16 rows on. The
// group is waited for before the dot's result is used: its registers are held around it
// (ssm_wgmma_hold). Where the result only feeds the next wgmma dot (chainsWgmma: the terms of a
// split operand), that dot's instructions join the group and its wait serves both.
void Emitter::emitWgmmaDot(Operation* op, const std::string& nm, int64_t K, int aPieces, sj::SharedBufferOp buf,
                           Value offset, const std::function<void()>& aFragments) {
  const int64_t M = shapeOf(op->getResult(0))[0], N = shapeOf(op->getResult(0))[1];
  const int64_t nr = n(0, M), nn = n(1, N);
  // One warpgroup a block: the form the GPU tests run (several would each take their own rows).
  if (P_.wpc[0] != 4 || nr % 2)
    fail(op, "a wgmma dot needs 4 warps along M (one warpgroup) and each thread's rows in pairs (" + P_.str() + ", M " +
                 I(M) + ")");
  const int64_t sw = *buf.getSwizzle();
  auto d = dyn_cast<sj::DotOp>(op);
  const Value strideK = d ? d.getStrideK() : cast<sj::DotSharedOp>(op).getStrideK();
  const bool kMajor = sj::constantInt(strideK) == std::optional<int64_t>(1);
  const std::string type = cast<sj::PtrType>(buf.getType()).getElementType().isF16() ? "f16" : "bf16";
  const std::string instruction = wgmmaAsm(N, type, kMajor);
  const std::string kStep = kMajor ? "2 * ks" : I(sw) + " * ks";  // in the descriptor's 16-byte units
  line("{");
  ++ind_;
  line("const unsigned long long ssm_bdesc = ssm_wgmma_desc<" + I(sw) + ">(" + name(buf.getResult()) + " + " +
       name(offset) + ");");
  forRegs(nr * nn, [&] { line("ssm_wgmma_hold(" + nm + "[r]);"); });
  line("#pragma unroll");
  line("for (int ks = 0; ks < " + I(K / 16) + "; ++ks) {");
  ++ind_;
  aFragments();
  line("ssm_wgmma_fence();");
  for (int64_t i = 0; i < nr / 2; ++i)
    for (int x = aPieces - 1; x >= 0; --x) {  // a's terms, smallest first
      std::string outs;                       // the pair's accumulators in wgmma's order
      for (int64_t j = 0; j < N / 8; ++j)
        for (int e = 0; e < 4; ++e)
          outs += std::string(outs.empty() ? "" : ", ") + "\"+f\"(" + nm + "[" +
                  I((2 * i + e / 2) * nn + 2 * j + e % 2) + "])";
      std::string ins;
      for (int e = 0; e < 4; ++e) ins += "\"r\"(ssm_a[" + I(i) + "][" + I(e) + "][" + I(x) + "]), ";
      line("asm volatile(" + instruction + " : " + outs + " : " + ins + "\"l\"(ssm_bdesc + " + kStep + "), \"r\"(1));");
    }
  closeBlocks();
  if (chainsWgmma(op)) {
    openWgmma_ = op->getResult(0).getAsOpaquePointer();
    return closeBlocks();
  }
  openWgmma_ = nullptr;
  line("ssm_wgmma_commit();");
  line("ssm_wgmma_wait_all();");
  forRegs(nr * nn, [&] { line("ssm_wgmma_hold(" + nm + "[r]);"); });
  closeBlocks();
}

bool Emitter::chainsWgmma(Operation* op) {
  Value r = op->getResult(0);
  if (!r.hasOneUse()) return false;
  Operation* user = *r.getUsers().begin();
  Value acc;
  sj::SharedBufferOp b;
  if (auto d = dyn_cast<sj::DotOp>(user)) {
    acc = d.getAcc();
    b = sj::fragmentBuffer(d);
  } else if (auto d = dyn_cast<sj::DotSharedOp>(user)) {
    acc = d.getAcc();
    b = sj::fragmentBuffer(d.getPtr());
  }
  if (acc != r || !b || !b.getSwizzle() || user->getBlock() != op->getBlock()) return false;
  // The group reads its b from shared memory until the wait: nothing between may write memory.
  for (Operation* o = op->getNextNode(); o != user; o = o->getNextNode()) {
    if (o->getNumRegions()) return false;
    if (mlir::isMemoryEffectFree(o)) continue;
    auto e = dyn_cast<MemoryEffectOpInterface>(o);
    if (!e || !e.onlyHasEffect<MemoryEffects::Read>()) return false;
  }
  return true;
}

// The asm text (a C string literal) of one wgmma.m64nNk16 with f32 accumulators %0 .. %(N/2 - 1),
// a's four registers, b's descriptor and a register whose non-zero value keeps the accumulators.
std::string Emitter::wgmmaAsm(int64_t N, const std::string& type, bool kMajor) {
  const int64_t nd = N / 2;
  std::string d;
  for (int64_t j = 0; j < nd; ++j) d += (j ? ", %" : "%") + I(j);
  return "\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" + I(nd + 5) + ", 0;\\nwgmma.mma_async.sync.aligned.m64n" + I(N) +
         "k16.f32." + type + "." + type + " {" + d + "}, {%" + I(nd) + ", %" + I(nd + 1) + ", %" + I(nd + 2) + ", %" +
         I(nd + 3) + "}, %" + I(nd + 4) + ", p, 1, 1, " + (kMajor ? "0" : "1") + ";\\n}\"";
}

// a by ldmatrix as well: for pair i, matrices (mma rows 0-7, k 0-7), (rows 8-15, k 0-7),
// (rows 0-7, k 8-15), (rows 8-15, k 8-15) are the A fragment's registers 0..3. The mma's rows
// g and g + 8 are the thread's rows 2 i and 2 i + 1, so a matrix's 8 rows are those of lane
// groups 0..7 of this warp: 8 consecutive tile rows. k contiguous (a_stride_k 1): lane 8 j + i
// gives the address of row i's 8 k; m contiguous (.trans): of k row i's 8 rows. A thread with
// an odd row count reads its last pair's second half from its first half's rows, then zeros it.
void Emitter::emit(sj::DotSharedOp d) {
  sj::SharedBufferOp a = sj::fragmentBuffer(d.getAPtr()), b = sj::fragmentBuffer(d.getPtr());
  const int64_t M = shapeOf(d.getAcc())[0], nr = n(0, M), pairs = (nr + 1) / 2;
  const bool kUnit = sj::constantInt(d.getAStrideK()) == std::optional<int64_t>(1);
  const int64_t pitch = *sj::constantInt(kUnit ? d.getAStrideM() : d.getAStrideK());
  const std::string elem = storageCType(cast<sj::PtrType>(a.getType()).getElementType());
  auto aFragments = [&] {
    line("unsigned ssm_a[" + I(pairs) + "][4][1];");
    for (int64_t i = 0; i < pairs; ++i) {
      const bool second = 2 * i + 1 < nr;
      // The first tile row of this lane's matrix (this warp's lane group 0), and the lane's row.
      const std::string half = second ? "(ssm_lane >> 3) & 1" : "0";
      const std::string rowStart = "(" + half + " ? " + coord(0, M, I(2 * i + 1), "(ssm_warp * 8)") + " : " +
                                   coord(0, M, I(2 * i), "(ssm_warp * 8)") + ")";
      const std::string kRow = "16 * ks + 8 * (ssm_lane >> 4)";
      const std::string at = kUnit ? "(" + rowStart + " + (ssm_lane & 7)) * " + I(pitch) + " + " + kRow
                                   : "(" + kRow + " + (ssm_lane & 7)) * " + I(pitch) + " + " + rowStart;
      line("{");
      ++ind_;
      line("unsigned ssm_r[4];");
      line(std::string("ssm_ldmatrix_x4<") + (kUnit ? "false" : "true") + ">(ssm_r, " + name(d.getAPtr()) + " + " +
           name(d.getAOffset()) + " + " + at + ");");
      for (int e = 0; e < 4; ++e)
        line("ssm_a[" + I(i) + "][" + I(e) + "][0] = " + (second || e % 2 == 0 ? "ssm_r[" + I(e) + "]" : "0u") + ";");
      closeBlocks();
    }
  };
  emitFragmentDot(d, d.getAcc(), d.getResult(), d.getK(), 1, b, d.getOffset(), d.getStrideK(), d.getStrideN(),
                  aFragments);
}

}  // namespace ssmjit::emit
