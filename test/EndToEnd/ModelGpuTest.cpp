// The serving layer on a GPU with the hand-written tiny model and random weights (written
// by the test as a safetensors checkpoint): logits against a CPU reference of the same
// decoder (bf16 rounding where transformers rounds) through a chunked prefill, decode,
// multi-token decode, truncate + overwrite, and extend; device memory equal to the plan;
// and kiln-run's n-gram and draft-model speculation equal to plain greedy decoding.
#include "kiln/Runtime/Model.h"

#include "GpuTest.h"

#include <gtest/gtest.h>

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

// The tiny models and kiln-run are the build's (paths CMake bakes in), unless
// KILN_TINY_DIR names a folder with copies of them under the same file names: prebuilt
// test binaries run on another machine (a GPU machine given .carry/dev).
const char *staged(const char *baked) {
  static std::map<std::string, std::string> paths;
  const char *dir = std::getenv("KILN_TINY_DIR");
  if (!dir || !*dir)
    return baked;
  auto [at, fresh] = paths.try_emplace(baked);
  if (fresh) {
    const char *slash = std::strrchr(baked, '/');
    at->second = std::string(dir) + "/" + (slash ? slash + 1 : baked);
  }
  return at->second.c_str();
}
constexpr const char *kBakedTiny = KILN_TINY, *kBakedTinyDraft = KILN_TINY_DRAFT,
                     *kBakedKilnRun = KILN_RUN;
#undef KILN_TINY
#undef KILN_TINY_DRAFT
#undef KILN_RUN
#define KILN_TINY staged(kBakedTiny)
#define KILN_TINY_DRAFT staged(kBakedTinyDraft)
#define KILN_RUN staged(kBakedKilnRun)

} // namespace

namespace {

// Module loading must be eager before the first CUDA call for the memory check (ctest
// sets it too).
const int kEager = setenv("CUDA_MODULE_LOADING", "EAGER", 1);

std::string lastError() { return kiln_last_error(); }

uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float fromBf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float bf(float f) { return fromBf16(toBf16(f)); }

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> values; // bf16-exact
};
using Weights = std::map<std::string, Tensor>;

// The manifest's weight lines: name -> shape.
std::vector<std::pair<std::string, std::vector<int64_t>>> manifestWeights(const char *so) {
  kiln_model_t *m = nullptr;
  EXPECT_EQ(kiln_model_load_dry(so, &m), KILN_OK) << lastError();
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  if (!m)
    return out;
  std::istringstream text(kiln_model_manifest_text(m));
  std::string line;
  while (std::getline(text, line)) {
    std::istringstream f(line);
    std::string key, name, dtype, shape;
    f >> key;
    if (key != "weight")
      continue;
    f >> name >> dtype >> shape;
    std::vector<int64_t> dims;
    std::istringstream s(shape);
    std::string d;
    while (std::getline(s, d, 'x'))
      dims.push_back(std::stoll(d));
    out.push_back({name, dims});
  }
  kiln_model_unload(m);
  return out;
}

Weights randomWeights(const char *so, uint32_t seed) {
  std::mt19937 rng(seed);
  Weights w;
  for (const auto &[name, shape] : manifestWeights(so)) {
    Tensor t;
    t.shape = shape;
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    const bool norm = name.find("norm") != std::string::npos;
    const bool bias = name.find("bias") != std::string::npos;
    const float scale = norm ? 0.2f : bias ? 0.1f
                                : name.find("embed") != std::string::npos
                                    ? 1.0f
                                    : 1.7f / std::sqrt(static_cast<float>(shape.back()));
    std::uniform_real_distribution<float> u(-scale, scale);
    t.values.resize(static_cast<size_t>(n));
    for (auto &v : t.values)
      v = bf((norm ? 1.0f : 0.0f) + u(rng));
    w[name] = std::move(t);
  }
  return w;
}

// model.safetensors: u64 header size, JSON header, bf16 data.
void writeSafetensors(const std::string &dir, const Weights &w) {
  std::string header = "{";
  uint64_t at = 0;
  bool first = true;
  for (const auto &[name, t] : w) {
    std::string shape;
    for (size_t i = 0; i < t.shape.size(); ++i)
      shape += (i ? "," : "") + std::to_string(t.shape[i]);
    const uint64_t bytes = t.values.size() * 2;
    header += std::string(first ? "" : ",") + "\"" + name + "\":{\"dtype\":\"BF16\",\"shape\":[" +
              shape + "],\"data_offsets\":[" + std::to_string(at) + "," +
              std::to_string(at + bytes) + "]}";
    at += bytes;
    first = false;
  }
  header += "}";
  while (header.size() % 8)
    header += ' ';
  std::ofstream out(dir + "/model.safetensors", std::ios::binary);
  uint64_t size = header.size();
  out.write(reinterpret_cast<const char *>(&size), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto &[name, t] : w)
    for (float v : t.values) {
      uint16_t h = toBf16(v);
      out.write(reinterpret_cast<const char *>(&h), 2);
    }
  ASSERT_TRUE(out.good());
}

// Device memory is measured as the whole GPU's free memory, so it only means something
// when no other process allocates on the GPU. scripts/gpu-session.sh sets KILN_GPU_SHARED
// where it runs test binaries side by side (the compute-sanitizer lanes, whose tools also
// allocate device memory of their own); the memory == plan test then runs alone.
bool deviceMemoryIsOurs() {
  if (!std::getenv("KILN_GPU_SHARED"))
    return true;
  std::printf("  [skipped] the memory == plan check: KILN_GPU_SHARED is set (other processes "
              "use this GPU)\n");
  return false;
}

std::string tempDir() {
  char path[] = "/tmp/kiln-model-gpu-XXXXXX";
  const char *p = mkdtemp(path);
  EXPECT_NE(p, nullptr);
  return p ? p : "/tmp";
}

// ---- the CPU reference of TinyModel.c ---------------------------------------------------
constexpr int V = 512, H = 256, NH = 4, KVH = 2, D = 64, I = 512;
constexpr float kEps = 1e-6f, kTheta = 10000.f;

struct Reference {
  const Weights &w;
  int layers;

  const std::vector<float> &t(const std::string &name) const { return w.at(name).values; }

  void rmsNorm(const float *x, const std::vector<float> &g, float *y, int dim) const {
    double s = 0;
    for (int i = 0; i < dim; ++i)
      s += static_cast<double>(x[i]) * x[i];
    const float r = 1.0f / std::sqrt(static_cast<float>(s / dim) + kEps);
    for (int i = 0; i < dim; ++i)
      y[i] = bf(g[i] * bf(x[i] * r));
  }
  void linear(const float *x, const std::vector<float> &W, const std::vector<float> *b, float *y,
              int n, int k) const {
    for (int o = 0; o < n; ++o) {
      float s = 0;
      const float *row = &W[static_cast<size_t>(o) * k];
      for (int i = 0; i < k; ++i)
        s += x[i] * row[i];
      y[o] = bf(s + (b ? (*b)[o] : 0.f));
    }
  }
  void rope(float *x, int heads, int pos) const {
    for (int h = 0; h < heads; ++h) {
      float *v = x + h * D;
      float out[D];
      for (int i = 0; i < D; ++i) {
        const int f = i % (D / 2);
        const float inv = 1.0f / std::pow(kTheta, static_cast<float>(2 * f) / D);
        const float a = static_cast<float>(pos) * inv;
        const float c = bf(std::cos(a)), s = bf(std::sin(a));
        const float rot = i < D / 2 ? -v[i + D / 2] : v[i - D / 2];
        out[i] = bf(bf(v[i] * c) + bf(rot * s));
      }
      std::memcpy(v, out, sizeof(out));
    }
  }

  // Logits [len, V] of every position of `tokens`.
  std::vector<float> logits(const std::vector<int32_t> &tokens) const {
    const int L = static_cast<int>(tokens.size());
    std::vector<float> x(static_cast<size_t>(L) * H), hn(H), q(NH * D), y(H), g(I), u(I), a(I);
    std::vector<float> K(static_cast<size_t>(L) * KVH * D), Vv(static_cast<size_t>(L) * KVH * D);
    std::vector<float> Q(static_cast<size_t>(L) * NH * D), att(NH * D);
    const auto &embed = t("model.embed_tokens.weight");
    for (int p = 0; p < L; ++p)
      std::copy(&embed[static_cast<size_t>(tokens[p]) * H],
                &embed[static_cast<size_t>(tokens[p] + 1) * H], &x[static_cast<size_t>(p) * H]);
    for (int l = 0; l < layers; ++l) {
      const std::string pre = "model.layers." + std::to_string(l) + ".";
      for (int p = 0; p < L; ++p) {
        rmsNorm(&x[static_cast<size_t>(p) * H], t(pre + "input_layernorm.weight"), hn.data(), H);
        linear(hn.data(), t(pre + "self_attn.q_proj.weight"), &t(pre + "self_attn.q_proj.bias"),
               &Q[static_cast<size_t>(p) * NH * D], NH * D, H);
        linear(hn.data(), t(pre + "self_attn.k_proj.weight"), &t(pre + "self_attn.k_proj.bias"),
               &K[static_cast<size_t>(p) * KVH * D], KVH * D, H);
        linear(hn.data(), t(pre + "self_attn.v_proj.weight"), &t(pre + "self_attn.v_proj.bias"),
               &Vv[static_cast<size_t>(p) * KVH * D], KVH * D, H);
        rope(&Q[static_cast<size_t>(p) * NH * D], NH, p);
        rope(&K[static_cast<size_t>(p) * KVH * D], KVH, p);
      }
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      for (int p = 0; p < L; ++p) {
        for (int h = 0; h < NH; ++h) {
          const int kvh = h / (NH / KVH);
          const float *qv = &Q[(static_cast<size_t>(p) * NH + h) * D];
          std::vector<float> s(static_cast<size_t>(p) + 1);
          float mx = -INFINITY;
          for (int j = 0; j <= p; ++j) {
            const float *kv = &K[(static_cast<size_t>(j) * KVH + kvh) * D];
            float dot = 0;
            for (int i = 0; i < D; ++i)
              dot += qv[i] * kv[i];
            s[j] = dot * scale;
            mx = std::max(mx, s[j]);
          }
          float sum = 0;
          for (auto &v : s)
            sum += (v = std::exp(v - mx));
          for (int i = 0; i < D; ++i) {
            float o = 0;
            for (int j = 0; j <= p; ++j)
              o += s[j] * Vv[(static_cast<size_t>(j) * KVH + kvh) * D + i];
            att[h * D + i] = bf(o / sum);
          }
        }
        float *xp = &x[static_cast<size_t>(p) * H];
        linear(att.data(), t(pre + "self_attn.o_proj.weight"), nullptr, y.data(), H, NH * D);
        for (int i = 0; i < H; ++i)
          xp[i] = bf(xp[i] + y[i]);
        rmsNorm(xp, t(pre + "post_attention_layernorm.weight"), hn.data(), H);
        linear(hn.data(), t(pre + "mlp.gate_proj.weight"), nullptr, g.data(), I, H);
        linear(hn.data(), t(pre + "mlp.up_proj.weight"), nullptr, u.data(), I, H);
        for (int i = 0; i < I; ++i)
          a[i] = bf(bf(g[i] / (1.0f + std::exp(-g[i]))) * u[i]);
        linear(a.data(), t(pre + "mlp.down_proj.weight"), nullptr, y.data(), H, I);
        for (int i = 0; i < H; ++i)
          xp[i] = bf(xp[i] + y[i]);
      }
    }
    std::vector<float> out(static_cast<size_t>(L) * V);
    for (int p = 0; p < L; ++p) {
      rmsNorm(&x[static_cast<size_t>(p) * H], t("model.norm.weight"), hn.data(), H);
      linear(hn.data(), t("lm_head.weight"), nullptr, &out[static_cast<size_t>(p) * V], V, H);
    }
    return out;
  }
};

// ||a - b|| / ||b|| of one row of V logits.
double relErr(const float *a, const float *b) {
  double num = 0, den = 0;
  for (int i = 0; i < V; ++i) {
    num += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

int argmaxOf(const float *v) { return static_cast<int>(std::max_element(v, v + V) - v); }

constexpr double kTol = 2e-2;

// Checks kiln's logits row against the reference at `position` of `tokens`.
void expectRow(const Reference &ref, const std::vector<int32_t> &tokens, int position,
               const float *row, const char *what) {
  static std::map<std::vector<int32_t>, std::vector<float>> memo;
  auto it = memo.find(tokens);
  if (it == memo.end())
    it = memo.emplace(tokens, ref.logits(tokens)).first;
  const std::vector<float> &r = it->second;
  const float *want = &r[static_cast<size_t>(position) * V];
  double e = relErr(row, want);
  EXPECT_LE(e, kTol) << what << ": position " << position << " of " << tokens.size();
  std::printf("  %-28s len %4zu pos %4d: rel err %.2e, argmax kiln %d ref %d\n", what,
              tokens.size(), position, e, argmaxOf(row), argmaxOf(want));
}

TEST(ModelGpu, ForwardMatchesReferenceAndPlan) {
  KILN_REQUIRE_GPU();
  (void)kEager;
  const std::string dir = tempDir();
  Weights w = randomWeights(KILN_TINY, 1234);
  writeSafetensors(dir, w);
  kiln_model_t *m = nullptr;
  ASSERT_EQ(kiln_model_load(KILN_TINY, dir.c_str(), 0, &m), KILN_OK) << lastError();
  const uint64_t planned = kiln_model_planned_bytes(m), used = kiln_model_device_bytes_used(m);
  std::printf("  planned %llu bytes, used %llu (%.3f%%)\n",
              static_cast<unsigned long long>(planned), static_cast<unsigned long long>(used),
              100.0 * (static_cast<double>(used) - planned) / planned);
  EXPECT_LE(std::fabs(static_cast<double>(used) - planned), planned * 0.01);
  // How the driver loads kernels: a lazily loaded kernel takes device memory for its code
  // at its first launch, after the baseline (docs/performance.md, "FP8 KV cache").
  int (*loadingMode)(int *) = nullptr;
  int mode = 0;
  if (cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode",
                                       reinterpret_cast<void **>(&loadingMode), 11070,
                                       cudaEnableDefault, nullptr) == cudaSuccess &&
      loadingMode && loadingMode(&mode) == 0)
    std::printf("  module loading: %s\n", mode == 1 ? "eager" : mode == 2 ? "lazy" : "unknown");
  size_t stackLimit = 0;
  cudaDeviceGetLimit(&stackLimit, cudaLimitStackSize);
  std::printf("  thread stack limit: %zu bytes\n", stackLimit);
  // Device memory beyond the plan, phase by phase: a failure of the final check then
  // says which step took it.
  uint64_t lastNow = kiln_model_device_bytes_now(m);
  auto phase = [&](const char *name) {
    const uint64_t now = kiln_model_device_bytes_now(m);
    if (now != lastNow)
      std::printf("  device memory after %s: %+lld bytes\n", name,
                  static_cast<long long>(now) - static_cast<long long>(lastNow));
    lastNow = now;
  };
  Reference ref{w, 2};

  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, V - 1);
  std::vector<std::vector<int32_t>> seqs = {std::vector<int32_t>(5), std::vector<int32_t>(37),
                                            std::vector<int32_t>(200)};
  for (auto &s : seqs)
    for (auto &t : s)
      t = tok(rng);
  std::vector<int32_t> ids(3);
  for (auto &id : ids)
    ASSERT_EQ(kiln_model_add_sequence(m, &id), KILN_OK);
  std::vector<const int32_t *> ptrs;
  std::vector<int32_t> lens, next(3);
  for (auto &s : seqs) {
    ptrs.push_back(s.data());
    lens.push_back(static_cast<int32_t>(s.size()));
  }
  std::vector<float> logits(3 * 4 * V);
  ASSERT_EQ(kiln_model_prefill(m, ids.data(), 3, ptrs.data(), lens.data(), next.data(),
                               logits.data()),
            KILN_OK) << lastError();
  phase("prefill");
  for (int i = 0; i < 3; ++i) {
    expectRow(ref, seqs[i], lens[i] - 1, &logits[static_cast<size_t>(i) * V], "prefill");
    EXPECT_EQ(next[i], argmaxOf(&logits[static_cast<size_t>(i) * V]));
  }
  // Two greedy decode steps.
  for (int step = 0; step < 2; ++step) {
    std::vector<int32_t> in = next;
    ASSERT_EQ(kiln_model_decode(m, ids.data(), 3, in.data(), 1, next.data(), logits.data()),
              KILN_OK) << lastError();
    phase("a decode step");
    for (int i = 0; i < 3; ++i) {
      seqs[i].push_back(in[i]);
      expectRow(ref, seqs[i], static_cast<int>(seqs[i].size()) - 1,
                &logits[static_cast<size_t>(i) * V], "decode");
    }
  }
  // Multi-token decode: q_len 4 (1 + 3 drafts).
  std::vector<int32_t> four(12), argmax(12);
  for (auto &t : four)
    t = tok(rng);
  ASSERT_EQ(kiln_model_decode(m, ids.data(), 3, four.data(), 4, argmax.data(), logits.data()),
            KILN_OK) << lastError();
  phase("the q_len 4 decode");
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> s = seqs[i];
    s.insert(s.end(), four.begin() + 4 * i, four.begin() + 4 * i + 4);
    for (int r = 0; r < 4; ++r)
      expectRow(ref, s, static_cast<int>(seqs[i].size()) + r,
                &logits[static_cast<size_t>(4 * i + r) * V], "multi-token decode");
  }
  // Keep 2 of the 4 tokens, then decode over the rejected positions' KV.
  for (int i = 0; i < 3; ++i) {
    seqs[i].push_back(four[4 * i]);
    seqs[i].push_back(four[4 * i + 1]);
    ASSERT_EQ(kiln_model_truncate(m, ids[i], static_cast<int32_t>(seqs[i].size())), KILN_OK);
  }
  std::vector<int32_t> one = {1, 2, 3};
  ASSERT_EQ(kiln_model_decode(m, ids.data(), 3, one.data(), 1, argmax.data(), logits.data()),
            KILN_OK) << lastError();
  for (int i = 0; i < 3; ++i) {
    seqs[i].push_back(one[i]);
    expectRow(ref, seqs[i], static_cast<int>(seqs[i].size()) - 1,
              &logits[static_cast<size_t>(i) * V], "decode after truncate");
  }
  // Extend: 2, 1 and 3 tokens.
  std::vector<std::vector<int32_t>> ext = {{4, 5}, {6}, {7, 8, 9}};
  std::vector<const int32_t *> eptr;
  std::vector<int32_t> elen, last(3);
  for (auto &e : ext) {
    eptr.push_back(e.data());
    elen.push_back(static_cast<int32_t>(e.size()));
  }
  ASSERT_EQ(kiln_model_extend(m, ids.data(), 3, eptr.data(), elen.data(), last.data(),
                              logits.data()),
            KILN_OK) << lastError();
  phase("extend");
  for (int i = 0; i < 3; ++i) {
    seqs[i].insert(seqs[i].end(), ext[i].begin(), ext[i].end());
    expectRow(ref, seqs[i], static_cast<int>(seqs[i].size()) - 1,
              &logits[static_cast<size_t>(i) * V], "extend");
    EXPECT_EQ(kiln_model_seq_len(m, ids[i]), static_cast<int32_t>(seqs[i].size()));
  }
  // No device memory beyond the plan after the steps but the CUDA graphs' own, which the
  // runtime measures at instantiation (the driver takes it in 2 MiB granules).
  const uint64_t now = kiln_model_device_bytes_now(m);
  kiln_rt_graph_stats_t graphs{};
  ASSERT_EQ(kiln_rt_graph_stats(kiln_model_context(m), &graphs), KILN_OK);
  std::printf("  after the steps: %llu bytes (%llu launches; %d graphs took %llu bytes)\n",
              static_cast<unsigned long long>(now),
              static_cast<unsigned long long>(kiln_rt_launch_count(kiln_model_context(m))),
              graphs.graphs, static_cast<unsigned long long>(graphs.graph_bytes));
  if (deviceMemoryIsOurs()) {
    EXPECT_EQ(now, planned + graphs.graph_bytes);
  }
  kiln_model_unload(m);
}

// ---- CUDA graphs ---------------------------------------------------------------------------

// Two loads of the same model and weights, one with CUDA graphs off, run the same steps:
// every decode step's logits are bitwise equal, whether it ran eagerly (a shape's first
// step), was captured (its second) or replayed; shapes change with the draft length and
// when a sequence leaves.
TEST(ModelGpu, GraphReplayEqualsEager) {
  KILN_REQUIRE_GPU();
  (void)kEager;
  const std::string dir = tempDir();
  writeSafetensors(dir, randomWeights(KILN_TINY, 4321));
  kiln_model_t *eager = nullptr, *graphed = nullptr;
  ASSERT_EQ(kiln_model_load(KILN_TINY, dir.c_str(), 0, &eager), KILN_OK) << lastError();
  ASSERT_EQ(kiln_model_load(KILN_TINY, dir.c_str(), 0, &graphed), KILN_OK) << lastError();
  ASSERT_EQ(kiln_rt_set_max_graphs(kiln_model_context(eager), 0), KILN_OK);

  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> tok(0, V - 1);
  std::vector<std::vector<int32_t>> prompts = {std::vector<int32_t>(5), std::vector<int32_t>(37),
                                               std::vector<int32_t>(90)};
  for (auto &p : prompts)
    for (auto &t : p)
      t = tok(rng);
  std::vector<const int32_t *> ptrs;
  std::vector<int32_t> lens;
  for (auto &p : prompts) {
    ptrs.push_back(p.data());
    lens.push_back(static_cast<int32_t>(p.size()));
  }
  std::vector<int32_t> ids[2] = {std::vector<int32_t>(3), std::vector<int32_t>(3)};
  kiln_model_t *models[2] = {eager, graphed};
  std::vector<int32_t> next[2] = {std::vector<int32_t>(3 * 4), std::vector<int32_t>(3 * 4)};
  std::vector<float> logits[2];
  for (int m = 0; m < 2; ++m) {
    for (auto &id : ids[m])
      ASSERT_EQ(kiln_model_add_sequence(models[m], &id), KILN_OK);
    logits[m].resize(3 * 4 * V);
    ASSERT_EQ(kiln_model_prefill(models[m], ids[m].data(), 3, ptrs.data(), lens.data(),
                                 next[m].data(), logits[m].data()),
              KILN_OK) << lastError();
  }
  // One decode step of `n` sequences and q_len (random) tokens each on both models,
  // compared.
  auto step = [&](int n, int qLen, const std::string &what) {
    std::vector<int32_t> in(static_cast<size_t>(n) * qLen);
    for (auto &t : in)
      t = tok(rng);
    for (int m = 0; m < 2; ++m)
      ASSERT_EQ(kiln_model_decode(models[m], ids[m].data(), n, in.data(), qLen, next[m].data(),
                                  logits[m].data()),
                KILN_OK) << what << ": " << lastError();
    const size_t values = static_cast<size_t>(n) * qLen * V;
    EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), values * sizeof(float)), 0)
        << what << ": graph replay differs from eager launches";
    EXPECT_EQ(std::vector<int32_t>(next[0].begin(), next[0].begin() + n * qLen),
              std::vector<int32_t>(next[1].begin(), next[1].begin() + n * qLen))
        << what;
  };
  for (int i = 0; i < 6; ++i)
    step(3, 1, "batch 3, q_len 1, step " + std::to_string(i));
  for (int i = 0; i < 4; ++i)
    step(3, 3, "batch 3, q_len 3, step " + std::to_string(i));
  for (int m = 0; m < 2; ++m) { // sequence 1 leaves
    ASSERT_EQ(kiln_model_remove_sequence(models[m], ids[m][1]), KILN_OK);
    ids[m].erase(ids[m].begin() + 1);
  }
  for (int i = 0; i < 4; ++i)
    step(2, 1, "batch 2, q_len 1, step " + std::to_string(i));

  kiln_rt_graph_stats_t off{}, on{};
  ASSERT_EQ(kiln_rt_graph_stats(kiln_model_context(eager), &off), KILN_OK);
  ASSERT_EQ(kiln_rt_graph_stats(kiln_model_context(graphed), &on), KILN_OK);
  EXPECT_EQ(off.graphs, 0);
  EXPECT_EQ(off.replays, 0u);
  // Three shapes, each eager once, then captured (and launched), then replayed: 4 + 2 + 2
  // replays.
  EXPECT_EQ(on.graphs, 3);
  EXPECT_EQ(on.shapes_seen, 3u);
  EXPECT_EQ(off.shapes_seen, 0u); // graphs off: shapes are not tracked
  EXPECT_EQ(on.replays, 8u);
  EXPECT_GT(on.capture_host_seconds, 0.0);
  // The replayed steps' host time is part of every decode step's, and each replay is a
  // graph launch, far cheaper than an eager step of the same shape.
  EXPECT_GT(on.replay_host_seconds, 0.0);
  EXPECT_LT(on.replay_host_seconds, on.decode_host_seconds);
  EXPECT_EQ(on.decode_batches, on.decode_steps);
  EXPECT_LT(on.replay_host_seconds / on.replays, off.decode_host_seconds / off.decode_steps);
  EXPECT_LE(on.graph_launch_seconds, on.replay_host_seconds);
  EXPECT_GT(on.replay_step_us_p50, 0.0);
  EXPECT_LE(on.replay_step_us_p50, on.replay_step_us_p99);
  EXPECT_EQ(off.replay_step_us_p50, 0.0);
  std::printf("  host per decode step: %.1f us eager, %.1f us per replay (%.1f us in "
              "cudaGraphLaunch; set_batch %.1f us), %.1f us per capture\n",
              1e6 * off.decode_host_seconds / off.decode_steps,
              1e6 * on.replay_host_seconds / on.replays,
              1e6 * on.graph_launch_seconds / on.replays,
              1e6 * on.decode_set_batch_seconds / on.decode_batches,
              1e6 * on.capture_host_seconds / on.graphs);
  std::printf("  replayed step (set_batch + forward): median %.1f us, p99 %.1f us\n",
              on.replay_step_us_p50, on.replay_step_us_p99);
  std::printf("  3 graphs: %llu bytes of device memory; %llu launches eager, %llu graphed\n",
              static_cast<unsigned long long>(on.graph_bytes),
              static_cast<unsigned long long>(kiln_rt_launch_count(kiln_model_context(eager))),
              static_cast<unsigned long long>(kiln_rt_launch_count(kiln_model_context(graphed))));
  kiln_model_unload(graphed);
  kiln_model_unload(eager);
}

// The compile-time graph choices: the manifest's reserve is the context's byte limit;
// only the listed batches are captured; a zero limit captures nothing.
TEST(ModelGpu, GraphLimitsChooseWhatIsCaptured) {
  KILN_REQUIRE_GPU();
  const std::string dir = tempDir();
  writeSafetensors(dir, randomWeights(KILN_TINY, 99));
  kiln_model_t *model = nullptr;
  ASSERT_EQ(kiln_model_load(KILN_TINY, dir.c_str(), 0, &model), KILN_OK) << lastError();
  kiln_rt_context_t *ctx = kiln_model_context(model);
  kiln_rt_graph_stats_t stats{};
  ASSERT_EQ(kiln_rt_graph_stats(ctx, &stats), KILN_OK);
  EXPECT_EQ(stats.graph_byte_limit, kiln_rt_graph_reserve_bytes(KILN_RT_DEFAULT_MAX_GRAPHS,
                                                                 20 * 2 + 8));
  std::vector<int32_t> ids(3), next(3 * 4);
  std::vector<int32_t> prompt(9, 7);
  const int32_t *prompts[3] = {prompt.data(), prompt.data(), prompt.data()};
  const int32_t lens[3] = {9, 9, 9};
  for (auto &id : ids)
    ASSERT_EQ(kiln_model_add_sequence(model, &id), KILN_OK);
  ASSERT_EQ(kiln_model_prefill(model, ids.data(), 3, prompts, lens, next.data(), nullptr),
            KILN_OK) << lastError();
  auto decode = [&](int n, int steps) {
    for (int i = 0; i < steps; ++i) {
      const std::vector<int32_t> in(next.begin(), next.begin() + n);
      ASSERT_EQ(kiln_model_decode(model, ids.data(), n, in.data(), 1, next.data(), nullptr),
                KILN_OK) << lastError();
    }
  };
  const int32_t onlyTwo[] = {2};
  ASSERT_EQ(kiln_rt_set_graph_limits(ctx, onlyTwo, 1, UINT64_MAX), KILN_OK);
  decode(3, 4); // batch 3 is not listed: eager
  ASSERT_EQ(kiln_rt_graph_stats(ctx, &stats), KILN_OK);
  EXPECT_EQ(stats.graphs, 0);
  EXPECT_EQ(stats.shapes_seen, 1u);
  decode(2, 4); // eager, captured, replayed twice
  ASSERT_EQ(kiln_rt_graph_stats(ctx, &stats), KILN_OK);
  EXPECT_EQ(stats.graphs, 1);
  EXPECT_EQ(stats.replays, 2u);
  ASSERT_EQ(kiln_rt_set_graph_limits(ctx, nullptr, 0, 0), KILN_OK); // no reserve
  decode(2, 4);
  ASSERT_EQ(kiln_rt_graph_stats(ctx, &stats), KILN_OK);
  EXPECT_EQ(stats.graphs, 0);
  EXPECT_EQ(stats.replays, 2u);
  kiln_model_unload(model);
}

// The runtime's own step API on a model's context — kiln_rt_set_batch (which uploads at
// once), kiln_rt_forward with the compiled forward, kiln_rt_read_argmax — gives the
// tokens kiln_model's steps give (whose upload and argmax ride inside the forward), with
// the decode steps captured and replayed: a graph must upload the inputs itself even
// when set_batch already did.
TEST(ModelGpu, RuntimeStepApiMatchesTheModelApi) {
  KILN_REQUIRE_GPU();
  const std::string dir = tempDir();
  writeSafetensors(dir, randomWeights(KILN_TINY, 555));
  kiln_model_t *served = nullptr, *raw = nullptr;
  ASSERT_EQ(kiln_model_load(KILN_TINY, dir.c_str(), 0, &served), KILN_OK) << lastError();
  ASSERT_EQ(kiln_model_load(KILN_TINY, dir.c_str(), 0, &raw), KILN_OK) << lastError();
  void *handle = dlopen(KILN_TINY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto forward = reinterpret_cast<kiln_rt_forward_fn>(dlsym(handle, "kiln_model_forward"));
  ASSERT_NE(forward, nullptr);
  kiln_model_info_t info{};
  ASSERT_EQ(kiln_model_get_info(raw, &info), KILN_OK);
  const int32_t P = static_cast<int32_t>((info.max_seq_len + info.page_size - 1) / info.page_size);
  ASSERT_LE(2 * P, info.kv_pages);

  const std::vector<std::vector<int32_t>> prompts = {{3, 14, 15, 92, 65},
                                                     {2, 71, 82, 81, 82, 84, 59, 4, 52, 35, 3}};
  const int steps = 6;
  // kiln_model: prefill, then `steps` decode steps of both sequences.
  std::vector<int32_t> ids(2), served_tokens;
  for (auto &id : ids)
    ASSERT_EQ(kiln_model_add_sequence(served, &id), KILN_OK);
  const int32_t *ptrs[2] = {prompts[0].data(), prompts[1].data()};
  const int32_t lens[2] = {5, 11};
  std::vector<int32_t> next(2);
  ASSERT_EQ(kiln_model_prefill(served, ids.data(), 2, ptrs, lens, next.data(), nullptr), KILN_OK)
      << lastError();
  served_tokens.insert(served_tokens.end(), next.begin(), next.end());
  for (int s = 0; s < steps; ++s) {
    const std::vector<int32_t> in = next;
    ASSERT_EQ(kiln_model_decode(served, ids.data(), 2, in.data(), 1, next.data(), nullptr),
              KILN_OK) << lastError();
    served_tokens.insert(served_tokens.end(), next.begin(), next.end());
  }

  // The runtime API: sequence i holds pages [i * P, (i + 1) * P), slot i.
  kiln_rt_context_t *ctx = kiln_model_context(raw);
  std::vector<int32_t> table(2 * static_cast<size_t>(P));
  for (int32_t i = 0; i < 2 * P; ++i)
    table[i] = i;
  const int32_t slots[2] = {0, 1};
  std::vector<int32_t> raw_tokens;
  auto step = [&](int32_t phase, std::vector<int32_t> q, std::vector<int32_t> seq,
                  std::vector<int32_t> tokens, std::vector<int32_t> rows) {
    kiln_rt_batch_t b{};
    b.phase = phase;
    b.batch = 2;
    b.q_lens = q.data();
    b.seq_lens = seq.data();
    b.block_table = table.data();
    b.slots = slots;
    b.token_ids = tokens.data();
    b.logit_rows = rows.data();
    b.num_logit_rows = 2;
    ASSERT_EQ(kiln_rt_set_batch(ctx, &b), KILN_OK) << lastError();
    ASSERT_EQ(kiln_rt_forward(ctx, forward), KILN_OK) << lastError();
    ASSERT_EQ(kiln_rt_read_argmax(ctx, next.data(), 2), KILN_OK) << lastError();
    raw_tokens.insert(raw_tokens.end(), next.begin(), next.end());
  };
  std::vector<int32_t> packed(prompts[0]);
  packed.insert(packed.end(), prompts[1].begin(), prompts[1].end());
  step(KILN_RT_PHASE_PREFILL, {5, 11}, {5, 11}, packed, {4, 15});
  for (int s = 0; s < steps; ++s)
    step(KILN_RT_PHASE_DECODE, {1, 1}, {5 + s + 1, 11 + s + 1}, next, {0, 1});
  EXPECT_EQ(raw_tokens, served_tokens);
  kiln_rt_graph_stats_t stats{};
  ASSERT_EQ(kiln_rt_graph_stats(ctx, &stats), KILN_OK);
  EXPECT_EQ(stats.graphs, 1);
  EXPECT_EQ(stats.replays, static_cast<uint64_t>(steps - 2)); // eager, captured, replays
  dlclose(handle);
  kiln_model_unload(raw);
  kiln_model_unload(served);
}

// ---- continuous batching ---------------------------------------------------------------

// Logits rows of one sequence: row 0 after its prompt, row t after its t-th fed token.
using Rows = std::vector<std::vector<float>>;

// Sequences join (their whole prompt in the step), decode one token a step, a 200-token
// prompt is chunked (max_step_tokens 128), and sequences leave when done: every step is
// ONE kiln_model_extend mixing prompts and single tokens. Teacher-forced with the
// tokens of the one-at-a-time run, each sequence's logits must match that run's: both go
// through the same EXTEND path, so what differs is only the batching (GEMM rows of other
// m, the packing of the attention), bounded by bf16 rounding; the greedy token must agree
// wherever the one-at-a-time run's top-2 margin is clear of that.
TEST(ModelGpu, ContinuousBatchingMatchesOneAtATime) {
  KILN_REQUIRE_GPU();
  (void)kEager;
  const std::string dir = tempDir();
  writeSafetensors(dir, randomWeights(KILN_TINY, 31));
  kiln_model_t *m = nullptr;
  ASSERT_EQ(kiln_model_load(KILN_TINY, dir.c_str(), 0, &m), KILN_OK) << lastError();
  std::mt19937 rng(12);
  std::uniform_int_distribution<int32_t> tok(0, V - 1);
  const std::vector<int> promptLens = {40, 5, 200, 12}, joinStep = {0, 0, 1, 2};
  constexpr int kNew = 6; // tokens fed after each prompt
  std::vector<std::vector<int32_t>> prompts;
  for (int len : promptLens) {
    prompts.emplace_back(len);
    for (auto &t : prompts.back())
      t = tok(rng);
  }
  const size_t n = prompts.size();
  // One at a time: the prompt, then its own greedy tokens one by one.
  std::vector<std::vector<int32_t>> fed(n);
  std::vector<Rows> alone(n);
  std::vector<float> row(V);
  for (size_t i = 0; i < n; ++i) {
    int32_t id = -1, next = 0;
    ASSERT_EQ(kiln_model_add_sequence(m, &id), KILN_OK);
    const int32_t *tokens = prompts[i].data();
    int32_t len = static_cast<int32_t>(prompts[i].size());
    for (int t = 0; t <= kNew; ++t) {
      ASSERT_EQ(kiln_model_extend(m, &id, 1, &tokens, &len, &next, row.data()), KILN_OK)
          << lastError();
      alone[i].push_back(row);
      if (t == kNew)
        break;
      fed[i].push_back(next);
      tokens = &fed[i].back();
      len = 1;
    }
    ASSERT_EQ(kiln_model_remove_sequence(m, id), KILN_OK);
  }
  // Mixed steps.
  std::vector<Rows> mixed(n);
  std::vector<int32_t> ids(n, -1);
  const int steps = *std::max_element(joinStep.begin(), joinStep.end()) + kNew + 1;
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> stepIds, lens;
    std::vector<const int32_t *> tokens;
    std::vector<size_t> who;
    for (size_t i = 0; i < n; ++i) {
      const int t = step - joinStep[i]; // 0: the prompt; t: fed token t - 1
      if (t < 0 || t > kNew)
        continue;
      if (t == 0) {
        ASSERT_EQ(kiln_model_add_sequence(m, &ids[i]), KILN_OK);
      }
      stepIds.push_back(ids[i]);
      tokens.push_back(t == 0 ? prompts[i].data() : &fed[i][t - 1]);
      lens.push_back(t == 0 ? static_cast<int32_t>(prompts[i].size()) : 1);
      who.push_back(i);
    }
    std::vector<int32_t> next(who.size());
    std::vector<float> logits(who.size() * V);
    ASSERT_EQ(kiln_model_extend(m, stepIds.data(), static_cast<int32_t>(who.size()),
                                tokens.data(), lens.data(), next.data(), logits.data()),
              KILN_OK) << "step " << step << ": " << lastError();
    for (size_t r = 0; r < who.size(); ++r) {
      const size_t i = who[r];
      mixed[i].emplace_back(logits.begin() + r * V, logits.begin() + (r + 1) * V);
      if (static_cast<int>(mixed[i].size()) == kNew + 1) { // done: it leaves
        ASSERT_EQ(kiln_model_remove_sequence(m, ids[i]), KILN_OK);
      }
    }
  }
  double worst = 0;
  int compared = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(mixed[i].size(), alone[i].size());
    for (size_t t = 0; t < alone[i].size(); ++t) {
      const std::vector<float> &a = alone[i][t], &b = mixed[i][t];
      float scale = 0, diff = 0;
      for (int v = 0; v < V; ++v) {
        scale = std::max(scale, std::fabs(a[v]));
        diff = std::max(diff, std::fabs(a[v] - b[v]));
      }
      worst = std::max(worst, double(diff) / scale);
      EXPECT_LE(diff, 3e-2f * scale) << "sequence " << i << " row " << t;
      std::vector<float> sorted = a;
      std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] > 6e-2f * scale) {
        ++compared;
        EXPECT_EQ(argmaxOf(a.data()), argmaxOf(b.data())) << "sequence " << i << " row " << t;
      }
    }
  }
  std::printf("  4 sequences x %d rows: max |mixed - alone| = %.2e of the logit scale; "
              "greedy token compared at %d rows\n",
              kNew + 1, worst, compared);
  EXPECT_EQ(kiln_model_live_sequences(m), 0);
  kiln_model_unload(m);
}

// ---- threads -----------------------------------------------------------------------------

// Greedy tokens of `steps` decode steps after prefilling `prompts`, on its own model load.
std::vector<int32_t> greedyRun(const std::string &weights,
                               const std::vector<std::vector<int32_t>> &prompts, int steps,
                               std::string &error) {
  kiln_model_t *m = nullptr;
  std::vector<int32_t> out;
  if (kiln_model_load(KILN_TINY, weights.c_str(), 0, &m) != KILN_OK) {
    error = "load: " + lastError();
    return out;
  }
  const int32_t n = static_cast<int32_t>(prompts.size());
  std::vector<int32_t> ids(n), next(n), lens;
  std::vector<const int32_t *> ptrs;
  for (const auto &p : prompts) {
    ptrs.push_back(p.data());
    lens.push_back(static_cast<int32_t>(p.size()));
  }
  for (auto &id : ids)
    if (kiln_model_add_sequence(m, &id) != KILN_OK)
      error = "add_sequence: " + lastError();
  if (error.empty() &&
      kiln_model_prefill(m, ids.data(), n, ptrs.data(), lens.data(), next.data(), nullptr) !=
          KILN_OK)
    error = "prefill: " + lastError();
  for (int step = 0; error.empty() && step < steps; ++step) {
    out.insert(out.end(), next.begin(), next.end());
    std::vector<int32_t> in = next;
    if (kiln_model_decode(m, ids.data(), n, in.data(), 1, next.data(), nullptr) != KILN_OK)
      error = "decode: " + lastError();
  }
  kiln_model_unload(m);
  return out;
}

// Two contexts driven from two threads at once generate what one context generates
// alone (each has its own stream, cuBLASLt handle, graphs and error state).
TEST(ModelGpu, TwoContextsOnTwoThreads) {
  KILN_REQUIRE_GPU();
  (void)kEager;
  const std::string dir = tempDir();
  writeSafetensors(dir, randomWeights(KILN_TINY, 77));
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {9, 8, 7}, {100, 200}};
  std::string aloneError;
  const std::vector<int32_t> alone = greedyRun(dir, prompts, 16, aloneError);
  ASSERT_TRUE(aloneError.empty()) << aloneError;
  std::vector<int32_t> results[2];
  std::string errors[2];
  std::thread threads[2];
  for (int t = 0; t < 2; ++t)
    threads[t] = std::thread([&, t] { results[t] = greedyRun(dir, prompts, 16, errors[t]); });
  for (auto &thread : threads)
    thread.join();
  for (int t = 0; t < 2; ++t) {
    EXPECT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
    EXPECT_EQ(results[t], alone) << "thread " << t;
  }
}

// ---- device faults ---------------------------------------------------------------------

// One decode step whose block table is corrupted on the device, behind
// kiln_rt_set_batch's checks (page ids 2^30: terabytes past the cache): with checked
// launches the step fails naming layer 0's attention and the illegal access, and the
// context then refuses every step. Prints FAULT-REPORTED and exits 0 when all of that
// holds (it runs in a child process: the fault loses the process's CUDA context).
[[noreturn]] void corruptBlockTableStep() {
  auto failWith = [](const std::string &why) {
    std::fprintf(stderr, "fault test: %s\n", why.c_str());
    std::exit(1);
  };
  const std::string dir = tempDir();
  writeSafetensors(dir, randomWeights(KILN_TINY, 5));
  kiln_model_t *m = nullptr;
  if (kiln_model_load(KILN_TINY, dir.c_str(), 0, &m) != KILN_OK)
    failWith("load: " + lastError());
  kiln_rt_context_t *ctx = kiln_model_context(m);
  auto forward = reinterpret_cast<kiln_rt_forward_fn>(
      dlsym(dlopen(KILN_TINY, RTLD_NOW), "kiln_model_forward"));
  if (!forward)
    failWith("no kiln_model_forward in the model");
  kiln_rt_set_check_launches(ctx, 1);
  const kiln_rt_config_t *cfg = kiln_rt_config(ctx);
  const int64_t pages = kiln_rt_max_pages_per_seq(cfg->max_seq_len, cfg->page_size);
  std::vector<int32_t> table(static_cast<size_t>(pages), 0);
  const int32_t qLen = 1, seqLen = 1, token = 5, row = 0;
  kiln_rt_batch_t b{};
  b.phase = KILN_RT_PHASE_DECODE;
  b.batch = 1;
  b.q_lens = &qLen;
  b.seq_lens = &seqLen;
  b.block_table = table.data();
  b.token_ids = &token;
  b.logit_rows = &row;
  b.num_logit_rows = 1;
  if (kiln_rt_set_batch(ctx, &b) != KILN_OK || kiln_rt_synchronize(ctx) != KILN_OK)
    failWith("set_batch: " + lastError());
  const kiln_rt_io_layout_t io = kiln_rt_io_layout(cfg->max_batch, cfg->max_step_tokens,
                                                   cfg->max_logit_rows, pages, 0);
  std::vector<int32_t> bad(static_cast<size_t>(pages), 1 << 30);
  if (cudaMemcpy(static_cast<char *>(kiln_rt_io(ctx)) + io.block_table, bad.data(),
                 bad.size() * sizeof(int32_t), cudaMemcpyHostToDevice) != cudaSuccess)
    failWith("cudaMemcpy of the corrupt table");
  if (kiln_rt_forward(ctx, forward) != KILN_ERROR_CUDA)
    failWith("the faulting step did not fail with KILN_ERROR_CUDA: " + lastError());
  const std::string fault = lastError();
  if (fault.find("kiln_rt_attention") == std::string::npos ||
      fault.find("layer 0") == std::string::npos ||
      fault.find("illegal memory access") == std::string::npos)
    failWith("the fault does not name layer 0's attention and the access: " + fault);
  if (!kiln_rt_is_faulted(ctx))
    failWith("the context is not marked faulted");
  if (kiln_rt_set_batch(ctx, &b) != KILN_ERROR_CUDA ||
      lastError().find("unusable after a device fault") == std::string::npos ||
      lastError().find("layer 0") == std::string::npos)
    failWith("a later step was not refused with the fault: " + lastError());
  std::fprintf(stderr, "FAULT-REPORTED: %s\n", fault.c_str());
  std::exit(0);
}

TEST(ModelGpu, KernelFaultNamesTheLayerAndRetiresTheContext) {
  KILN_REQUIRE_GPU();
  (void)kEager;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(corruptBlockTableStep(), ::testing::ExitedWithCode(0), "FAULT-REPORTED");
}

// ---- kiln-run ---------------------------------------------------------------------------

std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::vector<int32_t>> outputsOf(const std::string &json) {
  std::vector<std::vector<int32_t>> out;
  size_t at = json.find("\"outputs\": [");
  if (at == std::string::npos)
    return out;
  at += std::strlen("\"outputs\": [");
  while (at < json.size() && json[at] != ']') {
    if (json[at] == '[') {
      std::vector<int32_t> ids;
      ++at;
      while (json[at] != ']') {
        char *end = nullptr;
        ids.push_back(static_cast<int32_t>(std::strtol(json.c_str() + at, &end, 10)));
        at = static_cast<size_t>(end - json.c_str());
        while (json[at] == ',' || json[at] == ' ')
          ++at;
      }
      out.push_back(ids);
    }
    ++at;
  }
  return out;
}

double numberOf(const std::string &json, const std::string &key) {
  size_t at = json.find("\"" + key + "\": ");
  if (at == std::string::npos)
    return NAN;
  return std::strtod(json.c_str() + at + key.size() + 4, nullptr);
}

int runKiln(const std::string &args, const std::string &log) {
  std::string cmd = std::string(KILN_RUN) + " " + args + " > " + log + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::printf("$ kiln-run %s -> %d\n%s", args.c_str(), rc, readFile(log).c_str());
  return rc;
}

// ---- the activation trace ----------------------------------------------------------------

// A traced prefill lists every op of the step, each file holds its rows x cols bf16, the
// lm_head's output is the logits the step returned, and traced decode steps run eagerly.
TEST(ModelGpu, TraceListsEveryOpAndMatchesTheLogits) {
  KILN_REQUIRE_GPU();
  (void)kEager;
  const std::string dir = tempDir(), trace = dir + "/trace";
  writeSafetensors(dir, randomWeights(KILN_TINY, 77));
  kiln_model_t *model = nullptr;
  ASSERT_EQ(kiln_model_load(KILN_TINY, dir.c_str(), 0, &model), KILN_OK) << lastError();
  kiln_rt_context_t *ctx = kiln_model_context(model);
  ASSERT_EQ(kiln_rt_set_trace(ctx, trace.c_str()), KILN_OK) << lastError();
  std::vector<int32_t> ids(2), next(2), a(5, 3), b(37, 11);
  for (auto &id : ids)
    ASSERT_EQ(kiln_model_add_sequence(model, &id), KILN_OK);
  const int32_t *prompts[] = {a.data(), b.data()};
  const int32_t lens[] = {5, 37};
  std::vector<float> logits(2 * V);
  ASSERT_EQ(kiln_model_prefill(model, ids.data(), 2, prompts, lens, next.data(), logits.data()),
            KILN_OK) << lastError();

  std::istringstream tsv(readFile(trace + "/trace.tsv"));
  std::string line;
  int ops = 0, attentions = 0;
  std::vector<float> lmHead;
  while (std::getline(tsv, line)) {
    std::istringstream fields(line);
    long long step, op, layer, rows, cols;
    std::string fn, file;
    ASSERT_TRUE(fields >> step >> op >> fn >> layer >> rows >> cols >> file) << line;
    EXPECT_EQ(op, ++ops) << "ops are listed in order, each once";
    attentions += fn == "kiln_rt_attention";
    const std::string data = readFile(trace + "/" + file);
    ASSERT_EQ(data.size(), static_cast<size_t>(rows * cols * 2)) << line;
    if (fn == "kiln_rt_linear" && cols == V) {
      lmHead.resize(static_cast<size_t>(rows * cols));
      for (size_t i = 0; i < lmHead.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, data.data() + 2 * i, 2);
        lmHead[i] = fromBf16(h);
      }
    }
  }
  EXPECT_EQ(attentions, 2) << "one attention call per layer of the tiny model";
  EXPECT_GT(ops, 10);
  ASSERT_EQ(lmHead.size(), logits.size()) << "the lm_head is traced on the logit rows";
  EXPECT_EQ(std::memcmp(lmHead.data(), logits.data(), logits.size() * sizeof(float)), 0);

  for (int i = 0; i < 3; ++i) // the same decode shape three times: would be captured
    ASSERT_EQ(kiln_model_decode(model, ids.data(), 2, next.data(), 1, next.data(), nullptr),
              KILN_OK) << lastError();
  kiln_rt_graph_stats_t stats{};
  ASSERT_EQ(kiln_rt_graph_stats(ctx, &stats), KILN_OK);
  EXPECT_EQ(stats.graphs, 0) << "traced steps must run eagerly";
  kiln_model_unload(model);
}

TEST(ModelGpu, KilnRunSpeculationIsLossless) {
  KILN_REQUIRE_GPU();
  const std::string dir = tempDir(), target = dir + "/target", draft = dir + "/draft";
  ASSERT_EQ(mkdir(target.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(draft.c_str(), 0755), 0);
  writeSafetensors(target, randomWeights(KILN_TINY, 99));
  writeSafetensors(draft, randomWeights(KILN_TINY_DRAFT, 5));
  // Prompts with repetitions (n-gram hits) and without.
  {
    std::ofstream p(dir + "/prompts.txt");
    p << "1 2 3 4 5 6 7 8 1 2 3 4 5 6 7 8 1 2 3\n\n";
    p << "100 200 300 400 100 200 300 400 100 200\n";
    p << "17\n";
    for (int i = 0; i < 60; ++i)
      p << (i * 37 % 500) << (i < 59 ? " " : "\n");
  }
  const std::string common = " --weights " + target + " --prompts " + dir + "/prompts.txt" +
                             " --max-new-tokens 24 ";
  const std::string so = KILN_TINY;
  ASSERT_EQ(runKiln(so + common + "--json " + dir + "/plain.json --logits " + dir +
                        "/logits.bin",
                    dir + "/plain.log"),
            0);
  const std::string plainJson = readFile(dir + "/plain.json");
  const auto plain = outputsOf(plainJson);
  ASSERT_EQ(plain.size(), 4u);
  for (const auto &o : plain)
    EXPECT_EQ(o.size(), 24u);
  EXPECT_EQ(readFile(dir + "/logits.bin").size(), 4u * V * sizeof(float));
  const double planned = numberOf(plainJson, "planned_device_bytes");
  if (deviceMemoryIsOurs()) {
    EXPECT_LE(std::fabs(numberOf(plainJson, "used_device_bytes") - planned), planned * 0.01);
  }

  struct Mode {
    const char *name;
    std::string args;
    double minAcceptance;
  } modes[] = {
      {"ngram", "--spec ngram:3", 0.0},
      {"draft", "--draft-model " + std::string(KILN_TINY_DRAFT) + " --draft-weights " + draft +
                    " --spec draft:3",
       0.0},
      {"selfdraft",
       "--draft-model " + so + " --draft-weights " + target + " --spec draft:4", 0.8},
  };
  for (const Mode &mode : modes) {
    SCOPED_TRACE(mode.name);
    const std::string json = dir + "/" + mode.name + ".json";
    ASSERT_EQ(runKiln(so + common + mode.args + " --json " + json, dir + "/" + mode.name + ".log"),
              0);
    const std::string text = readFile(json);
    EXPECT_EQ(outputsOf(text), plain) << "speculation must be lossless";
    EXPECT_GE(numberOf(text, "acceptance_rate"), mode.minAcceptance);
  }
  // Teacher-forced on kiln's own greedy continuations: every position agrees.
  {
    std::ofstream ref(dir + "/ref.json");
    ref << "{\"continuations\": [";
    for (size_t i = 0; i < plain.size(); ++i) {
      ref << (i ? ", [" : "[");
      for (size_t j = 0; j < plain[i].size(); ++j)
        ref << (j ? ", " : "") << plain[i][j];
      ref << "]";
    }
    ref << "]}\n";
  }
  ASSERT_EQ(runKiln(so + common + "--teacher-forced " + dir + "/ref.json --json " + dir +
                        "/tf.json",
                    dir + "/tf.log"),
            0);
  const std::string tf = readFile(dir + "/tf.json");
  EXPECT_NE(tf.find("\"teacher_forced\": {\"positions\": 96, \"agree\": 96, "
                    "\"mismatch_positions\": [], \"mismatch_tokens\": []}"),
            std::string::npos)
      << tf;
  // Errors: K beyond the compiled max_draft_len; a draft model of another vocabulary is
  // not available here, so a missing draft weights dir stands in.
  EXPECT_EQ(runKiln(so + common + "--spec ngram:5", dir + "/k5.log") != 0, true);
  EXPECT_NE(readFile(dir + "/k5.log").find("compiled with max_draft_len 4"), std::string::npos);
}

} // namespace
