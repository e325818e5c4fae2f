// The specialisation the embedding op compiles for a call, for drivers that name its kernel
// without launching it (compile checks, prewarm). Internal to the runtime; libssmjit.so exports it
// for the tool and the tests.
#pragma once
#include <string>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// Checked as the op checks (every tensor on args.ids' device, so fake addresses can stand in).
// Completed (meta values chosen).
Specialization embeddingSpecialization(const EmbeddingArgs& args, const std::string& arch);

}  // namespace ssmjit::detail
