// Resource figures read from a CUBIN itself (an ELF file), so that they are known however NVRTC
// produced it: ptxas' verbose report is missing from NVRTC's log when the driver's compute cache
// served the compile, but the CUBIN always carries what the loader needs.
//
// Where the figures are (checked against cuobjdump -res-usage / -elf and ptxas -v on NVRTC 13.0
// output for sm_75 ... sm_120, and against cuFuncGetAttribute on an H100; tests/test_cubin_info.cpp
// keeps checking them against ptxas):
//   * `.nv.info` (and `.nv.info.<kernel>`, whose sh_link is the symbol table) is a sequence of
//     EIATTR records: u8 format, u8 attribute, then by format
//       EIFMT_NVAL 0x01: u16 (unused)      EIFMT_BVAL 0x02: u8 value, u8 pad
//       EIFMT_HVAL 0x03: u16 value          EIFMT_SVAL 0x04: u16 size, then `size` bytes
//     little-endian. Per-function attributes are EIFMT_SVAL with an 8-byte payload
//     (u32 symbol index, u32 value): EIATTR_REGCOUNT 0x2f, EIATTR_FRAME_SIZE 0x11,
//     EIATTR_MIN_STACK_SIZE 0x12, EIATTR_MAX_STACK_SIZE 0x23. ptxas puts them in the module-wide
//     `.nv.info`, one per function and attribute.
//   * Kernels are the STT_FUNC symbols with STO_CUDA_ENTRY (0x10) in st_other.
//   * Static shared memory is the size of the NOBITS section `.nv.shared.<kernel>` (absent: none).
//     From sm_90 on, ptxas places a reserved block at the start of every kernel's shared window and
//     counts it in that section: the user's variables start at 0x400 (SASS: UMOV UR4, 0x400). sm_100
//     and later name its size in the weak symbol `.nv.reservedSmem.cap` (value 0x400); sm_90 only
//     emits `.nv.reservedSmem.offset0` / `.nv.shared.reserved.0`, and the block is 1 KiB there too
//     (= the device's CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK). The driver's
//     CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES and ptxas' "bytes smem" both leave it out, as sharedBytes
//     does; CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES equals EIATTR_MIN_STACK_SIZE.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "CompiledKernel.h"

namespace ssmjit {

// One __global__ function. Every figure is -1 where the CUBIN does not say.
struct CubinKernel {
  std::string name;
  int registers = -1;           // EIATTR_REGCOUNT, per thread
  int frameBytes = -1;          // EIATTR_FRAME_SIZE (for a kernel: its call tree's, like the next)
  int minStackBytes = -1;       // EIATTR_MIN_STACK_SIZE = ptxas' "cumulative stack size" = cuobjdump STACK
  int maxStackBytes = -1;       // EIATTR_MAX_STACK_SIZE (rare; not emitted for NVRTC's whole programs)
  int sharedSectionBytes = -1;  // size of .nv.shared.<name> (0 if absent) = cuobjdump SHARED
  int sharedBytes = -1;         // the kernel's own static shared memory = ptxas' "bytes smem":
                                // sharedSectionBytes less CubinInfo::reservedSharedBytes

  // Stack (local memory) per thread the kernel needs: minStackBytes, else frameBytes.
  int stackBytes() const { return minStackBytes >= 0 ? minStackBytes : frameBytes; }
};

struct CubinInfo {
  bool ok = false;
  std::string error;            // why nothing could be read (ok == false)
  int reservedSharedBytes = 0;  // counted in each kernel's .nv.shared section (sm_90+); -1 unknown
  std::vector<CubinKernel> kernels;

  const CubinKernel* find(const std::string& name) const;
};

// Reads `size` bytes at `data` as a CUBIN. Never throws and never reads outside the blob: a
// truncated, garbled or foreign blob gives ok == false (or figures of -1 where a part is unreadable).
CubinInfo readCubinInfo(const void* data, size_t size);

// The figures ResourceUsage has, for the whole module: with several kernels the maximum of each;
// a figure any kernel lacks is -1. Spills are not in the CUBIN: always -1 here.
ResourceUsage cubinResources(const CubinInfo& info);

}  // namespace ssmjit
