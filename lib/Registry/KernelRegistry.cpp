//===- KernelRegistry.cpp - Kiln's kernel table and the matching rules ----===//
#include "kiln/Registry/KernelRegistry.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace kiln;

uint32_t kiln::dtypeBitOf(mlir::Type type) {
  if (!type)
    return 0;
  if (type.isBF16())
    return static_cast<uint32_t>(DtypeBit::bf16);
  if (type.isF16())
    return static_cast<uint32_t>(DtypeBit::f16);
  if (type.isF32())
    return static_cast<uint32_t>(DtypeBit::f32);
  if (mlir::isa<mlir::Float8E4M3FNType>(type))
    return static_cast<uint32_t>(DtypeBit::fp8);
  if (mlir::isa<mlir::Float8E5M2Type>(type))
    return static_cast<uint32_t>(DtypeBit::fp8_e5m2);
  return 0;
}

int kiln::runtimeKernelId(llvm::StringRef name) {
#define KILN_RT_KERNEL(ENUM, VALUE, NAME)                                                   \
  if (name == NAME)                                                                        \
    return VALUE;
#include "kiln/Runtime/ABI.def"
  return 0;
}

namespace {
constexpr uint32_t kBf16 = static_cast<uint32_t>(DtypeBit::bf16);
constexpr uint32_t kF16 = static_cast<uint32_t>(DtypeBit::f16);
constexpr uint32_t kF32 = static_cast<uint32_t>(DtypeBit::f32);
constexpr uint32_t kFp8 = static_cast<uint32_t>(DtypeBit::fp8);
constexpr uint32_t feature(TargetFeature f) { return static_cast<uint32_t>(f); }

// The table. Shared-memory figures are what each kernel's launcher requests per block
// for its largest supported configuration of the common shapes (docs/kernels-*.md:
// gqa_decode 96 KiB at d<=128 (d=256 with > 64 query rows needs up to 128 KiB and
// reports UNSUPPORTED where that does not fit), mla_decode 226.5 KiB,
// mla_decode_small_smem 93,952 B (99,200 B over an FP8 latent pool),
// prefill_fmha 96 KiB (d256 takes 128 KiB where a block may, else 96 KiB), the wgmma
// prefill 161 KiB, 193 KiB at d256); SM ranges are where the kernel is compiled.
// `dtypes` are the KV caches a variant reads next to the runtime's bf16 activations: an
// f16 or FP8 pool needs its own (converting) kernels, which gqa_decode and prefill_fmha
// have and the wgmma prefill does not.
std::vector<KernelVariant> builtinVariants() {
  std::vector<KernelVariant> table;
  auto add = [&](KernelVariant v) { table.push_back(std::move(v)); };

  // Attention, decode. Paged KV [pages, 2, page, kv_heads, head_dim].
  add({.name = "gqa_decode",
       .family = OpFamily::attention,
       .phase = Phase::decode,
       .minSm = 80,
       .maxSm = 121,
       .smemBytes = 96 * 1024,
       .headDims = {64, 128, 256},
       .dtypes = kBf16 | kF16 | kFp8,
       .pageSizes = {16, 32, 64, 128},
       .maxGroupSize = 16,
       .maxQueryLen = 8,
       .priority = 10,
       .note = "paged GQA/MHA/MQA decode, split-KV, q_len 1..8 causal among drafts; FP8 "
               "e4m3 pools widened to fp16 in registers, f16 pools read as fp16 operands"});
  // Attention, prefill (and the extend-context path for draft tokens).
  // Head dim 256 (Qwen3-Next's full attention) is the same kernel and launcher with its
  // own tiles (docs/kernels-prefill.md), so it is listed here rather than as a variant.
  add({.name = "prefill_fmha",
       .family = OpFamily::attention,
       .phase = Phase::prefill,
       .minSm = 80,
       .maxSm = 121,
       .smemBytes = 96 * 1024,
       .headDims = {64, 128, 256},
       .dtypes = kBf16 | kF16 | kFp8,
       .priority = 10,
       .note = "FlashAttention-2 style causal varlen prefill, mma.sync, paged extend (reads "
               "FP8 e4m3 and f16 caches)"});
  add({.name = "prefill_fmha_sm90",
       .family = OpFamily::attention,
       .phase = Phase::prefill,
       .minSm = 90,
       .maxSm = 90,
       .requiredFeatures = feature(TargetFeature::wgmma) | feature(TargetFeature::tma),
       .smemBytes = 162 * 1024,
       .headDims = {64, 128},
       .dtypes = kBf16,
       .priority = 20,
       .note = "Hopper wgmma prefill (dense prompts: warp-specialized, a TMA producer warp "
               "and two consumer warpgroups in ping-pong; paged extend: bf16 caches, q and "
               "K/V share one element type)"});
  // The wgmma prefill at head_dim 256 (Qwen3-Next's full attention): the same kernel and
  // launcher on its own tiles (64-key, 2 stages: a warpgroup's 64 x 256 O accumulator
  // takes 128 registers a thread and the ring 192 KiB), listed apart because it needs
  // more shared memory than the d64/d128 tiles and runs on its own kernel id.
  add({.name = "prefill_fmha_sm90_d256",
       .family = OpFamily::attention,
       .phase = Phase::prefill,
       .minSm = 90,
       .maxSm = 90,
       .requiredFeatures = feature(TargetFeature::wgmma) | feature(TargetFeature::tma),
       .smemBytes = 193 * 1024,
       .headDims = {256},
       .dtypes = kBf16,
       .priority = 20,
       .note = "Hopper wgmma prefill at head_dim 256 (dense and paged extend; bf16 caches)"});
  // MLA, decode. Latent pool [pages, 64, 576] bf16, or FP8 latent tokens (656 bytes:
  // 512 e4m3 + 4 f32 group scales + 64 bf16 rope, kiln/Kernels/Decode.h) that the mma.sync
  // kernels widen to bf16 in shared memory (96.9 KiB at 16 rows, 176 KiB at 64: within
  // the bf16 figures below); the sm_90 wgmma form reads bf16 pools only, so an FP8 launch
  // of mla_decode runs the mma.sync kernel there.
  add({.name = "mla_decode", .family = OpFamily::mla, .phase = Phase::decode,
       .minSm = 80, .maxSm = 121, .smemBytes = 231936, .headDims = {576},
       .dtypes = kBf16 | kFp8, .pageSizes = {64}, .maxHeads = 128, .maxQueryLen = 4,
       .priority = 10,
       .note = "absorbed MLA decode, latent 512 + rope 64, q_len 1..4, large tiles (on "
               "sm_90: wgmma + TMA, mla_decode_sm90, for bf16 pools; FP8 latent pools on "
               "the mma.sync kernel)"});
  add({.name = "mla_decode_small_smem", .family = OpFamily::mla, .phase = Phase::decode,
       .minSm = 80, .maxSm = 121, .smemBytes = 99200, .headDims = {576},
       .dtypes = kBf16 | kFp8, .pageSizes = {64}, .maxHeads = 128, .maxQueryLen = 1,
       .priority = 5,
       .note = "single-token MLA decode for ~99 KiB shared memory (bf16 93,952 B, FP8 "
               "latent pools 99,200 B)"});
  add({.name = "mla_prefill_decode", .family = OpFamily::mla, .phase = Phase::prefill,
       .minSm = 80, .maxSm = 121, .headDims = {576}, .dtypes = kBf16 | kFp8, .pageSizes = {64},
       .maxHeads = 128, .priority = 1,
       .note = "MLA prefill through the decode kernel (append, then causal extend)"});
  add({.name = "mla_prefill", .family = OpFamily::mla, .phase = Phase::prefill,
       .minSm = 80, .maxSm = 121, .headDims = {576}, .dtypes = kBf16 | kFp8, .pageSizes = {64},
       .maxHeads = 128, .priority = 10,
       .note = "MLA prompts expanded (kv_b_proj on the latent) through prefill_fmha when "
               "qk_nope + qk_rope == v_head_dim in {64, 128} or is DeepSeek's 192 over "
               "v_head_dim 128; other shapes and chunks that continue a sequence go "
               "through the decode kernel a token at a time"});
  // Mamba2 SSM.
  add({.name = "ssm_update", .family = OpFamily::ssm, .phase = Phase::decode,
       .dtypes = kF32 | kBf16, .priority = 10,
       .note = "selective state update, one token, state in place"});
  add({.name = "ssm_update_spec", .family = OpFamily::ssm, .phase = Phase::decode,
       .dtypes = kF32 | kBf16, .maxQueryLen = 8, .writesIntermediates = true,
       .priority = 10, .note = "1 + draft tokens, state after each into intermediates"});
  add({.name = "ssm_update_replay", .family = OpFamily::ssm, .phase = Phase::decode,
       .dtypes = kF32 | kBf16, .maxQueryLen = 8, .replay = true, .priority = 10,
       .note = "replay mode: folds the accepted prefix of the last step from its kept "
               "x/B/dt, then 1 + draft tokens whose inputs are kept instead of states"});
  add({.name = "ssm_prefill_sequential", .family = OpFamily::ssm, .phase = Phase::prefill,
       .dtypes = kF32 | kBf16, .priority = 1,
       .note = "prefill as token-by-token state updates (exact, slow for long prompts)"});
  add({.name = "ssm_chunk_scan", .family = OpFamily::ssm, .phase = Phase::prefill,
       .dtypes = kF32 | kBf16, .priority = 10,
       .note = "Mamba2 SSD chunked scan over a prompt, one launch a layer"});
  // Causal conv1d.
  add({.name = "conv_update", .family = OpFamily::conv, .phase = Phase::decode,
       .dtypes = kBf16 | kF16 | kF32, .priority = 10,
       .note = "causal conv1d update, width <= 4, state in place"});
  add({.name = "conv_update_spec", .family = OpFamily::conv, .phase = Phase::decode,
       .dtypes = kBf16 | kF16 | kF32, .maxQueryLen = 8, .writesIntermediates = true,
       .priority = 10, .note = "1 + draft tokens, window after each into intermediates"});
  add({.name = "conv_prefill_sequential", .family = OpFamily::conv, .phase = Phase::prefill,
       .dtypes = kBf16 | kF16 | kF32, .priority = 1,
       .note = "prefill as token-by-token conv updates"});
  add({.name = "conv_prefill", .family = OpFamily::conv, .phase = Phase::prefill,
       .dtypes = kBf16 | kF16 | kF32, .priority = 10,
       .note = "causal conv1d over a prompt, every token in parallel"});
  // Gated DeltaNet (Qwen3-Next; lib/Kernels/GatedDeltaNet, docs/kernels-gdn.md), reached
  // through kiln_rt_gated_delta_net, with fp32 states. Replay mode stays planned: the
  // lowering refuses it.
  add({.name = "gdn_update",
       .family = OpFamily::gdn,
       .phase = Phase::decode,
       .dtypes = kF32,
       .priority = 10,
       .note = "gated delta rule, one token, state in place"});
  add({.name = "gdn_update_spec",
       .family = OpFamily::gdn,
       .phase = Phase::decode,
       .dtypes = kF32,
       .maxQueryLen = 8,
       .writesIntermediates = true,
       .priority = 10,
       .note = "1 + draft tokens, state after each into intermediates"});
  add({.name = "gdn_update_replay",
       .family = OpFamily::gdn,
       .phase = Phase::decode,
       .dtypes = kF32,
       .maxQueryLen = 8,
       .replay = true,
       .priority = 10,
       .note = "replay mode: folds the accepted k/v/g/beta of the last step, keeps this one's"});
  add({.name = "gdn_chunk_prefill",
       .family = OpFamily::gdn,
       .phase = Phase::prefill,
       .dtypes = kF32,
       .priority = 10,
       .note = "chunkwise (WY) gated delta rule over a prompt"});
  // The runtime id of every implemented variant comes from the ABI table by name.
  for (KernelVariant &variant : table)
    if (variant.implemented)
      variant.runtimeKernel = runtimeKernelId(variant.name);
  return table;
}

std::string featureList(uint32_t bits) {
  std::string text;
  for (TargetFeature f : allTargetFeatures())
    if (bits & static_cast<uint32_t>(f))
      text += (text.empty() ? "" : ", ") + stringifyTargetFeature(f).str();
  return text;
}

std::string dtypeList(uint32_t bits) {
  static const std::pair<uint32_t, const char *> names[] = {
      {kBf16, "bf16"}, {kF16, "f16"}, {kF32, "f32"},
      {kFp8, "f8E4M3FN"}, {static_cast<uint32_t>(DtypeBit::fp8_e5m2), "f8E5M2"}};
  std::string text;
  for (auto [bit, name] : names)
    if (bits & bit)
      text += (text.empty() ? "" : ", ") + std::string(name);
  return text;
}

std::string join(llvm::ArrayRef<int64_t> values) {
  std::string text;
  for (int64_t value : values)
    text += (text.empty() ? "" : ", ") + std::to_string(value);
  return text;
}
} // namespace

KernelRegistry KernelRegistry::builtin() {
  KernelRegistry registry;
  registry.variants = builtinVariants();
  return registry;
}

KernelRegistry &KernelRegistry::global() {
  static KernelRegistry registry = builtin();
  return registry;
}

const KernelVariant *KernelRegistry::lookup(llvm::StringRef name) const {
  for (const KernelVariant &variant : variants)
    if (variant.name == name)
      return &variant;
  return nullptr;
}

std::string KernelRegistry::whyRejected(const KernelVariant &v, const KernelQuery &q,
                                        TargetAttr target) {
  std::string reason;
  llvm::raw_string_ostream os(reason);
  unsigned sm = target.getSm();
  if (sm < v.minSm || sm > v.maxSm)
    os << "needs sm_" << v.minSm << "..sm_" << v.maxSm << ", target is sm_" << sm;
  else if ((v.requiredFeatures & target.getFeatureBits()) != v.requiredFeatures)
    os << "needs " << featureList(v.requiredFeatures & ~target.getFeatureBits())
       << ", which sm_" << sm << " lacks";
  else if (v.smemBytes > target.getSmemPerBlock())
    os << "needs " << v.smemBytes << " B shared memory per block, sm_" << sm
       << " allows " << target.getSmemPerBlock();
  else if (!v.headDims.empty() && !llvm::is_contained(v.headDims, q.headDim))
    os << "head dim " << q.headDim << " not in {" << join(v.headDims) << "}";
  else if (v.dtypes && !(v.dtypes & dtypeBitOf(q.dtype)))
    os << "dtype " << q.dtype << " not in {" << dtypeList(v.dtypes) << "}";
  else if (q.pageSize && !v.pageSizes.empty() && !llvm::is_contained(v.pageSizes, q.pageSize))
    os << "page size " << q.pageSize << " not in {" << join(v.pageSizes) << "}";
  else if (v.maxGroupSize && q.groupSize > v.maxGroupSize)
    os << "GQA group " << q.groupSize << " exceeds " << v.maxGroupSize;
  else if (v.maxHeads && q.numHeads > v.maxHeads)
    os << q.numHeads << " query heads exceed " << v.maxHeads;
  else if (q.queryLen > v.maxQueryLen)
    os << "verifies at most " << v.maxQueryLen << " query token"
       << (v.maxQueryLen == 1 ? "" : "s") << " per sequence, step needs " << q.queryLen;
  else if (q.needsIntermediates != v.writesIntermediates)
    os << (v.writesIntermediates ? "writes intermediate states, which only rewind-mode "
                                   "speculation keeps"
                                 : "does not write the intermediate states rewind mode needs");
  else if (q.needsReplay != v.replay)
    os << (v.replay ? "is the replay-mode variant" : "does not keep replay inputs");
  return reason;
}

std::vector<const KernelVariant *> KernelRegistry::candidates(
    const KernelQuery &query, TargetAttr target,
    std::vector<std::pair<const KernelVariant *, std::string>> *rejections) const {
  std::vector<const KernelVariant *> fitting;
  for (const KernelVariant &variant : variants) {
    if (variant.family != query.family || variant.phase != query.phase)
      continue;
    std::string reason = whyRejected(variant, query, target);
    if (reason.empty())
      fitting.push_back(&variant);
    else if (rejections)
      rejections->emplace_back(&variant, std::move(reason));
  }
  std::stable_sort(fitting.begin(), fitting.end(),
                   [](const KernelVariant *a, const KernelVariant *b) {
                     if (a->implemented != b->implemented)
                       return a->implemented;
                     if (a->priority != b->priority)
                       return a->priority > b->priority;
                     return a->name < b->name;
                   });
  return fitting;
}

unsigned KernelRegistry::maxQueryLen(OpFamily family) const {
  unsigned most = 1;
  for (const KernelVariant &variant : variants)
    if (variant.family == family && variant.phase == Phase::decode && variant.implemented)
      most = std::max(most, variant.maxQueryLen);
  return most;
}
