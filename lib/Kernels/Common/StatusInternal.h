// Helpers for launchers: record an error message and return its status.
#ifndef KILN_LIB_KERNELS_STATUSINTERNAL_H
#define KILN_LIB_KERNELS_STATUSINTERNAL_H

#include "kiln/Kernels/Status.h"

namespace kiln::kernels {

// Formats like printf, stores the message for kiln_last_error(), returns `status`.
kiln_status_t fail(kiln_status_t status, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

// Clears the thread's last error and returns KILN_OK.
kiln_status_t ok();

// The KV cache's element type next to the activations' `dtype`: the same, or FP8 e4m3 or
// F16 next to BF16. Dequantization scales belong to FP8 caches only. `kernel` names the
// launcher in the message.
kiln_status_t checkCacheDtype(const char *kernel, kiln_dtype_t dtype, kiln_dtype_t cacheDtype,
                              const float *kScale, const float *vScale);

} // namespace kiln::kernels

#endif
