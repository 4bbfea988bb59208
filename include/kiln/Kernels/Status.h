/* Status codes shared by every Kiln kernel launcher and the runtime (C ABI).
 * A launcher never aborts: it validates its arguments, returns a status, and leaves a
 * message naming the kernel, the argument or the failing CUDA call, readable through
 * kiln_last_error() on the same thread. */
#ifndef KILN_KERNELS_STATUS_H
#define KILN_KERNELS_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERROR_INVALID_ARGUMENT = 1, /* null pointer, bad size or stride */
  KILN_ERROR_UNSUPPORTED = 2,      /* head dim, dtype, page size... not instantiated */
  KILN_ERROR_CUDA = 3,             /* a CUDA runtime call or launch failed */
  KILN_ERROR_NO_DEVICE = 4,        /* no CUDA device visible */
  KILN_ERROR_OUT_OF_MEMORY = 5
} kiln_status_t;

/* Element types understood by the kernels. */
typedef enum kiln_dtype {
  KILN_DTYPE_BF16 = 0,
  KILN_DTYPE_F16 = 1,
  KILN_DTYPE_F32 = 2,
  /* 3 is the runtime ABI's I32 (ABI.def shares these numbers). */
  /* OCP e4m3 ("fn": no infinities, largest finite 448), KV caches only: stored with a
   * dequantization scale, value = e4m3 * scale. */
  KILN_DTYPE_FP8_E4M3 = 4
} kiln_dtype_t;

/* Message of the last failed call on this thread ("" after success). */
const char *kiln_last_error(void);
/* Stable name of a status, e.g. "KILN_ERROR_UNSUPPORTED". */
const char *kiln_status_name(kiln_status_t status);

#ifdef __cplusplus
}
#endif
#endif /* KILN_KERNELS_STATUS_H */
