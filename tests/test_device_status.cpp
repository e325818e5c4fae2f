// The device status record's messages: what checkDeviceErrors says about a bad slot index.
#include <gtest/gtest.h>

#include "kernels_dsl/ssu/SelectiveStateUpdate.h"
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
