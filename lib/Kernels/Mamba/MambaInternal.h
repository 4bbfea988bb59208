// Internal argument structs shared by the Mamba launchers (Launchers.cpp, plain C++) and
// the CUDA dispatchers (*.cu). Strides here are resolved (no "0 = packed") and in
// elements; token strides are 0 for the single-token kernels.
#ifndef KILN_LIB_KERNELS_MAMBA_MAMBAINTERNAL_H
#define KILN_LIB_KERNELS_MAMBA_MAMBAINTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/Kernels/Status.h"

namespace kiln::kernels::mamba {

struct SsmArgs {
  const void *stateIn; // read from here (slot-indexed)
  void *stateOut;      // single-token: == stateIn; spec: intermediate base
  int64_t inSlot, inHead, inDim;       // strides of stateIn
  int64_t outSlot, outToken, outHead, outDim; // strides of stateOut
  int32_t numSlots;
  const int32_t *indices;
  int32_t batch, numTokens, heads, headDim, headsPerGroup;
  const void *x;
  int64_t xBatch, xToken, xHead;
  const void *dt;
  int64_t dtBatch, dtToken;
  const float *dtBias, *A, *D;
  const void *B;
  int64_t bBatch, bToken, bGroup;
  const void *C;
  int64_t cBatch, cToken, cGroup;
  const void *z;
  int64_t zBatch, zToken, zHead;
  void *out;
  int64_t yBatch, yToken, yHead;
  int32_t dtSoftplus;
  int32_t aIsLog;
  float dtMin, dtMax;
  // Replay mode (ssm_update_replay): per sequence {pending tokens, the buffer holding
  // them}; the slot's two buffers of x [T][heads][head_dim], B [T][groups][state] and
  // dt [heads][T] (strides in elements); stateOut is the state itself.
  const int32_t *replay;
  void *replayX, *replayB;
  float *replayDt;
  int64_t rxSlot, rxBuffer, rxToken;
  int64_t rbSlot, rbBuffer, rbToken;
  int64_t rdSlot, rdBuffer, rdHead;
  int32_t replayTokens;
  int32_t commit; // the step's tokens are final: applied to the state, not kept
};

struct ConvArgs {
  const void *stateIn;
  void *stateOut;
  int64_t inSlot;
  int64_t outSlot, outToken;
  int32_t numSlots;
  const int32_t *indices;
  int32_t batch, numTokens, convDim;
  const void *x;
  int64_t xBatch, xToken;
  const void *weight, *bias;
  void *out;
  int64_t yBatch, yToken;
  int32_t silu;
};

// ssm_chunk_scan (PrefillScan.cu): token-major activations, varlen sequences.
struct ChunkScanArgs {
  void *state;
  int64_t stSlot, stHead, stDim;
  int32_t numSlots;
  const int32_t *indices, *cuSeqlens;
  int32_t batch, heads, headDim, stateSize, headsPerGroup;
  bool half; // activations fp16 (else bf16)
  const void *x, *dt, *B, *C;
  int64_t xToken, dtToken, bToken, cToken, yToken;
  const float *dtBias, *A, *D;
  void *out;
  int32_t dtSoftplus, aIsLog;
  float dtMin, dtMax;
};

// conv_prefill (PrefillScan.cu).
struct ConvPrefillArgs {
  void *state;
  int64_t stSlot;
  int32_t numSlots;
  const int32_t *indices, *cuSeqlens;
  int32_t batch, convDim, width;
  int64_t maxTokens;
  const void *x, *weight, *bias;
  int64_t xToken, yToken;
  void *out;
  int32_t silu;
};

// The chunk length ssm_chunk_scan uses with `sharedBytes` of shared memory a block (64,
// 32 or 16 tokens; 0: none fits).
int chunkScanTokens(int headDim, int stateSize, size_t sharedBytes);

// Shared memory the tensor-core chunk scan (ChunkScanMma.cu) needs for these arguments,
// or 0 when it does not take them (fp16 activations, unaligned rows, a head_dim x
// state_size it is not instantiated for); launchSsmChunkScan then runs the fp32 kernel.
int chunkScanMmaBytes(const ChunkScanArgs &args);
kiln_status_t launchSsmChunkScanMma(const ChunkScanArgs &args, kiln_dtype_t stateDtype,
                                    void *stream);

// Launch helpers implemented in the .cu files. Arguments are already validated; they
// return KILN_OK, KILN_ERROR_UNSUPPORTED (no instantiation) or KILN_ERROR_CUDA, with the
// message set through fail().
kiln_status_t launchSsmUpdate(const SsmArgs &args, kiln_dtype_t stateDtype,
                              kiln_dtype_t dtype, int stateSize, void *stream);
kiln_status_t launchSsmUpdateSpec(const SsmArgs &args, kiln_dtype_t stateDtype,
                                  kiln_dtype_t dtype, int stateSize, void *stream);
kiln_status_t launchSsmUpdateReplay(const SsmArgs &args, kiln_dtype_t stateDtype,
                                    kiln_dtype_t dtype, int stateSize, void *stream);
kiln_status_t launchConvUpdate(const ConvArgs &args, kiln_dtype_t stateDtype,
                               kiln_dtype_t dtype, int width, bool spec, void *stream);
kiln_status_t launchSsmChunkScan(const ChunkScanArgs &args, kiln_dtype_t stateDtype,
                                 void *stream);
kiln_status_t launchConvPrefill(const ConvPrefillArgs &args, kiln_dtype_t stateDtype,
                                kiln_dtype_t dtype, void *stream);

} // namespace kiln::kernels::mamba

#endif
