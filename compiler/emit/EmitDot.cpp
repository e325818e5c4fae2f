// Matrix products on the tensor cores.
#include "compiler/emit/EmitterCore.h"

namespace ssmjit::emit {
using namespace mlir;

// sj.dot on mma.m16n8k16 (bf16 in, f32 accumulate). In an mma parent layout (assign-layouts)
// lane 4 g + q holds rows over g and columns over q. A thread's rows 2i and 2i + 1 play an
// mma's rows g and g + 8, and its registers 4s..4s+3 along a row the A fragment's k slots
// 2q + {0, 1} and 8 + 2q + {0, 1} of k-step s; the accumulators' column slots 2q + {0, 1} of
// n-tile m are its registers 2m + {0, 1}. Which tile columns those are is the layout's affair:
// b is gathered to match, k at the thread's own columns of those registers and n at those of
// register 2m + (g & 1) of lane q = g / 2. So a and the result stay in the parent layout and
// only b moves. A thread with an odd row count gives its last mma's second row zeros.
void Emitter::emit(sj::DotOp d) {
  if (sj::SharedBufferOp b = sj::fragmentBuffer(d)) {
    const std::string type = cast<sj::PtrType>(b.getType()).getElementType().isF16() ? "f16" : "bf16";
    return emitFragmentDot(d, d.getAcc(), d.getResult(), shapeOf(d.getA())[1], (int)d.getAPieces(), b, d.getOffset(),
                           d.getStrideK(), d.getStrideN(), [&] { emitAFragments(d, type, false); });
  }
  if (!(P_.spt[1] % 2 == 0 && P_.tpw[0] == 8 && P_.tpw[1] == 4 && P_.wpc[1] == 1))
    fail(d, "dot outside the mma parent layout (" + P_.str() + ")");
  auto as = shapeOf(d.getA()), cs = shapeOf(d.getAcc());
  const int64_t K = as[1], N = cs[1];
  const int64_t nr = n(0, as[0]), nn = n(1, N);
  const int pa = (int)d.getAPieces(), pb = (int)d.getBPieces(), pmax = std::max(pa, pb);
  const std::string nm = declare(d.getResult(), Kind::Blocked);
  forRegs(nr * nn, [&] { line(nm + "[r] = " + E(d.getAcc(), Kind::Blocked, "r") + ";"); });
  // b[k][n]: k at this thread's columns of a's registers 4 ks + e, n at lane g / 2's of the
  // result's register 2 m + (g & 1).
  auto bLoad = [&](int e) {
    return "ssm_load(" + name(d.getPtr()) + " + " + name(d.getOffset()) + " + " + coord(1, K, "4 * ks + " + I(e)) +
           " * " + name(d.getStrideK()) + " + ssm_n * " + name(d.getStrideN()) + ")";
  };
  const bool halfStep = K == 8;  // one k-step of 8: the fragments' upper halves are zeros
  line("{");
  ++ind_;
  line("const int ssm_g = ssm_lane >> 2;");
  line("#pragma unroll");
  line("for (int ks = 0; ks < " + I(halfStep ? 1 : K / 16) + "; ++ks) {");
  ++ind_;
  const int64_t pairs = (nr + 1) / 2;
  emitAFragments(d, "bf16", halfStep);
  line("#pragma unroll");
  line("for (int m = 0; m < " + I(N / 8) + "; ++m) {");
  ++ind_;
  line("const int ssm_n = " + coord(1, N, "2 * m + (ssm_g & 1)", "(ssm_g >> 1)") + ";");
  line("unsigned ssm_b[2][" + I(pb) + "];");
  line("ssm_bf16_pieces<" + I(pb) + ">(" + bLoad(0) + ", " + bLoad(1) + ", ssm_b[0]);");
  if (halfStep)
    line("ssm_bf16_pieces<" + I(pb) + ">(0.0f, 0.0f, ssm_b[1]);");
  else
    line("ssm_bf16_pieces<" + I(pb) + ">(" + bLoad(2) + ", " + bLoad(3) + ", ssm_b[1]);");
  for (int64_t i = 0; i < pairs; ++i) {
    if (2 * i + 1 >= nr) line("float ssm_z0 = 0.0f, ssm_z1 = 0.0f;");
    // Terms by weight, smallest first (pa + pb - 2 down to 0), those of weight >= 2^-24 only.
    for (int w = pmax - 1; w >= 0; --w)
      for (int x = 0; x < pa; ++x) {
        const int y = w - x;
        if (y < 0 || y >= pb) continue;
        emitMma("bf16", nm, i, nr, nn, "2 * m", x, "ssm_b[0][" + I(y) + "]", "ssm_b[1][" + I(y) + "]");
      }
  }
  closeBlocks(3);
}

void Emitter::emitMma(const std::string& mmaType, const std::string& nm, int64_t i, int64_t nr, int64_t nn,
                      const std::string& col, int x, const std::string& b0, const std::string& b1) {
  const bool second = 2 * i + 1 < nr;
  const std::string c0 = nm + "[" + I(2 * i * nn) + " + " + col + "]",
                    c1 = nm + "[" + I(2 * i * nn) + " + " + col + " + 1]";
  const std::string c2 = second ? nm + "[" + I((2 * i + 1) * nn) + " + " + col + "]" : "ssm_z0";
  const std::string c3 = second ? nm + "[" + I((2 * i + 1) * nn) + " + " + col + " + 1]" : "ssm_z1";
  const std::string a = "ssm_a[" + I(i) + "]", xs = "[" + I(x) + "]";
  line("ssm_mma_" + mmaType + "(" + c0 + ", " + c1 + ", " + c2 + ", " + c3 + ", " + a + "[0]" + xs + ", " + a + "[1]" +
       xs + ", " + a + "[2]" + xs + ", " + a + "[3]" + xs + ", " + b0 + ", " + b1 + ");");
}

// The A fragments of k-step `ks` as ssm_a[pair][register][piece]: pieces of the mma's input
// type `mmaType` (bf16 or f16); a loaded from that type in vectors keeps each pair's 32-bit word,
// and one piece is that word.
void Emitter::emitAFragments(sj::DotOp d, const std::string& mmaType, bool halfStep) {
  const int64_t nr = n(0, shapeOf(d.getA())[0]), nk = n(1, shapeOf(d.getA())[1]);
  const int pa = (int)d.getAPieces();
  const int64_t pairs = (nr + 1) / 2;
  const std::string pieces = "ssm_" + mmaType + "_pieces<" + I(pa) + ">(";
  const Raw* rawA = rawOf(d.getA());
  const bool rawPairs = pa == 1 && rawA && rawA->words && rawA->elem == "ssm_" + mmaType;
  line("unsigned ssm_a[" + I(pairs) + "][4][" + I(pa) + "];");
  for (int64_t i = 0; i < pairs; ++i)
    for (int e = 0; e < 4; ++e) {
      const int64_t row = 2 * i + (e & 1);
      const std::string at = "ssm_a[" + I(i) + "][" + I(e) + "]";
      if (row >= nr || (halfStep && e >= 2)) {
        line(pieces + "0.0f, 0.0f, " + at + ");");
        continue;
      }
      const std::string r0 = I(row * nk) + " + 4 * ks + " + I(2 * (e >> 1));
      if (rawPairs) {  // the loaded pair is the fragment register
        line(at + "[0] = " + rawA->name + "[" + r0 + "];");
        continue;
      }
      line(pieces + E(d.getA(), Kind::Blocked, r0) + ", " + E(d.getA(), Kind::Blocked, r0 + " + 1") + ", " + at + ");");
    }
}

}  // namespace ssmjit::emit
