// Row and column, within a 16 x 16 bf16 tile, of the address each lane gives an
// ldmatrix x4 load (lane l feeds row l % 8 of matrix l / 8), for the fragments of
// mma.sync m16n8k16 (the Mamba SSD and the Gated DeltaNet chunked scans). Plain integer
// code: the CTA emulator runs it on the host as it is.
#ifndef KILN_LIB_KERNELS_COMMON_LDMATRIXLANES_CUH
#define KILN_LIB_KERNELS_COMMON_LDMATRIXLANES_CUH

namespace kiln::kernels {

// An A fragment of a row-major [m][k] tile.
__device__ __forceinline__ int aRow(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }
__device__ __forceinline__ int aCol(int lane) { return (lane >> 4) * 8; }
// B fragments of two n8 tiles from a [n][k] tile (plain load).
__device__ __forceinline__ int bnRow(int lane) { return (lane & 7) + (lane >> 4) * 8; }
__device__ __forceinline__ int bnCol(int lane) { return ((lane >> 3) & 1) * 8; }
// B fragments of two n8 tiles from a [k][n] tile (transposed load).
__device__ __forceinline__ int btRow(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }
__device__ __forceinline__ int btCol(int lane) { return (lane >> 4) * 8; }
// An A fragment from a [k][m] tile (transposed load: btRow/btCol with the two middle
// matrices swapped).
__device__ __forceinline__ int atRow(int lane) { return (lane & 7) + (lane >> 4) * 8; }
__device__ __forceinline__ int atCol(int lane) { return ((lane >> 3) & 1) * 8; }

} // namespace kiln::kernels

#endif
