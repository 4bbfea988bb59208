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

} // namespace kiln::kernels

#endif
