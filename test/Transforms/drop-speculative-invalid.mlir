// RUN: kiln-opt %s -kiln-drop-speculative-resources -verify-diagnostics

module {
  func.func @escapes() -> !kiln.cache<draft_kv> {
    %d = kiln.cache_resource layer 2 unit [2, 8, 128] of bf16 speculative_only : !kiln.cache<draft_kv>
    // expected-error @below {{cannot detach speculative-only layer 2 draft_kv from 'func.return', which has no cache slots (CachedOpInterface)}}
    return %d : !kiln.cache<draft_kv>
  }
}
