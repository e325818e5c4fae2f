// Tiny Mamba-2 checkpoints written by the tests themselves: a safetensors writer (the header
// built by hand, so that tests can also write broken ones) and a random model of a few layers in
// either library's naming and config spelling.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/model/Mamba2Config.h"
#include "ssmjit/reference.h"

namespace ssmjit::testing {

// One tensor to write: values stored in `dtype` (F32, F16, BF16, F64 or I64).
struct StTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<double> values;
};

inline std::vector<uint8_t> tensorBytes(const StTensor& t) {
  std::vector<uint8_t> b;
  auto append = [&](const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
  };
  for (double v : t.values) {
    if (t.dtype == "F32") {
      const auto f = static_cast<float>(v);
      append(&f, 4);
    } else if (t.dtype == "BF16" || t.dtype == "F16") {
      const uint16_t h = t.dtype == "BF16" ? reference::toBFloat16Bits(v) : reference::toHalfBits(v);
      append(&h, 2);
    } else if (t.dtype == "F64") {
      append(&v, 8);
    } else {
      const auto i = static_cast<int64_t>(v);
      append(&i, 8);
    }
  }
  return b;
}

inline std::string jsonList(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

inline void writeFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

// The 8-byte little-endian length, the header, the data.
inline std::string safetensorsBytes(const std::string& header, const std::vector<uint8_t>& data) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xFF);
  return s + header + std::string(data.begin(), data.end());
}

// A well-formed file: the tensors back to back in the given order, with a __metadata__ entry;
// the header padded with spaces to a multiple of 8 bytes, as the safetensors library writes it
// (data then starts 8-byte aligned).
inline std::string safetensorsFile(const std::vector<StTensor>& ts) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  std::vector<uint8_t> data;
  for (const StTensor& t : ts) {
    const std::vector<uint8_t> b = tensorBytes(t);
    header += ",\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":" + jsonList(t.shape) +
              ",\"data_offsets\":[" + std::to_string(data.size()) + "," + std::to_string(data.size() + b.size()) + "]}";
    data.insert(data.end(), b.begin(), b.end());
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  return safetensorsBytes(header, data);
}

// A tiny Mamba-2 model: sizes, flags and the naming of its config and tensors.
struct TinyMamba2 {
  model::CheckpointNaming naming = model::CheckpointNaming::HuggingFace;
  int64_t hidden = 8, layers = 2, vocab = 11, heads = 4, head_dim = 4, state = 4, groups = 2, conv = 4;
  int64_t pad_vocab = 8;  // mamba_ssm's pad_vocab_size_multiple
  bool use_bias = false, conv_bias = true, tie = false, norm_before_gate = false, d_has_hdim = false;
  double dt_min = 0.0, dt_max = std::numeric_limits<double>::infinity();

  bool hf() const { return naming == model::CheckpointNaming::HuggingFace; }
  int64_t inner() const { return heads * head_dim; }
  int64_t convDim() const { return inner() + 2 * groups * state; }
  int64_t vocabRows() const { return hf() ? vocab : (vocab + pad_vocab - 1) / pad_vocab * pad_vocab; }
};

inline std::string jsonNumber(double v) {
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";  // as Python's json module writes it
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

inline std::string tinyMamba2Config(const TinyMamba2& m) {
  auto b = [](bool v) { return v ? std::string("true") : std::string("false"); };
  const std::string limit = "[" + jsonNumber(m.dt_min) + ", " + jsonNumber(m.dt_max) + "]";
  const std::string expand = std::to_string(m.inner() / m.hidden);
  if (m.hf())
    return "{\"model_type\": \"mamba2\", \"hidden_size\": " + std::to_string(m.hidden) +
           ", \"num_hidden_layers\": " + std::to_string(m.layers) + ", \"vocab_size\": " + std::to_string(m.vocab) +
           ", \"num_heads\": " + std::to_string(m.heads) + ", \"head_dim\": " + std::to_string(m.head_dim) +
           ", \"state_size\": " + std::to_string(m.state) + ", \"n_groups\": " + std::to_string(m.groups) +
           ", \"conv_kernel\": " + std::to_string(m.conv) + ", \"expand\": " + expand + ", \"chunk_size\": 64" +
           ", \"use_bias\": " + b(m.use_bias) + ", \"use_conv_bias\": " + b(m.conv_bias) +
           ", \"layer_norm_epsilon\": 1e-05, \"rms_norm\": true, \"residual_in_fp32\": true" +
           ", \"tie_word_embeddings\": " + b(m.tie) + ", \"norm_before_gate\": " + b(m.norm_before_gate) +
           ", \"time_step_limit\": " + limit + ", \"hidden_act\": \"silu\", \"architectures\": [\"Mamba2ForCausalLM\"]}";
  return "{\"d_model\": " + std::to_string(m.hidden) + ", \"d_intermediate\": 0, \"n_layer\": " +
         std::to_string(m.layers) + ", \"vocab_size\": " + std::to_string(m.vocab) +
         ", \"ssm_cfg\": {\"layer\": \"Mamba2\", \"d_state\": " + std::to_string(m.state) +
         ", \"d_conv\": " + std::to_string(m.conv) + ", \"expand\": " + expand +
         ", \"headdim\": " + std::to_string(m.head_dim) + ", \"ngroups\": " + std::to_string(m.groups) +
         ", \"norm_before_gate\": " + b(m.norm_before_gate) + ", \"D_has_hdim\": " + b(m.d_has_hdim) +
         ", \"bias\": " + b(m.use_bias) + ", \"conv_bias\": " + b(m.conv_bias) + ", \"dt_limit\": " + limit +
         "}, \"attn_layer_idx\": [], \"attn_cfg\": {}, \"rms_norm\": true, \"residual_in_fp32\": true" +
         ", \"fused_add_norm\": true, \"pad_vocab_size_multiple\": " + std::to_string(m.pad_vocab) +
         ", \"tie_embeddings\": " + b(m.tie) + "}";
}

// Every tensor of the model, random, in `dtype`, in checkpoint order.
inline std::vector<StTensor> tinyMamba2Tensors(const TinyMamba2& m, uint64_t seed, const std::string& dtype = "F32") {
  std::mt19937_64 rng(seed);
  std::vector<StTensor> ts;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, double lo, double hi) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::uniform_real_distribution<double> u(lo, hi);
    StTensor t{name, dtype, std::move(shape), {}};
    for (int64_t i = 0; i < n; ++i) t.values.push_back(u(rng));
    ts.push_back(std::move(t));
  };
  const int64_t rows = 2 * m.inner() + 2 * m.groups * m.state + m.heads;
  const double si = 1.0 / std::sqrt(double(m.hidden)), so = 1.0 / std::sqrt(double(m.inner()));
  add(m.hf() ? "backbone.embeddings.weight" : "backbone.embedding.weight", {m.vocabRows(), m.hidden}, -1, 1);
  for (int64_t i = 0; i < m.layers; ++i) {
    const std::string p = "backbone.layers." + std::to_string(i) + ".", x = p + "mixer.";
    add(p + "norm.weight", {m.hidden}, 0.8, 1.2);
    add(x + "in_proj.weight", {rows, m.hidden}, -si, si);
    if (m.use_bias) add(x + "in_proj.bias", {rows}, -0.1, 0.1);
    add(x + "conv1d.weight", {m.convDim(), 1, m.conv}, -0.5, 0.5);
    if (m.conv_bias) add(x + "conv1d.bias", {m.convDim()}, -0.1, 0.1);
    add(x + "dt_bias", {m.heads}, -2.0, 0.5);
    add(x + "A_log", {m.heads}, 0.0, 1.5);
    add(x + "D", {m.d_has_hdim ? m.inner() : m.heads}, 0.5, 1.5);
    add(x + "norm.weight", {m.inner()}, 0.8, 1.2);
    add(x + "out_proj.weight", {m.hidden, m.inner()}, -so, so);
    if (m.use_bias) add(x + "out_proj.bias", {m.hidden}, -0.1, 0.1);
  }
  add("backbone.norm_f.weight", {m.hidden}, 0.8, 1.2);
  if (!m.tie) add("lm_head.weight", {m.vocabRows(), m.hidden}, -si, si);
  return ts;
}

// config.json and model.safetensors in `dir`.
inline void writeTinyMamba2(const std::string& dir, const TinyMamba2& m, const std::vector<StTensor>& ts) {
  writeFileBytes(dir + "/config.json", tinyMamba2Config(m));
  writeFileBytes(dir + "/model.safetensors", safetensorsFile(ts));
}

}  // namespace ssmjit::testing
