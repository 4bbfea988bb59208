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
// Row invariance (KILN_GEMM_ROW_INVARIANT): a row of out must have the same bits
// whatever m is (a plain decode step of 7 rows and a speculative verify step of 35
// compute the same token's row; greedy speculation is lossless only if they agree).
// Split-K sums K in partial slices whose count the heuristic picks from m, so only
// algorithms without a split-K reduction are accepted. Those accumulate K in one order
// per output element, except that cuBLASLt's kernels for the smallest m (seen: m = 1
// with the bias epilogue) round differently; so every m <= KILN_GEMM_INVARIANT_ROWS
// runs the one algorithm chosen for m = KILN_GEMM_INVARIANT_ROWS. Checked on the GPU by
// GraphGpu.GemmRowsDoNotDependOnM.
#include "kiln/Kernels/Gemm.h"

#include "StatusInternal.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <mutex>
#include <new>
#include <unordered_map>

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
  int64_t m, n, k;
  uint64_t workspaceBytes;
  uint32_t alignX, alignW, alignOut, alignBias; // alignBias 0: no bias
  bool operator==(const PlanKey &o) const {
    return m == o.m && n == o.n && k == o.k && workspaceBytes == o.workspaceBytes &&
           alignX == o.alignX && alignW == o.alignW && alignOut == o.alignOut &&
           alignBias == o.alignBias;
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
  std::mutex mutex;
  std::unordered_map<PlanKey, Plan, PlanKeyHash> plans;

  void clearPlans() {
    for (auto &entry : plans)
      destroyPlan(entry.second);
    plans.clear();
  }
};

namespace {

// The split-K count of a configured algorithm (1 when the attribute cannot be read:
// the heuristic was told to return no split-K reduction).
int32_t splitKCount(const cublasLtMatmulAlgo_t &algo) {
  int32_t splits = 1;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                           sizeof(splits), &written) != CUBLAS_STATUS_SUCCESS)
    return 1;
  return splits;
}

// Builds the descriptor, the layouts and asks the heuristic for an algorithm.
kiln_status_t makePlan(kiln_gemm_t *gemm, const PlanKey &key, const void *bias, Plan &plan) {
  cublasStatus_t st;
#define KILN_LT(call)                                                                          \
  do {                                                                                         \
    if ((st = (call)) != CUBLAS_STATUS_SUCCESS) {                                              \
      destroyPlan(plan);                                                                       \
      return cublasFailure(#call, st);                                                         \
    }                                                                                          \
  } while (0)
  KILN_LT(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transA = CUBLAS_OP_T, transB = CUBLAS_OP_N;
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
  const uint64_t m = static_cast<uint64_t>(key.m), n = static_cast<uint64_t>(key.n),
                 k = static_cast<uint64_t>(key.k);
  KILN_LT(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, k, n, key.k)); // W' [k, n]
  KILN_LT(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, k, m, key.k)); // X' [k, m]
  KILN_LT(cublasLtMatrixLayoutCreate(&plan.d, CUDA_R_16BF, n, m, key.n)); // O' [n, m]

  cublasLtMatmulPreference_t pref = nullptr;
  KILN_LT(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = key.workspaceBytes;
  constexpr int kCandidates = 16;
  cublasLtMatmulHeuristicResult_t results[kCandidates]{};
  int found = 0;
  st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                            &workspace, sizeof(workspace));
  const bool invariant = gemm->policy == KILN_GEMM_ROW_INVARIANT;
  const uint32_t noSplitK = CUBLASLT_REDUCTION_SCHEME_NONE; // see "Row invariance"
  if (st == CUBLAS_STATUS_SUCCESS && invariant)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                              &noSplitK, sizeof(noSplitK));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                              &key.alignW, sizeof(key.alignW));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                              &key.alignX, sizeof(key.alignX));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                              &key.alignOut, sizeof(key.alignOut));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                              &key.alignOut, sizeof(key.alignOut));
  const char *failed = "cublasLtMatmulPreferenceSetAttribute";
  if (st == CUBLAS_STATUS_SUCCESS) {
    failed = "cublasLtMatmulAlgoGetHeuristic";
    // Row-invariant small m: the algorithm of m = KILN_GEMM_INVARIANT_ROWS.
    const bool pinned = invariant && key.m < KILN_GEMM_INVARIANT_ROWS;
    cublasLtMatrixLayout_t chooseB = plan.b, chooseD = plan.d;
    if (pinned) {
      st = cublasLtMatrixLayoutCreate(&chooseB, CUDA_R_16BF, k, KILN_GEMM_INVARIANT_ROWS, key.k);
      if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutCreate(&chooseD, CUDA_R_16BF, n, KILN_GEMM_INVARIANT_ROWS,
                                        key.n);
    }
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(gemm->handle, plan.desc, plan.a, chooseB, chooseD,
                                          chooseD, pref, kCandidates, results, &found);
    // The chosen algorithm must also run this m (it does for every tile kernel).
    for (int i = 0; pinned && st == CUBLAS_STATUS_SUCCESS && i < found; ++i) {
      cublasLtMatmulHeuristicResult_t checked{};
      if (cublasLtMatmulAlgoCheck(gemm->handle, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                  &results[i].algo, &checked) != CUBLAS_STATUS_SUCCESS)
        results[i].state = CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (pinned) {
      if (chooseB != plan.b && chooseB)
        cublasLtMatrixLayoutDestroy(chooseB);
      if (chooseD != plan.d && chooseD)
        cublasLtMatrixLayoutDestroy(chooseD);
    }
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
    destroyPlan(plan);
    return cublasFailure(failed, st);
  }
  // The heuristic's best candidate; when invariant, the best without split-K that keeps
  // at least half the GPU busy (wavesCount >= 0.5): split-K-free variants of kernels
  // meant for split-K can leave most SMs idle at small m (measured: 12x slower for
  // Llama-8B's k/v and down projections at m <= 64), else the busiest one.
  int chosen = -1, busiest = -1;
  for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < found && chosen < 0; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS ||
        (invariant && splitKCount(results[i].algo) > 1))
      continue;
    if (busiest < 0 || results[i].wavesCount > results[busiest].wavesCount)
      busiest = i;
    if (!invariant || results[i].wavesCount >= 0.5f)
      chosen = i;
  }
  if (chosen < 0)
    chosen = busiest;
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || chosen < 0) {
    destroyPlan(plan);
    return fail(KILN_ERROR_UNSUPPORTED,
                "%s: cuBLASLt has no %salgorithm for m=%lld n=%lld k=%lld%s "
                "(alignments x %u, w %u, out %u bytes; workspace %llu bytes)",
                kGemm, invariant ? "row-invariant " : "", static_cast<long long>(key.m),
                static_cast<long long>(key.n),
                static_cast<long long>(key.k), bias ? " with bias" : "", key.alignX, key.alignW,
                key.alignOut, static_cast<unsigned long long>(key.workspaceBytes));
  }
  plan.algo = results[chosen].algo;
  return KILN_OK;
#undef KILN_LT
}

} // namespace

extern "C" kiln_status_t kiln_gemm_create(kiln_gemm_t **out) {
  if (!out)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_gemm_create: out is null");
  *out = nullptr;
  auto *gemm = new (std::nothrow) kiln_gemm;
  if (!gemm)
    return fail(KILN_ERROR_OUT_OF_MEMORY, "kiln_gemm_create: out of host memory");
  const cublasStatus_t st = cublasLtCreate(&gemm->handle);
  if (st != CUBLAS_STATUS_SUCCESS) {
    delete gemm;
    return fail(KILN_ERROR_CUDA, "kiln_gemm_create: cublasLtCreate failed: %s",
                cublasLtGetStatusString(st));
  }
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
    gemm->clearPlans();
  gemm->policy = policy;
  return ok();
}

extern "C" void kiln_gemm_destroy(kiln_gemm_t *gemm) {
  if (!gemm)
    return;
  gemm->clearPlans();
  cublasLtDestroy(gemm->handle);
  delete gemm;
}

extern "C" kiln_status_t kiln_gemm_bf16(kiln_gemm_t *gemm, const void *x, const void *w,
                                        const void *bias, void *out, int64_t m, int64_t n,
                                        int64_t k, void *workspace, size_t workspace_bytes,
                                        void *stream) {
  // Validation first; `gemm` is not dereferenced before every argument passed.
  const struct {
    const void *p;
    const char *name;
  } pointers[] = {{gemm, "gemm"}, {x, "x"}, {w, "w"}, {out, "out"}};
  for (const auto &arg : pointers)
    if (!arg.p)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is null", kGemm, arg.name);
  const struct {
    const void *p;
    const char *name;
  } data[] = {{x, "x"}, {w, "w"}, {bias, "bias"}, {out, "out"}};
  for (const auto &arg : data)
    if (reinterpret_cast<uintptr_t>(arg.p) % 2 != 0)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is not 2-byte aligned", kGemm, arg.name);
  if (m < 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: m is negative (%lld)", kGemm,
                static_cast<long long>(m));
  const struct {
    int64_t v;
    const char *name;
  } sizes[] = {{n, "n"}, {k, "k"}};
  for (const auto &s : sizes)
    if (s.v <= 0)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s must be > 0 (got %lld)", kGemm, s.name,
                  static_cast<long long>(s.v));
  const struct {
    int64_t v;
    const char *name;
  } limits[] = {{m, "m"}, {n, "n"}, {k, "k"}};
  for (const auto &s : limits)
    if (s.v > std::numeric_limits<int32_t>::max())
      return fail(KILN_ERROR_UNSUPPORTED, "%s: %s = %lld exceeds the supported maximum %d",
                  kGemm, s.name, static_cast<long long>(s.v),
                  std::numeric_limits<int32_t>::max());
  if (!workspace && workspace_bytes != 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: workspace is null but workspace_bytes is %zu",
                kGemm, workspace_bytes);
  if (m == 0)
    return ok();

  const PlanKey key{m,
                    n,
                    k,
                    static_cast<uint64_t>(workspace_bytes),
                    alignmentOf(x),
                    alignmentOf(w),
                    alignmentOf(out),
                    bias ? alignmentOf(bias) : 0u};
  std::lock_guard<std::mutex> lock(gemm->mutex);
  auto found = gemm->plans.find(key);
  if (found == gemm->plans.end()) {
    if (gemm->plans.size() >= kMaxPlans)
      gemm->clearPlans();
    Plan plan;
    const kiln_status_t status = makePlan(gemm, key, bias, plan);
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
