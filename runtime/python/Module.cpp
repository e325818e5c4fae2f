// ssmjit._ssmjit: the C++ ops for Python. It knows no framework: tensors come as descriptors
// (Fields.h) and streams as integers, so the extension links libssmjit only, and ssmjit.torch
// (pure Python) turns torch tensors into descriptors and allocates outputs and workspaces.
// ssmjit::Error arrives as ssmjit.Error (a ValueError) with the same message and its kind.
#include <nanobind/nanobind.h>

#include "runtime/python/Fields.h"
#include "ssmjit/error.h"

namespace nb = nanobind;

namespace {

const char* kindName(ssmjit::Error::Kind k) {
  switch (k) {
    case ssmjit::Error::Kind::InvalidArgument: return "InvalidArgument";
    case ssmjit::Error::Kind::Compile: return "Compile";
    case ssmjit::Error::Kind::Cuda: return "Cuda";
    case ssmjit::Error::Kind::Unavailable: return "Unavailable";
    case ssmjit::Error::Kind::Internal: return "Internal";
  }
  return "Internal";
}

}  // namespace

NB_MODULE(_ssmjit, m) {
  // Lives as long as the interpreter (a static nb::object would be released after it ends).
  static PyObject* errorType = PyErr_NewExceptionWithDoc(
      "ssmjit.Error", "An error from ssmjit (kind: its Error::Kind).", PyExc_ValueError, nullptr);
  m.attr("Error") = nb::borrow(errorType);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ssmjit::Error& e) {
      nb::object exc = nb::borrow(errorType)(e.what());
      exc.attr("kind") = kindName(e.kind());
      PyErr_SetObject(errorType, exc.ptr());
    }
  });
  ssmjit::python::bindConv(m);
  ssmjit::python::bindScan(m);
  ssmjit::python::bindSsd(m);
  ssmjit::python::bindDecode(m);
}
