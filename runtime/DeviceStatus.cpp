// Device status record: one per context, read back and reset by checkDeviceErrors.
#include "runtime/DeviceStatus.h"

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "kernels_dsl/conv/CausalConv1d.h"
#include "kernels_dsl/decode/Mamba2DecodeStep.h"
#include "kernels_dsl/embed/Embedding.h"
#include "kernels_dsl/scan/SelectiveScan.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "kernels_dsl/ssu/SelectiveStateUpdate.h"
#include "runtime/Driver.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

std::mutex gMutex;
std::unordered_map<CUcontext, CUdeviceptr> gRecords;

// The last (context, record) this thread saw: the per-call path skips the mutex.
thread_local CUcontext tLastCtx = nullptr;
thread_local CUdeviceptr tLastRecord = 0;

CUdeviceptr recordFor(CUcontext ctx) {
  if (ctx == tLastCtx && tLastRecord) return tLastRecord;
  std::lock_guard<std::mutex> lock(gMutex);
  auto it = gRecords.find(ctx);
  if (it == gRecords.end()) {
    const driver::Api& a = driver::api();
    CUdeviceptr p = 0;
    CUresult r = a.cuMemAlloc(&p, kDeviceStatusWords * sizeof(int64_t));
    if (r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
      driver::check(r,
                    "cuMemAlloc(device status record, 32 bytes) during a CUDA graph capture: "
                    "run the op once outside capture first");
    driver::check(r, "cuMemAlloc(device status record, 32 bytes)");
    // Synchronous copy so that the zeros are in place before any stream can use the record.
    static const int64_t zeros[kDeviceStatusWords] = {};
    r = a.cuMemcpyHtoD(p, zeros, sizeof zeros);
    if (r != CUDA_SUCCESS) {
      a.cuMemFree(p);
      driver::check(r, "cuMemcpyHtoD(zero the device status record)");
    }
    it = gRecords.emplace(ctx, p).first;
  }
  tLastCtx = ctx;
  tLastRecord = it->second;
  return it->second;
}

}  // namespace

void* deviceStatusRecord() {
  CUcontext ctx = driver::ensureContext();
  return reinterpret_cast<void*>(static_cast<uintptr_t>(recordFor(ctx)));
}

std::string deviceStatusMessage(const int64_t rec[kDeviceStatusWords]) {
  const std::string b = std::to_string(rec[1]);
  const std::string v = std::to_string(rec[2]);
  const std::string bound = std::to_string(rec[3]);
  // A slot index out of range, and a bad cu_seqlens, as every op reports them.
  auto slot = [&](const char* op, const char* indices, const char* outcome) {
    return std::string(op) + ": " + indices + "[" + b + "] = " + v + " is out of range [0, " + bound + ") and not -1" +
           outcome;
  };
  auto cuSeqlens = [&](const char* op, const char* outcome) {
    return std::string(op) + ": cu_seqlens[" + b + "] = " + v + ", cu_seqlens[" + b + " + 1] = " + bound +
           ": expected cu_seqlens[0] = 0, strictly increasing, and cu_seqlens[nseq] = T (tokens); " + outcome;
  };
  switch (rec[0]) {
    case 0:
      return "no device error";
    case kernels::kErrSlotOutOfRange:
      return slot("selective_state_update", "state_batch_indices", " (padding); that row was skipped");
    case kernels::kErrDstSlotOutOfRange:
      // The record carries the row b only (kernels_dsl/ssu/SelectiveStateUpdate.h), not the token.
      return "selective_state_update: dst_state_indices[" + b + ", :] holds " + v + ", which is out of range [0, " +
             bound + ") and not -1 (skip); that token's state write was skipped";
    case kernels::kErrConvUpdateSlot:
      return slot("causal_conv1d_update", "state_indices", " (padding); that row was skipped");
    case kernels::kErrConvCuSeqlens:
      return cuSeqlens("causal_conv1d", "the call's outputs are unspecified (no state of that sequence was written)");
    case kernels::kErrConvSeqPos:
      return "causal_conv1d: seq_pos[0, " + b + "] = " + v + " after seq_pos[0, " + b + " - 1] = " + bound +
             ": expected 0 (a sequence start) or one more than the token before (and 0 at token 0); "
             "the call's outputs are unspecified";
    case kernels::kErrConvInitSlot:
      return slot("causal_conv1d", "initial_state_indices", "; that sequence started from zeros");
    case kernels::kErrConvFinalSlot:
      return slot("causal_conv1d", "final_state_indices", "; that sequence's final state was not written");
    case kernels::kErrDecodeSlot:
      return slot("mamba2_decode_step", "state_indices", " (padding); that row was skipped (nothing written for it)");
    case kernels::kErrDecodeAccepted:
      return "mamba2_decode_step: num_accepted[" + b + "] = " + v + ", expected 0.." + bound +
             " (the drafts its slot's cache holds: cached_tokens); that row was skipped (nothing written for it)";
    case kernels::kErrDecodeRing:
      return "mamba2_decode_step: ring_tokens of row " + b + "'s slot = " + v + ", expected 0.." + bound +
             " (the ring depth, dim 1 of xbc_ring); that row was skipped (nothing written for it)";
    case kernels::kErrScanCuSeqlens:
      return cuSeqlens("selective_scan", "that sequence was skipped (its out and final state not written)");
    case kernels::kErrScanMaxLen:
      return "selective_scan: sequence " + b + " has " + v + " tokens, expected at most max_seqlen = " + bound +
             "; that sequence was skipped (its out and final state not written)";
    case kernels::kErrScanInitSlot:
      return slot("selective_scan", "initial_state_indices", "; that sequence started from zeros");
    case kernels::kErrScanFinalSlot:
      return slot("selective_scan", "final_state_indices", "; that sequence's final state was not written");
    case kernels::kErrSsdCuSeqlens:
      return cuSeqlens("ssd", "the call's outputs are unspecified (no state of that sequence was written)");
    case kernels::kErrSsdInitSlot:
      return slot("ssd", "initial_state_indices", "; that sequence started from zeros");
    case kernels::kErrSsdFinalSlot:
      return slot("ssd", "final_state_indices", "; that sequence's final state was not written");
    case kernels::kErrSsdBlockSlot:
      // The record carries the sequence, not the block.
      return "ssd: block_state_indices[" + b + ", :] holds " + v + ", which is out of range [0, " + bound +
             ") and not -1; that block state was not written";
    case kernels::kErrSsdBlockCount:
      return "ssd: sequence " + b + " completes " + v + " blocks of block_state_tokens, expected at most " +
             "block_state_indices' kmax = " + bound + "; its blocks past kmax were not written";
    case kernels::kErrEmbedId:
      return "embedding: ids[" + b + "] = " + v + " is out of range [0, " + bound +
             ") (the table's rows); that row of out was written as zeros";
  }
  return "device status record holds unknown error code " + std::to_string(rec[0]) + " (row " + b + ", value " + v +
         ", bound " + bound + ")";
}

void checkDeviceErrors(Stream stream) {
  const driver::Api& a = driver::api();
  CUstream s = static_cast<CUstream>(stream);
  CUdeviceptr p = reinterpret_cast<uintptr_t>(deviceStatusRecord());
  // Waits for the kernels queued before this call (a kernel fault surfaces here, named).
  driver::check(a.cuStreamSynchronize(s), "checkDeviceErrors: cuStreamSynchronize");
  int64_t rec[kDeviceStatusWords] = {};
  driver::check(a.cuMemcpyDtoHAsync(rec, p, sizeof rec, s), "checkDeviceErrors: cuMemcpyDtoHAsync(status record)");
  driver::check(a.cuStreamSynchronize(s), "checkDeviceErrors: cuStreamSynchronize(after copy)");
  if (rec[0] == 0) return;
  // Reset before throwing, so that the next check reports only new errors.
  driver::check(a.cuMemsetD8Async(p, 0, sizeof rec, s), "checkDeviceErrors: cuMemsetD8Async(reset status record)");
  driver::check(a.cuStreamSynchronize(s), "checkDeviceErrors: cuStreamSynchronize(after reset)");
  const bool known = rec[0] == kernels::kErrSlotOutOfRange || rec[0] == kernels::kErrDstSlotOutOfRange ||
                     (rec[0] >= kernels::kErrConvUpdateSlot && rec[0] <= kernels::kErrConvFinalSlot) ||
                     (rec[0] >= kernels::kErrDecodeSlot && rec[0] <= kernels::kErrDecodeRing) ||
                     (rec[0] >= kernels::kErrScanCuSeqlens && rec[0] <= kernels::kErrScanFinalSlot) ||
                     (rec[0] >= kernels::kErrSsdCuSeqlens && rec[0] <= kernels::kErrSsdBlockCount) ||
                     rec[0] == kernels::kErrEmbedId;
  throw Error(known ? Error::Kind::InvalidArgument : Error::Kind::Internal, deviceStatusMessage(rec));
}

}  // namespace ssmjit
