// CUDA kernels of the graph glue ops (see docs/kernels-graph.md). bf16 data moves as raw
// 16-bit patterns; every kernel has a 16-byte vector path (8 bf16 per access), taken
// when the sizes and pointers allow it, and a scalar fallback.
#include "GraphInternal.h"
#include "Pdl.cuh" // the kernels that precede a GEMM let it start early (SkinnyGemm.h)
#include "ProgrammaticLaunch.h" // the small kernels start during the previous one's tail
#include "Swiglu.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>

namespace kiln::graph {
namespace {

using kiln::kernels::launchChained;

constexpr int kVecElems = 8; // bf16 elements per 16-byte access

bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

int roundUpWarp(int64_t threads) {
  return static_cast<int>(std::max<int64_t>(32, (threads + 31) / 32 * 32));
}

// Blocks of a grid-stride launch: enough to fill any current GPU, capped.
unsigned gridFor(int64_t work, int threads) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((work + threads - 1) / threads, 8192)));
}

// Blocks of a block-per-row launch (the kernels loop over the rows beyond the grid).
unsigned rowGrid(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, 65535)); }

__device__ __forceinline__ float bf2f(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}
__device__ __forceinline__ uint16_t f2bf(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
// Round to bf16 and back: the value PyTorch stores between two bf16 ops.
__device__ __forceinline__ float roundBf16(float v) { return bf2f(f2bf(v)); }

__device__ __forceinline__ void unpack8(const uint4 &u, float (&f)[kVecElems]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  return static_cast<uint32_t>(f2bf(lo)) | (static_cast<uint32_t>(f2bf(hi)) << 16);
}
__device__ __forceinline__ uint4 pack8(const float (&f)[kVecElems]) {
  return make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
}

__device__ __forceinline__ uint4 load16(const uint16_t *p) {
  return *reinterpret_cast<const uint4 *>(p);
}

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block; `scratch` holds 33 floats. Safe to call repeatedly (it
// synchronizes before reusing scratch).
__device__ float blockSum(float v, float *scratch) {
  v = warpSum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < warps ? scratch[lane] : 0.0f;
    t = warpSum(t);
    if (lane == 0)
      scratch[32] = t;
  }
  __syncthreads();
  return scratch[32];
}

// ---- elementwise: add, swiglu ---------------------------------------------------------
struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct SwigluOp {
  __device__ float operator()(float gate, float up) const { return swigluOfBf16(gate, up); }
};

// No __restrict__: out may be a or b (each element is read before it is written, by the
// same thread).
template <class Op, bool Vec>
__global__ void binaryKernel(const uint16_t *a, const uint16_t *b, uint16_t *out, int64_t n) {
  kiln::kernels::pdlLaunchDependents();
  kiln::kernels::pdlWait();
  const Op op;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t scalarStart = 0;
  if (Vec) {
    const int64_t vectors = n / kVecElems;
    const uint4 *a4 = reinterpret_cast<const uint4 *>(a);
    const uint4 *b4 = reinterpret_cast<const uint4 *>(b);
    uint4 *o4 = reinterpret_cast<uint4 *>(out);
    for (int64_t v = first; v < vectors; v += stride) {
      float fa[kVecElems], fb[kVecElems];
      unpack8(a4[v], fa);
      unpack8(b4[v], fb);
#pragma unroll
      for (int e = 0; e < kVecElems; ++e)
        fa[e] = op(fa[e], fb[e]);
      o4[v] = pack8(fa);
    }
    scalarStart = vectors * kVecElems;
  }
  for (int64_t i = scalarStart + first; i < n; i += stride)
    out[i] = f2bf(op(bf2f(a[i]), bf2f(b[i])));
}

template <class Op>
cudaError_t launchBinary(const void *a, const void *b, void *out, int64_t n, cudaStream_t stream) {
  constexpr int threads = 256;
  const auto *pa = static_cast<const uint16_t *>(a);
  const auto *pb = static_cast<const uint16_t *>(b);
  auto *po = static_cast<uint16_t *>(out);
  if (aligned16(a) && aligned16(b) && aligned16(out))
    return launchChained<&binaryKernel<Op, true>>(
        gridFor(std::max<int64_t>(n / kVecElems, 1), threads), threads, 0, stream, pa, pb, po, n);
  return launchChained<&binaryKernel<Op, false>>(gridFor(n, threads), threads, 0, stream, pa, pb,
                                                 po, n);
}

// ---- sigmoid_gate ---------------------------------------------------------------------
// One block a row: the gate's dot product (fp32, the block's fixed reduction order,
// rounded to bf16 as nn.Linear's output), then HF's F.sigmoid(g) (fp32, rounded to bf16)
// times the value row in bf16.
__global__ void sigmoidGateKernel(const uint16_t *x, const uint16_t *w, const uint16_t *value,
                                  uint16_t *out, int64_t rows, int64_t dim, int64_t cols) {
  __shared__ float scratch[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const uint16_t *xr = x + r * dim;
    float partial = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
      partial += bf2f(xr[i]) * bf2f(w[i]);
    const float g = roundBf16(blockSum(partial, scratch));
    const float s = roundBf16(1.0f / (1.0f + expf(-g)));
    const uint16_t *vr = value + r * cols;
    uint16_t *dst = out + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      dst[c] = f2bf(bf2f(vr[c]) * s);
  }
}

// ---- gated_rms_norm, rms_norm_gate -----------------------------------------------------
// silu in fp32, as PyTorch's F.silu of an fp32 tensor.
__device__ __forceinline__ float siluF32(float g) { return g / (1.0f + expf(-g)); }

// The two orders of a gated RMSNorm over groups of a row, as policies of one kernel:
//  - GateThenNorm: Mamba2's MambaRMSNormGated (norm_before_gate=False): y = x * silu(gate)
//    in fp32 (it upcasts both), normed, weight * bf16(y * scale) rounded; weight [width].
//  - NormThenGate: Qwen3NextRMSNormGated: bf16(x * scale) (the norm returns the input's
//    dtype), times the bf16 weight (a bf16 product, rounded), times silu(gate) in fp32,
//    rounded; weight [group_size], shared by every group (one per value head dim).
// normed(): the value whose mean square is taken; out(): the element before the final
// rounding.
struct GateThenNorm {
  static constexpr bool kSharedWeight = false;
  __device__ __forceinline__ static float normed(float x, const uint16_t *g) {
    return x * siluF32(bf2f(*g));
  }
  __device__ __forceinline__ static float out(float v, float scale, float w, const uint16_t *g) {
    return w * roundBf16(v * scale);
  }
};
struct NormThenGate {
  static constexpr bool kSharedWeight = true;
  __device__ __forceinline__ static float normed(float x, const uint16_t *) { return x; }
  __device__ __forceinline__ static float out(float v, float scale, float w, const uint16_t *g) {
    return roundBf16(w * roundBf16(v * scale)) * siluF32(bf2f(*g));
  }
};

// One block a (row, group): the group's mean square in the block's fixed order, then
// each element through Order::out. The gate is read only where Order uses it.
template <class Order>
__global__ void gatedRmsNormKernel(const uint16_t *x, const uint16_t *gate,
                                   const uint16_t *__restrict__ weight, uint16_t *out, int64_t rows,
                                   int64_t width, int64_t gateStride, int64_t groupSize,
                                   float eps) {
  __shared__ float scratch[33];
  const int64_t groups = width / groupSize;
  for (int64_t item = blockIdx.x; item < rows * groups; item += gridDim.x) {
    const int64_t r = item / groups, first = (item % groups) * groupSize;
    const uint16_t *xr = x + r * width + first;
    const uint16_t *gr = gate + r * gateStride + first;
    const uint16_t *wr = Order::kSharedWeight ? weight : weight + first;
    float partial = 0.0f;
    for (int64_t i = threadIdx.x; i < groupSize; i += blockDim.x) {
      const float y = Order::normed(bf2f(xr[i]), gr + i);
      partial += y * y;
    }
    const float scale = rsqrtf(blockSum(partial, scratch) / static_cast<float>(groupSize) + eps);
    uint16_t *dst = out + r * width + first;
    for (int64_t i = threadIdx.x; i < groupSize; i += blockDim.x)
      dst[i] = f2bf(Order::out(Order::normed(bf2f(xr[i]), gr + i), scale, bf2f(wr[i]), gr + i));
  }
}

// ---- sigmoid_mul -----------------------------------------------------------------------
// torch's x * torch.sigmoid(gate) on bf16 tensors: the sigmoid in fp32 rounded to bf16
// (its own tensor), then the bf16 product rounded. x, out [rows, dim] dense, gate rows
// gateStride apart. Blocks cover a row's columns (x) and rows (y); Vec: 8 columns a
// thread. out may be x (each element is read before it is written, by one thread).
__device__ __forceinline__ float sigmoidMul(float x, float g) {
  return x * roundBf16(1.0f / (1.0f + expf(-g)));
}

template <bool Vec>
__global__ void sigmoidMulKernel(const uint16_t *x, const uint16_t *gate, uint16_t *out,
                                 int64_t rows, int64_t dim, int64_t gateStride) {
  const int64_t items = Vec ? dim / kVecElems : dim;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      if (Vec) {
        float fx[kVecElems], fg[kVecElems];
        unpack8(load16(x + r * dim + i * kVecElems), fx);
        unpack8(load16(gate + r * gateStride + i * kVecElems), fg);
#pragma unroll
        for (int e = 0; e < kVecElems; ++e)
          fx[e] = sigmoidMul(fx[e], fg[e]);
        *reinterpret_cast<uint4 *>(out + r * dim + i * kVecElems) = pack8(fx);
      } else {
        out[r * dim + i] = f2bf(sigmoidMul(bf2f(x[r * dim + i]), bf2f(gate[r * gateStride + i])));
      }
    }
}

// ---- activation ------------------------------------------------------------------------
// fp32 math, one rounding: PyTorch's bf16 relu then square (relu is exact) and its silu.
__device__ __forceinline__ float activationOf(float v, int kind) {
  return kind == 0 ? (v > 0.0f ? v * v : 0.0f) : v / (1.0f + expf(-v));
}

__global__ void activationKernel(const uint16_t *x, uint16_t *out, int64_t n, int kind) {
  kiln::kernels::pdlLaunchDependents();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = f2bf(activationOf(bf2f(x[i]), kind));
}

// ---- gather rows (embedding, gather_rows) ---------------------------------------------
template <bool Vec>
__global__ void gatherRowsKernel(const uint16_t *__restrict__ src,
                                 const int32_t *__restrict__ index, uint16_t *__restrict__ out,
                                 int64_t rows, int64_t dim, int64_t numSource, int64_t first) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t s = static_cast<int64_t>(index[r]) - first;
    const bool valid = s >= 0 && s < numSource;
    if (Vec) {
      const int64_t vectors = dim / kVecElems;
      const uint4 *from = reinterpret_cast<const uint4 *>(src + (valid ? s : 0) * dim);
      uint4 *to = reinterpret_cast<uint4 *>(out + r * dim);
      for (int64_t v = threadIdx.x; v < vectors; v += blockDim.x)
        to[v] = valid ? from[v] : make_uint4(0, 0, 0, 0);
    } else {
      const uint16_t *from = src + (valid ? s : 0) * dim;
      uint16_t *to = out + r * dim;
      for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
        to[j] = valid ? from[j] : uint16_t(0);
    }
  }
}

// ---- rms_norm ------------------------------------------------------------------------
// How a norm applies its weight to a normalized element (x * scale, scale = rsqrt(mean(x^2)
// + eps)); the caller rounds the result to bf16 once. The kernels take the functor by value:
//  - RoundThenScale: Llama's weight * (x * scale).to(bf16) (the norm returns its input's
//    dtype before the weight's product);
//  - OffsetWeight: (x * scale) * (offset + weight) all in fp32. offset 1 is Qwen3-Next's
//    zero-centered weight (Qwen3NextRMSNorm upcasts the weight and rounds only its output);
//    offset -0.0 (weight exactly) is gpt-oss's GptOssRMSNorm, weight * x in fp32.
struct RoundThenScale {
  __device__ __forceinline__ float operator()(float x, float scale, float w) const {
    return w * roundBf16(x * scale);
  }
};
struct OffsetWeight {
  float offset;
  __device__ __forceinline__ float operator()(float x, float scale, float w) const {
    return (x * scale) * (offset + w);
  }
};

// Where a norm kernel reads row r (the output is always dense [rows, dim]): row(r) for the
// scalar path, load(r, col) for the 16-byte paths.
// Dense rows of dim.
struct RowOfX {
  const uint16_t *x;
  int64_t dim;
  __device__ __forceinline__ const uint16_t *row(int64_t r) const { return x + r * dim; }
  __device__ __forceinline__ uint4 load(int64_t r, int col) const { return load16(row(r) + col); }
};
// Rows `stride` elements apart (a column slice of a wider tensor).
struct RowOfStridedX {
  const uint16_t *x;
  int64_t stride;
  __device__ __forceinline__ const uint16_t *row(int64_t r) const { return x + r * stride; }
  __device__ __forceinline__ uint4 load(int64_t r, int col) const { return load16(row(r) + col); }
};
// Row r = (token r / heads, head r % heads) of a [tokens, heads] grid of rows at element
// strides: per-head norms of q rows inside an interleaved projection.
struct RowOfHeadX {
  const uint16_t *x;
  int64_t heads, tokenStride, headStride;
  __device__ __forceinline__ const uint16_t *row(int64_t r) const {
    const int64_t t = r / heads;
    return x + t * tokenStride + (r - t * heads) * headStride;
  }
  __device__ __forceinline__ uint4 load(int64_t r, int col) const { return load16(row(r) + col); }
};
// The residual sum a + b, which the load also stores (the residual stream) with the add
// kernel's rounding, so the fused add + norm gives the bits of the add kernel followed by
// the norm kernel. 16-byte paths only.
struct RowOfSum {
  const uint16_t *a, *b; // may alias sum: each chunk is read before it is written, by one thread
  uint16_t *sum;
  int64_t dim;
  __device__ __forceinline__ uint4 load(int64_t r, int col) const {
    const int64_t offset = r * dim + col;
    float fa[kVecElems], fb[kVecElems];
    unpack8(load16(a + offset), fa);
    unpack8(load16(b + offset), fb);
    const AddOp add;
#pragma unroll
    for (int e = 0; e < kVecElems; ++e)
      fa[e] = add(fa[e], fb[e]);
    const uint4 packed = pack8(fa);
    *reinterpret_cast<uint4 *>(sum + offset) = packed;
    return packed;
  }
};

// Applies `norm` to 8 elements and their weights.
template <class Norm>
__device__ __forceinline__ uint4 normChunk(const Norm &norm, const uint4 &x, const uint4 &weight,
                                           float scale) {
  float f[kVecElems], w[kVecElems];
  unpack8(x, f);
  unpack8(weight, w);
#pragma unroll
  for (int e = 0; e < kVecElems; ++e)
    f[e] = norm(f[e], scale, w[e]);
  return pack8(f);
}

// Adds the squares of 8 elements to a thread's running sum, one after the other.
__device__ __forceinline__ void addSquares(const uint4 &x, float &sum) {
  float f[kVecElems];
  unpack8(x, f);
#pragma unroll
  for (int e = 0; e < kVecElems; ++e)
    sum += f[e] * f[e];
}

// One block per row; out may be x (a row is read completely before the block-wide sum
// and written after it, each element by the thread that read it). Vector path: each
// thread keeps its kCache 16-byte chunks of the row in registers between the statistics
// and the output pass.
template <int kCache, class Norm, class Source>
__global__ void rmsNormVecKernel(Norm norm, Source src, const uint16_t *__restrict__ weight,
                                 uint16_t *out, int64_t rows, int dim, float eps) {
  __shared__ float scratch[33];
  kiln::kernels::pdlLaunchDependents();
  kiln::kernels::pdlWait();
  const int vectors = dim / kVecElems;
  const uint4 *w4 = reinterpret_cast<const uint4 *>(weight);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    uint4 *o4 = reinterpret_cast<uint4 *>(out + r * dim);
    uint4 cache[kCache];
    float sumSq = 0.0f;
#pragma unroll
    for (int c = 0; c < kCache; ++c) {
      const int v = threadIdx.x + c * blockDim.x;
      if (v < vectors) {
        cache[c] = src.load(r, v * kVecElems);
        addSquares(cache[c], sumSq);
      }
    }
    const float scale = rsqrtf(blockSum(sumSq, scratch) / static_cast<float>(dim) + eps);
#pragma unroll
    for (int c = 0; c < kCache; ++c) {
      const int v = threadIdx.x + c * blockDim.x;
      if (v < vectors)
        o4[v] = normChunk(norm, cache[c], w4[v], scale);
    }
  }
}

// Short rows (dim <= 256, 16-byte path): one warp per row, several rows per block, each
// lane holding one 16-byte chunk; no block-wide synchronization. (One block per row
// would leave most of a block idle and make block scheduling the bottleneck for
// Qwen3's per-head q/k norms: tokens x heads rows of head_dim.)
constexpr int kRmsWarpsPerBlock = 8;
template <class Norm, class Source>
__global__ void rmsNormWarpKernel(Norm norm, Source src, const uint16_t *__restrict__ weight,
                                  uint16_t *out, int64_t rows, int dim, float eps) {
  kiln::kernels::pdlLaunchDependents();
  kiln::kernels::pdlWait();
  const int vectors = dim / kVecElems;
  const int lane = threadIdx.x & 31;
  const uint4 *w4 = reinterpret_cast<const uint4 *>(weight);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRmsWarpsPerBlock + (threadIdx.x >> 5);
       r < rows; r += static_cast<int64_t>(gridDim.x) * kRmsWarpsPerBlock) {
    uint4 *o4 = reinterpret_cast<uint4 *>(out + r * dim);
    uint4 chunk;
    float sumSq = 0.0f;
    if (lane < vectors) {
      chunk = src.load(r, lane * kVecElems);
      addSquares(chunk, sumSq);
    }
    const float scale = rsqrtf(warpSum(sumSq) / static_cast<float>(dim) + eps);
    if (lane < vectors)
      o4[lane] = normChunk(norm, chunk, w4[lane], scale);
  }
}

// Any dim, stride and alignment: reads the row twice (the second time from cache).
template <class Norm, class Rows>
__global__ void rmsNormScalarKernel(Norm norm, Rows src, const uint16_t *__restrict__ weight,
                                    uint16_t *out, int64_t rows, int64_t dim, float eps) {
  __shared__ float scratch[33];
  kiln::kernels::pdlLaunchDependents();
  kiln::kernels::pdlWait();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const uint16_t *row = src.row(r);
    float sumSq = 0.0f;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const float v = bf2f(row[j]);
      sumSq += v * v;
    }
    const float scale = rsqrtf(blockSum(sumSq, scratch) / static_cast<float>(dim) + eps);
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
      out[r * dim + j] = f2bf(norm(bf2f(row[j]), scale, bf2f(weight[j])));
  }
}

// ---- rope ----------------------------------------------------------------------------
// A token's cos/sin table for every frequency of a head: cos in [0, half), sin in
// [half, 2 half); rounded to bf16 as transformers' cos/sin tensors are, unless `exact`.
// Callers sync before (the previous table is no longer read) and after.
__device__ __forceinline__ void fillCosSin(float *cosSin, float position, const RopeTable &table,
                                           int half, float attentionFactor, bool exact) {
  for (int f = threadIdx.x; f < half; f += blockDim.x) {
    const float angle = position * table.invFreq[f];
    const float c = cosf(angle) * attentionFactor, s = sinf(angle) * attentionFactor;
    cosSin[f] = exact ? c : roundBf16(c);
    cosSin[half + f] = exact ? s : roundBf16(s);
  }
}

// rotate_half on one pair (x1 = x[f], x2 = x[f + half]) with bf16 products.
__device__ __forceinline__ void rotateHalfPair(float x1, float x2, float c, float s, float &o1,
                                               float &o2) {
  o1 = roundBf16(x1 * c) + roundBf16(-x2 * s);
  o2 = roundBf16(x2 * c) + roundBf16(x1 * s);
}

// The heads of one token of one tensor, rotated with the token's table: each work item
// is a pair of chunks (x[f..], x[f + half..]) that only it reads and writes, so out may
// be x. Partial RoPE (rotaryDim < headDim, transformers' partial_rotary_factor): the
// first rotaryDim elements of a head are rotated over rotaryDim / 2 frequencies, the rest
// copied (nothing to do in place).
template <bool Vec>
__device__ __forceinline__ void rotateTokenHeads(const uint16_t *x, uint16_t *out,
                                                 int64_t tokenBase, int heads, int headDim,
                                                 int rotaryDim, const float *cosSin) {
  const int half = rotaryDim / 2;
  const int pass = x == out ? 0 : headDim - rotaryDim;
  if (Vec) {
    const int chunks = half / kVecElems;
    for (int item = threadIdx.x; item < heads * chunks; item += blockDim.x) {
      const int h = item / chunks, chunk = item - h * chunks;
      const int64_t first = tokenBase + static_cast<int64_t>(h) * headDim + chunk * kVecElems;
      float x1[kVecElems], x2[kVecElems], o1[kVecElems], o2[kVecElems];
      unpack8(*reinterpret_cast<const uint4 *>(x + first), x1);
      unpack8(*reinterpret_cast<const uint4 *>(x + first + half), x2);
#pragma unroll
      for (int e = 0; e < kVecElems; ++e) {
        rotateHalfPair(x1[e], x2[e], cosSin[chunk * kVecElems + e],
                       cosSin[half + chunk * kVecElems + e], o1[e], o2[e]);
      }
      *reinterpret_cast<uint4 *>(out + first) = pack8(o1);
      *reinterpret_cast<uint4 *>(out + first + half) = pack8(o2);
    }
    const int passChunks = pass / kVecElems;
    for (int item = threadIdx.x; item < heads * passChunks; item += blockDim.x) {
      const int h = item / passChunks, chunk = item - h * passChunks;
      const int64_t at =
          tokenBase + static_cast<int64_t>(h) * headDim + rotaryDim + chunk * kVecElems;
      *reinterpret_cast<uint4 *>(out + at) = load16(x + at);
    }
  } else {
    for (int item = threadIdx.x; item < heads * half; item += blockDim.x) {
      const int h = item / half, f = item - h * half;
      const int64_t first = tokenBase + static_cast<int64_t>(h) * headDim + f;
      const float x1 = bf2f(x[first]), x2 = bf2f(x[first + half]);
      float o1, o2;
      rotateHalfPair(x1, x2, cosSin[f], cosSin[half + f], o1, o2);
      out[first] = f2bf(o1);
      out[first + half] = f2bf(o2);
    }
    for (int item = threadIdx.x; item < heads * pass; item += blockDim.x) {
      const int h = item / pass, j = item - h * pass;
      const int64_t at = tokenBase + static_cast<int64_t>(h) * headDim + rotaryDim + j;
      out[at] = x[at];
    }
  }
}

// One block per token: the block computes the token's bf16 cos/sin table (accurate
// cosf/sinf: angles reach 1e5 radians) into shared memory once, then rotates every head
// of x and, for a pair (kiln_rope_pair_bf16: a layer's q and k), of x1 (heads1 > 0) with
// the same table. The two tensors' ranges do not overlap (the launcher checks it).
template <bool Vec>
__global__ void ropeKernel(const uint16_t *x, uint16_t *out, int heads, const uint16_t *x1,
                           uint16_t *out1, int heads1, const int32_t *__restrict__ positions,
                           int64_t tokens, int headDim, int rotaryDim, float attentionFactor,
                           RopeTable table) {
  kiln::kernels::pdlLaunchDependents();
  kiln::kernels::pdlWait();
  __shared__ float cosSin[KILN_ROPE_MAX_HEAD_DIM];
  const int half = rotaryDim / 2;
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const float position = static_cast<float>(positions[t]);
    __syncthreads(); // the previous token's table is no longer read
    fillCosSin(cosSin, position, table, half, attentionFactor, /*exact=*/false);
    __syncthreads();
    rotateTokenHeads<Vec>(x, out, t * heads * headDim, heads, headDim, rotaryDim, cosSin);
    if (heads1 > 0)
      rotateTokenHeads<Vec>(x1, out1, t * heads1 * headDim, heads1, headDim, rotaryDim, cosSin);
  }
}

// ---- rope over strided rows (MLA) ------------------------------------------------------
// One block per token, as ropeKernel; rows (token, head) sit at arbitrary element strides,
// the first `pass` elements of a row are copied, the next headDim rotated in `Style`
// (KILN_ROPE_STYLE_*). out must not overlap x (the paired styles move elements).
template <int Style>
__global__ void ropeRowsKernel(const uint16_t *x, int64_t xToken, int64_t xHead, uint16_t *out,
                               int64_t outToken, int64_t outHead,
                               const int32_t *__restrict__ positions, int64_t tokens, int heads,
                               int headDim, int pass, float attentionFactor, RopeTable table) {
  kiln::kernels::pdlLaunchDependents();
  kiln::kernels::pdlWait();
  __shared__ float cosSin[KILN_ROPE_MAX_HEAD_DIM];
  const int half = headDim / 2;
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const float position = static_cast<float>(positions[t]);
    __syncthreads();
    // DeepSeek-V2's complex product keeps cos/sin in fp32.
    fillCosSin(cosSin, position, table, half, attentionFactor,
               /*exact=*/Style == KILN_ROPE_STYLE_COMPLEX_PAIRS);
    __syncthreads();
    for (int item = threadIdx.x; item < heads * pass; item += blockDim.x) {
      const int h = item / pass, j = item - h * pass;
      out[t * outToken + h * outHead + j] = x[t * xToken + h * xHead + j];
    }
    for (int item = threadIdx.x; item < heads * half; item += blockDim.x) {
      const int h = item / half, f = item - h * half;
      const uint16_t *src = x + t * xToken + h * xHead + pass;
      uint16_t *dst = out + t * outToken + h * outHead + pass;
      const float c = cosSin[f], s = cosSin[half + f];
      if (Style == KILN_ROPE_STYLE_COMPLEX_PAIRS) {
        const float a = bf2f(src[2 * f]), b = bf2f(src[2 * f + 1]);
        dst[2 * f] = f2bf(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
        dst[2 * f + 1] = f2bf(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
      } else {
        const bool moved = Style == KILN_ROPE_STYLE_DEINTERLEAVE;
        const float x1 = bf2f(src[moved ? 2 * f : f]);
        const float x2 = bf2f(src[moved ? 2 * f + 1 : f + half]);
        float o1, o2;
        rotateHalfPair(x1, x2, c, s, o1, o2);
        dst[f] = f2bf(o1);
        dst[f + half] = f2bf(o2);
      }
    }
  }
}

// ---- argmax --------------------------------------------------------------------------
// A key whose unsigned order is torch.argmax's order: value first (NaN above +inf,
// -0 == +0), then the smaller index.
__device__ __forceinline__ unsigned long long argmaxKey(uint16_t bits, uint32_t index) {
  uint32_t order;
  if ((bits & 0x7fffu) > 0x7f80u)
    order = 0x10000u; // NaN
  else if (bits & 0x8000u)
    order = 0x8000u - (bits & 0x7fffu); // negative (-0 lands on 0x8000, like +0)
  else
    order = 0x8000u + bits;
  return (static_cast<unsigned long long>(order) << 32) | (0xffffffffu - index);
}

template <bool Vec>
__global__ void argmaxKernel(const uint16_t *__restrict__ logits, int32_t *__restrict__ out,
                             int64_t rows, int64_t cols) {
  kiln::kernels::pdlLaunchDependents();
  kiln::kernels::pdlWait();
  __shared__ unsigned long long scratch[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const uint16_t *row = logits + r * cols;
    unsigned long long best = 0; // below every real key
    if (Vec) {
      // kUnroll loads in flight per thread before any is consumed: with few rows (one
      // block each) a single outstanding load per thread would cap the bandwidth.
      constexpr int kUnroll = 4;
      const int64_t vectors = cols / kVecElems;
      const uint4 *row4 = reinterpret_cast<const uint4 *>(row);
      for (int64_t v0 = threadIdx.x; v0 < vectors; v0 += kUnroll * blockDim.x) {
        uint4 u[kUnroll];
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
          const int64_t v = v0 + j * blockDim.x;
          if (v < vectors)
            u[j] = row4[v];
        }
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
          if (v0 + j * blockDim.x >= vectors)
            break;
          const uint32_t w[4] = {u[j].x, u[j].y, u[j].z, u[j].w};
          const uint32_t base = static_cast<uint32_t>((v0 + j * blockDim.x) * kVecElems);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            best = max(best, argmaxKey(static_cast<uint16_t>(w[i] & 0xffffu), base + 2 * i));
            best = max(best, argmaxKey(static_cast<uint16_t>(w[i] >> 16), base + 2 * i + 1));
          }
        }
      }
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        best = max(best, argmaxKey(row[c], static_cast<uint32_t>(c)));
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
      best = max(best, __shfl_xor_sync(0xffffffffu, best, offset));
    __syncthreads(); // scratch of the previous row is consumed
    if (lane == 0)
      scratch[warp] = best;
    __syncthreads();
    if (warp == 0) {
      unsigned long long total = lane < warps ? scratch[lane] : 0;
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1)
        total = max(total, __shfl_xor_sync(0xffffffffu, total, offset));
      if (lane == 0)
        out[r] = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(total));
    }
  }
}


// ---- MoE routing, grouping and combine --------------------------------------------------
// The three expert GEMMs' entry `i` (gate and up read the tile's input rows, down the
// activation written over the gate rows). rowsIn/rowsOut: the first row of the entry in
// the input and output row spaces.
__device__ __forceinline__ void writeMoeEntry(const MoeLayout &l, int64_t i, int64_t e,
                                              const uint16_t *input, int64_t row) {
  const int64_t expertElems = l.inter * l.hidden, n = l.entries;
  uint16_t *gateRow = l.gateRows + row * l.inter;
  l.wPtrs[i] = l.gate ? l.gate + e * expertElems : nullptr; // plain experts: no gate GEMM
  l.xPtrs[i] = input;
  l.outPtrs[i] = gateRow;
  l.wPtrs[n + i] = l.up + e * expertElems;
  l.xPtrs[n + i] = input;
  l.outPtrs[n + i] = l.upRows + row * l.inter;
  l.wPtrs[2 * n + i] = l.down + e * expertElems;
  l.xPtrs[2 * n + i] = gateRow; // the activation, written over the gate rows
  l.outPtrs[2 * n + i] = l.yRows + row * l.hidden;
}

__device__ __forceinline__ float logitValue(const uint16_t *row, int e) { return bf2f(row[e]); }
__device__ __forceinline__ float logitValue(const float *row, int e) { return row[e]; }

// A float's bits reordered so that unsigned comparison orders the values (negatives too).
__device__ __forceinline__ uint32_t orderedBits(float v) {
  const uint32_t bits = __float_as_uint(v);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// The block's largest (value, lowest index) among the experts `usable` admits; key 0 is
// none. Every thread gets the winner's index.
template <typename Usable>
__device__ int blockArgmax(const float *values, int experts, Usable usable,
                           unsigned long long *best) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  unsigned long long key = 0;
  for (int e = threadIdx.x; e < experts; e += blockDim.x)
    if (usable(e))
      key = max(key, (static_cast<unsigned long long>(orderedBits(values[e])) << 32) |
                         (0xffffffffu - static_cast<uint32_t>(e)));
  for (int offset = 16; offset > 0; offset >>= 1)
    key = max(key, __shfl_xor_sync(0xffffffffu, key, offset));
  __syncthreads(); // the previous call's winners are read
  if (lane == 0)
    best[warp] = key;
  __syncthreads();
  unsigned long long top = best[0];
  for (int w = 1; w < warps; ++w)
    top = max(top, best[w]);
  return static_cast<int>(0xffffffffu - static_cast<uint32_t>(top & 0xffffffffu));
}

// Softmax in fp32 over the row's experts, in place.
__device__ void softmaxInPlace(float *scores, int experts, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  float localMax = -INFINITY;
  for (int e = threadIdx.x; e < experts; e += blockDim.x)
    localMax = fmaxf(localMax, scores[e]);
  for (int offset = 16; offset > 0; offset >>= 1)
    localMax = fmaxf(localMax, __shfl_xor_sync(0xffffffffu, localMax, offset));
  __syncthreads();
  if (lane == 0)
    scratch[warp] = localMax;
  __syncthreads();
  float rowMax = scratch[0];
  for (int w = 1; w < warps; ++w)
    rowMax = fmaxf(rowMax, scratch[w]);
  float localSum = 0.0f;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    scores[e] = expf(scores[e] - rowMax);
    localSum += scores[e];
  }
  const float sum = blockSum(localSum, scratch);
  for (int e = threadIdx.x; e < experts; e += blockDim.x)
    scores[e] = scores[e] / sum;
  __syncthreads();
}

// DeepSeek's group-limited routing: a group's key is the sum of its two largest choice
// keys; outside the top_groups best groups every key becomes -FLT_MAX (below any real
// key, above the -inf that marks a chosen expert).
__device__ void maskUnchosenGroups(float *choice, const MoeRouting &r, float *groupKey,
                                   bool *groupKept, unsigned long long *best) {
  const int size = r.experts / r.groups;
  for (int g = threadIdx.x; g < r.groups; g += blockDim.x) {
    float first = -INFINITY, second = -INFINITY;
    for (int e = g * size; e < (g + 1) * size; ++e) {
      const float v = choice[e];
      if (v > first) {
        second = first;
        first = v;
      } else if (v > second) {
        second = v;
      }
    }
    groupKey[g] = (r.flags & KILN_MOE_GROUP_MAX) ? first : first + second;
    groupKept[g] = false;
  }
  __syncthreads();
  for (int j = 0; j < r.topGroups; ++j) {
    const int g = blockArgmax(groupKey, r.groups, [&](int i) { return !groupKept[i]; }, best);
    __syncthreads(); // every thread read groupKept before it changes
    if (threadIdx.x == 0)
      groupKept[g] = true;
    __syncthreads();
  }
  for (int e = threadIdx.x; e < r.experts; e += blockDim.x)
    if (!groupKept[e / size])
      choice[e] = -FLT_MAX;
  __syncthreads();
}

// One block per token (Moe.h's routing): scores, choice keys, the groups' mask, top-k by
// repeated block argmax (ties: the lower index, like torch.topk), the chosen weights
// normalized, scaled and rounded as the flags say, then sorted by expert id (the
// combine's order). Pairs mode: each pair is its own GEMM entry and row.
template <typename Logit>
__global__ void moeRouteKernel(const Logit *__restrict__ logits, MoeLayout layout,
                               int64_t tokens, MoeRouting r, bool pairEntries) {
  extern __shared__ float shared[]; // scores [experts], choice keys [experts]
  float *scores = shared, *choice = shared + r.experts;
  __shared__ float scratch[33];
  __shared__ unsigned long long best[32];
  __shared__ float groupKey[KILN_MOE_MAX_EXPERTS / 2];
  __shared__ bool groupKept[KILN_MOE_MAX_EXPERTS / 2];
  __shared__ int chosen[KILN_MOE_MAX_TOP_K];
  __shared__ float chosenWeight[KILN_MOE_MAX_TOP_K];
  const int experts = r.experts, topK = r.topK;
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const Logit *row = logits + t * experts;
    for (int e = threadIdx.x; e < experts; e += blockDim.x) {
      const float v = logitValue(row, e);
      scores[e] = (r.flags & kMoeSigmoid) ? 1.0f / (1.0f + expf(-v)) : v;
    }
    __syncthreads();
    if (!(r.flags & kMoeSigmoid))
      softmaxInPlace(scores, experts, scratch);
    for (int e = threadIdx.x; e < experts; e += blockDim.x)
      choice[e] = r.scoreBias ? scores[e] + r.scoreBias[e] : scores[e];
    __syncthreads();
    if (r.groups > 1)
      maskUnchosenGroups(choice, r, groupKey, groupKept, best);
    for (int j = 0; j < topK; ++j) {
      // A chosen expert's key becomes -inf (never a real key: masked keys are -FLT_MAX).
      const int e = blockArgmax(choice, experts, [&](int i) { return choice[i] != -INFINITY; },
                                best);
      __syncthreads(); // every thread read choice before it changes
      if (threadIdx.x == 0) {
        chosen[j] = e;
        chosenWeight[j] = scores[e];
        choice[e] = -INFINITY;
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      if (r.flags & kMoeNormalizeTopK) {
        float total = 0.0f;
        for (int j = 0; j < topK; ++j)
          total += chosenWeight[j];
        for (int j = 0; j < topK; ++j)
          chosenWeight[j] /= total;
      }
      if (r.scale != 1.0f)
        for (int j = 0; j < topK; ++j)
          chosenWeight[j] *= r.scale;
      if (r.flags & kMoeRoundWeights)
        for (int j = 0; j < topK; ++j)
          chosenWeight[j] = roundBf16(chosenWeight[j]);
      for (int j = 1; j < topK; ++j) // insertion sort by expert id
        for (int i = j; i > 0 && chosen[i - 1] > chosen[i]; --i) {
          const int e = chosen[i];
          chosen[i] = chosen[i - 1];
          chosen[i - 1] = e;
          const float w = chosenWeight[i];
          chosenWeight[i] = chosenWeight[i - 1];
          chosenWeight[i - 1] = w;
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < topK; j += blockDim.x) {
      const int64_t pair = t * topK + j;
      layout.ids[pair] = chosen[j];
      layout.weights[pair] = chosenWeight[j];
      if (pairEntries) {
        layout.slots[pair] = static_cast<int32_t>(pair);
        writeMoeEntry(layout, pair, chosen[j], layout.x + t * layout.hidden, pair);
      }
    }
    __syncthreads();
  }
}

// The exclusive prefix sum of one value a thread over the block (blockDim.x a multiple of
// 32, at most 1024), and the block's total in *total. Every thread of the block calls it.
__device__ int blockExclusiveScan(int value, int *total) {
  __shared__ int warpTotals[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  int inclusive = value;
  for (int d = 1; d < 32; d *= 2) {
    const int up = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d)
      inclusive += up;
  }
  __syncthreads(); // warpTotals may still be read by a previous call
  if (lane == 31)
    warpTotals[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int sum = lane < warps ? warpTotals[lane] : 0;
    for (int d = 1; d < 32; d *= 2) {
      const int up = __shfl_up_sync(0xffffffffu, sum, d);
      if (lane >= d)
        sum += up;
    }
    if (lane < warps)
      warpTotals[lane] = sum; // inclusive over the warps
  }
  __syncthreads();
  *total = warpTotals[warps - 1];
  return inclusive - value + (warp > 0 ? warpTotals[warp - 1] : 0);
}

// The own grouped GEMM's token tiles: each expert's rows in the fewest tiles of at most
// kGroupedGemmMaxTileTokens, of equal size (the last may be smaller), experts in order;
// a thread an expert (experts <= blockDim.x), placed by a prefix sum of the tile counts.
// A decode step's few pairs over many experts made the serial loop the plan's cost.
__device__ void writeGemmTiles(const MoeLayout &layout, const int *counts, const int *offsets,
                               int experts) {
  const int e = threadIdx.x;
  const int rows = e < experts ? counts[e] : 0;
  const int parts = (rows + kGroupedGemmMaxTileTokens - 1) / kGroupedGemmMaxTileTokens;
  int used = 0;
  const int first = blockExclusiveScan(parts, &used);
  if (parts > 0) {
    const int each = (rows + parts - 1) / parts;
    for (int part = 0; part < parts; ++part)
      layout.gemmTiles[first + part] = {e, offsets[e] + part * each,
                                        min(each, rows - part * each)};
  }
  if (threadIdx.x == 0)
    *layout.gemmTileCount = used;
}

// The plan kernel's shared memory: counts [E], offsets [E + 1], tile bases [E + 1], and
// per chunk of the pairs its next row per expert [chunks][E], within the default 48 KiB.
constexpr int kMoePlanSharedInts = 48 * 1024 / 4 - 32; // blockExclusiveScan's static 32
constexpr int kMoePlanMaxChunks = 32; // one warp of the 1024-thread block a chunk
inline int moePlanChunks(int experts) {
  return std::max(1, std::min(kMoePlanMaxChunks, (kMoePlanSharedInts - 3 * experts - 2) / experts));
}

// Each pair's sorted row (layout.slots), stable in pair order: chunk w of the pairs is
// warp w's; chunkRows[w][e] starts at the first row of expert e that chunk w owns (its
// offset plus the pairs of e in the chunks before), and the warp walks its chunk 32 pairs
// at a time, ranking the lanes that share an expert (match_any) and advancing the
// expert's row past them.
__device__ void rankPairs(const MoeLayout &layout, int64_t pairs, int experts, int topK,
                          int chunks, int *chunkRows) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t per = (pairs + chunks - 1) / chunks;
  if (warp >= chunks)
    return;
  const int64_t end = std::min<int64_t>(pairs, (warp + 1) * per);
  int *rows = chunkRows + warp * experts;
  for (int64_t base = warp * per; base < end; base += 32) {
    const int64_t p = base + lane;
    const int e = p < end ? layout.ids[p] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    const int before = __popc(same & ((1u << lane) - 1u));
    if (e >= 0) {
      const int slot = rows[e] + before;
      layout.slots[p] = slot;
      if (layout.rowTokens)
        layout.rowTokens[slot] = static_cast<int32_t>(p / topK);
    }
    __syncwarp();
    if (e >= 0 && lane == 31 - __clz(same)) // the last lane of its expert advances it
      rows[e] += __popc(same);
    __syncwarp();
  }
}

// Grouped mode, one block of 1024 threads: the pairs per expert (per chunk of the pairs
// first), each expert's rows padded to a multiple of M (padded offsets, table[0..E]) and
// its tiles (tile bases, table[E+1..2E+1]), the own grouped GEMM's token tiles or the
// GEMM entries of every tile (entries beyond the last tile repeat it: identical writes of
// identical values), and each pair's sorted row.
__global__ void moePlanKernel(MoeLayout layout, int64_t pairs, int experts, int topK,
                              int tileRows, int chunks) {
  extern __shared__ int plan[];
  int *counts = plan, *offsets = plan + experts, *bases = offsets + experts + 1;
  int *chunkRows = bases + experts + 1; // [chunks][experts]
  const int64_t per = (pairs + chunks - 1) / chunks;
  for (int i = threadIdx.x; i < chunks * experts; i += blockDim.x)
    chunkRows[i] = 0;
  __syncthreads();
  if (const int warp = threadIdx.x >> 5; warp < chunks) {
    const int64_t end = std::min<int64_t>(pairs, (warp + 1) * per);
    for (int64_t p = warp * per + (threadIdx.x & 31); p < end; p += 32)
      atomicAdd(&chunkRows[warp * experts + layout.ids[p]], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    int count = 0;
    for (int w = 0; w < chunks; ++w)
      count += chunkRows[w * experts + e];
    counts[e] = count;
  }
  __syncthreads();
  { // bases and offsets: prefix sums of the tiles and padded rows, a thread an expert
    const int e = threadIdx.x;
    const int tiles = e < experts ? (counts[e] + tileRows - 1) / tileRows : 0;
    int total = 0;
    const int base = blockExclusiveScan(tiles, &total);
    if (e < experts) {
      bases[e] = base;
      offsets[e] = base * tileRows;
    }
    if (e == 0) {
      bases[experts] = total;
      offsets[experts] = total * tileRows;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) { // chunk counts -> first rows
    int row = offsets[e];
    for (int w = 0; w < chunks; ++w) {
      const int count = chunkRows[w * experts + e];
      chunkRows[w * experts + e] = row;
      row += count;
    }
  }
  if (layout.gemmTiles) { // the row-invariant mode's few pairs may not hold the table
    writeGemmTiles(layout, counts, offsets, experts);
  } else {
    for (int i = threadIdx.x; i < 2 * (experts + 1); i += blockDim.x)
      layout.table[i] = offsets[i]; // offsets, then the bases that follow them
  }
  const int used = bases[experts];
  for (int64_t entry = threadIdx.x; entry < layout.entries; entry += blockDim.x) {
    const int tile = entry < used ? static_cast<int>(entry) : used - 1;
    int lo = 0, hi = experts - 1; // the expert whose tiles hold `tile`
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (bases[mid] <= tile)
        lo = mid;
      else
        hi = mid - 1;
    }
    const int64_t row = offsets[lo] + static_cast<int64_t>(tile - bases[lo]) * tileRows;
    writeMoeEntry(layout, entry, lo, layout.xRows + row * layout.hidden, row);
  }
  __syncthreads();
  rankPairs(layout, pairs, experts, topK, chunks, chunkRows);
}

// Grouped mode: each pair's token row copied to its sorted row.
__global__ void moeGatherKernel(MoeLayout layout, int64_t pairs, int topK) {
  const int64_t vectors = layout.hidden / kVecElems;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < pairs * vectors; i += stride) {
    const int64_t p = i / vectors, v = i % vectors;
    reinterpret_cast<uint4 *>(layout.xRows + layout.slots[p] * layout.hidden)[v] =
        reinterpret_cast<const uint4 *>(layout.x + (p / topK) * layout.hidden)[v];
  }
}

// The experts' activation where kiln_swiglu_bf16 / kiln_activation_bf16 over the rows
// cannot give it (Moe.h): the gate and up biases of each row's expert, or gpt-oss's
// clamped form. A thread per 8 columns of a pair's row slots[p] (the pairs mode's row p,
// the grouped modes' sorted row), expert ids[p]; the activation goes over the gate row.
// Padding rows (no pair) are not touched: the combine never reads what they give.
template <MoeGlu Form>
__global__ void moeActivationKernel(MoeLayout layout, int64_t pairs, MoeActivation a) {
  const int64_t inter = layout.inter, vectors = inter / kVecElems;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs * vectors;
       i += stride) {
    const int64_t p = i / vectors, column = (i % vectors) * kVecElems;
    const int64_t at = static_cast<int64_t>(layout.slots[p]) * inter + column;
    const int64_t biasAt = static_cast<int64_t>(layout.ids[p]) * inter + column;
    // bf16(x . W) + bias, one bf16 op more (a no-op without the bias).
    auto biased = [&](const uint16_t *rows, const uint16_t *bias, float(&v)[kVecElems]) {
      unpack8(load16(rows + at), v);
      if (!bias)
        return;
      float b[kVecElems];
      unpack8(load16(bias + biasAt), b);
#pragma unroll
      for (int e = 0; e < kVecElems; ++e)
        v[e] = roundBf16(v[e] + b[e]);
    };
    float g[kVecElems], u[kVecElems];
    biased(layout.upRows, a.upBias, u);
    if (Form != MoeGlu::kPlain)
      biased(layout.gateRows, a.gateBias, g);
#pragma unroll
    for (int e = 0; e < kVecElems; ++e)
      g[e] = Form == MoeGlu::kPlain    ? activationOf(u[e], a.kind)
             : Form == MoeGlu::kSwiglu ? swigluOfBf16(g[e], u[e])
                                       : clampedSwigluOfBf16(g[e], u[e], a.alpha, a.limit);
    *reinterpret_cast<uint4 *>(layout.gateRows + at) = pack8(g);
  }
}

// out[t] = the weighted y[slot(t, j)] summed over j (ascending expert): with bf16 partial
// sums (every product and sum rounded), or in fp32 (products and sums rounded to fp32
// one at a time, as torch's mul then index_add_, no FMA) and rounded once; 8 columns a
// thread. Bias: y = bf16(y + downBias[expert]) first (the down GEMM's bias, Moe.h).
template <bool F32Sum, bool Bias>
__global__ void moeCombineKernel(MoeLayout layout, const uint16_t *__restrict__ downBias,
                                 uint16_t *__restrict__ out, int64_t tokens, int topK) {
  const int64_t hidden = layout.hidden, vectors = hidden / kVecElems;
  for (int64_t t = blockIdx.y; t < tokens; t += gridDim.y)
    for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors;
         v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      float acc[kVecElems] = {};
      for (int j = 0; j < topK; ++j) {
        const int64_t pair = t * topK + j;
        const float w = layout.weights[pair];
        float part[kVecElems];
        unpack8(reinterpret_cast<const uint4 *>(layout.yRows + layout.slots[pair] * hidden)[v],
                part);
        if (Bias) {
          float b[kVecElems];
          unpack8(reinterpret_cast<const uint4 *>(downBias + layout.ids[pair] * hidden)[v], b);
#pragma unroll
          for (int e = 0; e < kVecElems; ++e)
            part[e] = roundBf16(part[e] + b[e]);
        }
#pragma unroll
        for (int e = 0; e < kVecElems; ++e)
          acc[e] = F32Sum ? __fadd_rn(acc[e], __fmul_rn(part[e], w))
                          : roundBf16(acc[e] + roundBf16(part[e] * w));
      }
      reinterpret_cast<uint4 *>(out + t * hidden)[v] = pack8(acc);
    }
}
} // namespace

cudaError_t launchGatherRows(const void *src, const int32_t *index, void *out, int64_t rows,
                             int64_t dim, int64_t numSource, cudaStream_t stream, int64_t first) {
  const auto *s = static_cast<const uint16_t *>(src);
  auto *o = static_cast<uint16_t *>(out);
  if (dim % kVecElems == 0 && aligned16(src) && aligned16(out)) {
    const int threads = static_cast<int>(std::min<int64_t>(256, roundUpWarp(dim / kVecElems)));
    gatherRowsKernel<true>
        <<<rowGrid(rows), threads, 0, stream>>>(s, index, o, rows, dim, numSource, first);
  } else {
    const int threads = static_cast<int>(std::min<int64_t>(256, roundUpWarp(dim)));
    gatherRowsKernel<false>
        <<<rowGrid(rows), threads, 0, stream>>>(s, index, o, rows, dim, numSource, first);
  }
  return cudaGetLastError();
}

namespace {

// The 16-byte rms_norm paths take rows of up to this many 16-byte chunks.
constexpr int64_t kRmsMaxVectors = 4096;

// The 16-byte paths by row length (dim a multiple of 8 and at most 8 * kRmsMaxVectors;
// weight and out 16-byte aligned, and whatever `src` reads).
template <class Norm, class Source>
void launchRmsNormVec(Norm norm, Source src, const uint16_t *weight, uint16_t *out, int64_t rows,
                      int64_t dim, float eps, cudaStream_t stream) {
  const int64_t vectors = dim / kVecElems;
  if (vectors <= 32) {
    const int64_t blocks = std::min<int64_t>((rows + kRmsWarpsPerBlock - 1) / kRmsWarpsPerBlock, 65535);
    launchChained<&rmsNormWarpKernel<Norm, Source>>(static_cast<unsigned>(blocks),
                                                    32 * kRmsWarpsPerBlock, 0, stream, norm, src,
                                                    weight, out, rows, dim, eps);
  } else if (vectors <= 1024) {
    launchChained<&rmsNormVecKernel<1, Norm, Source>>(rowGrid(rows), roundUpWarp(vectors), 0,
                                                      stream, norm, src, weight, out, rows, dim,
                                                      eps);
  } else {
    launchChained<&rmsNormVecKernel<4, Norm, Source>>(rowGrid(rows),
                                                      roundUpWarp((vectors + 3) / 4), 0, stream,
                                                      norm, src, weight, out, rows, dim, eps);
  }
}

bool rmsNormVecFits(int64_t dim) {
  return dim % kVecElems == 0 && dim / kVecElems <= kRmsMaxVectors;
}

// A norm of the rows `src` reads: the 16-byte paths where `vec` (the caller checked
// rmsNormVecFits, the alignment and the strides), else the scalar one.
template <class Norm, class Rows>
void launchRmsNormRows(Norm norm, Rows src, bool vec, const void *weight, void *out, int64_t rows,
                       int64_t dim, float eps, cudaStream_t stream) {
  const auto *pw = static_cast<const uint16_t *>(weight);
  auto *po = static_cast<uint16_t *>(out);
  if (vec) {
    launchRmsNormVec(norm, src, pw, po, rows, dim, eps, stream);
  } else {
    const int threads = static_cast<int>(std::min<int64_t>(1024, roundUpWarp(dim)));
    launchChained<&rmsNormScalarKernel<Norm, Rows>>(rowGrid(rows), threads, 0, stream, norm, src,
                                                    pw, po, rows, dim, eps);
  }
}

} // namespace

cudaError_t launchRmsNormStrided(const void *x, int64_t stride, const void *weight, void *out,
                                 int64_t rows, int64_t dim, float eps, cudaStream_t stream) {
  launchRmsNormVec(RoundThenScale{}, RowOfStridedX{static_cast<const uint16_t *>(x), stride},
                   static_cast<const uint16_t *>(weight), static_cast<uint16_t *>(out), rows, dim,
                   eps, stream);
  return cudaGetLastError();
}

bool rmsNormStridedFits(const void *x, int64_t stride, const void *weight, const void *out,
                        int64_t dim) {
  return rmsNormVecFits(dim) && stride % kVecElems == 0 && aligned16(x) && aligned16(weight) &&
         aligned16(out);
}

cudaError_t launchRmsNorm(const void *x, const void *weight, void *out, int64_t rows,
                          int64_t dim, float eps, cudaStream_t stream) {
  const bool vec = rmsNormVecFits(dim) && aligned16(x) && aligned16(weight) && aligned16(out);
  launchRmsNormRows(RoundThenScale{}, RowOfX{static_cast<const uint16_t *>(x), dim}, vec, weight,
                    out, rows, dim, eps, stream);
  return cudaGetLastError();
}

cudaError_t launchRmsNormOffset(const void *x, int64_t tokenStride, int64_t headStride,
                                const void *weight, void *out, int64_t tokens, int64_t heads,
                                int64_t dim, float eps, float weightOffset, cudaStream_t stream) {
  const auto *px = static_cast<const uint16_t *>(x);
  const OffsetWeight norm{weightOffset};
  const int64_t rows = tokens * heads;
  // Rows one stride apart (one head a token, or heads back to back at the token stride)
  // need no division by heads; at the stride dim they are dense.
  const bool uniform = heads == 1 || tokenStride == heads * headStride;
  const int64_t rowStride = heads == 1 ? tokenStride : headStride;
  const bool vec = rmsNormVecFits(dim) && aligned16(x) && aligned16(weight) && aligned16(out) &&
                   tokenStride % kVecElems == 0 && (heads == 1 || headStride % kVecElems == 0);
  if (uniform && rowStride == dim)
    launchRmsNormRows(norm, RowOfX{px, dim}, vec, weight, out, rows, dim, eps, stream);
  else if (uniform)
    launchRmsNormRows(norm, RowOfStridedX{px, rowStride}, vec, weight, out, rows, dim, eps, stream);
  else
    launchRmsNormRows(norm, RowOfHeadX{px, heads, tokenStride, headStride}, vec, weight, out, rows,
                      dim, eps, stream);
  return cudaGetLastError();
}

cudaError_t launchAddRmsNorm(const void *a, const void *b, const void *weight, void *sum, void *out,
                             int64_t rows, int64_t dim, float eps, RmsNormWeight kind,
                             float weightOffset, cudaStream_t stream) {
  const bool offset = kind == RmsNormWeight::kOffset;
  const bool fused = rmsNormVecFits(dim) && aligned16(a) && aligned16(b) && aligned16(sum) &&
                     aligned16(weight) && aligned16(out);
  if (!fused) {
    // The add and the norm one after the other: the same bits by construction.
    if (cudaError_t e = launchAdd(a, b, sum, rows * dim, stream); e != cudaSuccess)
      return e;
    return offset ? launchRmsNormOffset(sum, dim, dim, weight, out, rows, 1, dim, eps, weightOffset,
                                        stream)
                  : launchRmsNorm(sum, weight, out, rows, dim, eps, stream);
  }
  const RowOfSum src{static_cast<const uint16_t *>(a), static_cast<const uint16_t *>(b),
                     static_cast<uint16_t *>(sum), dim};
  const auto *pw = static_cast<const uint16_t *>(weight);
  auto *po = static_cast<uint16_t *>(out);
  if (offset)
    launchRmsNormVec(OffsetWeight{weightOffset}, src, pw, po, rows, dim, eps, stream);
  else
    launchRmsNormVec(RoundThenScale{}, src, pw, po, rows, dim, eps, stream);
  return cudaGetLastError();
}

cudaError_t launchRope(const RopeTensor &a, const RopeTensor &b, const int32_t *positions,
                       int64_t tokens, int64_t headDim, int64_t rotaryDim, const RopeTable &table,
                       float attentionFactor, cudaStream_t stream) {
  const auto *x0 = static_cast<const uint16_t *>(a.x), *x1 = static_cast<const uint16_t *>(b.x);
  auto *out0 = static_cast<uint16_t *>(a.out), *out1 = static_cast<uint16_t *>(b.out);
  const int64_t half = rotaryDim / 2, heads = a.heads + b.heads;
  const int64_t pass = (a.x == a.out && (b.heads == 0 || b.x == b.out)) ? 0 : headDim - rotaryDim;
  const bool vec = half % kVecElems == 0 && headDim % kVecElems == 0 && aligned16(a.x) &&
                   aligned16(a.out) && (b.heads == 0 || (aligned16(b.x) && aligned16(b.out)));
  // The 16-byte path needs every head's rotated halves and copied tail in whole chunks.
  const int64_t items = heads * std::max(half, pass) / (vec ? kVecElems : 1);
  const int threads = static_cast<int>(
      std::min<int64_t>(256, roundUpWarp(vec ? std::max(items, half) : items)));
  const int h0 = static_cast<int>(a.heads), h1 = static_cast<int>(b.heads);
  if (vec)
    return launchChained<&ropeKernel<true>>(rowGrid(tokens), threads, 0, stream, x0, out0, h0, x1,
                                            out1, h1, positions, tokens, headDim, rotaryDim,
                                            attentionFactor, table);
  return launchChained<&ropeKernel<false>>(rowGrid(tokens), threads, 0, stream, x0, out0, h0, x1,
                                           out1, h1, positions, tokens, headDim, rotaryDim,
                                           attentionFactor, table);
}

cudaError_t launchRopeRows(const kiln_rope_rows_t &p, const RopeTable &table,
                           cudaStream_t stream) {
  const auto *px = static_cast<const uint16_t *>(p.x);
  auto *po = static_cast<uint16_t *>(p.out);
  const int half = static_cast<int>(p.head_dim / 2);
  const int threads = static_cast<int>(
      std::min<int64_t>(256, roundUpWarp(p.heads * std::max<int64_t>(half, p.pass))));
  const float af = p.rope.attention_factor;
#define KILN_ROPE_ROWS(STYLE)                                                                  \
  launchChained<&ropeRowsKernel<STYLE>>(rowGrid(p.tokens), threads, 0, stream, px,               \
                                        p.x_token_stride, p.x_head_stride, po,                  \
                                        p.out_token_stride, p.out_head_stride, p.positions,     \
                                        p.tokens, p.heads, p.head_dim, p.pass, af, table)
  switch (p.style) {
  case KILN_ROPE_STYLE_DEINTERLEAVE:
    return KILN_ROPE_ROWS(KILN_ROPE_STYLE_DEINTERLEAVE);
  case KILN_ROPE_STYLE_COMPLEX_PAIRS:
    return KILN_ROPE_ROWS(KILN_ROPE_STYLE_COMPLEX_PAIRS);
  default:
    return KILN_ROPE_ROWS(KILN_ROPE_STYLE_ROTATE_HALF);
  }
#undef KILN_ROPE_ROWS
}

cudaError_t launchAdd(const void *a, const void *b, void *out, int64_t n, cudaStream_t stream) {
  return launchBinary<AddOp>(a, b, out, n, stream);
}

cudaError_t launchSwiglu(const void *gate, const void *up, void *out, int64_t n,
                         cudaStream_t stream) {
  return launchBinary<SwigluOp>(gate, up, out, n, stream);
}

cudaError_t launchSigmoidGate(const void *x, const void *w, const void *value, void *out,
                              int64_t rows, int64_t dim, int64_t cols, cudaStream_t stream) {
  sigmoidGateKernel<<<rowGrid(rows), 256, 0, stream>>>(
      static_cast<const uint16_t *>(x), static_cast<const uint16_t *>(w),
      static_cast<const uint16_t *>(value), static_cast<uint16_t *>(out), rows, dim, cols);
  return cudaGetLastError();
}

namespace {
template <class Order>
cudaError_t launchGatedNorm(const void *x, const void *gate, const void *weight, void *out,
                            int64_t rows, int64_t width, int64_t gateStride, int64_t groupSize,
                            float eps, cudaStream_t stream) {
  const int threads = static_cast<int>(std::min<int64_t>(256, roundUpWarp(groupSize)));
  gatedRmsNormKernel<Order><<<rowGrid(rows * (width / groupSize)), threads, 0, stream>>>(
      static_cast<const uint16_t *>(x), static_cast<const uint16_t *>(gate),
      static_cast<const uint16_t *>(weight), static_cast<uint16_t *>(out), rows, width, gateStride,
      groupSize, eps);
  return cudaGetLastError();
}
} // namespace

cudaError_t launchGatedRmsNorm(const void *x, const void *gate, const void *weight, void *out,
                               int64_t rows, int64_t width, int64_t gateStride, int64_t groupSize,
                               float eps, cudaStream_t stream) {
  return launchGatedNorm<GateThenNorm>(x, gate, weight, out, rows, width, gateStride, groupSize,
                                       eps, stream);
}

cudaError_t launchRmsNormGate(const void *x, const void *gate, const void *weight, void *out,
                              int64_t rows, int64_t width, int64_t gateStride, int64_t groupSize,
                              float eps, cudaStream_t stream) {
  return launchGatedNorm<NormThenGate>(x, gate, weight, out, rows, width, gateStride, groupSize,
                                       eps, stream);
}

cudaError_t launchSigmoidMul(const void *x, const void *gate, void *out, int64_t rows, int64_t dim,
                             int64_t gateStride, cudaStream_t stream) {
  const bool vec = dim % kVecElems == 0 && gateStride % kVecElems == 0 && aligned16(x) &&
                   aligned16(gate) && aligned16(out);
  const int64_t items = vec ? dim / kVecElems : dim;
  const int threads = static_cast<int>(std::min<int64_t>(256, roundUpWarp(items)));
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((items + threads - 1) / threads, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  const auto *px = static_cast<const uint16_t *>(x);
  const auto *pg = static_cast<const uint16_t *>(gate);
  auto *po = static_cast<uint16_t *>(out);
  if (vec)
    sigmoidMulKernel<true><<<grid, threads, 0, stream>>>(px, pg, po, rows, dim, gateStride);
  else
    sigmoidMulKernel<false><<<grid, threads, 0, stream>>>(px, pg, po, rows, dim, gateStride);
  return cudaGetLastError();
}

cudaError_t launchActivation(const void *x, void *out, int64_t n, int kind,
                             cudaStream_t stream) {
  constexpr int threads = 256;
  activationKernel<<<gridFor(n, threads), threads, 0, stream>>>(
      static_cast<const uint16_t *>(x), static_cast<uint16_t *>(out), n, kind);
  return cudaGetLastError();
}

namespace {
// One element a thread: out[r, c] from a's or b's row (a plain copy, memory-bound).
__global__ void concatKernel(const uint16_t *__restrict__ a, const uint16_t *__restrict__ b,
                             uint16_t *__restrict__ out, int64_t rows, int64_t colsA,
                             int64_t colsB) {
  const int64_t width = colsA + colsB, total = rows * width;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / width, c = i % width;
    out[i] = c < colsA ? a[r * colsA + c] : b[r * colsB + (c - colsA)];
  }
}

__global__ void shiftTokensKernel(const int32_t *__restrict__ ids, int32_t *__restrict__ out,
                                  int64_t tokens) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[t] = ids[t + 1 < tokens ? t + 1 : t];
}
__global__ void scatterPicksKernel(const int32_t *__restrict__ picks,
                                   const int32_t *__restrict__ rows, int32_t *__restrict__ out,
                                   int64_t tokens, int64_t numRows) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < numRows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t t = rows[r];
    if (t >= 0 && t < tokens)
      out[t] = picks[r];
  }
}
} // namespace

cudaError_t launchConcat(const void *a, const void *b, void *out, int64_t rows, int64_t colsA,
                         int64_t colsB, cudaStream_t stream) {
  constexpr int threads = 256;
  concatKernel<<<gridFor(rows * (colsA + colsB), threads), threads, 0, stream>>>(
      static_cast<const uint16_t *>(a), static_cast<const uint16_t *>(b),
      static_cast<uint16_t *>(out), rows, colsA, colsB);
  return cudaGetLastError();
}

cudaError_t launchNextTokens(const int32_t *ids, const int32_t *picks, const int32_t *rows,
                             int32_t *out, int64_t tokens, int64_t numRows,
                             cudaStream_t stream) {
  constexpr int threads = 256;
  shiftTokensKernel<<<gridFor(tokens, threads), threads, 0, stream>>>(ids, out, tokens);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess || numRows == 0)
    return e;
  scatterPicksKernel<<<gridFor(numRows, threads), threads, 0, stream>>>(picks, rows, out,
                                                                       tokens, numRows);
  return cudaGetLastError();
}

cudaError_t launchArgmax(const void *logits, int32_t *out, int64_t rows, int64_t cols,
                         cudaStream_t stream) {
  const auto *pl = static_cast<const uint16_t *>(logits);
  if (cols % kVecElems == 0 && aligned16(logits)) {
    const int threads = static_cast<int>(std::min<int64_t>(1024, roundUpWarp(cols / kVecElems)));
    return launchChained<&argmaxKernel<true>>(rowGrid(rows), threads, 0, stream, pl, out, rows,
                                              cols);
  }
  const int threads = static_cast<int>(std::min<int64_t>(1024, roundUpWarp(cols)));
  return launchChained<&argmaxKernel<false>>(rowGrid(rows), threads, 0, stream, pl, out, rows,
                                             cols);
}

cudaError_t launchMoeRoute(const void *logits, const MoeLayout &layout, int64_t tokens,
                           const MoeRouting &routing, bool pairEntries, cudaStream_t stream) {
  const int threads = static_cast<int>(std::min<int64_t>(256, roundUpWarp(routing.experts)));
  const size_t shared = 2 * static_cast<size_t>(routing.experts) * sizeof(float);
  if (routing.flags & KILN_MOE_F32_LOGITS)
    moeRouteKernel<<<rowGrid(tokens), threads, shared, stream>>>(
        static_cast<const float *>(logits), layout, tokens, routing, pairEntries);
  else
    moeRouteKernel<<<rowGrid(tokens), threads, shared, stream>>>(
        static_cast<const uint16_t *>(logits), layout, tokens, routing, pairEntries);
  return cudaGetLastError();
}

cudaError_t launchMoeGroup(const MoeLayout &layout, int64_t pairs, int topK, int experts,
                           int tileRows, cudaStream_t stream) {
  const int chunks = moePlanChunks(experts);
  moePlanKernel<<<1, 1024, static_cast<size_t>(3 * experts + 2 + chunks * experts) * sizeof(int),
                  stream>>>(layout, pairs, experts, topK, tileRows, chunks);
  if (!layout.rowTokens) { // else the own grouped GEMM gathers the rows itself
    const int64_t vectors = pairs * (layout.hidden / kVecElems);
    moeGatherKernel<<<gridFor(vectors, 256), 256, 0, stream>>>(layout, pairs, topK);
  }
  return cudaGetLastError();
}

cudaError_t launchMoeActivation(const MoeLayout &layout, int64_t pairs, const MoeActivation &a,
                                cudaStream_t stream) {
  constexpr int threads = 256;
  const unsigned blocks = gridFor(pairs * (layout.inter / kVecElems), threads);
  switch (a.form) {
  case MoeGlu::kSwiglu:
    moeActivationKernel<MoeGlu::kSwiglu><<<blocks, threads, 0, stream>>>(layout, pairs, a);
    break;
  case MoeGlu::kClamped:
    moeActivationKernel<MoeGlu::kClamped><<<blocks, threads, 0, stream>>>(layout, pairs, a);
    break;
  case MoeGlu::kPlain:
    moeActivationKernel<MoeGlu::kPlain><<<blocks, threads, 0, stream>>>(layout, pairs, a);
    break;
  }
  return cudaGetLastError();
}

cudaError_t launchMoeCombine(const MoeLayout &layout, const void *downBias, void *out,
                             int64_t tokens, int topK, bool f32Sum, cudaStream_t stream) {
  const int64_t vectors = layout.hidden / kVecElems;
  const int threads = static_cast<int>(std::min<int64_t>(256, roundUpWarp(vectors)));
  const dim3 grid(static_cast<unsigned>((vectors + threads - 1) / threads),
                  static_cast<unsigned>(std::min<int64_t>(tokens, 65535)));
  const auto *bias = static_cast<const uint16_t *>(downBias);
  auto *o = static_cast<uint16_t *>(out);
  if (f32Sum && bias)
    moeCombineKernel<true, true><<<grid, threads, 0, stream>>>(layout, bias, o, tokens, topK);
  else if (f32Sum)
    moeCombineKernel<true, false><<<grid, threads, 0, stream>>>(layout, bias, o, tokens, topK);
  else if (bias)
    moeCombineKernel<false, true><<<grid, threads, 0, stream>>>(layout, bias, o, tokens, topK);
  else
    moeCombineKernel<false, false><<<grid, threads, 0, stream>>>(layout, bias, o, tokens, topK);
  return cudaGetLastError();
}

} // namespace kiln::graph
