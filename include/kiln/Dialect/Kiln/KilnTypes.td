//===- KilnTypes.td - kiln types ---------------------------*- tablegen -*-===//
#ifndef KILN_TYPES_TD
#define KILN_TYPES_TD

include "KilnBase.td"

def Kiln_CacheType : TypeDef<Kiln_Dialect, "Cache"> {
  let mnemonic = "cache";
  let summary = "handle to a cache resource of one kind";
  let description = [{
    `!kiln.cache<kv>`: the value a `kiln.cache_resource` defines and a cached op
    consumes in the slot of that kind. The kind in the type lets the verifier reject a
    resource in the wrong slot.
  }];
  let parameters = (ins EnumParameter<Kiln_ResourceKind>:$kind);
  let assemblyFormat = "`<` $kind `>`";
}

#endif // KILN_TYPES_TD
