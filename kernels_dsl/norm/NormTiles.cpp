// The RMSNorm kernels' row tiling (NormTiles.h).
#include "kernels_dsl/norm/NormTiles.h"

#include <algorithm>
#include <string>

#include "compiler/IntMath.h"
#include "kernels_dsl/MetaDefaults.h"
#include "ssmjit/dtype.h"
#include "ssmjit/error.h"

namespace ssmjit::kernels {
namespace {

// The narrowest element among the row tensors the call reads or writes: it sets the vector width
// (16 bytes of it a thread).
int64_t narrowestBytes(const Specialization& s, std::initializer_list<const char*> rowTensors) {
  int64_t bytes = 4;
  for (const char* t : rowTensors) {
    const std::string flag = std::string("has_") + t;
    if (s.find(flag) && !s.get(flag)) continue;
    bytes = std::min<int64_t>(bytes, dtypeBytes(static_cast<DType>(s.get(std::string("dtype:") + t))));
  }
  return bytes;
}

// The widest warps along the channels a tile of bg channels takes (every thread holds a vector).
int64_t warpsAlong(int64_t bg, int64_t vec) {
  const int64_t lanes = std::min<int64_t>(32, std::max<int64_t>(1, bg / vec));
  return std::max<int64_t>(1, bg / (vec * lanes));
}

}  // namespace

// Bandwidth-bound: each element is read and written once, so a program holds its rows whole in
// registers and the launch only needs enough bytes in flight. A group is `chunks` tiles of BLOCK_G
// channels: the power of two that masks the fewest channels (ties: the widest; at most 8 chunks
// of at least 8 vectors) and lets one program of up to 16 warps hold a row with at most
// maxPerThread elements a thread (Mamba-2 2.7B's 5120 bf16 channels: 5 chunks of 1024, none
// masked, 4 warps; its groups of 640: 5 chunks of 128).
// A row of at least 2048 elements is one program, with the fewest warps that hold it; shorter
// rows share a program of 4 warps, about 2048 elements (enough rows to put every warp on them).
void chooseNormTiles(Specialization& s, std::initializer_list<const char*> rowTensors, int64_t maxPerThread,
                     const char* op) {
  const int64_t GS = s.get("group_size"), vec = 16 / narrowestBytes(s, rowTensors);
  setDefault(s, "meta:index_bits", 32);
  if (!s.find("meta:BLOCK_G")) {
    int64_t best = nextPow2(GS), bestWaste = best - GS;
    for (int64_t bg = best / 2; bg >= 1; bg /= 2) {
      const int64_t n = (GS + bg - 1) / bg, waste = n * bg - GS;
      if (n > 8 || bg < 8 * vec || n * bg > maxPerThread * 32 * std::min<int64_t>(16, warpsAlong(bg, vec))) break;
      if (waste < bestWaste) best = bg, bestWaste = waste;
    }
    s.set("meta:BLOCK_G", best);
  }
  const int64_t BG = s.get("meta:BLOCK_G");
  if (!isPow2(BG))
    throw Error(Error::Kind::InvalidArgument, std::string(op) + ": meta BLOCK_G (SSMJIT_META) is " +
                                                  std::to_string(BG) + ", expected a power of two");
  setDefault(s, "meta:chunks", (GS + BG - 1) / BG);
  const int64_t row = s.get("meta:chunks") * BG;
  if (row < GS)
    throw Error(Error::Kind::InvalidArgument,
                std::string(op) + ": meta chunks (SSMJIT_META) is " + std::to_string(s.get("meta:chunks")) +
                    " of BLOCK_G " + std::to_string(BG) + ", expected them to cover group_size " + std::to_string(GS));
  const int64_t lanes = std::min<int64_t>(32, std::max<int64_t>(1, BG / vec));
  setDefault(s, "meta:inner_lanes", lanes);
  if (row >= 2048) {
    int64_t warps = 1;
    while (warps < 16 && row > maxPerThread * 32 * warps) warps *= 2;
    setDefault(s, "meta:num_warps", std::min(warps, warpsAlong(BG, vec)));
    setDefault(s, "meta:BLOCK_T", 1);
  } else {
    setDefault(s, "meta:num_warps", 4);
    // Rows enough that the warps the channels cannot take go down the rows.
    const int64_t warps = s.get("meta:num_warps"), alongRows = std::max<int64_t>(1, warps / warpsAlong(BG, vec));
    if (!s.find("meta:BLOCK_T"))
      s.set("meta:BLOCK_T", std::max<int64_t>((32 / lanes) * alongRows, std::max<int64_t>(1, 2048 / nextPow2(row))));
  }
  if (!isPow2(s.get("meta:BLOCK_T")))
    throw Error(Error::Kind::InvalidArgument, std::string(op) + ": meta BLOCK_T (SSMJIT_META) is " +
                                                  std::to_string(s.get("meta:BLOCK_T")) + ", expected a power of two");
}

}  // namespace ssmjit::kernels
