// Binding an op whose arguments arrive as keyword fields (Fields.h): `read` turns the fields into
// the op's argument struct (finishing them), the op runs on the caller's stream. The fields are
// named after the op in messages, for the op and its workspace size alike.
#pragma once
#include <nanobind/nanobind.h>

#include <string>

#include "runtime/python/Fields.h"
#include "ssmjit/ops.h"

namespace ssmjit::python {

// name(fields, stream): op(read(fields), stream).
template <class Args>
void bindOp(nanobind::module_& m, const char* name, Args (*read)(Fields&), void (*op)(const Args&, Stream)) {
  m.def(name, [name, read, op](nanobind::dict d, uintptr_t stream) {
    Fields f(d, name);
    op(read(f), streamOf(stream));
  });
}

// As above, and name_workspace_size(fields): the workspace bytes the call needs.
template <class Args>
void bindOp(nanobind::module_& m, const char* name, Args (*read)(Fields&), void (*op)(const Args&, Stream),
            int64_t (*workspaceSize)(const Args&)) {
  bindOp(m, name, read, op);
  m.def((std::string(name) + "_workspace_size").c_str(), [name, read, workspaceSize](nanobind::dict d) {
    Fields f(d, name);
    return workspaceSize(read(f));
  });
}

}  // namespace ssmjit::python
