#include "tools/problems/DeviceProblem.h"

#include "runtime/Driver.h"
#include "runtime/OpSpecializations.h"

namespace ssmjit::testing {

DeviceProblem::DeviceProblem(const SsuProblem& p) {
  args = p.args();
  const auto views = opspec::ssuViews(args);
  const auto host = p.all();
  for (size_t k = 0; k < host.size(); ++k) {
    bufs.emplace_back();
    if (!host[k]->defined) continue;
    bufs[k] = DeviceBuffer(host[k]->bytes.size());
    views[k]->data = static_cast<char*>(bufs[k].data()) + host[k]->byteOffset;
    views[k]->device = DeviceKind::CUDA;
    views[k]->deviceId = 0;
  }
  upload(p);
}

void DeviceProblem::upload(const SsuProblem& p) {
  const auto host = p.all();
  for (size_t k = 0; k < host.size(); ++k)
    if (host[k]->defined) bufs[k].uploadBytes(host[k]->bytes.data(), host[k]->bytes.size());
  driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize (after uploading inputs)");
}

std::vector<uint8_t> DeviceProblem::download(size_t k) const {
  std::vector<uint8_t> v(bufs[k].bytes());
  bufs[k].downloadBytes(v.data(), v.size());
  return v;
}

}  // namespace ssmjit::testing
