/* Device queries used by launchers, tests and the runtime. */
#ifndef KILN_KERNELS_DEVICE_H
#define KILN_KERNELS_DEVICE_H

#include "kiln/Kernels/Status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_device_info {
  int sm;                       /* compute capability x10 + minor, e.g. 90 */
  int multiprocessors;
  int max_smem_per_block_optin; /* bytes */
  unsigned long long memory_bytes;
} kiln_device_info_t;

/* KILN_ERROR_NO_DEVICE when no CUDA device is visible. */
kiln_status_t kiln_get_device_info(int device, kiln_device_info_t *info);

#ifdef __cplusplus
}
#endif
#endif
