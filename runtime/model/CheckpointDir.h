// The safetensors files of a checkpoint directory, looked up by tensor name. Which files: the
// shards named by model.safetensors.index.json (its weight_map must agree with them exactly),
// else model.safetensors, else every *.safetensors file of the folder. A tensor in two files is
// an error. Internal to the runtime.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/model/Safetensors.h"

namespace ssmjit::model {

class CheckpointDir {
 public:
  // Opens (maps and checks) every file; throws ssmjit::Error(InvalidArgument) naming the
  // directory, the file and the tensor.
  explicit CheckpointDir(const std::string& dir);

  const std::string& path() const { return dir_; }
  // Every tensor name, sorted.
  std::vector<std::string> names() const;
  // The file holding `name`, or nullptr.
  const SafetensorsFile* fileOf(const std::string& name) const;
  const SafetensorsEntry* find(const std::string& name) const;
  // SafetensorsFile::view of the file holding `name`; throws naming the directory if none does.
  TensorView view(const std::string& name) const;

 private:
  void add(std::unique_ptr<SafetensorsFile> file);

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;  // stable addresses: views outlive moves
  std::map<std::string, const SafetensorsFile*> where_;
};

}  // namespace ssmjit::model
