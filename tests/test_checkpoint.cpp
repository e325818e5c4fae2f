// Checkpoint loading: the safetensors reader (good files and every class of damage), checkpoint
// directories (single file, sharded index, loose files), config.json in both spellings, and the
// Mamba-2 weight set (names, shapes, dtypes, tied and untied lm_head). Every error names what is
// wrong.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "runtime/model/CheckpointDir.h"
#include "runtime/model/Mamba2Config.h"
#include "runtime/model/Mamba2Weights.h"
#include "runtime/model/Safetensors.h"
#include "runtime/reference/ElementAccess.h"
#include "tests/support/ExpectError.h"
#include "tests/support/ScratchDir.h"
#include "tests/support/TinyMamba2.h"

using namespace ssmjit;
using namespace ssmjit::model;
using namespace ssmjit::testing;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

std::vector<StTensor> twoTensors() {
  return {{"a", "F32", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"b.weight", "BF16", {4}, {0.5, -1, 2, 3}}};
}

std::string writeFile(const ScratchDir& d, const std::string& name, const std::string& bytes) {
  const std::string p = d.path() + "/" + name;
  writeFileBytes(p, bytes);
  return p;
}

// A file whose header is `header` followed by `dataBytes` zero bytes.
std::string rawFile(const ScratchDir& d, const std::string& header, size_t dataBytes) {
  return writeFile(d, "t.safetensors", safetensorsBytes(header, std::vector<uint8_t>(dataBytes, 0)));
}

std::string openError(const std::string& path) {
  return invalidArgMessage([&] { SafetensorsFile f(path); });
}

// ---- safetensors ----------------------------------------------------------------------------

TEST(Safetensors, ReadsViewsIntoTheMapping) {
  ScratchDir d;
  std::vector<StTensor> ts = twoTensors();
  ts.push_back({"steps", "I64", {2}, {7, 9}});
  SafetensorsFile f(writeFile(d, "t.safetensors", safetensorsFile(ts)));
  EXPECT_EQ(f.entries().size(), 3u);  // __metadata__ is not a tensor
  const TensorView a = f.view("a");
  EXPECT_EQ(a.dtype, DType::F32);
  EXPECT_EQ(a.device, DeviceKind::CPU);
  EXPECT_EQ(a.shapeString(), "(2, 3)");
  EXPECT_EQ(reference::el(a, {1, 2}), 6.0);
  const TensorView b = f.view("b.weight");
  EXPECT_EQ(b.dtype, DType::BF16);
  EXPECT_EQ(reference::el(b, {1}), -1.0);
  EXPECT_EQ(f.find("steps")->dtype, "I64");
  EXPECT_THAT(invalidArgMessage([&] { f.view("steps"); }), AllOf(HasSubstr("'steps'"), HasSubstr("I64")));
  EXPECT_THAT(invalidArgMessage([&] { f.view("nope"); }), HasSubstr("'nope'"));
  // A move keeps the mapping (and so the views).
  SafetensorsFile g = std::move(f);
  EXPECT_EQ(reference::el(g.view("a"), {0, 1}), 2.0);
}

TEST(Safetensors, RefusesAFileShorterThanItsHeaderLength) {
  ScratchDir d;
  EXPECT_THAT(openError(writeFile(d, "t.safetensors", "abc")), AllOf(HasSubstr("t.safetensors"), HasSubstr("3 bytes")));
  std::string bytes = safetensorsBytes("{}", {});
  bytes[0] = char(200);  // header length 200, 2 bytes follow
  EXPECT_THAT(openError(writeFile(d, "t.safetensors", bytes)), HasSubstr("header length is 200"));
}

TEST(Safetensors, RefusesAHeaderThatIsNotJson) {
  ScratchDir d;
  EXPECT_THAT(openError(rawFile(d, "{\"a\": {", 0)), HasSubstr("not valid JSON"));
  EXPECT_THAT(openError(rawFile(d, "[1, 2]", 0)), HasSubstr("expected a JSON object"));
}

TEST(Safetensors, RefusesBadEntries) {
  ScratchDir d;
  // Tensor 'w' of 8 data bytes: its entry, and what the error names besides 'w'.
  const std::pair<const char*, std::vector<const char*>> cases[] = {
      {"\"dtype\": \"F32\", \"shape\": [2]", {"data_offsets"}},
      {"\"dtype\": \"F31\", \"shape\": [2], \"data_offsets\": [0, 8]", {"F31"}},
      {"\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]", {"-2", "non-negative"}},
      {"\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 0]", {"end before begin"}},
      {"\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 12]", {"past the end of the data region (8 bytes)"}},
      {"\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]", {"8 bytes", "expected 3 elements x 4 bytes"}},
  };
  for (const auto& [entry, parts] : cases) {
    SCOPED_TRACE(entry);
    const std::string m = openError(rawFile(d, "{\"w\": {" + std::string(entry) + "}}", 8));
    EXPECT_THAT(m, HasSubstr("'w'"));
    for (const char* part : parts) EXPECT_THAT(m, HasSubstr(part));
  }
}

TEST(Safetensors, RefusesAViewOfMisalignedData) {
  ScratchDir d;
  const std::string h = "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}";  // 61 bytes
  const SafetensorsFile f(rawFile(d, h, 4));
  EXPECT_THAT(invalidArgMessage([&] { f.view("w"); }),
              AllOf(HasSubstr("'w'"), HasSubstr("starts at byte 69"), HasSubstr("element size (4 bytes)")));
}

TEST(Safetensors, RefusesOverlappingTensors) {
  ScratchDir d;
  const std::string h = "{\"p\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                        " \"q\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}";
  EXPECT_THAT(openError(rawFile(d, h, 12)), AllOf(HasSubstr("'q'"), HasSubstr("overlaps"), HasSubstr("'p'")));
}

TEST(Safetensors, RefusesATruncatedFile) {
  ScratchDir d;
  const std::string whole = safetensorsFile(twoTensors());
  const std::string p = writeFile(d, "t.safetensors", whole.substr(0, whole.size() - 3));
  EXPECT_THAT(openError(p), AllOf(HasSubstr("t.safetensors"), HasSubstr("'b.weight'"), HasSubstr("truncated")));
}

// ---- checkpoint directories -----------------------------------------------------------------

TEST(CheckpointDir, ReadsShardsThroughTheIndex) {
  ScratchDir d;
  std::vector<StTensor> ts = twoTensors();
  writeFile(d, "model-00001-of-00002.safetensors", safetensorsFile({ts[0]}));
  writeFile(d, "model-00002-of-00002.safetensors", safetensorsFile({ts[1]}));
  writeFile(d, "stray.safetensors", safetensorsFile({ts[1]}));  // not in the index: not opened
  const std::string index = "{\"metadata\": {\"total_size\": 32}, \"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", "
                            "\"b.weight\": \"model-00002-of-00002.safetensors\"}}";
  writeFile(d, "model.safetensors.index.json", index);
  const CheckpointDir dir(d.path());
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"a", "b.weight"}));
  EXPECT_EQ(reference::el(dir.view("b.weight"), {3}), 3.0);
  EXPECT_THAT(std::filesystem::path(dir.fileOf("a")->path()).filename().string(), "model-00001-of-00002.safetensors");
}

TEST(CheckpointDir, RefusesAnIndexThatDisagreesWithItsShards) {
  ScratchDir d;
  std::vector<StTensor> ts = twoTensors();
  writeFile(d, "s1.safetensors", safetensorsFile({ts[0]}));
  writeFile(d, "s2.safetensors", safetensorsFile({ts[1]}));
  // b.weight listed under s1, which does not hold it.
  writeFile(d, "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b.weight\": \"s1.safetensors\"}}");
  EXPECT_THAT(invalidArgMessage([&] { CheckpointDir c(d.path()); }),
              AllOf(HasSubstr("'b.weight'"), HasSubstr("s1.safetensors does not hold it")));
  // A tensor in two shards.
  writeFile(d, "s2.safetensors", safetensorsFile(ts));
  writeFile(d, "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b.weight\": \"s2.safetensors\"}}");
  EXPECT_THAT(invalidArgMessage([&] { CheckpointDir c(d.path()); }), AllOf(HasSubstr("'a'"), HasSubstr("in both")));
  // A shard tensor the index does not list.
  writeFile(d, "model.safetensors.index.json", "{\"weight_map\": {\"b.weight\": \"s2.safetensors\"}}");
  EXPECT_THAT(invalidArgMessage([&] { CheckpointDir c(d.path()); }), AllOf(HasSubstr("'a'"), HasSubstr("not listed")));
  // A shard that is missing.
  writeFile(d, "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"s9.safetensors\"}}");
  EXPECT_THAT(invalidArgMessage([&] { CheckpointDir c(d.path()); }), HasSubstr("s9.safetensors"));
  writeFile(d, "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"../s1.safetensors\"}}");
  EXPECT_THAT(invalidArgMessage([&] { CheckpointDir c(d.path()); }), HasSubstr("expected a file name"));
}

TEST(CheckpointDir, ReadsLooseFilesAndRefusesATensorInTwo) {
  ScratchDir d;
  std::vector<StTensor> ts = twoTensors();
  writeFile(d, "x.safetensors", safetensorsFile({ts[0]}));
  writeFile(d, "y.safetensors", safetensorsFile({ts[1]}));
  EXPECT_EQ(CheckpointDir(d.path()).names().size(), 2u);
  writeFile(d, "z.safetensors", safetensorsFile({ts[1]}));
  EXPECT_THAT(invalidArgMessage([&] { CheckpointDir c(d.path()); }), AllOf(HasSubstr("'b.weight'"), HasSubstr("in both")));
  ScratchDir empty;
  EXPECT_THAT(invalidArgMessage([&] { CheckpointDir c(empty.path()); }), HasSubstr("no *.safetensors"));
}

// ---- config.json ----------------------------------------------------------------------------

TEST(Mamba2Config, ParsesTransformersSpelling) {
  TinyMamba2 m;
  m.dt_min = 0.001;
  const Mamba2Config c = parseMamba2Config(tinyMamba2Config(m), "config.json");
  EXPECT_EQ(c.naming, CheckpointNaming::HuggingFace);
  EXPECT_EQ(c.hidden_size, 8);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.vocab_rows, 11);
  EXPECT_EQ(c.d_inner(), 16);
  EXPECT_EQ(c.conv_dim(), 16 + 2 * 2 * 4);
  EXPECT_EQ(c.in_proj_rows(), 2 * 16 + 2 * 2 * 4 + 4);
  EXPECT_EQ(c.dt_min, 0.001);
  EXPECT_TRUE(std::isinf(c.dt_max));  // written as the bare literal Infinity
  EXPECT_FALSE(c.tie_embeddings);
  // transformers 5 writes it as {"__float__": "Infinity"}.
  const Mamba2Config t5 = parseMamba2Config(
      "{\"model_type\": \"mamba2\", \"time_step_limit\": [0.0, {\"__float__\": \"Infinity\"}]}", "config.json");
  EXPECT_TRUE(std::isinf(t5.dt_max));
  // transformers' defaults where fields are absent.
  const Mamba2Config dflt = parseMamba2Config("{\"model_type\": \"mamba2\"}", "config.json");
  EXPECT_EQ(dflt.num_heads, 128);
  EXPECT_EQ(dflt.n_groups, 8);
  EXPECT_EQ(dflt.state_size, 128);
  EXPECT_FALSE(dflt.norm_before_gate);
  EXPECT_FALSE(dflt.tie_embeddings);
  EXPECT_EQ(dflt.norm_eps, 1e-5);
}

TEST(Mamba2Config, ParsesMambaSsmSpelling) {
  TinyMamba2 m;
  m.naming = CheckpointNaming::MambaSsm;
  m.d_has_hdim = true;
  m.norm_before_gate = true;
  const Mamba2Config c = parseMamba2Config(tinyMamba2Config(m), "config.json");
  EXPECT_EQ(c.naming, CheckpointNaming::MambaSsm);
  EXPECT_EQ(c.num_heads, 4);  // d_inner / headdim
  EXPECT_EQ(c.vocab_size, 11);
  EXPECT_EQ(c.vocab_rows, 16);  // padded to a multiple of 8
  EXPECT_TRUE(c.d_has_hdim);
  EXPECT_TRUE(c.norm_before_gate);
  const Mamba2Config dflt =
      parseMamba2Config("{\"d_model\": 256, \"ssm_cfg\": {\"layer\": \"Mamba2\"}}", "config.json");
  EXPECT_EQ(dflt.num_heads, 8);  // 2 * 256 / 64
  EXPECT_EQ(dflt.n_groups, 1);
  EXPECT_TRUE(dflt.tie_embeddings);
  EXPECT_EQ(dflt.vocab_rows, 50280);  // 50277 padded to a multiple of 8
}

TEST(Mamba2Config, RefusesUnsupportedOrInconsistentConfigs) {
  auto err = [](const std::string& text) { return invalidArgMessage([&] { parseMamba2Config(text, "cfg.json"); }); };
  EXPECT_THAT(err("{\"d_model\": 64, \"d_intermediate\": 128, \"ssm_cfg\": {\"layer\": \"Mamba2\"}}"),
              AllOf(HasSubstr("cfg.json"), HasSubstr("'d_intermediate'")));
  EXPECT_THAT(err("{\"d_model\": 64, \"attn_layer_idx\": [1], \"ssm_cfg\": {\"layer\": \"Mamba2\"}}"),
              HasSubstr("'attn_layer_idx'"));
  EXPECT_THAT(err("{\"d_model\": 64, \"ssm_cfg\": {}}"), AllOf(HasSubstr("'ssm_cfg.layer'"), HasSubstr("Mamba1")));
  EXPECT_THAT(err("{\"d_model\": 64, \"ssm_cfg\": {\"layer\": \"Mamba2\", \"headdim\": 48}}"), HasSubstr("'ssm_cfg.headdim'"));
  EXPECT_THAT(err("{\"d_model\": 64, \"ssm_cfg\": {\"layer\": \"Mamba2\", \"d_state\": \"16\"}}"),
              AllOf(HasSubstr("'ssm_cfg.d_state'"), HasSubstr("expected an integer")));
  EXPECT_THAT(err("{\"model_type\": \"mamba2\", \"hidden_size\": 64, \"num_heads\": 3, \"head_dim\": 64}"),
              AllOf(HasSubstr("'expand'"), HasSubstr("num_heads * head_dim")));
  EXPECT_THAT(err("{\"model_type\": \"mamba2\", \"hidden_size\": 64, \"num_heads\": 2, \"head_dim\": 64, \"n_groups\": 3}"),
              HasSubstr("3 groups"));
  EXPECT_THAT(err("{\"model_type\": \"mamba2\", \"num_hidden_layers\": 0}"), HasSubstr("'num_hidden_layers'"));
  EXPECT_THAT(err("{\"model_type\": \"mamba2\", \"time_step_limit\": [0.1, 0.01]}"), HasSubstr("'time_step_limit'"));
  EXPECT_THAT(err("{\"model_type\": \"mamba\"}"), HasSubstr("'model_type'"));
  EXPECT_THAT(err("{\"hidden_size\": 64}"), HasSubstr("neither"));
  EXPECT_THAT(err("{\"model_type\": "), HasSubstr("not valid JSON"));
}

// ---- the Mamba-2 weight set -----------------------------------------------------------------

// Writes `m` with `ts` and loads it; returns the error message (empty on success).
std::string loadError(const TinyMamba2& m, const std::vector<StTensor>& ts) {
  ScratchDir d;
  writeTinyMamba2(d.path(), m, ts);
  try {
    Mamba2Checkpoint ck(d.path());
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

TEST(Mamba2Weights, LoadsBothNamingsTiedAndUntied) {
  for (const auto naming : {CheckpointNaming::HuggingFace, CheckpointNaming::MambaSsm})
    for (const bool tie : {false, true}) {
      TinyMamba2 m;
      m.naming = naming;
      m.tie = tie;
      m.use_bias = tie;  // the optional biases, once each way
      ScratchDir d;
      const std::vector<StTensor> ts = tinyMamba2Tensors(m, 7, "BF16");
      writeTinyMamba2(d.path(), m, ts);
      const Mamba2Checkpoint ck(d.path());
      const Mamba2Weights& w = ck.weights;
      ASSERT_EQ(w.layers.size(), 2u);
      EXPECT_EQ(w.embedding.shapeString(), "(" + std::to_string(m.vocabRows()) + ", 8)");
      EXPECT_EQ(w.layers[1].conv1d_weight.shapeString(), "(32, 1, 4)");
      EXPECT_EQ(w.layers[0].in_proj_bias.defined(), m.use_bias);
      EXPECT_EQ(w.layers[0].in_proj_weight.dtype, DType::BF16);
      EXPECT_EQ(w.lm_head.data == w.embedding.data, tie);
      EXPECT_EQ(reference::el(w.norm_f, {3}), reference::fromBFloat16Bits(reference::toBFloat16Bits(ts[ts.size() - (tie ? 1 : 2)].values[3])));
    }
}

TEST(Mamba2Weights, AcceptsATiedLmHeadOfTheEmbeddingsShape) {
  TinyMamba2 m;
  m.tie = true;
  std::vector<StTensor> ts = tinyMamba2Tensors(m, 1);
  ts.push_back({"lm_head.weight", "F32", {m.vocab, m.hidden}, std::vector<double>(size_t(m.vocab * m.hidden), 0.0)});
  EXPECT_EQ(loadError(m, ts), "");
  ts.back().shape = {m.hidden, m.vocab};
  EXPECT_THAT(loadError(m, ts), AllOf(HasSubstr("'lm_head.weight'"), HasSubstr("(8, 11)"), HasSubstr("(11, 8)")));
}

TEST(Mamba2Weights, NamesEveryMissingMisshapedMistypedAndExtraTensor) {
  TinyMamba2 m;
  std::vector<StTensor> ts = tinyMamba2Tensors(m, 3);
  auto named = [&](const std::string& n) -> StTensor& {
    for (StTensor& t : ts)
      if (t.name == n) return t;
    throw std::runtime_error("no " + n);
  };
  ts.erase(ts.begin() + 1);  // backbone.layers.0.norm.weight
  named("backbone.layers.1.mixer.A_log").shape = {2, 2};
  StTensor& D = named("backbone.layers.0.mixer.D");
  D.dtype = "F64";
  ts.push_back({"backbone.layers.0.mixer.dt_proj.weight", "F32", {2}, {1, 2}});
  const std::string msg = loadError(m, ts);
  EXPECT_THAT(msg, HasSubstr("missing tensor 'backbone.layers.0.norm.weight' (expected shape (8,))"));
  EXPECT_THAT(msg, HasSubstr("'backbone.layers.1.mixer.A_log' has shape (2, 2), expected (4,)"));
  EXPECT_THAT(msg, HasSubstr("'backbone.layers.0.mixer.D' has dtype F64"));
  EXPECT_THAT(msg, HasSubstr("unexpected tensors: backbone.layers.0.mixer.dt_proj.weight"));
}

TEST(Mamba2Weights, RefusesTheOtherLibrarysNaming) {
  TinyMamba2 hf, ssm;
  ssm.naming = CheckpointNaming::MambaSsm;
  ssm.vocab = 16;  // no padding: only the names differ
  hf.vocab = 16;
  const std::string msg = loadError(ssm, tinyMamba2Tensors(hf, 5));
  EXPECT_THAT(msg, AllOf(HasSubstr("missing tensor 'backbone.embedding.weight'"),
                         HasSubstr("unexpected tensors: backbone.embeddings.weight")));
  EXPECT_THAT(loadError(hf, tinyMamba2Tensors(hf, 5)), Not(HasSubstr("missing")));
}

TEST(Mamba2Weights, RefusesATruncatedCheckpoint) {
  TinyMamba2 m;
  ScratchDir d;
  writeFileBytes(d.path() + "/config.json", tinyMamba2Config(m));
  const std::string whole = safetensorsFile(tinyMamba2Tensors(m, 2));
  writeFileBytes(d.path() + "/model.safetensors", whole.substr(0, whole.size() / 2));
  EXPECT_THAT(invalidArgMessage([&] { Mamba2Checkpoint ck(d.path()); }),
              AllOf(HasSubstr("model.safetensors"), HasSubstr("truncated")));
}

}  // namespace
