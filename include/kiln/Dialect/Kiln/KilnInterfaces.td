//===- KilnInterfaces.td - interfaces passes query ---------*- tablegen -*-===//
#ifndef KILN_INTERFACES_TD
#define KILN_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Kiln_CacheResourceInterface : OpInterface<"CacheResourceInterface"> {
  let cppNamespace = "::kiln";
  let description = [{
    Any op that defines a cache resource. Passes and embedders ask it for its kind,
    its layer, whether it exists only for speculative decoding, how it is allocated
    (per sequence slot or per token through KV pages), and its bytes under a runtime
    configuration; they never switch on op names.
  }];
  let methods = [
    InterfaceMethod<"Kind of the resource.", "::kiln::ResourceKind", "getResourceKind">,
    InterfaceMethod<"Decoder layer the resource belongs to.", "int64_t", "getLayerIndex">,
    InterfaceMethod<[{Moves the op to decoder layer `layer` (kiln-expand-layers, which
      copies a layer loop's body once a layer; default: the `layer` attribute).}],
      "void", "setLayerIndex", (ins "int64_t":$layer), [{}], [{
        $_op->setAttr("layer", ::mlir::Builder($_op->getContext()).getI64IntegerAttr(layer));
      }]>,
    InterfaceMethod<"True when the resource exists only for speculative decoding.",
      "bool", "isSpeculativeOnly">,
    InterfaceMethod<"Element type of the resource.", "::mlir::Type", "getResourceElementType">,
    InterfaceMethod<"Shape of one allocation unit (one slot or one token), per TP rank.",
      "::llvm::SmallVector<int64_t>", "getUnitShape",
      (ins "const ::kiln::RuntimeAttr &":$runtime)>,
    InterfaceMethod<"How it is allocated: per slot (states) or per token (KV pages).",
      "::kiln::AllocationUnit", "getAllocationUnit">,
    InterfaceMethod<"Pool category the planner puts it in.", "::kiln::PoolCategory",
      "getPoolCategory">,
    InterfaceMethod<[{Sliding window in tokens (0: none); bounds the tokens a
      per-token resource holds per sequence.}], "int64_t", "getWindowTokens">
  ];
}

def Kiln_CachedOpInterface : OpInterface<"CachedOpInterface"> {
  let cppNamespace = "::kiln";
  let description = [{
    An op that reads and writes cache resources through named slots. A slot may be
    empty: a speculative-only resource erased because speculation is off.
  }];
  let methods = [
    InterfaceMethod<"Decoder layer.", "int64_t", "getLayerIndex">,
    InterfaceMethod<[{Moves the op to decoder layer `layer` (kiln-expand-layers, which
      copies a layer loop's body once a layer; default: the `layer` attribute).}],
      "void", "setLayerIndex", (ins "int64_t":$layer), [{}], [{
        $_op->setAttr("layer", ::mlir::Builder($_op->getContext()).getI64IntegerAttr(layer));
      }]>,
    InterfaceMethod<"Which kernel family serves the op.", "::kiln::OpFamily", "getOpFamily">,
    InterfaceMethod<[{Whether the op's runtime call passes its layer index and cache
      offsets as per-layer arguments (`RuntimeArg::layer`, `RuntimeArg::cacheOffset`),
      so that one call in a layer loop serves every layer: convert-kiln-to-runtime-calls
      computes them from the loop's index; kiln-expand-layers{unsupported-only} copies
      out the loops holding an op that does not.}],
      "bool", "hasPerLayerRuntimeCall", (ins), [{}], [{ return false; }]>,
    InterfaceMethod<"The slots with their expected kind and current value (maybe null).",
      "::llvm::SmallVector<::kiln::CacheSlot>", "getCacheSlots">,
    InterfaceMethod<"Empties the slot holding `resource` (detaches the use).",
      "void", "detachResource", (ins "::mlir::Value":$resource)>,
    InterfaceMethod<"Draft-layer marker, if the op belongs to a draft layer.",
      "std::optional<::kiln::DraftKind>", "getDraftKind">,
    InterfaceMethod<[{The resources the op would need under another speculation setup
      `spec` (the planner's what-if hints, e.g. the other SSM recovery mode), as its
      model op would have asked kiln-insert-caches; empty (the default) when the op
      does not say.}],
      "::llvm::SmallVector<::kiln::ResourceRequest>", "getResourceRequestsUnder",
      (ins "::kiln::SpecAttr":$spec, "::kiln::RuntimeAttr":$runtime), [{}], [{
        return {};
      }]>,
    InterfaceMethod<[{What the op needs of a kernel under `runtime` (head dim, cache
      dtype, page size, heads, attached speculative resources): the kernel registry's
      query, so that kiln-select-kernels names no op.}],
      "::kiln::KernelShape", "getKernelShape", (ins "::kiln::RuntimeAttr":$runtime)>,
    InterfaceMethod<[{Records the kernels kiln-select-kernels chose (registry names) and,
      for attention-like families, the speculative decode mode (default: the
      `decode_kernel`, `prefill_kernel` and `spec_dec_mode` attributes the lowering
      reads).}],
      "void", "setChosenKernels",
      (ins "::llvm::StringRef":$decode, "::llvm::StringRef":$prefill,
           "std::optional<::kiln::SpecDecMode>":$mode), [{}], [{
        ::mlir::Builder builder($_op->getContext());
        $_op->setAttr("decode_kernel", builder.getStringAttr(decode));
        $_op->setAttr("prefill_kernel", builder.getStringAttr(prefill));
        if (mode)
          $_op->setAttr("spec_dec_mode",
                        ::kiln::SpecDecModeAttr::get($_op->getContext(), *mode));
      }]>
  ];
}

def Kiln_ModelOpInterface : OpInterface<"ModelOpInterface"> {
  let cppNamespace = "::kiln";
  let description = [{
    A model-level op that `kiln-insert-caches` turns into its cached form: it lists the
    resources it needs under a configuration and builds the cached op from them.
  }];
  let methods = [
    InterfaceMethod<"Decoder layer.", "int64_t", "getLayerIndex">,
    InterfaceMethod<[{Moves the op to decoder layer `layer` (kiln-expand-layers, which
      copies a layer loop's body once a layer; default: the `layer` attribute).}],
      "void", "setLayerIndex", (ins "int64_t":$layer), [{}], [{
        $_op->setAttr("layer", ::mlir::Builder($_op->getContext()).getI64IntegerAttr(layer));
      }]>,
    InterfaceMethod<[{Resources the op needs; speculative-only ones only when `spec`
      is set.}], "::llvm::SmallVector<::kiln::ResourceRequest>", "getResourceRequests",
      (ins "::kiln::SpecAttr":$spec, "::kiln::RuntimeAttr":$runtime)>,
    InterfaceMethod<[{Replaces the op with its cached form, consuming `resources`
      (same order as the requests; a null value leaves the slot empty).}],
      "::mlir::Operation *", "buildCachedForm",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::ValueRange":$resources)>,
    InterfaceMethod<[{Draft-layer marker, if the op belongs to a draft layer (default:
      the op's `draft` attribute).}],
      "std::optional<::kiln::DraftKind>", "getDraftKind", (ins), [{}], [{
        if (auto attr = $_op->template getAttrOfType<::kiln::DraftKindAttr>("draft"))
          return attr.getValue();
        return std::nullopt;
      }]>
  ];
}

def Kiln_RuntimeCallOpInterface : OpInterface<"RuntimeCallOpInterface"> {
  let cppNamespace = "::kiln";
  let description = [{
    An op that `kiln-lower-to-runtime` turns into one call of the Kiln runtime once it
    works on buffers (after bufferization): the op states the callee and its arguments
    (pointers of its buffers, sizes read from its buffers, constants), and the lowering
    builds them. An embedder's own op takes part by implementing it.
  }];
  let methods = [
    InterfaceMethod<[{The runtime function and its arguments after the context, for the
      buffer (memref) form of the op; failure (with a diagnostic) if the op cannot be
      called as it is.}], "::mlir::FailureOr<::kiln::RuntimeCall>", "getRuntimeCall">,
    InterfaceMethod<[{An upper bound of the kernel launches the call makes in a decode
      step (what a CUDA graph of the step captures): by default two, a kernel and a
      GEMM's split-K reduction or an attention's split combine.}],
      "uint64_t", "getMaxDecodeLaunches", (ins), [{}], [{ return 2; }]>
  ];
}

def Kiln_OverwritesInputsOpInterface : OpInterface<"OverwritesInputsOpInterface"> {
  let cppNamespace = "::kiln";
  let description = [{
    A destination-style op whose kernel reads every element of some inputs before it
    writes the same element of an output, in the same thread: that output may take the
    bytes of such an input whose last use is this op. `kiln-plan-activations` then
    places the output exactly over the input instead of beside it, so the op's inputs
    and outputs are not all live at once.
  }];
  let methods = [
    InterfaceMethod<[{True when the output written through `init` may be placed exactly
      over the buffer read through `input` (both operands of this op).}],
      "bool", "mayOverwriteInput", (ins "::mlir::OpOperand &":$init,
                                        "::mlir::OpOperand &":$input)>
  ];
}

#endif // KILN_INTERFACES_TD
