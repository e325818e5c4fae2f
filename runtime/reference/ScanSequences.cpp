#include "runtime/reference/ScanSequences.h"

#include <string>

#include "runtime/reference/ElementAccess.h"
#include "runtime/reference/RefHelpers.h"
#include "ssmjit/error.h"

namespace ssmjit::reference {
ScanSequences scanSequences(const char* op, const SelectiveScanArgs& a, const detail::ScanDims& d) {
  return readSequences(op, d.packed ? a.cu_seqlens : TensorView{}, d.nseq, d.L, a.max_seqlen, "u's seqlen");
}

ScanSequences readSequences(const char* op, const TensorView& cu, int64_t nseq, int64_t L, int64_t maxSeqlen,
                            const char* lengthOf) {
  ScanSequences q;
  q.row.resize(at(nseq)), q.start.resize(at(nseq)), q.len.resize(at(nseq));
  for (int64_t i = 0; i < nseq; ++i) {
    if (!cu.defined()) {
      q.row[at(i)] = i, q.start[at(i)] = 0, q.len[at(i)] = L;
      continue;
    }
    const int64_t s = loadIndex(cu, i * cu.strides[0]), e = loadIndex(cu, (i + 1) * cu.strides[0]);
    const std::string at0 = "cu_seqlens[" + std::to_string(i) + "] = " + std::to_string(s);
    const std::string at1 = "cu_seqlens[" + std::to_string(i + 1) + "] = " + std::to_string(e);
    if (i == 0 && s != 0) invalid(op, at0 + ", expected 0");
    if (e <= s) invalid(op, at1 + " after " + at0 + ", expected strictly increasing entries (no empty sequence)");
    if (i == nseq - 1 && e != L)
      invalid(op, at1 + " (the last entry), expected T = " + std::to_string(L) + " (" + lengthOf + ")");
    if (maxSeqlen > 0 && e - s > maxSeqlen)
      invalid(op, "sequence " + std::to_string(i) + " has " + std::to_string(e - s) +
                      " tokens, expected at most max_seqlen = " + std::to_string(maxSeqlen));
    q.row[at(i)] = 0, q.start[at(i)] = s, q.len[at(i)] = e - s;
  }
  return q;
}

std::vector<int64_t> scanSlots(const char* op, const char* name, const TensorView& idx, int64_t n, int64_t S) {
  std::vector<int64_t> s(at(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = idx.defined() ? loadIndex(idx, i * idx.strides[0]) : i;
    if (v != -1 && (v < 0 || v >= S))
      invalid(op, std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(v) +
                      ", expected -1 or a slot in [0, " + std::to_string(S) + ")");
    s[at(i)] = v;
  }
  return s;
}

}  // namespace ssmjit::reference
