/* The CUDA backend's insides: a model's device state (cu_ctx), each node's
 * kernel state (cu_node), and the kernel families that fill and run them.
 *
 * Every non-elided node is one of:
 *   a GPU kernel: setup (at attach: check the node fits, make descriptors,
 *     choose algorithms, say how much workspace it needs) and run (enqueue
 *     its work on a stream; no allocation, no synchronization), or
 *   a CPU node (host.cu): the op's own CPU kernel on host copies of its
 *     operands, enqueued as copies around a host function, when no GPU
 *     kernel handles it (its setup returned NN_ERR_UNSUPPORTED).
 * Device memory: the constants in one allocation (`weights`); activations at
 * the planned offsets, the shared workspace, node constants and the staging
 * buffers of the batch pipeline in another (`mem`). */
#ifndef NN_CUDA_INTERNAL_H
#define NN_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <cudnn.h>

extern "C" {
#include "../engine/backend.h"
#include "../engine/model.h"
#include "../ops/geom.h"
#include "../ops/registry.h"
}
#include "check.h"
#include "layout.h"
#include "lt.h"
#include "stats.h"

/* The math options, from nn_options.tf32 and nn_options.fp16. */
typedef struct cu_options {
    bool tf32; /* fp32 convs and GEMMs may use TF32 tensor cores */
    bool fp16; /* float values stored in half; accumulation stays fp32 */
} cu_options;

typedef enum cu_kind {
    CU_SKIP,      /* elided: its outputs alias memory other nodes write */
    CU_COPY,      /* Identity, Dropout, Reshape, ... that could not alias */
    CU_EW,        /* elementwise program */
    CU_CONV,      /* cuDNN */
    CU_GEMM,      /* cuBLASLt */
    CU_POOL,      /* MaxPool, AveragePool */
    CU_REDUCE,    /* Reduce*, GlobalAveragePool, GlobalMaxPool */
    CU_SOFTMAX,   /* Softmax, LogSoftmax */
    CU_TRANSPOSE, /* Transpose */
    CU_CONCAT,    /* Concat the optimizer could not elide */
    CU_RESIZE,    /* Resize, Upsample */
    CU_HOST,      /* the CPU kernel on host copies */
} cu_kind;

typedef struct cu_conv_state {
    nn_cu_conv shape;
    cudnnTensorDescriptor_t x, y, bias;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnActivationDescriptor_t relu; /* set: one cudnnConvolutionBiasActivationForward */
    cudnnConvolutionFwdAlgo_t algo;   /* chosen once at attach, or taken from the plan cache (conv.cu) */
    cudnnMathType_t math;
    size_t algo_workspace;
    int bias_input, residual_input; /* node inputs, -1 for none */
    /* without relu: cudnnConvolutionForward, then this pass over y; operand
     * 0 is y, operand j > 0 node input post_inputs[j] */
    nn_cu_ew post;
    int post_inputs[3];
} cu_conv_state;

typedef struct cu_gemm_state {
    nn_cu_matmul mm;
    nn_cu_batch batch;
    int batching; /* NN_CU_BATCH_* (Gemm: strided with one entry) */
    nn_cu_gemm_epilogue epi;
    float alpha;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c, d;
    cublasLtMatmulAlgo_t algo;
    size_t algo_workspace;
} cu_gemm_state;

typedef struct cu_host_state {
    struct cu_ctx *ctx;
    int node;
    nn_tensor *in, *out;     /* the call's tensors; data bound when it runs */
    int64_t *in_at, *out_at; /* byte offsets in the pinned mirror, -1: a constant's host data */
    int64_t *in_ws, *out_ws; /* fp16: byte offsets of fp32 copies in the device workspace, -1: none */
} cu_host_state;

typedef struct cu_node {
    cu_kind kind;
    int node;
    size_t workspace; /* bytes of the shared device workspace it uses */
    size_t const_at;  /* its constants (zero bias, resize taps) in the node-constant region */
    size_t const_bytes;
    void *const_host;    /* their contents until uploaded */
    const char *cpu_why; /* CU_HOST: why no GPU kernel runs it */
    union {
        nn_cu_ew ew;
        cu_conv_state conv;
        cu_gemm_state gemm;
        nn_cu_pool pool;
        nn_cu_reduce reduce;
        nn_cu_softmax softmax;
        nn_cu_transpose transpose;
        nn_cu_resize resize;
        int64_t concat_axis;
        cu_host_state host;
    } u;
} cu_node;

/* CUDA events of one batch in flight (two batches alternate: parity). */
typedef struct cu_batch_events {
    cudaEvent_t h2d_start, h2d_end, compute_start, compute_end, d2h_start, d2h_end;
    cudaEvent_t *nodes; /* profiling: before each node, and after the last */
} cu_batch_events;

typedef struct cu_ctx {
    nn_model *m;
    const char *device; /* "gpuN", for messages */
    cu_options opt;
    cu_lt lt;
    cudaStream_t compute, upload, download;
    cudnnHandle_t cudnn;
    cublasLtHandle_t blas;
    /* device memory */
    char *weights;
    int64_t *weight_at; /* per value: byte offset in `weights`, -1 when not uploaded */
    char *mem;          /* activations at the planned offsets, then: */
    int64_t *value_at;  /* per value: byte offset of its data in `mem`, -1 when not planned (fp16: slices
                         * of a buffer sit at half their planned distance from its start) */
    size_t workspace_at, workspace_bytes;
    size_t consts_at, consts_bytes;
    size_t stage_at[2][2];  /* [in/out][parity] */
    size_t stage_bytes[2];  /* [in/out] */
    size_t *in_at, *out_at; /* per graph input/output: byte offset in a staging buffer */
    size_t mem_bytes;
    /* pinned host memory: staging [in/out][parity], then the CPU nodes' mirror */
    char *pinned;
    char *host_stage[2][2];
    char *mirror;
    size_t mirror_bytes;
    void *host_workspace; /* the CPU kernels' scratch */
    size_t host_workspace_bytes;
    cu_node *nodes;
    int cpu_nodes;
    cudaGraphExec_t graph[2]; /* the batch, per parity; NULL: enqueued node by node */
    cu_batch_events ev[2];
    cudaEvent_t begin;
    /* the first error a CPU node met in a host function (no CUDA calls there) */
    nn_status host_status;
    char host_error[300];
    nn_cuda_stats stats;
} cu_ctx;

/* ---- backend.cu: values and calls */
bool cu_half(const cu_ctx *c, int v);          /* stored as fp16 on the device */
size_t cu_value_bytes(const cu_ctx *c, int v); /* bytes on the device */
bool cu_on_device(const cu_ctx *c, int v);     /* a constant uploaded, or a planned value */
void *cu_ptr(const cu_ctx *c, int v);          /* device address; NULL when not on the device */
int cu_esize(const cu_ctx *c, int v);          /* device bytes per element */
/* The node's call with host tensors in the first lane's call_in/out: shapes, and data for constants. */
void cu_node_call(cu_ctx *c, int node, nn_call *call, char *err, size_t err_size);
/* Alignment in bytes (up to 256) a value's device address will have. */
size_t cu_value_alignment(const cu_ctx *c, int v);

/* ---- one setup/run/release per family; setup returns NN_OK (a GPU kernel
 * runs the node), NN_ERR_UNSUPPORTED with *why (the CPU runs it), or an
 * error.  run enqueues on `s`. */
#define NN_CU_FAMILY(name)                                                                                             \
    nn_status cu_##name##_setup(cu_ctx *c, cu_node *dn, nn_call *call, const char **why);                              \
    nn_status cu_##name##_run(cu_ctx *c, const cu_node *dn, cudaStream_t s);
NN_CU_FAMILY(ew)
NN_CU_FAMILY(conv)
NN_CU_FAMILY(gemm)
NN_CU_FAMILY(pool)
NN_CU_FAMILY(reduce)
NN_CU_FAMILY(softmax)
NN_CU_FAMILY(copy)
NN_CU_FAMILY(transpose)
NN_CU_FAMILY(concat)
NN_CU_FAMILY(resize)
NN_CU_FAMILY(host)
#undef NN_CU_FAMILY
void cu_conv_release(cu_ctx *c, cu_node *dn);
void cu_gemm_release(cu_ctx *c, cu_node *dn);
void cu_host_release(cu_node *dn);
/* Choose each conv's algorithm with cuDNN's measurements once the memory
 * plan is known (before the arena exists: on scratch buffers aligned like
 * the real ones).  The plan cache keeps the choices (save_choices), and an
 * attach from the cache uses them when they are this device's. */
nn_status cu_conv_search(cu_ctx *c);
size_t cu_conv_save_choices(const nn_model *m, void *buf, size_t cap); /* backend.h save_choices */

/* ---- kernels shared between families (elementwise.cu, movement.cu) */
nn_status cu_ew_launch(const cu_ctx *c, const nn_cu_ew *e, const void *const *in, void *out, cudaStream_t s);
nn_status cu_convert_launch(const cu_ctx *c, const void *src, void *dst, int64_t n, bool to_half, cudaStream_t s);
/* blocks for a grid-stride loop over n items of `per_block` */
unsigned cu_blocks(int64_t n, int per_block);

/* The backend (backend.cu), which the plugin's entry point returns (plugin.cu). */
extern "C" const nn_backend nn_cuda_backend;

/* ---- pipeline.cu */
/* Enqueue one batch: staging buffer `parity` into the input slots, every node, outputs back. */
nn_status cu_enqueue_batch(cu_ctx *c, int parity);
/* Run one batch eagerly, then capture both parities as CUDA graphs (kept off when capture fails). */
nn_status cu_pipeline_prepare(cu_ctx *c);
/* The chunk interface of engine/backend.h; slots are the two parities. */
void *cu_input_buffer(nn_model *m, int slot, int i);
const void *cu_output_buffer(nn_model *m, int slot, int i);
nn_status cu_launch(nn_model *m, int slot, int64_t chunk);
nn_status cu_finish(nn_model *m, int slot, int64_t chunk);

#endif
