// kiln_gemm_bf16 on cuBLASLt: nn.Linear's out[m,n] = x[m,k] w[n,k]^T (+ bias[n]).
//
// Mapping onto cuBLASLt's column-major convention: a row-major [r, c] matrix is the
// column-major [c, r] matrix with leading dimension c. So
//   x (row-major [m,k])  = column-major X' [k,m], ld k
//   w (row-major [n,k])  = column-major W' [k,n], ld k
//   out (row-major [m,n]) = column-major O' [n,m], ld n
// and out = x w^T  <=>  O' = W'^T X'. cuBLASLt computes D = op(A) op(B) with A = W'
// (op T), B = X' (op N), D = O' of n rows and m columns: the "TN" layout. The BIAS
// epilogue adds a vector of D's row count (n) to every column, i.e. bias[n] to every row
// of out, in fp32 before D's one rounding to bf16.
//
// Row invariance (KILN_GEMM_ROW_INVARIANT): a row of out must have the same bits for
// every m a decode or verify step can have (a plain decode step of 7 rows and a
// speculative verify step of 35 compute the same token's row; greedy speculation is
// lossless only if they agree). So every m <= the handle's invariant rows (the model's
// largest decode/verify step, kiln_gemm_set_invariant_rows) runs one algorithm per
// shape: the one the heuristic picks for m = KILN_GEMM_INVARIANT_ROWS (or the pin rows,
// kiln_gemm_set_pin_rows), checked to run both m = 1 and m = invariant rows. Split-K is
// allowed there only with the COMPUTE_TYPE reduction: the split count and the K slices
// are fixed by the algorithm (not by m) and the fp32 partials are summed in a separate,
// fixed-order pass. INPLACE and OUTPUT_TYPE reductions add partials in bf16 and are
// never taken. Above the invariant rows (prefill) the heuristic's best split-K-free
// algorithm for that m runs. Checked on the GPU by GraphGpu.GemmRowsDoNotDependOnM.
//
// Skinny steps (kiln_gemm_set_skinny: the runtime's batch-1 models): every m up to the
// invariant rows runs the skinny GEMM (SkinnyGemm.h) instead, rows invariant by its
// fixed summation order, launched to overlap the kernel before it. KILN_GEMM_SKINNY
// overrides the setter (how the forms are compared, and how models of larger batches
// are checked with it).
//
// CUDA graphs: calls of at most the invariant rows prefer the candidates whose launch is
// kernels only (launchesKernelsOnly; GraphGpu.GemmCapturedAsKernelsOnly).
//
// Batched GEMMs (kiln_gemm_bf16_batched, a MoE layer's experts): the same TN mapping
// per entry with m = rows, every matrix's address read from a device array (cuBLASLt's
// pointer-array batch mode), the entry count in the place of m in the plan key. One-row
// entries (decode) are always pinned: one algorithm per (n, k), chosen for
// KILN_GEMM_INVARIANT_ROWS entries and checked for 1 and for every count that runs, so
// an entry's bits do not depend on how many entries share the call. Entries of more
// rows (grouped prefill) take the heuristic's split-K-free choice per (count, rows).
#include "kiln/Kernels/Gemm.h"

#include "GroupedGemm.h"
#include "SkinnyGemm.h"
#include "StatusInternal.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <unordered_map>
#include <vector>

using namespace kiln::kernels;

namespace {

constexpr size_t kMaxPlans = 4096; // the whole cache is dropped when it would grow past this

// Largest power of two (<= 256) dividing the address: cuBLASLt's alignment preference.
uint32_t alignmentOf(const void *p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && (address % alignment) != 0)
    alignment /= 2;
  return alignment;
}

struct PlanKey {
  int64_t m, n, k; // batched: m is the entry count
  uint64_t workspaceBytes;
  uint32_t alignX, alignW, alignOut, alignBias; // alignBias 0: no bias
  bool batched = false;                         // pointer-array GEMMs
  int64_t rows = 1;                             // batched: rows of each entry
  bool f32Out = false;                          // fp32 out instead of bf16
  // Strided batch (kiln_gemm_bf16_strided_batched): leading dimensions and batch strides
  // in elements, and whether w is stored [k, n] instead of [n, k].
  int64_t stridedBatch = 0; // 0: not a strided batch
  bool wKn = false;
  int64_t ldx = 0, ldw = 0, ldo = 0, strideX = 0, strideW = 0, strideOut = 0;
  auto stridedFields() const {
    return std::tie(stridedBatch, wKn, ldx, ldw, ldo, strideX, strideW, strideOut);
  }
  bool operator==(const PlanKey &o) const {
    return m == o.m && n == o.n && k == o.k && workspaceBytes == o.workspaceBytes &&
           alignX == o.alignX && alignW == o.alignW && alignOut == o.alignOut &&
           alignBias == o.alignBias && batched == o.batched && rows == o.rows &&
           f32Out == o.f32Out && stridedFields() == o.stridedFields();
  }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey &key) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(static_cast<uint64_t>(key.m));
    mix(static_cast<uint64_t>(key.n));
    mix(static_cast<uint64_t>(key.k));
    mix(key.workspaceBytes);
    mix((static_cast<uint64_t>(key.alignX) << 32) | key.alignW);
    mix((static_cast<uint64_t>(key.alignOut) << 32) | key.alignBias);
    mix(key.batched);
    mix(static_cast<uint64_t>(key.rows));
    mix(key.f32Out);
    for (int64_t v : {key.stridedBatch, static_cast<int64_t>(key.wKn), key.ldx, key.ldw,
                      key.ldo, key.strideX, key.strideW, key.strideOut})
      mix(static_cast<uint64_t>(v));
    return static_cast<size_t>(h);
  }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

void destroyPlan(Plan &plan) {
  if (plan.d)
    cublasLtMatrixLayoutDestroy(plan.d);
  if (plan.b)
    cublasLtMatrixLayoutDestroy(plan.b);
  if (plan.a)
    cublasLtMatrixLayoutDestroy(plan.a);
  if (plan.desc)
    cublasLtMatmulDescDestroy(plan.desc);
  plan = Plan{};
}

const char *kGemm = "kiln_gemm_bf16";

kiln_status_t cublasFailure(const char *call, cublasStatus_t status) {
  return fail(KILN_ERROR_CUDA, "%s: %s failed: %s", kGemm, call,
              cublasLtGetStatusString(status));
}

} // namespace

struct kiln_gemm {
  cublasLtHandle_t handle = nullptr;
  kiln_gemm_policy_t policy = KILN_GEMM_ROW_INVARIANT;
  int64_t invariantRows = KILN_GEMM_INVARIANT_ROWS;
  // The m the heuristic is asked about when it picks a pinned plain or strided-batch
  // GEMM's algorithm, when set (kiln_gemm_set_pin_rows; used clamped to invariantRows);
  // unset, KILN_GEMM_INVARIANT_ROWS whatever the invariant rows.
  std::optional<int64_t> pinRows;
  // Prefer algorithms whose launch is kernels only (launchesKernelsOnly); off with
  // KILN_GEMM_KERNELS_ONLY=0.
  bool kernelsOnly = true;
  // Calls of at most the invariant rows run the skinny GEMM in this form
  // (kiln_gemm_set_skinny); KILN_GEMM_SKINNY, when set, overrides it.
  kiln_gemm_skinny_t skinny = KILN_GEMM_SKINNY_OFF;
  std::optional<kiln_gemm_skinny_t> skinnyOverride;
  int sms = 0; // the device's SMs (the own GEMM's split count depends on them)
  mutable std::mutex mutex;
  std::unordered_map<PlanKey, Plan, PlanKeyHash> plans;
  // The row-invariant algorithm of each shape (PlanKey with m = 0).
  std::unordered_map<PlanKey, cublasLtMatmulAlgo_t, PlanKeyHash> pinnedAlgos;

  void clearPlans() {
    for (auto &entry : plans)
      destroyPlan(entry.second);
    plans.clear();
  }
  // Drops every choice (a policy or invariant-rows change).
  void reset() {
    clearPlans();
    pinnedAlgos.clear();
  }
};

namespace {

// An attribute of a configured algorithm, or `fallback` when it cannot be read (the
// heuristic was told to return no split-K reduction).
template <typename T>
T algoConfig(const cublasLtMatmulAlgo_t &algo, cublasLtMatmulAlgoConfigAttributes_t attribute,
             T fallback) {
  T value = fallback;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written) !=
      CUBLAS_STATUS_SUCCESS)
    return fallback;
  return value;
}

// Whether an algorithm's rows do not depend on m: no split-K, or split-K whose fp32
// partials are reduced in a separate pass (see "Row invariance").
bool rowInvariantReduction(const cublasLtMatmulAlgo_t &algo) {
  if (algoConfig<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1) <= 1)
    return true;
  return algoConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                              CUBLASLT_REDUCTION_SCHEME_NONE) ==
         CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
}

// Whether `algo` runs with m rows (the layouts of x and out rebuilt for m) within the
// workspace.
bool runsWithRows(kiln_gemm_t *gemm, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                  const PlanKey &key, int64_t m, const cublasLtMatmulAlgo_t &algo);

// One algorithm for every m (or entry count) of the shape: row-invariant plain GEMMs up
// to the invariant rows, batched ones always.
bool isPinned(const kiln_gemm_t *gemm, const PlanKey &key) {
  if (key.batched)
    return key.rows == 1;
  return gemm->policy == KILN_GEMM_ROW_INVARIANT && key.m <= gemm->invariantRows;
}

// The matrices and workspace of the call a plan is made for (a trial capture launches
// with them; nothing runs).
struct Operands {
  const void *w, *x;
  void *out, *workspace;
  size_t workspaceBytes;
  cudaStream_t stream;
};

kiln_status_t chooseAlgo(kiln_gemm_t *gemm, const Plan &plan, const PlanKey &key,
                         const void *bias, const Operands &operands, cublasLtMatmulAlgo_t &algo);

// The layouts of W' [k, n], X' [k, m] and O' [n, m]; batched: W' [k, n], X' [k, rows]
// and O' [n, rows] in pointer-array mode over m entries.
struct Layouts {
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, out = nullptr;
  Layouts() = default;
  Layouts(const Layouts &) = delete;
  Layouts &operator=(const Layouts &) = delete;
  ~Layouts() {
    for (cublasLtMatrixLayout_t layout : {w, x, out})
      if (layout)
        cublasLtMatrixLayoutDestroy(layout);
  }
};

cublasStatus_t setPointerArray(cublasLtMatrixLayout_t layout, int64_t count) {
  const uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
  const int32_t batch = static_cast<int32_t>(count);
  cublasStatus_t st = cublasLtMatrixLayoutSetAttribute(
      layout, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &mode, sizeof(mode));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                          sizeof(batch));
  return st;
}

cublasStatus_t setStridedBatch(cublasLtMatrixLayout_t layout, int64_t count, int64_t stride) {
  const int32_t batch = static_cast<int32_t>(count);
  cublasStatus_t st = cublasLtMatrixLayoutSetAttribute(
      layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                          &stride, sizeof(stride));
  return st;
}

// A strided batch's layouts: W' [k, n] (or [n, k] when w is stored [k, n], used
// untransposed), X' [k, m] and O' [n, m] at their leading dimensions and batch strides.
cublasStatus_t makeStridedLayouts(const PlanKey &key, int64_t m, Layouts &layouts) {
  cublasStatus_t st =
      key.wKn ? cublasLtMatrixLayoutCreate(&layouts.w, CUDA_R_16BF, key.n, key.k, key.ldw)
              : cublasLtMatrixLayoutCreate(&layouts.w, CUDA_R_16BF, key.k, key.n, key.ldw);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&layouts.x, CUDA_R_16BF, key.k, m, key.ldx);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&layouts.out, CUDA_R_16BF, key.n, m, key.ldo);
  const std::pair<cublasLtMatrixLayout_t, int64_t> strides[] = {
      {layouts.w, key.strideW}, {layouts.x, key.strideX}, {layouts.out, key.strideOut}};
  for (const auto &[layout, stride] : strides)
    if (st == CUBLAS_STATUS_SUCCESS)
      st = setStridedBatch(layout, key.stridedBatch, stride);
  return st;
}

cublasStatus_t makeLayouts(const PlanKey &key, int64_t m, Layouts &layouts) {
  if (key.stridedBatch)
    return makeStridedLayouts(key, m, layouts);
  const int64_t rows = key.batched ? key.rows : m;
  cublasStatus_t st = cublasLtMatrixLayoutCreate(&layouts.w, CUDA_R_16BF, key.k, key.n, key.k);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&layouts.x, CUDA_R_16BF, key.k, rows, key.k);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&layouts.out, key.f32Out ? CUDA_R_32F : CUDA_R_16BF, key.n,
                                    rows, key.n);
  if (key.batched)
    for (cublasLtMatrixLayout_t layout : {layouts.w, layouts.x, layouts.out})
      if (st == CUBLAS_STATUS_SUCCESS)
        st = setPointerArray(layout, m);
  return st;
}

// Builds the descriptor, the layouts and asks the heuristic for an algorithm.
kiln_status_t makePlan(kiln_gemm_t *gemm, const PlanKey &key, const void *bias,
                       const Operands &operands, Plan &plan) {
  cublasStatus_t st;
#define KILN_LT(call)                                                                          \
  do {                                                                                         \
    if ((st = (call)) != CUBLAS_STATUS_SUCCESS) {                                              \
      destroyPlan(plan);                                                                       \
      return cublasFailure(#call, st);                                                         \
    }                                                                                          \
  } while (0)
  KILN_LT(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transA = key.wKn ? CUBLAS_OP_N : CUBLAS_OP_T, transB = CUBLAS_OP_N;
  KILN_LT(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transA,
                                         sizeof(transA)));
  KILN_LT(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &transB,
                                         sizeof(transB)));
  if (bias) {
    const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const int32_t biasType = CUDA_R_16BF;
    KILN_LT(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                           sizeof(epilogue)));
    KILN_LT(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                           &biasType, sizeof(biasType)));
    KILN_LT(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                           sizeof(bias)));
  }
  {
    Layouts layouts;
    st = makeLayouts(key, key.m, layouts);
    std::swap(plan.a, layouts.w);
    std::swap(plan.b, layouts.x);
    std::swap(plan.d, layouts.out);
    KILN_LT(st);
  }

  const bool pinned = isPinned(gemm, key);
  if (pinned) {
    PlanKey shape = key;
    shape.m = 0; // one algorithm for every m <= invariantRows
    auto known = gemm->pinnedAlgos.find(shape);
    if (known == gemm->pinnedAlgos.end()) {
      cublasLtMatmulAlgo_t algo{};
      if (kiln_status_t s = chooseAlgo(gemm, plan, key, bias, operands, algo); s != KILN_OK) {
        destroyPlan(plan);
        return s;
      }
      known = gemm->pinnedAlgos.emplace(shape, algo).first;
    }
    plan.algo = known->second;
    if (!runsWithRows(gemm, plan.desc, plan.a, key, key.m, plan.algo)) {
      destroyPlan(plan);
      return fail(KILN_ERROR_UNSUPPORTED,
                  "%s: the row-invariant algorithm of n=%lld k=%lld (chosen for %s <= %lld) "
                  "does not run %s=%lld",
                  kGemm, static_cast<long long>(key.n), static_cast<long long>(key.k),
                  key.batched ? "entries" : "m",
                  static_cast<long long>(key.batched ? KILN_GEMM_INVARIANT_ROWS
                                                     : gemm->invariantRows),
                  key.batched ? "entries" : "m", static_cast<long long>(key.m));
    }
    return KILN_OK;
  }
  if (kiln_status_t s = chooseAlgo(gemm, plan, key, bias, operands, plan.algo); s != KILN_OK) {
    destroyPlan(plan);
    return s;
  }
  return KILN_OK;
#undef KILN_LT
}

bool runsWithRows(kiln_gemm_t *gemm, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                  const PlanKey &key, int64_t m, const cublasLtMatmulAlgo_t &algo) {
  Layouts layouts;
  if (makeLayouts(key, m, layouts) != CUBLAS_STATUS_SUCCESS)
    return false;
  // A batched W' layout carries the entry count, so it is rebuilt with the others.
  cublasLtMatmulHeuristicResult_t checked{};
  return cublasLtMatmulAlgoCheck(gemm->handle, desc, key.batched ? layouts.w : a, layouts.x,
                                 layouts.out, layouts.out, &algo, &checked) ==
             CUBLAS_STATUS_SUCCESS &&
         checked.workspaceSize <= key.workspaceBytes;
}

// Whether one call of `algo` over the layouts a (w), b (x) and d (out) captures as
// kernels only, by a trial capture on a stream of its own (nothing runs). Unknown (a
// capture already under way on this thread, or a failure): true.
bool capturesKernelsOnly(kiln_gemm_t *gemm, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                         cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t d,
                         const Operands &operands, const cublasLtMatmulAlgo_t &algo) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(operands.stream, &capturing) != cudaSuccess ||
      capturing != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    return true;
  }
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();
    return true;
  }
  cudaGraph_t graph = nullptr;
  bool kernelsOnly = true;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    const float alpha = 1.0f, beta = 0.0f;
    cublasLtMatmul(gemm->handle, desc, &alpha, operands.w, a, operands.x, b, &beta,
                   operands.out, d, operands.out, d, &algo, operands.workspace,
                   operands.workspaceBytes, stream);
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph) {
      size_t count = 0;
      cudaGraphGetNodes(graph, nullptr, &count);
      std::vector<cudaGraphNode_t> nodes(count);
      if (count && cudaGraphGetNodes(graph, nodes.data(), &count) == cudaSuccess)
        for (cudaGraphNode_t node : nodes) {
          cudaGraphNodeType type;
          if (cudaGraphNodeGetType(node, &type) == cudaSuccess && type != cudaGraphNodeTypeKernel)
            kernelsOnly = false;
        }
      cudaGraphDestroy(graph);
    }
  }
  cudaGetLastError();
  cudaStreamDestroy(stream);
  return kernelsOnly;
}

// Whether `algo` launches kernels only for the plan's m and, pinned, for every m it will
// run (checked at 1 and at the invariant rows: a memset can come with the larger m
// alone, as it did at 256 rows for the 8B step's algorithms, kernels only at 1 and 16). An
// algorithm may add a memset or a copy around its kernels, and one node other than a
// kernel can take a whole CUDA graph off the driver's fast launch path (docs/performance.md:
// the 8B step's graphs at 256 rows launched in ~300 us against ~3 at 64).
bool launchesKernelsOnly(kiln_gemm_t *gemm, const Plan &plan, const PlanKey &key,
                         const Operands &operands, const cublasLtMatmulAlgo_t &algo) {
  if (!capturesKernelsOnly(gemm, plan.desc, plan.a, plan.b, plan.d, operands, algo))
    return false;
  if (key.batched || !isPinned(gemm, key))
    return true;
  for (int64_t m : {int64_t{1}, gemm->invariantRows}) {
    Layouts layouts;
    if (m == key.m || makeLayouts(key, m, layouts) != CUBLAS_STATUS_SUCCESS)
      continue;
    if (!capturesKernelsOnly(gemm, plan.desc, plan.a, layouts.x, layouts.out, operands, algo))
      return false;
  }
  return true;
}

// Asks the heuristic for the plan's algorithm. Pinned (row-invariant, m <= invariant
// rows): the candidates for m = pin rows (KILN_GEMM_INVARIANT_ROWS unless
// kiln_gemm_set_pin_rows says otherwise) whose reduction keeps rows invariant and that run
// both m = 1 and m = invariant rows; otherwise the candidates for
// key.m (split-K-free under ROW_INVARIANT). Of those, the heuristic's first that keeps
// at least half the GPU busy (wavesCount >= 0.5): split-K-free variants of kernels meant
// for split-K can leave most SMs idle at small m (measured: 12x slower for Llama-8B's
// k/v and down projections at m <= 64), else the busiest one.
kiln_status_t chooseAlgo(kiln_gemm_t *gemm, const Plan &plan, const PlanKey &key,
                         const void *bias, const Operands &operands, cublasLtMatmulAlgo_t &algo) {
  const bool invariant = gemm->policy == KILN_GEMM_ROW_INVARIANT || key.batched;
  const bool pinned = isPinned(gemm, key);
  const int64_t pinRows = key.batched || !gemm->pinRows
                              ? int64_t{KILN_GEMM_INVARIANT_ROWS}
                              : std::min(*gemm->pinRows, gemm->invariantRows);
  Layouts rows;
  cublasStatus_t st = makeLayouts(key, pinned ? pinRows : key.m, rows);
  if (st != CUBLAS_STATUS_SUCCESS)
    return cublasFailure("cublasLtMatrixLayoutCreate", st);
  cublasLtMatmulPreference_t pref = nullptr;
  if ((st = cublasLtMatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS)
    return cublasFailure("cublasLtMatmulPreferenceCreate", st);
  const uint64_t workspace = key.workspaceBytes;
  st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                            &workspace, sizeof(workspace));
  const uint32_t reductions =
      pinned ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE : CUBLASLT_REDUCTION_SCHEME_NONE;
  if (st == CUBLAS_STATUS_SUCCESS && invariant)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                              &reductions, sizeof(reductions));
  const struct {
    cublasLtMatmulPreferenceAttributes_t attribute;
    uint32_t bytes;
  } alignments[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.alignW},
                    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.alignX},
                    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.alignOut},
                    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.alignOut}};
  for (const auto &alignment : alignments)
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, alignment.attribute, &alignment.bytes,
                                                sizeof(alignment.bytes));
  const char *failed = "cublasLtMatmulPreferenceSetAttribute";
  constexpr int kCandidates = 16;
  cublasLtMatmulHeuristicResult_t results[kCandidates]{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    failed = "cublasLtMatmulAlgoGetHeuristic";
    st = cublasLtMatmulAlgoGetHeuristic(gemm->handle, plan.desc, key.batched ? rows.w : plan.a,
                                        rows.x, rows.out, rows.out, pref, kCandidates, results,
                                        &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
    return cublasFailure(failed, st);
  auto acceptable = [&](const cublasLtMatmulAlgo_t &candidate) {
    if (!invariant)
      return true;
    if (!pinned)
      return algoConfig<int32_t>(candidate, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1) <= 1;
    return rowInvariantReduction(candidate) &&
           runsWithRows(gemm, plan.desc, plan.a, key, 1, candidate) &&
           runsWithRows(gemm, plan.desc, plan.a, key,
                        key.batched ? int64_t{KILN_GEMM_INVARIANT_ROWS} : gemm->invariantRows,
                        candidate);
  };
  // Each candidate judged once (the checks ask cuBLASLt), for both passes below.
  bool usable[kCandidates] = {};
  for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < found; ++i)
    usable[i] = results[i].state == CUBLAS_STATUS_SUCCESS && acceptable(results[i].algo);
  // The candidates whose launch is kernels only first (the others would slow every
  // CUDA-graph launch of the step), then any.
  auto pick = [&](bool kernelsOnly) {
    int chosen = -1, busiest = -1;
    for (int i = 0; i < found && chosen < 0; ++i) {
      if (!usable[i] ||
          (kernelsOnly && !launchesKernelsOnly(gemm, plan, key, operands, results[i].algo)))
        continue;
      if (busiest < 0 || results[i].wavesCount > results[busiest].wavesCount)
        busiest = i;
      if (!invariant || results[i].wavesCount >= 0.5f)
        chosen = i;
    }
    return chosen < 0 ? busiest : chosen;
  };
  // Only the decode-sized calls that CUDA graphs capture: a prefill's choice has no graph
  // to slow, and its fastest algorithms may zero a workspace first.
  const bool captured = pinned || (!key.batched && key.m <= gemm->invariantRows);
  int chosen = gemm->kernelsOnly && captured ? pick(true) : -1;
  if (chosen < 0)
    chosen = pick(false);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || chosen < 0)
    return fail(KILN_ERROR_UNSUPPORTED,
                "%s: cuBLASLt has no %salgorithm for %s=%lld n=%lld k=%lld%s "
                "(alignments x %u, w %u, out %u bytes; workspace %llu bytes)",
                kGemm, invariant ? "row-invariant " : "", key.batched ? "entries" : "m",
                static_cast<long long>(key.m),
                static_cast<long long>(key.n), static_cast<long long>(key.k),
                bias ? " with bias" : "", key.alignX, key.alignW, key.alignOut,
                static_cast<unsigned long long>(key.workspaceBytes));
  algo = results[chosen].algo;
  return KILN_OK;
}

} // namespace

namespace {

// Finds or makes the plan of `key` and runs it: w, x and out are the matrices, or for a
// batched key the device arrays of their pointers.
kiln_status_t runPlanned(kiln_gemm_t *gemm, const PlanKey &key, const void *bias,
                         const void *w, const void *x, void *out, void *workspace,
                         size_t workspace_bytes, void *stream) {
  std::lock_guard<std::mutex> lock(gemm->mutex);
  auto found = gemm->plans.find(key);
  if (found == gemm->plans.end()) {
    if (gemm->plans.size() >= kMaxPlans)
      gemm->clearPlans();
    Plan plan;
    const kiln_status_t status =
        makePlan(gemm, key, bias, Operands{w, x, out, workspace, workspace_bytes,
                                                    static_cast<cudaStream_t>(stream)}, plan);
    if (status != KILN_OK)
      return status;
    found = gemm->plans.emplace(key, plan).first;
  }
  Plan &plan = found->second;
  if (bias) {
    const cublasStatus_t st = cublasLtMatmulDescSetAttribute(
        plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    if (st != CUBLAS_STATUS_SUCCESS)
      return cublasFailure("cublasLtMatmulDescSetAttribute(BIAS_POINTER)", st);
  }
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st =
      cublasLtMatmul(gemm->handle, plan.desc, &alpha, w, plan.a, x, plan.b, &beta, out, plan.d,
                     out, plan.d, &plan.algo, workspace, workspace_bytes,
                     static_cast<cudaStream_t>(stream));
  if (st != CUBLAS_STATUS_SUCCESS)
    return cublasFailure("cublasLtMatmul", st);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "%s: cublasLtMatmul launch failed: %s", kGemm,
                cudaGetErrorString(error));
  return ok();
}

// KILN_GEMM_PIN_ROWS: kiln_gemm_set_pin_rows for every handle of the process (how a
// whole model is tried with another pinned choice without recompiling it).
kiln_status_t pinRowsFromEnvironment(kiln_gemm_t *gemm) {
  const char *pin = std::getenv("KILN_GEMM_PIN_ROWS");
  if (!pin)
    return KILN_OK;
  char *end = nullptr;
  const long long rows = std::strtoll(pin, &end, 10);
  if (end == pin || *end != '\0' || rows < 1 || rows > KILN_GEMM_MAX_INVARIANT_ROWS)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "kiln_gemm_create: KILN_GEMM_PIN_ROWS='%s' is not a row count in 1..%d", pin,
                KILN_GEMM_MAX_INVARIANT_ROWS);
  gemm->pinRows = rows;
  return KILN_OK;
}

// KILN_GEMM_KERNELS_ONLY=0: the heuristic's order alone, memsets and all (how the cost
// of a graph launch off the fast path is measured again). KILN_GEMM_SKINNY ("0", "fma",
// else tensor cores): the skinny GEMM's form for every handle, whatever
// kiln_gemm_set_skinny says.
void choicesFromEnvironment(kiln_gemm_t *gemm) {
  const char *only = std::getenv("KILN_GEMM_KERNELS_ONLY");
  gemm->kernelsOnly = !(only && std::string(only) == "0");
  if (const char *skinny = std::getenv("KILN_GEMM_SKINNY"))
    gemm->skinnyOverride = std::string(skinny) == "0"     ? KILN_GEMM_SKINNY_OFF
                           : std::string(skinny) == "fma" ? KILN_GEMM_SKINNY_CUDA_CORES
                                                          : KILN_GEMM_SKINNY_TENSOR_CORES;
}

} // namespace

extern "C" kiln_status_t kiln_gemm_create(kiln_gemm_t **out) {
  if (!out)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_gemm_create: out is null");
  *out = nullptr;
  auto *gemm = new (std::nothrow) kiln_gemm;
  if (!gemm)
    return fail(KILN_ERROR_OUT_OF_MEMORY, "kiln_gemm_create: out of host memory");
  if (kiln_status_t s = pinRowsFromEnvironment(gemm); s != KILN_OK) {
    delete gemm;
    return s;
  }
  choicesFromEnvironment(gemm);
  const cublasStatus_t st = cublasLtCreate(&gemm->handle);
  if (st != CUBLAS_STATUS_SUCCESS) {
    delete gemm;
    return fail(KILN_ERROR_CUDA, "kiln_gemm_create: cublasLtCreate failed: %s",
                cublasLtGetStatusString(st));
  }
  // Whether the own row-invariant GEMM runs here is found out now, outside any capture.
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetAttribute(&gemm->sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess)
    kiln::graph::groupedGemmDeviceState(/*mayProbe=*/true);
  else
    cudaGetLastError(); // no device: cuBLASLt would fail the same way at its first call
  *out = gemm;
  return ok();
}

extern "C" kiln_status_t kiln_gemm_set_policy(kiln_gemm_t *gemm, kiln_gemm_policy_t policy) {
  if (!gemm)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_gemm_set_policy: gemm is null");
  if (policy != KILN_GEMM_ROW_INVARIANT && policy != KILN_GEMM_HEURISTIC)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_gemm_set_policy: policy %d unknown",
                static_cast<int>(policy));
  std::lock_guard<std::mutex> lock(gemm->mutex);
  if (gemm->policy != policy)
    gemm->reset();
  gemm->policy = policy;
  return ok();
}

extern "C" kiln_status_t kiln_gemm_set_invariant_rows(kiln_gemm_t *gemm, int64_t rows) {
  if (!gemm)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_gemm_set_invariant_rows: gemm is null");
  if (rows < 1 || rows > KILN_GEMM_MAX_INVARIANT_ROWS)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "kiln_gemm_set_invariant_rows: rows %lld outside 1..%d",
                static_cast<long long>(rows), KILN_GEMM_MAX_INVARIANT_ROWS);
  std::lock_guard<std::mutex> lock(gemm->mutex);
  if (gemm->invariantRows != rows)
    gemm->reset();
  gemm->invariantRows = rows;
  return ok();
}

extern "C" kiln_status_t kiln_gemm_set_pin_rows(kiln_gemm_t *gemm, int64_t rows) {
  if (!gemm)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_gemm_set_pin_rows: gemm is null");
  if (rows < 1 || rows > KILN_GEMM_MAX_INVARIANT_ROWS)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_gemm_set_pin_rows: rows %lld outside 1..%d",
                static_cast<long long>(rows), KILN_GEMM_MAX_INVARIANT_ROWS);
  std::lock_guard<std::mutex> lock(gemm->mutex);
  if (gemm->pinRows != std::optional<int64_t>(rows))
    gemm->reset();
  gemm->pinRows = rows;
  return ok();
}

extern "C" kiln_status_t kiln_gemm_set_skinny(kiln_gemm_t *gemm, kiln_gemm_skinny_t form) {
  if (!gemm)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_gemm_set_skinny: gemm is null");
  if (form != KILN_GEMM_SKINNY_OFF && form != KILN_GEMM_SKINNY_TENSOR_CORES &&
      form != KILN_GEMM_SKINNY_CUDA_CORES)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "kiln_gemm_set_skinny: form %d unknown (off 0, tensor cores 1, CUDA cores 2)",
                static_cast<int>(form));
  std::lock_guard<std::mutex> lock(gemm->mutex);
  gemm->skinny = form;
  return ok();
}

extern "C" kiln_gemm_skinny_t kiln_gemm_skinny_form(const kiln_gemm_t *gemm) {
  if (!gemm)
    return KILN_GEMM_SKINNY_OFF;
  std::lock_guard<std::mutex> lock(gemm->mutex);
  return gemm->skinnyOverride.value_or(gemm->skinny);
}

extern "C" void kiln_gemm_destroy(kiln_gemm_t *gemm) {
  if (!gemm)
    return;
  gemm->clearPlans();
  cublasLtDestroy(gemm->handle);
  delete gemm;
}

namespace {

bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether the row-invariant policy runs the own GEMM (GroupedGemm.h's dense form,
// sm_90a): a decode or verify step's rows (m up to the invariant rows) of a shape whose
// output features fill the SMs without splitting K (an lm_head), no bias. It reads the
// weights at 95-97% of the read ceiling there, against cuBLASLt's 90% (H100). The choice
// depends on the shape, the device and the pointers' alignment only, so every m up to the
// invariant rows takes the same GEMM and a row's bits never depend on m.
bool useOwnGemm(kiln_gemm_t *gemm, const void *x, const void *w, const void *bias,
                const void *out, int64_t m, int64_t n, int64_t k, void *stream) {
  if (bias || !aligned16(x) || !aligned16(w) || !aligned16(out) ||
      !kiln::graph::denseGemmFillsTheSms(n, k, gemm->sms))
    return false;
  {
    std::lock_guard<std::mutex> lock(gemm->mutex);
    if (gemm->policy != KILN_GEMM_ROW_INVARIANT || m > gemm->invariantRows)
      return false;
  }
  return kiln::graph::groupedGemmDeviceReady(
      !kiln::graph::streamCapturing(static_cast<cudaStream_t>(stream)));
}

// The skinny GEMM's form a call runs (OFF: cuBLASLt): the handle's (kiln_gemm_set_skinny)
// for every m up to the invariant rows and none above them, when the operands have the
// kernel's form. That form depends on the shape and the pointers' alignment, which a
// layer's calls share at every m (the activation plan's offsets), so a row's bits still
// never depend on m.
kiln_gemm_skinny_t skinnyFormFor(kiln_gemm_t *gemm, const kiln::graph::SkinnyGemmArgs &args) {
  std::lock_guard<std::mutex> lock(gemm->mutex);
  const kiln_gemm_skinny_t form = gemm->skinnyOverride.value_or(gemm->skinny);
  if (form == KILN_GEMM_SKINNY_OFF || gemm->policy != KILN_GEMM_ROW_INVARIANT ||
      args.m > gemm->invariantRows || !kiln::graph::skinnyGemmFits(args))
    return KILN_GEMM_SKINNY_OFF;
  return form;
}

kiln_status_t runSkinny(const char *fn, const kiln::graph::SkinnyGemmArgs &args,
                        kiln_gemm_skinny_t form, void *stream) {
  const cudaError_t e = kiln::graph::launchSkinnyGemm(
      args, form == KILN_GEMM_SKINNY_TENSOR_CORES, static_cast<cudaStream_t>(stream));
  return e == cudaSuccess
             ? ok()
             : fail(KILN_ERROR_CUDA, "%s: skinny GEMM launch failed: %s", fn,
                    cudaGetErrorString(e));
}

// kiln_gemm_bf16 and kiln_gemm_bf16_f32out: out's element is fp32 when f32Out.
kiln_status_t denseGemm(const char *fn, kiln_gemm_t *gemm, const void *x, const void *w,
                        const void *bias, void *out, int64_t m, int64_t n, int64_t k,
                        void *workspace, size_t workspace_bytes, void *stream, bool f32Out) {
  // Validation first; `gemm` is not dereferenced before every argument passed.
  const struct {
    const void *p;
    const char *name;
  } pointers[] = {{gemm, "gemm"}, {x, "x"}, {w, "w"}, {out, "out"}};
  for (const auto &arg : pointers)
    if (!arg.p)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is null", fn, arg.name);
  const struct {
    const void *p;
    const char *name;
    uintptr_t bytes;
  } data[] = {{x, "x", 2}, {w, "w", 2}, {bias, "bias", 2}, {out, "out", f32Out ? 4u : 2u}};
  for (const auto &arg : data)
    if (reinterpret_cast<uintptr_t>(arg.p) % arg.bytes != 0)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is not %d-byte aligned", fn, arg.name,
                  static_cast<int>(arg.bytes));
  if (m < 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: m is negative (%lld)", fn,
                static_cast<long long>(m));
  const struct {
    int64_t v;
    const char *name;
  } sizes[] = {{n, "n"}, {k, "k"}};
  for (const auto &s : sizes)
    if (s.v <= 0)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s must be > 0 (got %lld)", fn, s.name,
                  static_cast<long long>(s.v));
  const struct {
    int64_t v;
    const char *name;
  } limits[] = {{m, "m"}, {n, "n"}, {k, "k"}};
  for (const auto &s : limits)
    if (s.v > std::numeric_limits<int32_t>::max())
      return fail(KILN_ERROR_UNSUPPORTED, "%s: %s = %lld exceeds the supported maximum %d",
                  fn, s.name, static_cast<long long>(s.v),
                  std::numeric_limits<int32_t>::max());
  if (!workspace && workspace_bytes != 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: workspace is null but workspace_bytes is %zu",
                fn, workspace_bytes);
  if (m == 0)
    return ok();
  const bool own = !f32Out && useOwnGemm(gemm, x, w, bias, out, m, n, k, stream);
  const kiln::graph::SkinnyGemmArgs skinny{static_cast<const uint16_t *>(x), k, 0,
                                           static_cast<const uint16_t *>(w), k, 0,
                                           static_cast<const uint16_t *>(bias),
                                           static_cast<uint16_t *>(out), n, 0, 1, m, n, k};
  if (!own && !f32Out)
    if (const kiln_gemm_skinny_t form = skinnyFormFor(gemm, skinny); form != KILN_GEMM_SKINNY_OFF)
      return runSkinny(fn, skinny, form, stream);
  if (own) {
    const cudaError_t e = kiln::graph::launchDenseGemm(
        static_cast<const uint16_t *>(x), static_cast<const uint16_t *>(w),
        static_cast<uint16_t *>(out), m, n, k, static_cast<cudaStream_t>(stream));
    return e == cudaSuccess ? ok()
                            : fail(KILN_ERROR_CUDA, "%s: own GEMM launch failed: %s", fn,
                                   cudaGetErrorString(e));
  }

  PlanKey key{m,
              n,
              k,
              static_cast<uint64_t>(workspace_bytes),
              alignmentOf(x),
              alignmentOf(w),
              alignmentOf(out),
              bias ? alignmentOf(bias) : 0u};
  key.f32Out = f32Out;
  return runPlanned(gemm, key, bias, w, x, out, workspace, workspace_bytes, stream);
}

} // namespace

extern "C" kiln_status_t kiln_gemm_bf16(kiln_gemm_t *gemm, const void *x, const void *w,
                                        const void *bias, void *out, int64_t m, int64_t n,
                                        int64_t k, void *workspace, size_t workspace_bytes,
                                        void *stream) {
  return denseGemm(kGemm, gemm, x, w, bias, out, m, n, k, workspace, workspace_bytes, stream,
                   false);
}

extern "C" kiln_status_t kiln_gemm_bf16_f32out(kiln_gemm_t *gemm, const void *x, const void *w,
                                               void *out, int64_t m, int64_t n, int64_t k,
                                               void *workspace, size_t workspace_bytes,
                                               void *stream) {
  return denseGemm("kiln_gemm_bf16_f32out", gemm, x, w, nullptr, out, m, n, k, workspace,
                   workspace_bytes, stream, true);
}

extern "C" kiln_status_t kiln_gemm_bf16_batched(kiln_gemm_t *gemm, const void *const *w_ptrs,
                                                const void *const *x_ptrs,
                                                void *const *out_ptrs, int64_t count,
                                                int64_t rows, int64_t n, int64_t k,
                                                void *workspace, size_t workspace_bytes,
                                                void *stream) {
  const char *fn = "kiln_gemm_bf16_batched";
  const struct {
    const void *p;
    const char *name;
  } pointers[] = {{gemm, "gemm"}, {w_ptrs, "w_ptrs"}, {x_ptrs, "x_ptrs"}, {out_ptrs, "out_ptrs"}};
  for (const auto &arg : pointers) {
    if (!arg.p)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is null", fn, arg.name);
    if (reinterpret_cast<uintptr_t>(arg.p) % alignof(void *) != 0)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is not pointer-aligned", fn, arg.name);
  }
  if (count < 0 || count > std::numeric_limits<int32_t>::max())
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: count %lld outside 0..%d", fn,
                static_cast<long long>(count), std::numeric_limits<int32_t>::max());
  if (rows < 1 || rows > std::numeric_limits<int32_t>::max())
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: rows %lld outside 1..%d", fn,
                static_cast<long long>(rows), std::numeric_limits<int32_t>::max());
  const struct {
    int64_t v;
    const char *name;
  } sizes[] = {{n, "n"}, {k, "k"}};
  for (const auto &size : sizes)
    if (size.v <= 0 || size.v % 8 != 0 || size.v > std::numeric_limits<int32_t>::max())
      return fail(KILN_ERROR_INVALID_ARGUMENT,
                  "%s: %s must be a positive multiple of 8 below 2^31 (got %lld)", fn,
                  size.name, static_cast<long long>(size.v));
  if (!workspace && workspace_bytes != 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: workspace is null but workspace_bytes is %zu",
                fn, workspace_bytes);
  if (count == 0)
    return ok();
  // Every matrix is 16-byte aligned (the caller's contract; the arrays live on the device).
  PlanKey key{count, n, k, static_cast<uint64_t>(workspace_bytes), 16, 16, 16, 0u};
  key.batched = true;
  key.rows = rows;
  return runPlanned(gemm, key, nullptr, w_ptrs, x_ptrs, const_cast<void *>(
                        static_cast<const void *>(out_ptrs)), workspace, workspace_bytes, stream);
}

namespace {

// kiln_gemm_bf16_strided_batched's arguments (fn names the caller in the messages).
kiln_status_t checkStridedBatch(const char *fn, kiln_gemm_t *gemm,
                                const kiln_gemm_strided_batch_t *p, void *workspace,
                                size_t workspace_bytes) {
  if (!gemm || !p)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is null", fn, gemm ? "params" : "gemm");
  const struct {
    const void *ptr;
    const char *name;
  } pointers[] = {{p->x, "x"}, {p->w, "w"}, {p->out, "out"}};
  for (const auto &arg : pointers) {
    if (!arg.ptr)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is null", fn, arg.name);
    if (reinterpret_cast<uintptr_t>(arg.ptr) % 16 != 0)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is not 16-byte aligned", fn, arg.name);
  }
  const int64_t int32Max = std::numeric_limits<int32_t>::max();
  const struct {
    int64_t v;
    const char *name;
  } counts[] = {{p->batch, "batch"}, {p->m, "m"}};
  for (const auto &count : counts)
    if (count.v < 0 || count.v > int32Max)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s %lld outside 0..%lld", fn, count.name,
                  static_cast<long long>(count.v), static_cast<long long>(int32Max));
  const struct {
    int64_t v;
    const char *name;
    bool mayBeZero;
  } multiples[] = {{p->n, "n", false},
                   {p->k, "k", false},
                   {p->ldx, "ldx", false},
                   {p->ldw, "ldw", false},
                   {p->ldo, "ldo", false},
                   {p->x_batch_stride, "x_batch_stride", true},
                   {p->w_batch_stride, "w_batch_stride", false},
                   {p->out_batch_stride, "out_batch_stride", false}};
  for (const auto &size : multiples)
    if (size.v < 0 || (size.v == 0 && !size.mayBeZero) || size.v % 8 != 0 ||
        size.v > int32Max)
      return fail(KILN_ERROR_INVALID_ARGUMENT,
                  "%s: %s must be a %s multiple of 8 below 2^31 (got %lld)", fn, size.name,
                  size.mayBeZero ? "non-negative" : "positive", static_cast<long long>(size.v));
  const int64_t wRow = p->w_kn ? p->n : p->k;
  if (p->ldx < p->k || p->ldo < p->n || p->ldw < wRow)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: leading dimensions (x %lld, w %lld, out %lld) below their rows (k %lld, "
                "w %lld, n %lld)",
                fn, static_cast<long long>(p->ldx), static_cast<long long>(p->ldw),
                static_cast<long long>(p->ldo), static_cast<long long>(p->k),
                static_cast<long long>(wRow), static_cast<long long>(p->n));
  if (!workspace && workspace_bytes != 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: workspace is null but workspace_bytes is %zu",
                fn, workspace_bytes);
  return KILN_OK;
}

kiln::graph::SkinnyGemmArgs skinnyArgsOf(const kiln_gemm_strided_batch_t *p) {
  return {static_cast<const uint16_t *>(p->x),
          p->ldx,
          p->x_batch_stride,
          static_cast<const uint16_t *>(p->w),
          p->ldw,
          p->w_batch_stride,
          nullptr,
          static_cast<uint16_t *>(p->out),
          p->ldo,
          p->out_batch_stride,
          p->batch,
          p->m,
          p->n,
          p->k};
}

} // namespace

extern "C" kiln_status_t kiln_gemm_bf16_strided_batched(kiln_gemm_t *gemm,
                                                        const kiln_gemm_strided_batch_t *p,
                                                        void *workspace, size_t workspace_bytes,
                                                        void *stream) {
  const char *fn = "kiln_gemm_bf16_strided_batched";
  if (kiln_status_t s = checkStridedBatch(fn, gemm, p, workspace, workspace_bytes); s != KILN_OK)
    return s;
  if (p->batch == 0 || p->m == 0)
    return ok();
  const kiln::graph::SkinnyGemmArgs skinny = skinnyArgsOf(p);
  if (!p->w_kn)
    if (const kiln_gemm_skinny_t form = skinnyFormFor(gemm, skinny); form != KILN_GEMM_SKINNY_OFF)
      return runSkinny(fn, skinny, form, stream);
  PlanKey key{p->m, p->n, p->k, static_cast<uint64_t>(workspace_bytes), 16, 16, 16, 0u};
  key.stridedBatch = p->batch;
  key.wKn = p->w_kn != 0;
  key.ldx = p->ldx;
  key.ldw = p->ldw;
  key.ldo = p->ldo;
  key.strideX = p->x_batch_stride;
  key.strideW = p->w_batch_stride;
  key.strideOut = p->out_batch_stride;
  return runPlanned(gemm, key, nullptr, p->w, p->x, p->out, workspace, workspace_bytes, stream);
}

extern "C" kiln_status_t kiln_gemm_bf16_pair_swiglu(kiln_gemm_t *gemm,
                                                   const kiln_gemm_strided_batch_t *pair,
                                                   void *h, void *stream) {
  const char *fn = "kiln_gemm_bf16_pair_swiglu";
  if (kiln_status_t s = checkStridedBatch(fn, gemm, pair, nullptr, 0); s != KILN_OK)
    return s;
  if (!h)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: h is null", fn);
  if (reinterpret_cast<uintptr_t>(h) % 2 != 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: h is not 2-byte aligned", fn);
  if (pair->batch != 2 || pair->x_batch_stride != 0 || pair->w_kn)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: a gate/up pair is a batch of 2 with one x and nn.Linear weights (got "
                "batch %lld, x_batch_stride %lld, w_kn %d)",
                fn, static_cast<long long>(pair->batch),
                static_cast<long long>(pair->x_batch_stride), static_cast<int>(pair->w_kn));
  if (pair->m == 0)
    return ok();
  // Fused only where the pair alone would run the tensor-core skinny GEMM, so that
  // fusing never changes which GEMM, and so which bits, a shape gets.
  kiln::graph::SkinnyGemmArgs args = skinnyArgsOf(pair);
  const kiln_gemm_skinny_t form = skinnyFormFor(gemm, args);
  args.glu = static_cast<uint16_t *>(h);
  args.ldGlu = pair->n;
  if (form != KILN_GEMM_SKINNY_TENSOR_CORES || !kiln::graph::skinnyGemmFits(args))
    return fail(KILN_ERROR_UNSUPPORTED,
                "%s: the SwiGLU is fused on the tensor-core skinny GEMM only (run the pair "
                "and the SwiGLU)",
                fn);
  return runSkinny(fn, args, form, stream);
}
