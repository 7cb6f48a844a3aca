/* Checked device calls: a failing CUDA, cuDNN or cuBLASLt call becomes a
 * one-line NN_ERR_DEVICE message naming the device, the call, what the
 * library said and where, and the function returns that status. */
#ifndef NN_CUDA_CHECK_H
#define NN_CUDA_CHECK_H

#include <cuda_runtime.h>
#include <cudnn.h>
#include <library_types.h>

extern "C" {
#include "../engine/error.h"
}

nn_status cu_cuda_error(const char *device, cudaError_t e, const char *call, const char *file, int line);
nn_status cu_cudnn_error(const char *device, cudnnStatus_t s, const char *call, const char *file, int line);
/* cuBLASLt statuses, with the library's own names when it is loaded */
nn_status cu_blas_error(const char *device, const char *status, int code, const char *call, const char *file, int line);

#define CU_CUDA(device, call)                                                                                          \
    do {                                                                                                               \
        cudaError_t cu_e_ = (call);                                                                                    \
        if (cu_e_ != cudaSuccess) return cu_cuda_error(device, cu_e_, #call, __FILE__, __LINE__);                      \
    } while (0)

#define CU_CUDNN(device, call)                                                                                         \
    do {                                                                                                               \
        cudnnStatus_t cu_s_ = (call);                                                                                  \
        if (cu_s_ != CUDNN_STATUS_SUCCESS) return cu_cudnn_error(device, cu_s_, #call, __FILE__, __LINE__);            \
    } while (0)

#define CU_LT(lt, device, call)                                                                                        \
    do {                                                                                                               \
        cublasStatus_t cu_s_ = (call);                                                                                 \
        if (cu_s_ != CUBLAS_STATUS_SUCCESS)                                                                            \
            return cu_blas_error(device, (lt)->cublasLtGetStatusString ? (lt)->cublasLtGetStatusString(cu_s_) : NULL,  \
                                 (int)cu_s_, #call, __FILE__, __LINE__);                                               \
    } while (0)

/* A status from a helper: return it unless it is NN_OK. */
#define CU_TRY(expr)                                                                                                   \
    do {                                                                                                               \
        nn_status cu_st_ = (expr);                                                                                     \
        if (cu_st_ != NN_OK) return cu_st_;                                                                            \
    } while (0)

#endif
