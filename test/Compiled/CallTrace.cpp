//===- CallTrace.cpp - the runtime calls of compiled forward functions ----===//
//
// Usage: kiln-call-trace [--activations-may-differ] A.so B.so
// Runs the forward function of two compiled models against a recording stand-in for
// the runtime and checks that they make the same calls with the same arguments in the
// same order. It exists for kiln-roll-layers, which must not change a step's calls:
// A is a model compiled with the layers rolled into a loop, B the same model unrolled
// (kiln-compile --no-roll-layers). With --activations-may-differ, the activations are
// compared by data flow (which call wrote what a call reads), not by address: a rotated
// layer loop carries the next layer's normed input in one buffer, where the unrolled
// plan may give each layer's another.
//
// The stand-in functions are defined here and exported from the executable, so the
// dynamic linker binds the model's imports to them before libkiln_runtime.so. The
// arenas are fake addresses: compiled code only offsets them and passes them on.
// Only the calls of dense decoders (what llama-tiny imports) are defined; a model that
// imports another kiln_rt_ function is refused before it runs (its call would reach the
// real runtime with a fake context: at best an error status nobody sees, and a trace
// without that call).
//
//===----------------------------------------------------------------------===//
#include "CallTraceDataflow.h"

#include <dlfcn.h>
#include <elf.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

namespace {

std::vector<std::string> trace;

/// An argument as text: integers and pointers as numbers, floats as their bits (so
/// that equal means bit-equal). A pointer the call writes through (`void *`, where
/// inputs are `const void *`) is marked `w`.
struct Arg {
  Arg(const void *pointer) : text(hex(reinterpret_cast<uintptr_t>(pointer))) {}
  Arg(void *pointer) : text("w" + hex(reinterpret_cast<uintptr_t>(pointer))) {}
  Arg(int32_t value) : text(std::to_string(value)) {}
  Arg(int64_t value) : text(std::to_string(value)) {}
  Arg(uint64_t value) : text(std::to_string(value)) {}
  Arg(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    text = "f" + hex(bits);
  }
  static std::string hex(uint64_t value) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "0x%" PRIx64, value);
    return buffer;
  }
  std::string text;
};

int32_t record(const char *name, std::initializer_list<Arg> args) {
  std::string line = name;
  for (const Arg &arg : args)
    line += " " + arg.text;
  trace.push_back(std::move(line));
  return 0; // KILN_OK
}

// Fake, distinct regions; the inputs describe a step of 5 tokens and 2 logit rows.
void *fake(uintptr_t address) { return reinterpret_cast<void *>(address); }
constexpr uintptr_t kWeights = 0x100000000000, kActivations = kiln::calltrace::kActivations,
                    kInputs = kiln::calltrace::kInputs;
constexpr int64_t kInputSizes[] = {5, 5, 2};

} // namespace

extern "C" {
using ctx_t = void;
void *kiln_rt_weights(ctx_t *) { return fake(kWeights); }
void *kiln_rt_activations(ctx_t *) { return fake(kActivations); }
void *kiln_rt_input(ctx_t *, int32_t which) { return fake(kInputs + 0x1000000 * which); }
int64_t kiln_rt_input_size(ctx_t *, int32_t which) {
  return which >= 0 && which < 3 ? kInputSizes[which] : -1;
}
int32_t kiln_rt_embedding(ctx_t *, const void *ids, const void *table, void *out,
                          int64_t tokens, int64_t vocab, int64_t hidden) {
  return record("embedding", {ids, table, out, tokens, vocab, hidden});
}
int32_t kiln_rt_rms_norm(ctx_t *, const void *x, const void *weight, void *out, int64_t rows,
                         int64_t dim, float eps) {
  return record("rms_norm", {x, weight, out, rows, dim, eps});
}
int32_t kiln_rt_add_rms_norm(ctx_t *, const void *a, const void *b, const void *weight,
                             void *sum, void *out, int64_t rows, int64_t dim, float eps) {
  return record("add_rms_norm", {a, b, weight, sum, out, rows, dim, eps});
}
int32_t kiln_rt_linear(ctx_t *, const void *x, const void *w, const void *bias, void *out,
                       int64_t m, int64_t n, int64_t k) {
  return record("linear", {x, w, bias, out, m, n, k});
}
// A pair is recorded as the two projections it stands for, in order: a model compiled
// with kiln-pair-linears must make the calls of one compiled without it.
int32_t kiln_rt_linear_pair(ctx_t *, const void *x, const void *w0, const void *w1, void *out0,
                            void *out1, int64_t m, int64_t n, int64_t k) {
  if (int32_t s = record("linear", {x, w0, static_cast<const void *>(nullptr), out0, m, n, k}); s != 0)
    return s;
  return record("linear", {x, w1, static_cast<const void *>(nullptr), out1, m, n, k});
}
// A gate/up pair with its SwiGLU is recorded as the calls it stands for: the two
// projections (the gate's first, as the importers emit them) and the SwiGLU
// (kiln-fuse-pair-swiglu).
int32_t kiln_rt_linear_pair_swiglu(ctx_t *ctx, const void *x, const void *w0, const void *w1,
                                   void *gate, void *up, void *h, int64_t m, int64_t n,
                                   int64_t k) {
  if (int32_t s = kiln_rt_linear_pair(ctx, x, w0, w1, gate, up, m, n, k); s != 0)
    return s;
  return record("swiglu", {static_cast<const void *>(gate), static_cast<const void *>(up), h,
                           m * n});
}
int32_t kiln_rt_rope(ctx_t *, const void *x, const void *positions, void *out, int64_t tokens,
                     int64_t heads, int64_t head_dim, int64_t rotary_dim, int32_t rope_type,
                     float theta, float factor, float low, float high,
                     int64_t original_max_position, float attention_factor) {
  return record("rope", {x, positions, out, tokens, heads, head_dim, rotary_dim, rope_type, theta,
                         factor, low, high, original_max_position, attention_factor});
}
// A rope pair is recorded as its two ropes, in order (kiln-pair-ropes).
int32_t kiln_rt_rope_pair(ctx_t *ctx, const void *x0, const void *x1, const void *positions,
                          void *out0, void *out1, int64_t tokens, int64_t heads0, int64_t heads1,
                          int64_t head_dim, int64_t rotary_dim, int32_t rope_type, float theta,
                          float factor, float low, float high, int64_t original_max_position,
                          float attention_factor) {
  if (int32_t s = kiln_rt_rope(ctx, x0, positions, out0, tokens, heads0, head_dim, rotary_dim,
                               rope_type, theta, factor, low, high, original_max_position,
                               attention_factor);
      s != 0)
    return s;
  return kiln_rt_rope(ctx, x1, positions, out1, tokens, heads1, head_dim, rotary_dim, rope_type,
                      theta, factor, low, high, original_max_position, attention_factor);
}
int32_t kiln_rt_add(ctx_t *, const void *a, const void *b, void *out, int64_t n) {
  return record("add", {a, b, out, n});
}
int32_t kiln_rt_swiglu(ctx_t *, const void *gate, const void *up, void *out, int64_t n) {
  return record("swiglu", {gate, up, out, n});
}
int32_t kiln_rt_embedding_rank(ctx_t *, const void *ids, const void *table, void *out,
                               int64_t tokens, int64_t rows, int64_t hidden) {
  return record("embedding_rank", {ids, table, out, tokens, rows, hidden});
}
int32_t kiln_rt_all_reduce(ctx_t *, const void *x, void *out, int64_t n) {
  return record("all_reduce", {x, out, n});
}
int32_t kiln_rt_all_gather(ctx_t *, const void *x, void *blocks, void *out, int64_t rows,
                           int64_t cols, int64_t ranks) {
  return record("all_gather", {x, blocks, out, rows, cols, ranks});
}
int32_t kiln_rt_gather_rows(ctx_t *, const void *x, const void *rows, void *out,
                            int64_t num_rows, int64_t dim, int64_t num_source_rows) {
  return record("gather_rows", {x, rows, out, num_rows, dim, num_source_rows});
}
int32_t kiln_rt_attention(ctx_t *, int32_t layer, uint64_t kv_offset, const void *q, const void *k,
                          const void *v, const float *sinks, void *out, int64_t tokens,
                          int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                          int32_t page_size, int32_t window, int32_t decode_kernel,
                          int32_t prefill_kernel, int32_t spec_dec_mode, float softmax_scale,
                          int32_t kv_dtype) {
  return record("attention", {layer, kv_offset, q, k, v, sinks, out, tokens, num_heads,
                              num_kv_heads, head_dim, page_size, window, decode_kernel,
                              prefill_kernel, spec_dec_mode, softmax_scale, kv_dtype});
}
int32_t kiln_rt_rms_norm_strided(ctx_t *, const void *x, int64_t x_stride, const void *weight,
                                 void *out, int64_t rows, int64_t dim, float eps) {
  return record("rms_norm_strided", {x, x_stride, weight, out, rows, dim, eps});
}
int32_t kiln_rt_linear_f32out(ctx_t *, const void *x, const void *w, void *out, int64_t m,
                              int64_t n, int64_t k) {
  return record("linear_f32out", {x, w, out, m, n, k});
}
int32_t kiln_rt_activation(ctx_t *, const void *x, void *out, int64_t n, int32_t kind) {
  return record("activation", {x, out, n, kind});
}
int32_t kiln_rt_gated_rms_norm(ctx_t *, const void *x, const void *gate, const void *weight,
                               void *out, int64_t rows, int64_t width, int64_t gate_stride,
                               int64_t group_size, float eps) {
  return record("gated_rms_norm", {x, gate, weight, out, rows, width, gate_stride, group_size,
                                   eps});
}
int32_t kiln_rt_sigmoid_gate(ctx_t *, const void *x, const void *w, const void *value, void *out,
                             int64_t rows, int64_t dim, int64_t cols) {
  return record("sigmoid_gate", {x, w, value, out, rows, dim, cols});
}
int32_t kiln_rt_moe(ctx_t *, const void *x, const void *logits, const void *gate, const void *up,
                    const void *down, const void *score_bias, const void *gate_bias,
                    const void *up_bias, const void *down_bias, void *out, void *scratch,
                    int64_t tokens, int64_t hidden, int64_t inter, int64_t experts, int32_t top_k,
                    int32_t flags, int32_t groups, int32_t top_groups, float scale,
                    int32_t activation, float glu_alpha, float glu_limit,
                    int64_t scratch_per_token) {
  return record("moe", {x,          logits,  gate,       up,        down,      score_bias,
                        gate_bias,  up_bias, down_bias,  out,       scratch,   tokens,
                        hidden,     inter,   experts,    top_k,     flags,     groups,
                        top_groups, scale,   activation, glu_alpha, glu_limit, scratch_per_token});
}
int32_t kiln_rt_causal_conv(ctx_t *, int32_t layer, uint64_t state_offset,
                            int64_t intermediate_offset, const void *x, const void *weight,
                            const void *bias, void *out, int64_t tokens, int64_t conv_dim,
                            int32_t width, int64_t x_stride, int32_t silu, int32_t state_dtype,
                            int32_t decode_kernel, int32_t prefill_kernel,
                            int32_t spec_dec_mode) {
  return record("causal_conv", {layer, state_offset, intermediate_offset, x, weight, bias, out,
                                tokens, conv_dim, width, x_stride, silu, state_dtype,
                                decode_kernel, prefill_kernel, spec_dec_mode});
}
int32_t kiln_rt_mamba_ssm(ctx_t *, int32_t layer, uint64_t state_offset,
                          int64_t intermediate_offset, int64_t replay_x_offset,
                          int64_t replay_b_offset, int64_t replay_dt_offset, const void *x,
                          const void *dt, const void *b, const void *c, const void *a_log,
                          const void *d, const void *dt_bias, void *out, int64_t tokens,
                          int64_t heads, int64_t head_dim, int64_t state_size, int64_t n_groups,
                          int64_t x_stride, int64_t dt_stride, int64_t bc_stride, float dt_min,
                          float dt_max, int32_t state_dtype, int32_t decode_kernel,
                          int32_t prefill_kernel, int32_t spec_dec_mode) {
  return record("mamba_ssm", {layer,     state_offset, intermediate_offset, replay_x_offset,
                              replay_b_offset, replay_dt_offset, x, dt, b, c, a_log, d, dt_bias,
                              out, tokens, heads, head_dim, state_size, n_groups, x_stride,
                              dt_stride, bc_stride, dt_min, dt_max, state_dtype, decode_kernel,
                              prefill_kernel, spec_dec_mode});
}
int32_t kiln_rt_gated_delta_net(ctx_t *, int32_t layer, uint64_t state_offset,
                                int64_t intermediate_offset, int64_t replay_k_offset,
                                int64_t replay_v_offset, int64_t replay_gb_offset, const void *q,
                                const void *k, const void *v, const void *a, const void *b,
                                const void *a_log, const void *dt_bias, void *scratch, void *out,
                                int64_t tokens, int64_t k_heads, int64_t v_heads, int64_t k_dim,
                                int64_t v_dim, int64_t q_stride, int64_t k_stride,
                                int64_t v_stride, int64_t a_stride, int64_t b_stride,
                                int32_t state_dtype, int32_t decode_kernel,
                                int32_t prefill_kernel, int32_t spec_dec_mode) {
  return record("gated_delta_net",
                {layer, state_offset, intermediate_offset, replay_k_offset, replay_v_offset,
                 replay_gb_offset, q, k, v, a, b, a_log, dt_bias, scratch, out, tokens, k_heads,
                 v_heads, k_dim, v_dim, q_stride, k_stride, v_stride, a_stride, b_stride,
                 state_dtype, decode_kernel, prefill_kernel, spec_dec_mode});
}
int32_t kiln_rt_mla_attention(ctx_t *, int32_t layer, uint64_t cache_offset, const void *q,
                              const void *latent, const void *k_pe, int64_t k_pe_stride,
                              const void *positions, const void *kv_b, void *scratch, void *out,
                              int64_t tokens, int32_t num_heads, int32_t kv_lora_rank,
                              int32_t rope_dim, int32_t nope_dim, int32_t v_dim,
                              int32_t page_size, int32_t decode_kernel, int32_t prefill_kernel,
                              int32_t spec_dec_mode, float softmax_scale, int32_t rope_style,
                              int32_t rope_type, float theta, float factor, float low,
                              float high, int64_t original_max_position,
                              float attention_factor, int32_t kv_dtype) {
  return record("mla_attention",
                {layer,     cache_offset,  q,          latent,   k_pe,    k_pe_stride, positions,
                 kv_b,      scratch,       out,        tokens,   num_heads, kv_lora_rank,
                 rope_dim,  nope_dim,      v_dim,      page_size, decode_kernel, prefill_kernel,
                 spec_dec_mode, softmax_scale, rope_style, rope_type, theta, factor, low, high,
                 original_max_position, attention_factor, kv_dtype});
}
int32_t kiln_rt_output(ctx_t *, int32_t which, const void *data, int64_t rows, int64_t cols) {
  return record("output", {which, data, rows, cols});
}
}

namespace {

/// The kiln_rt_ functions the shared object at `path` imports (its undefined dynamic
/// symbols), read from its ELF dynamic symbol table; false if it is not a 64-bit ELF.
bool runtimeImports(const char *path, std::vector<std::string> &names) {
  std::ifstream file(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), {});
  auto inside = [&](uint64_t offset, uint64_t size) {
    return offset <= bytes.size() && size <= bytes.size() - offset;
  };
  if (!inside(0, sizeof(Elf64_Ehdr)) || std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0 ||
      bytes[EI_CLASS] != ELFCLASS64)
    return false;
  Elf64_Ehdr header;
  std::memcpy(&header, bytes.data(), sizeof(header));
  if (!inside(header.e_shoff, uint64_t(header.e_shnum) * sizeof(Elf64_Shdr)))
    return false;
  std::vector<Elf64_Shdr> sections(header.e_shnum);
  std::memcpy(sections.data(), bytes.data() + header.e_shoff,
              sections.size() * sizeof(Elf64_Shdr));
  for (const Elf64_Shdr &symbols : sections) {
    if (symbols.sh_type != SHT_DYNSYM || symbols.sh_link >= sections.size())
      continue;
    const Elf64_Shdr &strings = sections[symbols.sh_link];
    if (!inside(symbols.sh_offset, symbols.sh_size) ||
        !inside(strings.sh_offset, strings.sh_size))
      return false;
    for (uint64_t at = 0; at + sizeof(Elf64_Sym) <= symbols.sh_size; at += sizeof(Elf64_Sym)) {
      Elf64_Sym symbol;
      std::memcpy(&symbol, bytes.data() + symbols.sh_offset + at, sizeof(symbol));
      if (symbol.st_shndx != SHN_UNDEF || symbol.st_name >= strings.sh_size)
        continue;
      const char *name = bytes.data() + strings.sh_offset + symbol.st_name;
      const size_t length = strnlen(name, strings.sh_size - symbol.st_name);
      if (std::string(name, length).rfind("kiln_rt_", 0) == 0)
        names.emplace_back(name, length);
    }
  }
  return true;
}

/// True when every kiln_rt_ import of `path` binds to a stand-in of this executable.
bool importsAreStubbed(const char *path) {
  std::vector<std::string> names;
  if (!runtimeImports(path, names)) {
    std::fprintf(stderr, "kiln-call-trace: %s is not a 64-bit ELF shared object\n", path);
    return false;
  }
  Dl_info self{};
  if (!dladdr(reinterpret_cast<void *>(&record), &self))
    return false;
  bool stubbed = true;
  for (const std::string &name : names) {
    Dl_info where{};
    void *address = dlsym(RTLD_DEFAULT, name.c_str());
    if (!address || !dladdr(address, &where) || where.dli_fbase != self.dli_fbase) {
      std::fprintf(stderr, "kiln-call-trace: %s imports %s, which the stand-in does not "
                           "define (add it to test/Compiled/CallTrace.cpp)\n",
                   path, name.c_str());
      stubbed = false;
    }
  }
  return stubbed;
}

/// The calls of `path`'s forward function, or false when it cannot be run.
bool traceModel(const char *path, std::vector<std::string> &calls) {
  if (!importsAreStubbed(path))
    return false;
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    std::fprintf(stderr, "kiln-call-trace: dlopen %s: %s\n", path, dlerror());
    return false;
  }
  auto forward = reinterpret_cast<void (*)(void *)>(dlsym(handle, "kiln_model_forward"));
  if (!forward) {
    std::fprintf(stderr, "kiln-call-trace: %s has no kiln_model_forward\n", path);
    return false;
  }
  trace.clear();
  static char context; // never read: every call it is passed to is recorded here
  forward(&context);
  calls = trace;
  return true;
}

} // namespace

int main(int argc, char **argv) {
  const bool anyActivation = argc == 4 && std::strcmp(argv[1], "--activations-may-differ") == 0;
  if (argc != 3 && !anyActivation) {
    std::fprintf(stderr, "usage: kiln-call-trace [--activations-may-differ] A.so B.so\n");
    return 2;
  }
  argv += anyActivation;
  std::vector<std::string> a, b;
  if (!traceModel(argv[1], a) || !traceModel(argv[2], b))
    return 1;
  if (anyActivation) {
    a = kiln::calltrace::dataflow(a);
    b = kiln::calltrace::dataflow(b);
  }
  if (a.empty()) {
    std::fprintf(stderr, "kiln-call-trace: %s made no call\n", argv[1]);
    return 1;
  }
  size_t common = std::min(a.size(), b.size());
  for (size_t i = 0; i < common; ++i)
    if (a[i] != b[i]) {
      std::printf("call %zu differs:\n  %s\n  %s\n", i, a[i].c_str(), b[i].c_str());
      // The calls before it, where the buffers that differ were last written.
      std::printf("the calls before it (%s):\n", argv[1]);
      for (size_t j = i > 12 ? i - 12 : 0; j < i; ++j)
        std::printf("  %zu %s\n", j, a[j].c_str());
      return 1;
    }
  if (a.size() != b.size()) {
    std::printf("%zu calls against %zu\n", a.size(), b.size());
    return 1;
  }
  size_t attention = 0;
  for (const std::string &call : a)
    attention += call.rfind("attention ", 0) == 0;
  std::printf("same calls: %zu (%zu attention)\n", a.size(), attention);
  return 0;
}
