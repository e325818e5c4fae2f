// A random Mamba-2 mixer layer in fp32 on the host, and its weights (whole, or one rank's
// tensor-parallel shard through runtime/model/Mamba2Sharding.h) and zeroed per-slot states on the
// device, for the multi-GPU layer tests.
#pragma once
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/model/Mamba2Sharding.h"
#include "ssmjit/mamba2.h"

namespace ssmjit::testing {

struct HostTensorF32 {
  std::vector<int64_t> shape;
  std::vector<float> v;
  TensorView view() {
    TensorView t = TensorView::contiguous(v.data(), DType::F32, {1}, DeviceKind::CPU);
    t.ndim = static_cast<int>(shape.size());
    int64_t stride = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      t.shape[d] = shape[d];
      t.strides[d] = stride;
      stride *= shape[d];
    }
    return t;
  }
};

inline HostTensorF32 randomTensor(std::mt19937_64& rng, std::vector<int64_t> shape, double lo, double hi) {
  HostTensorF32 t{std::move(shape), {}};
  int64_t n = 1;
  for (int64_t s : t.shape) n *= s;
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < n; ++i) t.v.push_back(static_cast<float>(u(rng)));
  return t;
}

struct HostMamba2Layer {
  Mamba2Dims d;
  HostTensorF32 inProj, inProjBias, conv, convBias, A, D, dtBias, norm, outProj, outProjBias;
};

inline HostMamba2Layer randomMamba2Layer(const Mamba2Dims& d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  HostMamba2Layer l;
  l.d = d;
  const double in = 1 / std::sqrt(double(d.hidden)), out = 1 / std::sqrt(double(d.dInner()));
  l.inProj = randomTensor(rng, {d.inProjRows(), d.hidden}, -in, in);
  l.inProjBias = randomTensor(rng, {d.inProjRows()}, -0.1, 0.1);
  l.conv = randomTensor(rng, {d.convDim(), d.conv_width}, -0.5, 0.5);
  l.convBias = randomTensor(rng, {d.convDim()}, -0.1, 0.1);
  l.A = randomTensor(rng, {d.heads}, -2.0, -0.5);
  l.D = randomTensor(rng, {d.heads}, 0.5, 1.5);
  l.dtBias = randomTensor(rng, {d.heads}, -2.0, -1.0);
  l.norm = randomTensor(rng, {d.dInner()}, 0.5, 1.5);
  l.outProj = randomTensor(rng, {d.hidden, d.dInner()}, -out, out);
  l.outProjBias = randomTensor(rng, {d.hidden}, -0.1, 0.1);
  return l;
}

// A layer's weights and states on the current device: the whole layer (shard == nullptr) or a
// shard. States: `slots` slots, fp32, zero.
struct DeviceMamba2Layer {
  Mamba2Dims dims;  // the dims of what is held (the shard's local dims)
  std::vector<DeviceBuffer> buffers;
  Mamba2LayerWeights w;
  Mamba2LayerState s;

  DeviceMamba2Layer(HostMamba2Layer& h, const model::Mamba2LayerShard* shard, int64_t slots) {
    dims = shard ? shard->local : h.d;
    const int device = driver::currentDeviceId();
    auto put = [&](HostTensorF32& t, const model::TensorSlice* slice, std::initializer_list<int64_t> shape) {
      std::vector<char> bytes;
      if (shard && slice) {
        model::sliceTensor(t.view(), *slice, DType::F32, bytes);
      } else {
        bytes.resize(t.v.size() * 4);
        std::memcpy(bytes.data(), t.v.data(), bytes.size());
      }
      buffers.emplace_back(bytes.size());
      buffers.back().uploadBytes(bytes.data(), bytes.size());
      return TensorView::contiguous(buffers.back().data(), DType::F32, shape, DeviceKind::CUDA, device);
    };
    const Mamba2Dims& d = dims;
    w.in_proj = put(h.inProj, shard ? &shard->inProj : nullptr, {d.inProjRows(), d.hidden});
    w.in_proj_bias = put(h.inProjBias, shard ? &shard->inProj : nullptr, {d.inProjRows()});
    w.conv_weight = put(h.conv, shard ? &shard->conv : nullptr, {d.convDim(), d.conv_width});
    w.conv_bias = put(h.convBias, shard ? &shard->conv : nullptr, {d.convDim()});
    w.A = put(h.A, shard ? &shard->heads : nullptr, {d.heads});
    w.D = put(h.D, shard ? &shard->heads : nullptr, {d.heads});
    w.dt_bias = put(h.dtBias, shard ? &shard->heads : nullptr, {d.heads});
    w.norm_weight = put(h.norm, shard ? &shard->channels : nullptr, {d.dInner()});
    w.out_proj = put(h.outProj, shard ? &shard->outProj : nullptr, {d.hidden, d.dInner()});
    if (!shard || shard->outProjBias) w.out_proj_bias = put(h.outProjBias, nullptr, {d.hidden});
    buffers.emplace_back(static_cast<size_t>(slots * d.convDim() * (d.conv_width - 1) * 4));
    buffers.back().fill(0);
    s.conv_state = TensorView::contiguous(buffers.back().data(), DType::F32, {slots, d.convDim(), d.conv_width - 1},
                                          DeviceKind::CUDA, device);
    buffers.emplace_back(static_cast<size_t>(slots * d.heads * d.head_dim * d.state * 4));
    buffers.back().fill(0);
    s.ssm_state = TensorView::contiguous(buffers.back().data(), DType::F32, {slots, d.heads, d.head_dim, d.state},
                                         DeviceKind::CUDA, device);
  }
};

}  // namespace ssmjit::testing
