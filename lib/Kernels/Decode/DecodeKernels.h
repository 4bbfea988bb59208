// Host-side handles of the compiled decode kernels (defined in the .cu files), so the
// launcher logic in DecodeApi.cpp stays plain C++ over the CUDA runtime API.
#ifndef KILN_LIB_KERNELS_DECODE_DECODEKERNELS_H
#define KILN_LIB_KERNELS_DECODE_DECODEKERNELS_H

#include "kiln/Kernels/Status.h"

namespace kiln::decode {

struct KernelInfo {
  const void *fn = nullptr; // __global__ function, launched with one args struct
  int threads = 0;
  int smemBytes = 0; // dynamic shared memory
  int tileN = 0;     // keys per pipeline tile (split granularity)
};

// gqa_decode for `headDim` (64/128/256) and `mTiles` (1/2 m16 row tiles a block); an
// empty KernelInfo for anything else.
KernelInfo gqaKernelInfoBf16(int headDim, int mTiles);
KernelInfo gqaKernelInfoF16(int headDim, int mTiles);
// bf16 q/out over an FP8 e4m3 pool, and over an f16 pool.
KernelInfo gqaKernelInfoBf16Fp8(int headDim, int mTiles);
KernelInfo gqaKernelInfoBf16F16(int headDim, int mTiles);
// The FP8 pool's kernel with the integer widening (GqaDecodeBf16Fp8Fast.cu): head_dim 128,
// one row tile; an empty KernelInfo for anything else.
KernelInfo gqaKernelInfoBf16Fp8Fast(int headDim, int mTiles);
// Tuning variants 1 .. gqaNumVariants() - 1 of the bf16 kernel at head_dim 128, one row
// tile (GqaDecodeKernel.cuh, kGqaVariants); an empty KernelInfo for any other number.
int gqaNumVariants();
KernelInfo gqaKernelInfoBf16Variant(int variant);
// mla_decode configs: 0 = 16 rows x 32-key tiles (91.8 KiB smem); 1 = 64 rows x 64-key
// tiles, PV on 32-row warp tiles (226.5 KiB); 2 = as 1 with 16-row PV warp tiles.
KernelInfo mlaKernelInfo(int config);
// The same kernels over an FP8 latent pool: 0 = 16 rows x 32 keys, 1 = 64 rows x 32 keys.
KernelInfo mlaFp8KernelInfo(int config);
// mla_decode_sm90 (MlaDecodeSm90.cu): 64 rows x 64-key tiles, wgmma + TMA, launched with
// MlaSm90Args; its body is empty unless built for sm_90a (KILN_MLA_SM90A_BUILT).
KernelInfo mlaSm90KernelInfo();
// splitCombineKernel<T>(partO, partLse, out, numSplits, dv, sinks, heads), no dynamic
// smem; sinks may be null (MLA has none).
const void *splitCombineKernelBf16();
const void *splitCombineKernelF16();
// kv append kernels (args structs in DecodeArgs.h).
const void *kvAppendKernel();
const void *kvAppendFp8Kernel(); // bf16 K/V quantized into an FP8 e4m3 pool
const void *kvAppendF16Kernel(); // bf16 K/V rounded into an f16 pool (saturating)
const void *mlaKvAppendKernel();
const void *mlaKvAppendFp8Kernel(); // one warp a token (group amax by shuffles)
const void *mlaExpandKeysKernel();

} // namespace kiln::decode

#endif
