// How a kernel's tiles are spread over threads (set by sj-assign-layouts, read by
// sj-vectorize-accesses and the CUDA emitter). One blocked parent layout a kernel (sj.parent on
// the function); every op's results carry one of these each (sj.layouts).
#ifndef SSMJIT_SJ_ATTRS
#define SSMJIT_SJ_ATTRS

include "dialect/SJDialect.td"

class SJ_Layout<string name, string attrMnemonic> : AttrDef<SJ_Dialect, name> {
  let mnemonic = attrMnemonic;
}

def SJ_BlockedAttr : SJ_Layout<"Blocked", "blocked"> {
  let summary = "the kernel's parent layout, that of its 2-D tiles";
  let description = [{
    Along each dim d (dim 1 fastest) a thread holds runs of `spt[d]` consecutive elements, a
    warp's `tpw[d]` lanes and the program's `wpc[d]` warps follow each other, and the pattern
    repeats over the tile's extent (an extent below the threads along d is replicated).
    Example: `#sj.blocked<spt = [1, 4], tpw = [4, 8], wpc = [4, 1]>`.
  }];
  let parameters = (ins ArrayRefParameter<"int64_t">:$spt, ArrayRefParameter<"int64_t">:$tpw,
                        ArrayRefParameter<"int64_t">:$wpc);
  let assemblyFormat = [{
    `<` `spt` `=` `[` $spt `]` `,` `tpw` `=` `[` $tpw `]` `,` `wpc` `=` `[` $wpc `]` `>`
  }];
  let genVerifyDecl = 1;
}

def SJ_SliceAttr : SJ_Layout<"Slice", "slice"> {
  let summary = "a 1-D tile: the parent layout with dim `dim` removed";
  let description = [{
    The tile runs along the parent's other dim: expand_dims at axis `dim` makes it a 2-D tile
    in the parent, and a reduction of a 2-D tile along axis `dim` gives one.
    Example: `#sj.slice<dim = 0, parent = #sj.blocked<...>>`.
  }];
  let parameters = (ins "unsigned":$dim, "BlockedAttr":$parent);
  let assemblyFormat = "`<` `dim` `=` $dim `,` `parent` `=` $parent `>`";
  let genVerifyDecl = 1;
}

def SJ_AnyAttr : SJ_Layout<"Any", "any"> {
  let summary = "a range, splat or constant tile, made in whatever layout each use needs";
}

def SJ_ScalarAttr : SJ_Layout<"Scalar", "scalar"> {
  let summary = "a scalar: every thread holds the one value";
}

#endif
