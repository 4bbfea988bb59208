/* Graph glue kernels of a decoder model (C ABI): token embedding, RMSNorm, rotary
 * position embedding, residual add, SwiGLU, gates, row gather and greedy argmax.
 * See docs/kernels-graph.md.
 *
 * Conventions shared by every launcher
 *  - Tensors are bf16, row-major and dense; index vectors (ids, positions, rows) are
 *    int32; `out` of argmax is int32. All pointers are device pointers; `stream` is a
 *    cudaStream_t (NULL = the default stream).
 *  - Numerics mirror Hugging Face transformers in bf16 (every intermediate that
 *    PyTorch rounds to bf16 is rounded here too, the rest is fp32), so greedy decoding
 *    reproduces its tokens.
 *  - Every launcher validates its arguments before any CUDA call and returns
 *    KILN_ERROR_INVALID_ARGUMENT / KILN_ERROR_UNSUPPORTED with a message naming the
 *    kernel and the argument (kiln_last_error()); a failed launch returns
 *    KILN_ERROR_CUDA. A size of 0 (no rows, no tokens) is a no-op returning KILN_OK.
 *  - add, swiglu, rms_norm, rms_norm_offset (dense rows), sigmoid_mul and rope may run in
 *    place (out == x, a, b, gate or up); add_rms_norm(_offset) may write its sum over a or b;
 *    embedding, gather_rows and argmax must not alias their output with an input.
 *  - Indices live on the device, so the host cannot check them: an embedding id or a
 *    gathered row outside its table yields a row of zeros instead of an out-of-bounds
 *    read.
 */
#ifndef KILN_KERNELS_GRAPH_H
#define KILN_KERNELS_GRAPH_H

#include <stdint.h>

#include "kiln/Kernels/Status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest head_dim kiln_rope_bf16 supports (its frequency table travels as a kernel
 * argument). */
#define KILN_ROPE_MAX_HEAD_DIM 512

typedef struct kiln_rope_params {
  int32_t type;            /* KILN_RT_ROPE_* from ABI.def: 0 default, 1 linear, 2 llama3, 3 yarn */
  float theta;             /* rope_theta */
  float factor;            /* linear / llama3 / yarn scaling factor (1 for default) */
  float low;               /* llama3: low_freq_factor; yarn: low end of the correction range (in dims) */
  float high;              /* llama3: high_freq_factor; yarn: high end of the correction range (in dims) */
  int64_t original_max_position; /* llama3: original_max_position_embeddings */
  float attention_factor;  /* multiplies cos and sin (1 unless yarn) */
} kiln_rope_params_t;

/* out[t, :] = table[ids[t], :]; table [vocab, hidden], out [tokens, hidden]. An id
 * outside [0, vocab) gives a zero row. */
kiln_status_t kiln_embedding_bf16(const int32_t *ids, const void *table, void *out,
                                  int64_t tokens, int64_t vocab, int64_t hidden,
                                  void *stream);

/* A vocabulary-parallel rank's embedding (docs/tensor-parallel.md): table holds the
 * vocabulary's rows [first, first + rows); out[t, :] = table[ids[t] - first, :] for an id
 * in that range and a zero row for any other, so the sum over the ranks is the whole
 * table's lookup. */
kiln_status_t kiln_embedding_rows_bf16(const int32_t *ids, const void *table, void *out,
                                       int64_t tokens, int64_t first, int64_t rows, int64_t hidden,
                                       void *stream);

/* The column interleave after an all-gather of column blocks: blocks [parts, rows, cols]
 * (NCCL's all-gather output, one contiguous block a rank), out [rows, parts * cols] with
 * out[r, p * cols + j] = blocks[p, r, j]. Must not alias. */
kiln_status_t kiln_blocks_to_columns_bf16(const void *blocks, void *out, int64_t parts,
                                          int64_t rows, int64_t cols, void *stream);

/* Per row of `dim`: out = bf16(weight * bf16(x * rsqrt(mean(x^2) + eps))), statistics
 * in fp32. x, out [rows, dim]; weight [dim]. rows may count tokens x heads (per-head
 * q/k norms). */
kiln_status_t kiln_rms_norm_bf16(const void *x, const void *weight, void *out,
                                 int64_t rows, int64_t dim, float eps, void *stream);

/* kiln_rms_norm_bf16 of rows x_row_stride elements apart (a column slice of a wider
 * tensor, MLA's compressed KV); out dense. A stride other than dim needs dim and the
 * stride multiples of 8 and 16-byte aligned x, weight and out. */
kiln_status_t kiln_rms_norm_rows_bf16(const void *x, int64_t x_row_stride, const void *weight,
                                      void *out, int64_t rows, int64_t dim, float eps,
                                      void *stream);

/* The residual add and the norm that reads it, in one pass: sum = bf16(a + b) (the
 * residual stream, [rows, dim]), then out = kiln_rms_norm_bf16(sum). Bit for bit
 * kiln_add_bf16 followed by kiln_rms_norm_bf16. sum may be a or b; out must not be sum
 * (the norm would overwrite the residual). */
kiln_status_t kiln_add_rms_norm_bf16(const void *a, const void *b, const void *weight,
                                     void *sum, void *out, int64_t rows, int64_t dim,
                                     float eps, void *stream);

/* An RMSNorm whose weight multiplies the fp32 normalized value, rounded once, of a
 * [tokens, heads] grid of rows of dim, row (t, h) at x + t * x_token_stride + h *
 * x_head_stride (elements): out[t, h, :] = bf16((x * rsqrt(mean(x^2) + eps)) *
 * (weight_offset + weight)), all in fp32. weight_offset (finite) is 1 for Qwen3-Next's
 * zero-centered weight (Qwen3NextRMSNorm: x * (1 + weight)) and -0.0 for gpt-oss's
 * GptOssRMSNorm (weight * x in fp32; -0.0 + weight is weight exactly, where 0.0 + -0.0 would
 * drop a zero's sign). out dense [tokens, heads, dim], weight [dim]. heads == 1: whole rows
 * (the hidden norms; x_head_stride unused); heads > 1: per-head q/k norms, e.g. q inside
 * Qwen3-Next's interleaved [q | gate] projection (token stride 2 * heads * dim, head stride
 * 2 * dim). The strides keep rows apart: x_head_stride >= dim, x_token_stride >= (heads - 1)
 * * x_head_stride + dim. out may be x only with dense rows, else must not overlap it. */
kiln_status_t kiln_rms_norm_offset_bf16(const void *x, int64_t x_token_stride,
                                        int64_t x_head_stride, const void *weight, void *out,
                                        int64_t tokens, int64_t heads, int64_t dim, float eps,
                                        float weight_offset, void *stream);

/* kiln_add_rms_norm_bf16 with kiln_rms_norm_offset_bf16's norm: sum = bf16(a + b), out =
 * kiln_rms_norm_offset_bf16 of the rounded sum (transformers adds the residual in bf16,
 * then norms it). Bit for bit kiln_add_bf16 followed by kiln_rms_norm_offset_bf16; sum may
 * be a or b, not out. */
kiln_status_t kiln_add_rms_norm_offset_bf16(const void *a, const void *b, const void *weight,
                                            void *sum, void *out, int64_t rows, int64_t dim,
                                            float eps, float weight_offset, void *stream);

/* Rotate-half RoPE (HF apply_rotary_pos_emb) of x [tokens, heads, head_dim] at
 * positions [tokens] into out (same shape, may be x). head_dim even, <= 512. rotary_dim 0
 * or head_dim rotates the whole head; otherwise (even, 2 <= rotary_dim < head_dim: a
 * partial_rotary_factor) the frequencies span rotary_dim (inv_freq[j] = 1 /
 * theta^(2j / rotary_dim), scaled per rope->type), rotate_half turns the first rotary_dim
 * elements and the rest are copied unchanged. */
kiln_status_t kiln_rope_bf16(const void *x, const int32_t *positions, void *out, int64_t tokens,
                             int64_t heads, int64_t head_dim, int64_t rotary_dim,
                             const kiln_rope_params_t *rope, void *stream);

/* kiln_rope_bf16 of two tensors at the same positions with the same parameters in one
 * launch (a layer's q and k: one cos/sin table a token for both): x0 [tokens, heads0,
 * head_dim] into out0 and x1 [tokens, heads1, head_dim] into out1, each exactly as
 * kiln_rope_bf16 would. Each output may be its own input; neither may overlap the other
 * tensor's input or output (KILN_ERROR_INVALID_ARGUMENT). */
typedef struct kiln_rope_pair {
  const void *x0;
  const void *x1;
  void *out0;
  void *out1;
  const int32_t *positions;
  int64_t tokens;
  int64_t heads0;
  int64_t heads1;
  int64_t head_dim;
  int64_t rotary_dim; /* as kiln_rope_bf16's */
  kiln_rope_params_t rope;
  void *stream;
} kiln_rope_pair_t;
kiln_status_t kiln_rope_pair_bf16(const kiln_rope_pair_t *params);

/* How RoPE pairs a head's dimensions (kiln.mla_attention's rope_style; the values are
 * #kiln.rope_style's):
 *   ROTATE_HALF    element f with f + d/2, bf16 cos/sin and bf16 products (as
 *                  kiln_rope_bf16, Hugging Face's rotate_half);
 *   DEINTERLEAVE   DeepSeek-V3's rope_interleave: elements (2f, 2f+1) are moved to
 *                  (f, f + d/2), then rotated as ROTATE_HALF (out keeps the moved order);
 *   COMPLEX_PAIRS  DeepSeek-V2's complex product: (2f, 2f+1) rotated in fp32 with fp32
 *                  cos/sin, rounded once (out keeps the interleaved order). */
#define KILN_ROPE_STYLE_ROTATE_HALF 0
#define KILN_ROPE_STYLE_DEINTERLEAVE 1
#define KILN_ROPE_STYLE_COMPLEX_PAIRS 2

/* RoPE of rows at arbitrary strides (MLA's rope parts inside wider q and kv rows): for
 * token t and head h, row x + t * x_token_stride + h * x_head_stride; its first `pass`
 * elements are copied to the out row, the next head_dim rotated at positions[t] in
 * `style`. Strides in elements; out must not overlap x. head_dim even, <= 512. */
typedef struct kiln_rope_rows {
  const void *x;
  int64_t x_token_stride, x_head_stride;
  void *out;
  int64_t out_token_stride, out_head_stride;
  const int32_t *positions;
  int64_t tokens, heads, head_dim, pass;
  int32_t style; /* KILN_ROPE_STYLE_* */
  kiln_rope_params_t rope;
  void *stream;
} kiln_rope_rows_t;
kiln_status_t kiln_rope_rows_bf16(const kiln_rope_rows_t *params);

/* out = bf16(a + b), n elements. */
kiln_status_t kiln_add_bf16(const void *a, const void *b, void *out, int64_t n,
                            void *stream);

/* out = bf16(bf16(silu(gate)) * up), n elements. */
kiln_status_t kiln_swiglu_bf16(const void *gate, const void *up, void *out, int64_t n,
                               void *stream);

/* Mamba2's output norm (transformers' MambaRMSNormGated, norm_before_gate=False): per row
 * r and group of group_size columns, y = x * silu(gate) in fp32, then
 * out = bf16(weight * bf16(y * rsqrt(mean(y^2) + eps))). x, out [rows, width] packed;
 * gate [rows, width] with row stride gate_stride (>= width); weight [width]; group_size
 * divides width. */
kiln_status_t kiln_gated_rms_norm_bf16(const void *x, const void *gate, const void *weight,
                                       void *out, int64_t rows, int64_t width,
                                       int64_t gate_stride, int64_t group_size, float eps,
                                       void *stream);

/* Qwen3-Next's output norm (Qwen3NextRMSNormGated: the norm before the gate): per row r
 * and group of group_size columns, xn = bf16(x * rsqrt(mean(x^2) + eps)) (fp32 statistics),
 * y = bf16(weight * xn), out = bf16(y * silu(gate)) with silu in fp32. x, out [rows, width]
 * packed; gate [rows, width] with row stride gate_stride (>= width); weight [group_size],
 * shared by every group (one per value head dim); group_size divides width. */
kiln_status_t kiln_rms_norm_gate_bf16(const void *x, const void *gate, const void *weight,
                                      void *out, int64_t rows, int64_t width, int64_t gate_stride,
                                      int64_t group_size, float eps, void *stream);

/* torch's x * torch.sigmoid(gate) on bf16 tensors (Qwen3-Next's gated attention output):
 * out[r, i] = bf16(x[r, i] * bf16(sigmoid(gate[r, i]))), the sigmoid in fp32. x, out
 * [rows, dim] packed (out may be x); gate rows gate_stride (>= dim) elements apart. */
kiln_status_t kiln_sigmoid_mul_bf16(const void *x, const void *gate, void *out, int64_t rows,
                                    int64_t dim, int64_t gate_stride, void *stream);

/* out = bf16(f(x)), n elements, f = relu(x)^2 (kind 0) or x * sigmoid(x) (kind 1), in
 * fp32 (KILN_RT_ACTIVATION_* of Runtime/ABI.def). May run in place. */
kiln_status_t kiln_activation_bf16(const void *x, void *out, int64_t n, int32_t kind,
                                   void *stream);

/* A gated shared expert (Qwen2-MoE, Qwen3-Next): per row r,
 *   g = bf16(dot(x[r, :], w))            (the one-output gate linear, fp32 sum)
 *   out[r, :] = bf16(bf16(sigmoid(g)) * value[r, :])
 * x [rows, dim], w [dim] (the [1, dim] gate weight), value and out [rows, cols]. The dot
 * is computed here, in a fixed order per row: cuBLASLt has no row-invariant algorithm
 * for a one-output GEMM (its 2-byte output rows), and a row's bits must not depend on
 * the batch. May run in place (out == value). */
kiln_status_t kiln_sigmoid_gate_bf16(const void *x, const void *w, const void *value, void *out,
                                     int64_t rows, int64_t dim, int64_t cols, void *stream);

/* out[r, :] = x[rows[r], :]; x [num_source_rows, dim], out [num_rows, dim]. A row
 * index outside [0, num_source_rows) gives a zero row. */
kiln_status_t kiln_gather_rows_bf16(const void *x, const int32_t *rows, void *out,
                                    int64_t num_rows, int64_t dim, int64_t num_source_rows,
                                    void *stream);

/* out[r] = argmax of logits[r, 0:cols] (torch.argmax semantics: ties give the smallest
 * index, NaN counts as larger than any number, -0 == +0). cols < 2^31. */
kiln_status_t kiln_argmax_bf16(const void *logits, int32_t *out, int64_t rows, int64_t cols,
                               void *stream);

/* out[r] = [a[r, 0:cols_a] | b[r, 0:cols_b]], bf16 rows (an MTP module's input). */
kiln_status_t kiln_concat_bf16(const void *a, const void *b, void *out, int64_t rows,
                               int64_t cols_a, int64_t cols_b, void *stream);

/* The token after each token of a step (an MTP module's inputs, docs/mtp.md):
 * out[t] = ids[t + 1] for t < tokens - 1 (out[tokens - 1] = ids[tokens - 1]), then
 * out[rows[r]] = picks[r] for r < num_rows (a row outside [0, tokens) is skipped). All
 * int32 device arrays; out must not alias ids. Two launches on the stream. */
kiln_status_t kiln_next_tokens_i32(const int32_t *ids, const int32_t *picks,
                                   const int32_t *rows, int32_t *out, int64_t tokens,
                                   int64_t num_rows, void *stream);

/* Chains (chain != 0) the small kernels launched on `stream` from now on to the kernel
 * before each (programmatic dependent launch on sm_90+: norms, RoPE, elementwise ops,
 * argmax and the KV appends of Decode.h, each waiting for its inputs), or stops
 * (chain == 0). Worth it where the GEMMs between them are the skinny GEMM, which lets
 * its dependents launch only past its K loop; measured mixed over cuBLASLt's GEMMs
 * (docs/kernels-graph.md). The runtime marks each context's stream by its GEMM form.
 * KILN_PDL=1 or 0 chains on every stream or none, whatever the marks. At most 64 streams
 * are marked at once (KILN_ERROR_UNSUPPORTED past that); the legacy default stream is
 * never chained (KILN_ERROR_INVALID_ARGUMENT). Unmark a stream before destroying it. */
kiln_status_t kiln_graph_chain_launches(void *stream, int chain);

#ifdef __cplusplus
}
#endif
#endif /* KILN_KERNELS_GRAPH_H */
