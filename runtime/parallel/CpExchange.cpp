// What the context-parallel ops share (CpExchange.h).
#include "runtime/parallel/CpExchange.h"

#include <cuda.h>

#include <string>
#include <vector>

#include "runtime/Driver.h"

namespace ssmjit::detail {

namespace {
const driver::Api& api() { return driver::api(); }
CUdeviceptr ptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }
CUstream cu(Stream s) { return static_cast<CUstream>(s); }
}  // namespace

void checkContextPart(const Checker& c, const char* tensor, int64_t batch, const ContextPart& p,
                      bool initialStatesGiven, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    c.fail("rank is " + std::to_string(rank) + " with " + std::to_string(ranks) + " ranks, expected 0 <= rank < " +
           std::to_string(ranks) + " and at least one rank");
  if (batch != 1)
    c.fail(std::string(tensor) + " has batch " + std::to_string(batch) +
           ", expected 1 (each rank's part of one packed row)");
  if (p.from_previous && rank == 0)
    c.fail("part.from_previous is true on rank 0, expected false (no rank precedes it)");
  if (p.to_next && rank == ranks - 1)
    c.fail("part.to_next is true on the last rank (" + std::to_string(rank) + "), expected false (no rank follows it)");
  if (p.from_previous && initialStatesGiven)
    c.fail(
        "initial_states is given with part.from_previous, expected none (the first sequence starts from the "
        "incoming state, the others from zero)");
}

void checkContiguousF32(const Checker& c, const char* name, const TensorView& t, const Dim* e, int n) {
  c.required(name, t);
  c.rank(name, t, e, n);
  c.tensor(name, t, e, n, kF32Only, false);
  for (int64_t i = n - 1, s = 1; i >= 0; s *= t.shape[i], --i)
    if (t.strides[i] != s && t.shape[i] > 1)
      c.fail(std::string(name) + " has strides " + listString(t.strides, n) + ", expected contiguous");
}

int64_t cpSlotBytes(int64_t nseq) { return cpAlignUp(2 * nseq * 4); }

void uploadPartSlots(void* at, int64_t nseq, const ContextPart& p, Stream stream, const char* op) {
  std::vector<int32_t> ints(2 * nseq, -1);
  if (p.from_previous) ints[0] = 0;
  if (p.to_next) ints[2 * nseq - 1] = 0;
  const CUresult r = api().cuMemcpyHtoDAsync(ptr(at), ints.data(), ints.size() * 4, cu(stream));
  if (r != CUDA_SUCCESS) driver::check(r, (std::string(op) + ": uploading the part's slot indices").c_str());
}

TensorView afterExtras(const TensorView& w, int64_t extrasBytes) {
  return TensorView::contiguous(static_cast<char*>(w.data) + extrasBytes, DType::F32, {w.numel() - extrasBytes / 4},
                                DeviceKind::CUDA, w.deviceId);
}

void zeroFloats(void* at, int64_t n, Stream stream) {
  driver::check(api().cuMemsetD32Async(ptr(at), 0, n, cu(stream)), "context parallelism: cuMemsetD32Async");
}
void copyFloats(void* dst, const void* src, int64_t n, Stream stream) {
  driver::check(api().cuMemcpyDtoDAsync(ptr(dst), ptr(src), n * 4, cu(stream)),
                "context parallelism: cuMemcpyDtoDAsync");
}

void passStatesOn(Communicator& comm, const CpBuffers& b, const CpRows& r, void* carryDecay, const TensorView& incoming,
                  Stream stream) {
  const int64_t rowFloats = cpRowFloats(r.H, r.PN, r.decay);
  copyFloats(carryDecay, b.base + r.row, r.decayFloats(), stream);
  const TensorView rows = b.at(r.gathered, DType::F32, {comm.size(), rowFloats});
  comm.allGather(b.at(r.row, DType::F32, {rowFloats}), rows, stream);
  cpStateScan(rows, comm.rank(), r.H, r.PN, r.decay, incoming, stream);
}

void passAdjointsBack(Communicator& comm, const ContextPart& p, const CpBuffers& b, const CpRows& r,
                      const void* carryDecay, const std::function<void()>& summary, Stream stream) {
  const int ranks = comm.size();
  const int64_t rowFloats = cpRowFloats(r.H, r.PN, r.decay), state = r.row + r.decayFloats() * 4;
  if (p.from_previous)
    summary();
  else
    zeroFloats(b.base + state, r.H * r.PN, stream);
  copyFloats(b.base + r.row, carryDecay, r.decayFloats(), stream);
  comm.allGather(b.at(r.row, DType::F32, {rowFloats}), b.at(r.gathered, DType::F32, {ranks, rowFloats}), stream);
  if (!p.to_next) return;
  for (int q = 0; q < ranks; ++q)
    copyFloats(b.base + r.reversed + (ranks - 1 - q) * rowFloats * 4, b.base + r.gathered + q * rowFloats * 4,
               rowFloats, stream);
  cpStateScan(b.at(r.reversed, DType::F32, {ranks, rowFloats}), ranks - 1 - comm.rank(), r.H, r.PN, r.decay,
              b.at(r.g, DType::F32, {r.H * r.PN}), stream);
}

}  // namespace ssmjit::detail
