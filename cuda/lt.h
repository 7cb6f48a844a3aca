/* cuBLASLt, opened when a model attaches to a GPU rather than linked: the
 * library is over 500 MB, and loading it in every program that links libnn
 * (the CPU-only tools and the test programs under valgrind) costs seconds
 * for nothing.  cublasLt.h gives the types; this table the functions. */
#ifndef NN_CUDA_LT_H
#define NN_CUDA_LT_H

#include <cublasLt.h>

#include "check.h"

#define NN_LT_FUNCTIONS(X)                                                                                             \
    X(cublasLtCreate)                                                                                                  \
    X(cublasLtDestroy)                                                                                                 \
    X(cublasLtGetStatusString)                                                                                         \
    X(cublasLtMatmulDescCreate)                                                                                        \
    X(cublasLtMatmulDescDestroy)                                                                                       \
    X(cublasLtMatmulDescSetAttribute)                                                                                  \
    X(cublasLtMatrixLayoutCreate)                                                                                      \
    X(cublasLtMatrixLayoutDestroy)                                                                                     \
    X(cublasLtMatrixLayoutSetAttribute)                                                                                \
    X(cublasLtMatmulPreferenceCreate)                                                                                  \
    X(cublasLtMatmulPreferenceDestroy)                                                                                 \
    X(cublasLtMatmulPreferenceSetAttribute)                                                                            \
    X(cublasLtMatmulAlgoGetHeuristic)                                                                                  \
    X(cublasLtMatmul)

typedef struct cu_lt {
    void *lib;
#define NN_LT_FIELD(name) decltype(&::name) name;
    NN_LT_FUNCTIONS(NN_LT_FIELD)
#undef NN_LT_FIELD
} cu_lt;

/* Open the library and resolve every function; NN_ERR_DEVICE naming what
 * is missing (`device` prefixes the message). */
nn_status cu_lt_open(cu_lt *lt, const char *device);
void cu_lt_close(cu_lt *lt);

#endif
