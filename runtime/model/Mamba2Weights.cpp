// The tensors of a Mamba-2 model (see Mamba2Weights.h).
#include "runtime/model/Mamba2Weights.h"

#include <set>

#include "ssmjit/error.h"

namespace ssmjit::model {

namespace {

std::string shapeString(const std::vector<int64_t>& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

// One expected tensor and where its view goes.
struct Expect {
  std::string name;
  std::vector<int64_t> shape;
  TensorView* dst;
};

std::vector<Expect> expectedTensors(const Mamba2Config& c, Mamba2Weights& w) {
  const int64_t hid = c.hidden_size, H = c.num_heads;
  std::vector<Expect> e;
  e.push_back({mamba2EmbeddingName(c), {c.vocab_rows, hid}, &w.embedding});
  w.layers.resize(size_t(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    Mamba2LayerWeights& l = w.layers[size_t(i)];
    const std::string p = "backbone.layers." + std::to_string(i) + ".";
    const std::string m = p + "mixer.";
    e.push_back({p + "norm.weight", {hid}, &l.norm});
    e.push_back({m + "in_proj.weight", {c.in_proj_rows(), hid}, &l.in_proj_weight});
    if (c.use_bias) e.push_back({m + "in_proj.bias", {c.in_proj_rows()}, &l.in_proj_bias});
    e.push_back({m + "conv1d.weight", {c.conv_dim(), 1, c.conv_kernel}, &l.conv1d_weight});
    if (c.use_conv_bias) e.push_back({m + "conv1d.bias", {c.conv_dim()}, &l.conv1d_bias});
    e.push_back({m + "dt_bias", {H}, &l.dt_bias});
    e.push_back({m + "A_log", {H}, &l.A_log});
    e.push_back({m + "D", {c.d_has_hdim ? c.d_inner() : H}, &l.D});
    e.push_back({m + "norm.weight", {c.d_inner()}, &l.gated_norm});
    e.push_back({m + "out_proj.weight", {hid, c.d_inner()}, &l.out_proj_weight});
    if (c.use_bias) e.push_back({m + "out_proj.bias", {hid}, &l.out_proj_bias});
  }
  e.push_back({"backbone.norm_f.weight", {hid}, &w.norm_f});
  e.push_back({"lm_head.weight", {c.vocab_rows, hid}, c.tie_embeddings ? nullptr : &w.lm_head});
  return e;
}

}  // namespace

std::string mamba2EmbeddingName(const Mamba2Config& cfg) {
  return cfg.naming == CheckpointNaming::HuggingFace ? "backbone.embeddings.weight" : "backbone.embedding.weight";
}

Mamba2Weights loadMamba2Weights(const CheckpointDir& dir, const Mamba2Config& cfg) {
  Mamba2Weights w;
  const std::vector<Expect> expect = expectedTensors(cfg, w);
  std::vector<std::string> problems;
  std::set<std::string> known;
  for (const Expect& e : expect) {
    known.insert(e.name);
    const SafetensorsEntry* got = dir.find(e.name);
    const bool optional = e.dst == nullptr;  // the tied lm_head
    if (!got) {
      if (!optional) problems.push_back("missing tensor '" + e.name + "' (expected shape " + shapeString(e.shape) + ")");
      continue;
    }
    if (got->shape != e.shape)
      problems.push_back("tensor '" + e.name + "' has shape " + shapeString(got->shape) + ", expected " +
                         shapeString(e.shape));
    else if (got->dtype != "F32" && got->dtype != "BF16" && got->dtype != "F16")
      problems.push_back("tensor '" + e.name + "' has dtype " + got->dtype + ", expected F32, BF16 or F16");
    else if (e.dst)
      *e.dst = dir.view(e.name);
  }
  std::string extra;
  for (const std::string& n : dir.names())
    if (!known.count(n)) extra += (extra.empty() ? "" : ", ") + n;
  if (!extra.empty()) problems.push_back("unexpected tensors: " + extra);
  if (!problems.empty()) {
    std::string msg = "checkpoint " + dir.path() + " does not match its Mamba-2 config (" +
                      std::to_string(cfg.num_layers) + " layers, hidden " + std::to_string(cfg.hidden_size) + "):";
    for (const std::string& p : problems) msg += "\n  " + p;
    throw Error(Error::Kind::InvalidArgument, msg);
  }
  if (cfg.tie_embeddings) w.lm_head = w.embedding;
  return w;
}

Mamba2Checkpoint::Mamba2Checkpoint(const std::string& dir)
    : config(loadMamba2Config(dir)), files(dir), weights(loadMamba2Weights(files, config)) {}

}  // namespace ssmjit::model
