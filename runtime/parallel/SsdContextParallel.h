// The SSD's context parallelism (ssmjit/ssd_parallel.h) with its extra buffers apart from the
// SSD's own workspace, so that the layer's context-parallel prefill (Mamba2ContextParallel.cpp)
// runs the same forward from its own workspace plan. The public functions carve the extras from
// the front of args.workspace. Internal to the runtime; libssmjit.so exports it for the tests.
#pragma once
#include <cstdint>

#include "ssmjit/ssd_parallel.h"

namespace ssmjit::detail {

// The extras' size in bytes (a multiple of 256) for a part of `nseq` sequences (H heads, PN = P N).
int64_t ssdCpForwardExtrasBytes(int64_t nseq, int64_t H, int64_t PN, int ranks);
int64_t ssdCpBackwardExtrasBytes(int64_t nseq, int64_t H, int64_t PN, int ranks);

// The checks and sizes of ssd_cp and ssd_cp_backward on rank `rank` of `ranks`, without a device
// or a communicator: the workspace in float32 elements, extras included (every argument checked
// but the carry and the workspace), and the whole check of a call.
int64_t ssdCpWorkspaceFloats(const SsdArgs& args, const ContextPart& part, int rank, int ranks);
int64_t ssdCpBackwardWorkspaceFloats(const SsdBackwardArgs& args, const ContextPart& part, int rank, int ranks);
void checkSsdCp(const SsdArgs& args, const ContextPart& part, const SsdCpCarry& carry, int rank, int ranks);
void checkSsdCpBackward(const SsdBackwardArgs& args, const ContextPart& part, const SsdCpCarry& carry, int rank,
                        int ranks);

// The forward, args.workspace being the SSD's alone and `extras` ssdCpForwardExtrasBytes on the
// device (256-byte aligned). Unchecked: the callers check.
void ssdCpForward(const SsdArgs& args, const ContextPart& part, const SsdCpCarry& carry, Communicator& comm,
                  char* extras, Stream stream);

}  // namespace ssmjit::detail
