#include "runtime/python/Fields.h"

#include <vector>

#include "ssmjit/error.h"

namespace nb = nanobind;

namespace ssmjit::python {

nb::handle Fields::get(const char* name) {
  read_.insert(name);
  PyObject* v = PyDict_GetItemString(fields_.ptr(), name);  // borrowed
  return v ? nb::handle(v) : nb::none();
}

TensorView Fields::tensor(const char* name) {
  nb::handle h = get(name);
  if (h.is_none()) return {};
  auto t = nb::cast<nb::tuple>(h);
  if (t.size() != 7)
    throw Error(Error::Kind::InvalidArgument,
                std::string(op_) + ": " + name + " is not a tensor descriptor (7 fields)");
  std::vector<int64_t> shape, strides;
  for (nb::handle s : nb::cast<nb::tuple>(t[3])) shape.push_back(nb::cast<int64_t>(s));
  for (nb::handle s : nb::cast<nb::tuple>(t[4])) strides.push_back(nb::cast<int64_t>(s));
  TensorView::DLPackFields f;
  f.data = reinterpret_cast<void*>(nb::cast<uintptr_t>(t[0]));
  f.dtypeCode = nb::cast<int>(t[1]);
  f.dtypeBits = nb::cast<int>(t[2]);
  f.ndim = static_cast<int>(shape.size());
  f.shape = shape.data();
  f.strides = strides.data();
  f.deviceType = nb::cast<int>(t[5]);
  f.deviceId = nb::cast<int>(t[6]);
  try {
    return TensorView::fromDLPackFields(f, name);
  } catch (const Error& e) {  // the message names the argument; say whose it is
    throw Error(e.kind(), std::string(op_) + ": " + e.what());
  }
}

bool Fields::flag(const char* name, bool fallback) {
  nb::handle h = get(name);
  return h.is_none() ? fallback : nb::cast<bool>(h);
}

int64_t Fields::integer(const char* name, int64_t fallback) {
  nb::handle h = get(name);
  return h.is_none() ? fallback : nb::cast<int64_t>(h);
}

float Fields::real(const char* name, float fallback) {
  nb::handle h = get(name);
  return h.is_none() ? fallback : nb::cast<float>(h);
}

std::vector<std::string> Fields::memberNames(const char* spelled) {
  std::vector<std::string> names;
  std::string name;
  for (const char* c = spelled;; ++c) {
    if (*c == ',' || *c == '\0') {
      names.push_back(name);
      name.clear();
      if (!*c) return names;
    } else if (*c == '.') {
      name.clear();  // what came before is the struct
    } else if (*c != ' ') {
      name += *c;
    }
  }
}

void Fields::finish() const {
  std::string unknown;
  for (auto [key, value] : fields_) {
    std::string k = nb::str(key).c_str();
    if (!read_.count(k)) unknown += (unknown.empty() ? "" : ", ") + k;
  }
  if (!unknown.empty())
    throw Error(Error::Kind::InvalidArgument, std::string(op_) + ": unknown argument(s) " + unknown);
}

}  // namespace ssmjit::python
