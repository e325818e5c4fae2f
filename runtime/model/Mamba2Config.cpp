// config.json of a Mamba-2 model (see Mamba2Config.h). The defaults are those of
// transformers' Mamba2Config and of mamba_ssm's MambaConfig and Mamba2 module.
#include "runtime/model/Mamba2Config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ssmjit/error.h"

namespace ssmjit::model {

namespace {

using nlohmann::json;

// Python's json module writes float('inf') as the bare literal Infinity (time_step_limit,
// dt_limit), which is not JSON: such literals outside strings are quoted before parsing and read
// back by number() below.
std::string quoteNonFiniteLiterals(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') inString = false;
      continue;
    }
    if (c == '"') inString = true;
    bool replaced = false;
    for (const char* lit : {"-Infinity", "Infinity", "NaN"}) {
      const size_t n = std::char_traits<char>::length(lit);
      if (text.compare(i, n, lit) == 0) {
        out += '"' + std::string(lit) + '"';
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

// Reads fields of one JSON object, `prefix` naming it in errors ("ssm_cfg.").
class Fields {
 public:
  Fields(const json& obj, std::string source, std::string prefix)
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& msg) const {
    throw Error(Error::Kind::InvalidArgument, source_ + ": field '" + prefix_ + key + "' " + msg);
  }
  bool has(const char* key) const { return obj_.contains(key) && !obj_[key].is_null(); }
  const json& at(const char* key) const { return obj_[key]; }

  int64_t integer(const char* key, int64_t dflt, int64_t min = 1) const {
    if (!has(key)) return dflt;
    const json& v = obj_[key];
    if (!v.is_number_integer()) fail(key, "is " + v.dump() + ", expected an integer");
    const int64_t n = v.get<int64_t>();
    if (n < min) fail(key, "is " + std::to_string(n) + ", expected at least " + std::to_string(min));
    return n;
  }
  bool boolean(const char* key, bool dflt) const {
    if (!has(key)) return dflt;
    if (!obj_[key].is_boolean()) fail(key, "is " + obj_[key].dump() + ", expected true or false");
    return obj_[key].get<bool>();
  }
  std::string string(const char* key, const std::string& dflt) const {
    if (!has(key)) return dflt;
    if (!obj_[key].is_string()) fail(key, "is " + obj_[key].dump() + ", expected a string");
    return obj_[key].get<std::string>();
  }
  double number(const char* key, double dflt) const { return has(key) ? toNumber(key, obj_[key]) : dflt; }
  // [lo, hi] with 0 <= lo <= hi (hi may be Infinity).
  void range(const char* key, double& lo, double& hi) const {
    lo = 0.0, hi = std::numeric_limits<double>::infinity();
    if (!has(key)) return;
    const json& v = obj_[key];
    if (!v.is_array() || v.size() != 2) fail(key, "is " + v.dump() + ", expected [min, max]");
    lo = toNumber(key, v[0]), hi = toNumber(key, v[1]);
    if (std::isnan(lo) || std::isnan(hi) || lo < 0 || hi < lo) fail(key, "is " + v.dump() + ", expected 0 <= min <= max");
  }

 private:
  // transformers 5 writes non-finite floats as {"__float__": "Infinity"}.
  double toNumber(const char* key, const json& v) const {
    if (v.is_number()) return v.get<double>();
    if (v.is_object() && v.size() == 1 && v.contains("__float__")) return toNumber(key, v["__float__"]);
    if (v == "Infinity") return std::numeric_limits<double>::infinity();
    if (v == "-Infinity") return -std::numeric_limits<double>::infinity();
    fail(key, "is " + v.dump() + ", expected a number");
  }

  const json& obj_;
  std::string source_, prefix_;
};

void parseHuggingFace(const Fields& f, Mamba2Config& c) {
  c.naming = CheckpointNaming::HuggingFace;
  c.hidden_size = f.integer("hidden_size", 4096);
  c.num_layers = f.integer("num_hidden_layers", 64);
  c.vocab_size = c.vocab_rows = f.integer("vocab_size", 32768);
  c.num_heads = f.integer("num_heads", 128);
  c.head_dim = f.integer("head_dim", 64);
  c.state_size = f.integer("state_size", 128);
  c.n_groups = f.integer("n_groups", 8);
  c.conv_kernel = f.integer("conv_kernel", 4);
  c.chunk_size = f.integer("chunk_size", 256);
  c.use_bias = f.boolean("use_bias", false);
  c.use_conv_bias = f.boolean("use_conv_bias", true);
  c.norm_before_gate = f.boolean("norm_before_gate", false);
  c.residual_in_fp32 = f.boolean("residual_in_fp32", true);
  c.tie_embeddings = f.boolean("tie_word_embeddings", false);
  c.norm_eps = f.number("layer_norm_epsilon", 1e-5);
  f.range("time_step_limit", c.dt_min, c.dt_max);
  if (!f.boolean("rms_norm", true)) f.fail("rms_norm", "is false, expected true (the gated RMSNorm)");
  const std::string act = f.string("hidden_act", "silu");
  if (act != "silu" && act != "swish") f.fail("hidden_act", "is \"" + act + "\", expected \"silu\"");
  // transformers sizes in_proj and the conv from expand * hidden_size and the heads from
  // num_heads * head_dim: the two must agree.
  const double expand = f.number("expand", 2);
  const double inner = expand * double(c.hidden_size);
  if (inner != double(c.d_inner()))
    f.fail("expand", "is " + std::to_string(expand) + ": expand * hidden_size = " + std::to_string(inner) +
                         ", expected num_heads * head_dim = " + std::to_string(c.num_heads) + " * " +
                         std::to_string(c.head_dim) + " = " + std::to_string(c.d_inner()));
}

void parseMambaSsm(const Fields& f, const std::string& source, Mamba2Config& c) {
  c.naming = CheckpointNaming::MambaSsm;
  c.hidden_size = f.integer("d_model", 2560);
  c.num_layers = f.integer("n_layer", 64);
  c.vocab_size = f.integer("vocab_size", 50277);
  const int64_t pad = f.integer("pad_vocab_size_multiple", 8);
  c.vocab_rows = (c.vocab_size + pad - 1) / pad * pad;
  c.residual_in_fp32 = f.boolean("residual_in_fp32", true);
  c.tie_embeddings = f.boolean("tie_embeddings", true);
  if (f.integer("d_intermediate", 0, 0) != 0)
    f.fail("d_intermediate", "is " + f.at("d_intermediate").dump() + ", expected 0 (MLP blocks are not supported)");
  if (f.has("attn_layer_idx") && !(f.at("attn_layer_idx").is_array() && f.at("attn_layer_idx").empty()))
    f.fail("attn_layer_idx", "is " + f.at("attn_layer_idx").dump() + ", expected [] (attention layers are not supported)");
  if (!f.boolean("rms_norm", true)) f.fail("rms_norm", "is false, expected true (LayerNorm blocks are not supported)");

  static const json kEmpty = json::object();
  if (f.has("ssm_cfg") && !f.at("ssm_cfg").is_object()) f.fail("ssm_cfg", "is " + f.at("ssm_cfg").dump() + ", expected an object");
  const Fields s(f.has("ssm_cfg") ? f.at("ssm_cfg") : kEmpty, source, "ssm_cfg.");
  const std::string layer = s.string("layer", "Mamba1");
  if (layer != "Mamba2") s.fail("layer", "is \"" + layer + "\", expected \"Mamba2\"");
  c.state_size = s.integer("d_state", 128);
  c.conv_kernel = s.integer("d_conv", 4);
  const int64_t expand = s.integer("expand", 2);
  c.head_dim = s.integer("headdim", 64);
  c.n_groups = s.integer("ngroups", 1);
  c.chunk_size = s.integer("chunk_size", 256);
  c.d_has_hdim = s.boolean("D_has_hdim", false);
  c.norm_before_gate = s.boolean("norm_before_gate", false);
  c.use_bias = s.boolean("bias", false);
  c.use_conv_bias = s.boolean("conv_bias", true);
  s.range("dt_limit", c.dt_min, c.dt_max);
  if (!s.boolean("rmsnorm", true)) s.fail("rmsnorm", "is false, expected true (the gated RMSNorm)");
  c.norm_eps = 1e-5;  // mamba_ssm fixes both the block norms' and the gated norm's epsilon
  const int64_t dInner = expand * c.hidden_size;
  if (s.has("d_ssm") && s.integer("d_ssm", 0) != dInner)
    s.fail("d_ssm", "is " + s.at("d_ssm").dump() + ", expected null or expand * d_model = " + std::to_string(dInner) +
                        " (a gated MLP beside the SSM is not supported)");
  if (dInner % c.head_dim != 0)
    s.fail("headdim", "is " + std::to_string(c.head_dim) + ", which does not divide expand * d_model = " +
                          std::to_string(dInner));
  c.num_heads = dInner / c.head_dim;
}

}  // namespace

Mamba2Config parseMamba2Config(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(quoteNonFiniteLiterals(text));
  } catch (const json::exception& e) {
    throw Error(Error::Kind::InvalidArgument, source + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(Error::Kind::InvalidArgument, source + ": expected a JSON object");
  const Fields f(j, source, "");
  Mamba2Config c;
  const std::string modelType = f.string("model_type", "");
  if (modelType == "mamba2")
    parseHuggingFace(f, c);
  else if (modelType.empty() && f.has("d_model"))
    parseMambaSsm(f, source, c);
  else if (!modelType.empty())
    f.fail("model_type", "is \"" + modelType + "\", expected \"mamba2\" (or a mamba_ssm config with d_model)");
  else
    throw Error(Error::Kind::InvalidArgument,
                source + ": neither a transformers Mamba2Config (model_type \"mamba2\") nor a mamba_ssm MambaConfig (d_model)");
  if (c.num_heads % c.n_groups != 0)
    throw Error(Error::Kind::InvalidArgument, source + ": " + std::to_string(c.num_heads) + " heads do not split into " +
                                                  std::to_string(c.n_groups) + " groups (n_groups / ngroups must divide the heads)");
  if (!(c.norm_eps > 0)) f.fail("layer_norm_epsilon", "is " + std::to_string(c.norm_eps) + ", expected > 0");
  return c;
}

Mamba2Config loadMamba2Config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(Error::Kind::InvalidArgument, "checkpoint " + dir + ": cannot read config.json");
  std::ostringstream s;
  s << in.rdbuf();
  return parseMamba2Config(s.str(), path);
}

}  // namespace ssmjit::model
