// The sj dialect and its pointer type, shared by its ops (SJOps.td) and layouts (SJAttrs.td).
// Tablegen include paths are relative to compiler/.
#ifndef SSMJIT_SJ_DIALECT
#define SSMJIT_SJ_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributes.td"

def SJ_Dialect : Dialect {
  let name = "sj";
  let cppNamespace = "::ssmjit::sj";
  let summary = "ssmjit block programs over tiles";
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  // Folders (splat of a constant) produce attributes; arith.constant materialises them.
  let hasConstantMaterializer = 1;
}

class SJ_Type<string name, string typeMnemonic> : TypeDef<SJ_Dialect, name> {
  let mnemonic = typeMnemonic;
}

// A pointer to a tensor's storage. The element type is the storage dtype (f32, f16, bf16, i32,
// i64); loads widen floats to f32 and stores narrow from f32, so math is always fp32.
def SJ_PtrType : SJ_Type<"Ptr", "ptr"> {
  let summary = "pointer to tensor storage";
  let parameters = (ins "::mlir::Type":$elementType);
  let assemblyFormat = "`<` $elementType `>`";
}

#endif
