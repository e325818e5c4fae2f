// A random test layer (RandomMamba2Layer.h) as the float64 reference reads it
// (reference::mamba2_layer, mamba2_layer_backward).
#pragma once
#include <cmath>

#include "runtime/model/Mamba2Config.h"
#include "runtime/model/Mamba2Weights.h"
#include "tests/support/RandomMamba2Layer.h"

namespace ssmjit::testing {

// The layer's config and CPU weights as the reference reads them (A_log = log(-A), the conv weight
// as (convDim, 1, W)).
struct ReferenceLayer {
  model::Mamba2Config cfg;
  model::Mamba2LayerWeights w;
  HostTensorF32 aLog, conv;
  explicit ReferenceLayer(HostMamba2Layer& h) {
    const Mamba2Dims& d = h.d;
    cfg.hidden_size = d.hidden;
    cfg.num_heads = d.heads;
    cfg.head_dim = d.head_dim;
    cfg.state_size = d.state;
    cfg.n_groups = d.groups;
    cfg.conv_kernel = d.conv_width;
    cfg.chunk_size = d.chunk_size;
    cfg.use_bias = cfg.use_conv_bias = true;
    cfg.norm_before_gate = d.norm_before_gate;
    cfg.norm_eps = d.norm_eps;
    // The layer's dt_max <= dt_min means no clamp; the config's is then [0, inf).
    cfg.dt_min = d.dt_max > d.dt_min ? d.dt_min : 0.0;
    cfg.dt_max = d.dt_max > d.dt_min ? d.dt_max : INFINITY;
    aLog = h.A;
    for (float& v : aLog.v) v = std::log(-v);
    conv = h.conv;
    conv.shape = {d.convDim(), 1, d.conv_width};
    w.in_proj_weight = h.inProj.view();
    w.in_proj_bias = h.inProjBias.view();
    w.conv1d_weight = conv.view();
    w.conv1d_bias = h.convBias.view();
    w.dt_bias = h.dtBias.view();
    w.A_log = aLog.view();
    w.D = h.D.view();
    w.gated_norm = h.norm.view();
    w.out_proj_weight = h.outProj.view();
    w.out_proj_bias = h.outProjBias.view();
  }
};

}  // namespace ssmjit::testing
