// The Mamba-2 layer's backward on the CPU: its argument checks (fake device tensors, never
// dereferenced): every gradient given exactly with its weight, dout and dhidden shaped as hidden,
// and both workspaces (the prefill's, holding its intermediates, and the backward's own) large
// enough, each refusal naming what it refuses.
#include <gtest/gtest.h>

#include "runtime/model/Mamba2WeightFields.h"
#include "ssmjit/mamba2.h"
#include "tests/support/ExpectError.h"
#include "tests/support/FakeTensors.h"

namespace ssmjit {
namespace {

// A backward call of a prefill of 3 sequences in a row of 40 tokens, fp32, with every bias.
struct BackwardCall {
  Mamba2Dims d;
  Mamba2LayerWeights w;
  Mamba2LayerState s;
  Mamba2LayerBackwardArgs b;
  int k = 0;
  TensorView t(DType dt, std::initializer_list<int64_t> shape) { return testing::fakeView(k++, dt, shape); }
  BackwardCall() {
    d.hidden = 16, d.heads = 4, d.head_dim = 8, d.state = 8, d.groups = 2, d.conv_width = 4, d.chunk_size = 64;
    const DType f = DType::F32;
    w.in_proj = t(f, {d.inProjRows(), d.hidden});
    w.in_proj_bias = t(f, {d.inProjRows()});
    w.conv_weight = t(f, {d.convDim(), d.conv_width});
    w.conv_bias = t(f, {d.convDim()});
    w.A = t(f, {d.heads});
    w.D = t(f, {d.heads});
    w.dt_bias = t(f, {d.heads});
    w.norm_weight = t(f, {d.dInner()});
    w.out_proj = t(f, {d.hidden, d.dInner()});
    w.out_proj_bias = t(f, {d.hidden});
    s.conv_state = t(f, {4, d.convDim(), d.conv_width - 1});
    s.ssm_state = t(f, {4, d.heads, d.head_dim, d.state});
    Mamba2LayerArgs& a = b.forward;
    a.hidden = t(f, {40, d.hidden});
    a.out = t(f, {40, d.hidden});
    a.cu_seqlens = t(DType::I32, {4});
    a.state_indices = t(DType::I32, {3});
    a.workspace = t(f, {int64_t{1} << 26});
    b.dout = t(f, {40, d.hidden});
    b.grads.dhidden = t(f, {40, d.hidden});
    const auto weights = detail::mamba2WeightFields(w);
    const auto grads = detail::mamba2WeightFields(b.grads.weights);
    for (size_t i = 0; i < weights.size(); ++i) {
      *grads[i].second = *weights[i].second;
      grads[i].second->data = t(f, {1}).data;
    }
    b.workspace = t(f, {int64_t{1} << 26});
  }
  int64_t size() const { return mamba2_layer_backward_workspace_size(d, w, s, b); }
  void run() const { mamba2_layer_backward(d, w, s, b); }
};

TEST(Mamba2LayerBackward, ChecksItsArguments) {
  const BackwardCall ok;
  // At least the gradients kept between the ops: in_proj's output's and two fp32 (T, d_inner) ones.
  EXPECT_GT(ok.size(), 40 * (ok.d.inProjRows() + 2 * ok.d.dInner()));

  BackwardCall c = ok;
  c.b.grads.weights.D = {};
  EXPECT_MENTIONS(testing::invalidArgMessage([&] { c.size(); }), "mamba2_layer_backward", "grads.weights.D is absent",
                  "exactly when weights.D is given");
  c = ok;
  c.w.out_proj_bias = {};
  EXPECT_MENTIONS(testing::invalidArgMessage([&] { c.size(); }), "grads.weights.out_proj_bias is given");
  c = ok;
  c.b.dout = c.t(DType::F32, {39, c.d.hidden});
  EXPECT_MENTIONS(testing::invalidArgMessage([&] { c.size(); }), "dout", "(40, 16)");
  c = ok;
  c.b.grads.dhidden = c.t(DType::BF16, {40, c.d.hidden});
  EXPECT_MENTIONS(testing::invalidArgMessage([&] { c.size(); }), "grads.dhidden", "bfloat16");
  c = ok;
  c.b.forward.hidden = {};
  EXPECT_MENTIONS(testing::invalidArgMessage([&] { c.size(); }), "mamba2_layer_backward", "hidden");
  c = ok;
  c.b.forward.workspace = c.t(DType::F32, {16});
  EXPECT_MENTIONS(testing::invalidArgMessage([&] { c.run(); }), "mamba2_layer_backward", "mamba2_layer_workspace_size");
  c = ok;
  c.b.workspace = c.t(DType::F32, {16});
  EXPECT_MENTIONS(testing::invalidArgMessage([&] { c.run(); }), "mamba2_layer_backward",
                  "mamba2_layer_backward_workspace_size");
}

}  // namespace
}  // namespace ssmjit
