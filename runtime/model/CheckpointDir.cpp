// A checkpoint directory's safetensors files (see CheckpointDir.h).
#include "runtime/model/CheckpointDir.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "ssmjit/error.h"

namespace ssmjit::model {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kIndex = "model.safetensors.index.json";
constexpr const char* kSingle = "model.safetensors";

[[noreturn]] void fail(const std::string& dir, const std::string& msg) {
  throw Error(Error::Kind::InvalidArgument, "checkpoint " + dir + ": " + msg);
}

std::string readText(const std::string& dir, const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail(dir, "cannot read " + p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// weight_map of the index: tensor name -> shard file name (a plain name in `dir`).
std::map<std::string, std::string> readWeightMap(const std::string& dir) {
  const fs::path p = fs::path(dir) / kIndex;
  json index;
  try {
    index = json::parse(readText(dir, p));
  } catch (const json::exception& e) {
    fail(dir, std::string(kIndex) + " is not valid JSON: " + e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    fail(dir, std::string(kIndex) + " has no \"weight_map\" object");
  std::map<std::string, std::string> map;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string())
      fail(dir, std::string(kIndex) + ": weight_map[\"" + name + "\"] is " + shard.dump() + ", expected a file name");
    const std::string file = shard.get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      fail(dir, std::string(kIndex) + ": weight_map[\"" + name + "\"] is \"" + file +
                    "\", expected a file name in the directory");
    map.emplace(name, file);
  }
  if (map.empty()) fail(dir, std::string(kIndex) + " lists no tensors");
  return map;
}

}  // namespace

CheckpointDir::CheckpointDir(const std::string& dir) : dir_(dir) {
  if (!fs::is_directory(dir)) fail(dir, "not a directory");
  const fs::path root(dir);
  if (fs::exists(root / kIndex)) {
    const std::map<std::string, std::string> weightMap = readWeightMap(dir);
    std::set<std::string> shards;
    for (const auto& kv : weightMap) shards.insert(kv.second);
    for (const std::string& s : shards) add(std::make_unique<SafetensorsFile>((root / s).string()));
    for (const auto& [name, shard] : weightMap) {
      const SafetensorsFile* f = fileOf(name);
      if (!f || fs::path(f->path()).filename() != shard)
        fail(dir, "tensor '" + name + "' is listed in " + kIndex + " under " + shard + ", but " + shard +
                      " does not hold it" + (f ? " (" + f->path() + " does)" : ""));
    }
    for (const auto& [name, f] : where_)
      if (!weightMap.count(name))
        fail(dir, "tensor '" + name + "' is in " + f->path() + " but not listed in " + kIndex);
    return;
  }
  if (fs::exists(root / kSingle)) {
    add(std::make_unique<SafetensorsFile>((root / kSingle).string()));
    return;
  }
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") found.push_back(e.path().string());
  if (found.empty()) fail(dir, std::string("no ") + kIndex + ", no " + kSingle + " and no *.safetensors file");
  std::sort(found.begin(), found.end());
  for (const std::string& f : found) add(std::make_unique<SafetensorsFile>(f));
}

void CheckpointDir::add(std::unique_ptr<SafetensorsFile> file) {
  for (const auto& kv : file->entries()) {
    const auto [it, fresh] = where_.emplace(kv.first, file.get());
    if (!fresh) fail(dir_, "tensor '" + kv.first + "' is in both " + it->second->path() + " and " + file->path());
  }
  files_.push_back(std::move(file));
}

std::vector<std::string> CheckpointDir::names() const {
  std::vector<std::string> v;
  for (const auto& kv : where_) v.push_back(kv.first);
  return v;
}

const SafetensorsFile* CheckpointDir::fileOf(const std::string& name) const {
  const auto it = where_.find(name);
  return it == where_.end() ? nullptr : it->second;
}

const SafetensorsEntry* CheckpointDir::find(const std::string& name) const {
  const SafetensorsFile* f = fileOf(name);
  return f ? f->find(name) : nullptr;
}

TensorView CheckpointDir::view(const std::string& name) const {
  const SafetensorsFile* f = fileOf(name);
  if (!f) fail(dir_, "no tensor '" + name + "'");
  return f->view(name);
}

}  // namespace ssmjit::model
