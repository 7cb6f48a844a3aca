/* One-line messages for failed device calls (check.h). */
#include <stdio.h>
#include <string.h>

#include "check.h"

/* "cuda/conv.cu" rather than the full path the compiler was given */
static const char *short_path(const char *file) {
    const char *p = strstr(file, "cuda/");
    return p ? p : file;
}

nn_status cu_cuda_error(const char *device, cudaError_t e, const char *call, const char *file, int line) {
    cudaGetLastError(); /* clear it, so that the next call does not report it again */
    return nn_set_error(NN_ERR_DEVICE, "device '%s': %s failed: %s (%s, %s:%d)", device, call, cudaGetErrorString(e),
                        cudaGetErrorName(e), short_path(file), line);
}

nn_status cu_cudnn_error(const char *device, cudnnStatus_t s, const char *call, const char *file, int line) {
    return nn_set_error(NN_ERR_DEVICE, "device '%s': %s failed: %s (%s:%d)", device, call, cudnnGetErrorString(s),
                        short_path(file), line);
}

nn_status cu_blas_error(const char *device, const char *status, int code, const char *call, const char *file,
                        int line) {
    if (status)
        return nn_set_error(NN_ERR_DEVICE, "device '%s': %s failed: %s (%s:%d)", device, call, status, short_path(file),
                            line);
    return nn_set_error(NN_ERR_DEVICE, "device '%s': %s failed: cuBLAS status %d (%s:%d)", device, call, code,
                        short_path(file), line);
}
