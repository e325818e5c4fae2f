// The device status record's messages: what checkDeviceErrors says about a bad slot index, and
// about each check of the SSD kernels, about a bad decode-step ring count, and about a bad
// embedding id.
#include <gtest/gtest.h>

#include <string>

#include "kernels_dsl/decode/Mamba2DecodeStep.h"
#include "kernels_dsl/embed/Embedding.h"
#include "kernels_dsl/ssu/SelectiveStateUpdate.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "runtime/DeviceStatus.h"

TEST(DeviceStatus, MessagesNameIndexValueAndRange) {
  const int64_t slot[4] = {ssmjit::kernels::kErrSlotOutOfRange, 3, 7, 4};
  EXPECT_EQ(ssmjit::deviceStatusMessage(slot),
            "selective_state_update: state_batch_indices[3] = 7 is out of range [0, 4) and not -1 "
            "(padding); that row was skipped");
  const int64_t dst[4] = {ssmjit::kernels::kErrDstSlotOutOfRange, 1, -5, 16};
  std::string m = ssmjit::deviceStatusMessage(dst);
  EXPECT_NE(m.find("dst_state_indices[1"), std::string::npos) << m;
  EXPECT_NE(m.find("-5"), std::string::npos) << m;
  EXPECT_NE(m.find("[0, 16)"), std::string::npos) << m;
  const int64_t odd[4] = {99, 0, 0, 0};
  EXPECT_NE(ssmjit::deviceStatusMessage(odd).find("unknown error code 99"), std::string::npos);
}

TEST(DeviceStatus, SsdMessagesNameTheArgument) {
  using namespace ssmjit::kernels;
  struct Case {
    long long code;
    std::string want;
  };
  const Case cases[] = {
      {kErrSsdCuSeqlens, "ssd: cu_seqlens[2] = 7, cu_seqlens[2 + 1] = 5: expected cu_seqlens[0] = 0, strictly"},
      {kErrSsdInitSlot, "ssd: initial_state_indices[2] = 7 is out of range [0, 5) and not -1"},
      {kErrSsdFinalSlot, "ssd: final_state_indices[2] = 7 is out of range [0, 5) and not -1"},
      {kErrSsdBlockSlot, "ssd: block_state_indices[2, :] holds 7, which is out of range [0, 5)"},
      {kErrSsdBlockCount,
       "ssd: sequence 2 completes 7 blocks of block_state_tokens, expected at most "
       "block_state_indices' kmax = 5"},
  };
  for (const Case& c : cases) {
    const int64_t rec[4] = {c.code, 2, 7, 5};
    const std::string m = ssmjit::deviceStatusMessage(rec);
    EXPECT_EQ(m.rfind(c.want, 0), 0u) << m;
  }
}

TEST(DeviceStatus, EmbeddingMessageNamesTheIdAndTheTable) {
  const int64_t rec[4] = {ssmjit::kernels::kErrEmbedId, 4, 50280, 50277};
  EXPECT_EQ(ssmjit::deviceStatusMessage(rec),
            "embedding: ids[4] = 50280 is out of range [0, 50277) (the table's rows); that row of out was written "
            "as zeros");
}

TEST(DeviceStatus, DecodeRingMessageNamesTheRowValueAndDepth) {
  const int64_t rec[4] = {ssmjit::kernels::kErrDecodeRing, 2, 9, 8};
  EXPECT_EQ(ssmjit::deviceStatusMessage(rec),
            "mamba2_decode_step: ring_tokens of row 2's slot = 9, expected 0..8 (the ring depth, dim 1 of xbc_ring); "
            "that row was skipped (nothing written for it)");
}
