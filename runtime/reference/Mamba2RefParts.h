// The pieces of the float64 Mamba-2 layer reference (Mamba2ModelRef.h) that its forward
// (Mamba2ModelRef.cpp) and its backward (Mamba2LayerBackwardRef.cpp) share, so that the backward
// differentiates exactly the forward's arithmetic. Internal to the reference.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/model/Mamba2Config.h"
#include "runtime/model/Mamba2Weights.h"
#include "runtime/reference/Mamba2ModelRef.h"
#include "ssmjit/tensor.h"

namespace ssmjit::reference::mamba2_parts {

inline double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }
inline double silu(double v) { return v / (1.0 + std::exp(-v)); }
inline double siluGrad(double v) {
  const double s = sigmoid(v);
  return s * (1.0 + v * (1.0 - s));
}

// dt' of head h from its in_proj value: softplus(raw) (raw itself above 20, as mamba_ssm and
// transformers compute it), raw = dt + dt_bias, clamped to [dt_min, dt_max].
struct HeadDt {
  double raw, softplus, value;
  bool clamped;  // softplus strictly outside [dt_min, dt_max]: dt' does not depend on raw there
  double grad() const { return clamped ? 0.0 : raw > 20.0 ? 1.0 : sigmoid(raw); }  // d dt' / d raw
};
HeadDt headDt(const model::Mamba2Config& c, const model::Mamba2LayerWeights& w, int64_t h, double dt);

// y = W x (+ b) for W (rows, cols).
void linear(const TensorView& W, const TensorView& b, const double* x, double* y);

// out = v / sqrt(mean(v^2) + eps) * w[w0 + i] over n values; out may be v.
void rmsNorm(const double* v, int64_t n, const TensorView& w, int64_t w0, double eps, double* out);

// Refuses (InvalidArgument, prefixed `op`) a cu_seqlens that does not split T tokens.
void checkSeqlens(const char* op, const std::vector<int64_t>& cu, int64_t T);

// A layer call's packed row: hidden a whole number of tokens, cu_seqlens splitting them, one state
// per sequence (`statesArg` in errors), each empty one made zeros. Returns the token count.
int64_t checkRow(const char* op, const model::Mamba2Config& c, const std::vector<double>& hidden,
                 const std::vector<int64_t>& cu, std::vector<Mamba2SequenceState>& states, const char* statesArg);

// A state vector of `n` values: zeros when empty, else exactly n (refused as <arg>[seq].<what>).
void prepareState(const char* op, const char* arg, const char* what, std::vector<double>& s, size_t n, size_t seq);

// Where layerToken writes one token's intermediates (buffers of the caller).
struct TokenValues {
  double* proj;    // (in_proj_rows): [z | xBC | dt]
  double* acc;     // (conv_dim): the conv's output before its SiLU
  double* post;    // (conv_dim): silu(acc) = [x | B | C]
  double* y;       // (d_inner): the SSM's output, before the gated norm
  double* normed;  // (d_inner): the gated norm's output, out_proj's input
};

// One token u (hidden) of a sequence through the layer: out (hidden), the sequence's state s
// (prepared to its sizes) advanced by the token.
void layerToken(const model::Mamba2Config& c, const model::Mamba2LayerWeights& w, const double* u,
                Mamba2SequenceState& s, const TokenValues& v, double* out);

}  // namespace ssmjit::reference::mamba2_parts
