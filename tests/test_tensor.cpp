// TensorView: contiguous views and zero-copy import of DLPack tensors, with errors that name the
// argument, the expectation and what came.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#if __has_include(<dlpack/dlpack.h>)
#include <dlpack/dlpack.h>
#else
// dlpack.h is not installed here: DLPack 0.6's layout and codes, which is all fromDLPack (a
// template over the tensor type) reads.
typedef enum { kDLCPU = 1, kDLCUDA = 2, kDLROCM = 10 } DLDeviceType;
typedef struct {
  DLDeviceType device_type;
  int device_id;
} DLDevice;
typedef enum { kDLInt = 0U, kDLUInt = 1U, kDLFloat = 2U, kDLBfloat = 4U } DLDataTypeCode;
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;
typedef struct {
  void* data;
  DLDevice device;
  int ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} DLTensor;
#endif

#include "ssmjit/error.h"
#include "ssmjit/tensor.h"
#include "tests/support/ExpectError.h"

using ssmjit::DType;
using ssmjit::TensorView;
using ssmjit::testing::invalidArgMessage;

namespace {

DLTensor makeDL(void* data, std::vector<int64_t>& shape, int64_t* strides, DLDataType dtype,
                DLDeviceType dev = kDLCUDA) {
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{dev, 0};
  t.ndim = static_cast<int>(shape.size());
  t.dtype = dtype;
  t.shape = shape.data();
  t.strides = strides;
  t.byte_offset = 0;
  return t;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(TensorView, ContiguousRowMajor) {
  float buf[1];
  TensorView v = TensorView::contiguous(buf, DType::F32, {2, 80, 64});
  EXPECT_EQ(v.ndim, 3);
  EXPECT_EQ(v.stride(0), 80 * 64);
  EXPECT_EQ(v.stride(1), 64);
  EXPECT_EQ(v.stride(-1), 1);
  EXPECT_EQ(v.size(-1), 64);
  EXPECT_EQ(v.numel(), 2 * 80 * 64);
  EXPECT_EQ(v.span(), 2 * 80 * 64);
  EXPECT_EQ(v.shapeString(), "(2, 80, 64)");
  EXPECT_EQ(v.device, ssmjit::DeviceKind::CUDA);
  EXPECT_TRUE(v.defined());
  EXPECT_FALSE(TensorView{}.defined());

  TensorView scalar = TensorView::contiguous(buf, DType::F32, {});
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.span(), 1);
  EXPECT_EQ(scalar.shapeString(), "()");

  TensorView empty = TensorView::contiguous(buf, DType::F32, {3, 0, 5});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.span(), 0);

  EXPECT_THROW(TensorView::contiguous(buf, DType::F32, {1, 1, 1, 1, 1, 1, 1}), ssmjit::Error);
  EXPECT_THROW(TensorView::contiguous(buf, DType::F32, {2, -1}), ssmjit::Error);
}

TEST(TensorView, SpanFollowsStridesAndBroadcast) {
  float buf[1];
  TensorView v = TensorView::contiguous(buf, DType::F32, {4, 3});
  v.strides[0] = 10;  // padded rows
  EXPECT_EQ(v.span(), 3 * 10 + 2 + 1);
  v.strides[0] = 0;  // broadcast rows
  EXPECT_EQ(v.span(), 3);
}

TEST(TensorView, FromDLPackContiguousWhenStridesNull) {
  alignas(16) uint16_t storage[2 * 3 * 4];
  std::vector<int64_t> shape = {2, 3, 4};
  DLTensor t = makeDL(storage, shape, nullptr, DLDataType{kDLBfloat, 16, 1});
  TensorView v = TensorView::fromDLPack(t, "x");
  EXPECT_EQ(v.data, storage);
  EXPECT_EQ(v.dtype, DType::BF16);
  EXPECT_EQ(v.device, ssmjit::DeviceKind::CUDA);
  EXPECT_EQ(v.ndim, 3);
  EXPECT_EQ(v.shape[0], 2);
  EXPECT_EQ(v.shape[2], 4);
  EXPECT_EQ(v.strides[0], 12);
  EXPECT_EQ(v.strides[1], 4);
  EXPECT_EQ(v.strides[2], 1);
}

TEST(TensorView, FromDLPackKeepsStridesAndAppliesByteOffset) {
  float storage[64];
  std::vector<int64_t> shape = {4, 2};
  int64_t strides[] = {1, 8};  // transposed view
  DLTensor t = makeDL(storage, shape, strides, DLDataType{kDLFloat, 32, 1}, kDLCPU);
  t.byte_offset = 3 * sizeof(float);
  t.device.device_id = 0;
  TensorView v = TensorView::fromDLPack(t, "state");
  EXPECT_EQ(v.data, static_cast<void*>(storage + 3));
  EXPECT_EQ(v.device, ssmjit::DeviceKind::CPU);
  EXPECT_EQ(v.strides[0], 1);
  EXPECT_EQ(v.strides[1], 8);
  EXPECT_EQ(v.span(), 3 + 8 + 1);
}

TEST(TensorView, FromDLPackAllDTypes) {
  char storage[16];
  std::vector<int64_t> shape = {2};
  struct Case {
    DLDataType dl;
    DType want;
  } cases[] = {{{kDLFloat, 32, 1}, DType::F32},
               {{kDLFloat, 16, 1}, DType::F16},
               {{kDLBfloat, 16, 1}, DType::BF16},
               {{kDLInt, 32, 1}, DType::I32},
               {{kDLInt, 64, 1}, DType::I64}};
  for (const Case& c : cases) {
    DLTensor t = makeDL(storage, shape, nullptr, c.dl);
    EXPECT_EQ(TensorView::fromDLPack(t).dtype, c.want) << ssmjit::dtypeName(c.want);
  }
}

TEST(TensorView, FromDLPackDeviceIdAndEmptyWithoutStorage) {
  std::vector<int64_t> shape = {0, 4};
  DLTensor t = makeDL(nullptr, shape, nullptr, DLDataType{kDLFloat, 32, 1});
  t.device.device_id = 3;
  TensorView v = TensorView::fromDLPack(t, "z");
  EXPECT_EQ(v.deviceId, 3);
  EXPECT_EQ(v.numel(), 0);
  EXPECT_FALSE(v.defined());

  std::vector<int64_t> shape2 = {2, 4};
  DLTensor u = makeDL(nullptr, shape2, nullptr, DLDataType{kDLFloat, 32, 1});
  std::string msg = invalidArgMessage([&] { TensorView::fromDLPack(u, "z"); });
  EXPECT_TRUE(has(msg, "z:")) << msg;
  EXPECT_TRUE(has(msg, "null data")) << msg;
}

TEST(TensorView, FromDLPackRejectsBadDTypeNamingTheArgument) {
  char storage[16];
  std::vector<int64_t> shape = {4};
  DLTensor t = makeDL(storage, shape, nullptr, DLDataType{kDLUInt, 8, 1});
  std::string msg = invalidArgMessage([&] { TensorView::fromDLPack(t, "dt_bias"); });
  EXPECT_TRUE(has(msg, "dt_bias")) << msg;
  EXPECT_TRUE(has(msg, "float32")) << msg;  // what was expected
  EXPECT_TRUE(has(msg, "uint8")) << msg;    // what came

  t.dtype = DLDataType{kDLFloat, 64, 1};
  msg = invalidArgMessage([&] { TensorView::fromDLPack(t, "A"); });
  EXPECT_TRUE(has(msg, "A:")) << msg;
  EXPECT_TRUE(has(msg, "float64")) << msg;

  t.dtype = DLDataType{kDLFloat, 32, 4};  // vector lanes
  msg = invalidArgMessage([&] { TensorView::fromDLPack(t, "B"); });
  EXPECT_TRUE(has(msg, "B:")) << msg;
  EXPECT_TRUE(has(msg, "float32x4")) << msg;
}

TEST(TensorView, FromDLPackRejectsBadDeviceNamingTheArgument) {
  char storage[16];
  std::vector<int64_t> shape = {4};
  DLTensor t = makeDL(storage, shape, nullptr, DLDataType{kDLFloat, 32, 1}, kDLROCM);
  std::string msg = invalidArgMessage([&] { TensorView::fromDLPack(t, "x"); });
  EXPECT_TRUE(has(msg, "x:")) << msg;
  EXPECT_TRUE(has(msg, "kDLCUDA")) << msg;
  EXPECT_TRUE(has(msg, "kDLROCM")) << msg;
}

TEST(TensorView, FromDLPackRejectsTooManyDimsAndNegativeSizes) {
  char storage[16];
  std::vector<int64_t> shape(7, 1);
  DLTensor t = makeDL(storage, shape, nullptr, DLDataType{kDLFloat, 32, 1});
  std::string msg = invalidArgMessage([&] { TensorView::fromDLPack(t, "state"); });
  EXPECT_TRUE(has(msg, "state:")) << msg;
  EXPECT_TRUE(has(msg, "6")) << msg;
  EXPECT_TRUE(has(msg, "7")) << msg;

  std::vector<int64_t> neg = {2, -1};
  DLTensor u = makeDL(storage, neg, nullptr, DLDataType{kDLFloat, 32, 1});
  msg = invalidArgMessage([&] { TensorView::fromDLPack(u, "C"); });
  EXPECT_TRUE(has(msg, "C:")) << msg;
  EXPECT_TRUE(has(msg, "-1")) << msg;
}
