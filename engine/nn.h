/* nn — a small ONNX inference engine.  This is the whole public API.
 *
 * Typical use:
 *     nn_options opt = nn_options_default();
 *     opt.batch = 8;
 *     nn_model *m;
 *     if (nn_load("model.onnx", &opt, &m) != NN_OK) { puts(nn_last_error()); ... }
 *     nn_tensor in = {...}, out;
 *     nn_predict(m, &in, 1, &out, 1);   // any number of samples: batched for you
 *     ...  nn_tensor_release(&out);  nn_free(m);
 *
 * Thread safety: a model may be shared between threads; concurrent nn_predict
 * calls on one model are serialized (one runs at a time, others wait), because
 * they share the model's planned activation memory.  Use one model per thread
 * to run in parallel.  nn_last_error() is thread-local.
 */
#ifndef NN_H
#define NN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NN_VERSION_STRING "0.1.2"
/* Most dimensions a tensor may have. */
#define NN_MAX_DIMS 8

#if defined(NN_BUILDING_LIBRARY)
#define NN_API __attribute__((visibility("default")))
#else
#define NN_API
#endif

typedef enum nn_status {
    NN_OK = 0,
    NN_ERR_IO,          /* file missing, unreadable or truncated */
    NN_ERR_PARSE,       /* not a valid ONNX protobuf / tensor file */
    NN_ERR_INVALID,     /* model is malformed (dangling input, cycle, bad attribute ...) */
    NN_ERR_UNSUPPORTED, /* operator, dtype or feature this engine does not implement */
    NN_ERR_SHAPE,       /* shapes that do not fit the operator or the model */
    NN_ERR_NOMEM,       /* allocation failed or sizes overflow */
    NN_ERR_ARG,         /* bad argument to an API call */
    NN_ERR_DEVICE,      /* requested device is not available */
    NN_ERR_INTERNAL,    /* engine bug: please report with the message */
} nn_status;

/* Element types; the values are ONNX's TensorProto.DataType numbers. */
typedef enum nn_dtype {
    NN_DTYPE_UNDEFINED = 0,
    NN_DTYPE_FLOAT = 1,
    NN_DTYPE_UINT8 = 2,
    NN_DTYPE_INT8 = 3,
    NN_DTYPE_UINT16 = 4,
    NN_DTYPE_INT16 = 5,
    NN_DTYPE_INT32 = 6,
    NN_DTYPE_INT64 = 7,
    NN_DTYPE_STRING = 8,   /* a `char *` per element, each a NUL-terminated UTF-8 string; a tensor the
                            * library allocates holds the pointers and the bytes they point to in one
                            * block, which nn_tensor_release frees */
    NN_DTYPE_BOOL = 9,     /* one byte per element, 0 or 1 */
    NN_DTYPE_FLOAT16 = 10, /* IEEE-754 binary16, as uint16_t bits */
    NN_DTYPE_DOUBLE = 11,
    NN_DTYPE_UINT32 = 12,
    NN_DTYPE_UINT64 = 13,
    NN_DTYPE_BFLOAT16 = 16, /* bfloat16: the upper 16 bits of a float, as uint16_t; Cast and CastLike only */
} nn_dtype;

/* A dense, row-major tensor.  `data` is owned by whoever filled it: the
 * caller for inputs, the library for outputs (free with nn_tensor_release). */
typedef struct nn_tensor {
    nn_dtype dtype;
    int ndim;
    int64_t dims[NN_MAX_DIMS];
    void *data;
} nn_tensor;

/* CPU arithmetic for the GEMM-shaped work (docs/precision.md). */
typedef enum nn_precision {
    NN_PRECISION_FP32 = 0, /* default: fp32 throughout */
    NN_PRECISION_BF16 = 1, /* convs through the GEMM, Gemm, MatMul with constant B: bf16 weights and
                            * activations, fp32 accumulation and epilogue; everything else fp32.
                            * Needs AVX512-BF16: refused by nn_load where the processor lacks it */
} nn_precision;

typedef struct nn_options {
    const char *device;         /* "cpu" (default) or "gpuN" */
    int batch;                  /* batch size bound to the symbolic batch dimension (default 1) */
    int threads;                /* worker threads; 0 = all cores */
    int optimize;               /* 1 = run the graph optimizer (default), 0 = run the graph as parsed */
    const char *passes;         /* comma-separated passes to run, in that order (NULL: the default pipeline) */
    const char *disable_passes; /* comma-separated passes to leave out (NULL: none) */
    int verify;                 /* check the IR after every pass (always on in debug builds) */
    int profile;                /* time every node (see nn_profile_print) */
    int winograd;               /* 3x3 convs may use Winograd F(4x4,3x3) (default 1): up to 2x faster, at a
                                 * relative error near 1e-5 end to end, about twice the direct GEMM's */
    int cache;                  /* 1 (default): keep the optimized plan in a cache file and load it from
                                 * there next time; 0: never read or write the cache */
    const char *cache_dir;      /* NULL: $NN_CACHE_DIR, else $XDG_CACHE_HOME/nn, else ~/.cache/nn */
    int64_t max_memory;         /* refuse a model whose weights, activations and scratch together need
                                 * more bytes than this; 0 = no limit */
    int tf32;                   /* GPU: let fp32 convs and GEMMs use TF32 tensor cores (default 0: exact
                                 * fp32 parity with the CPU) */
    int fp16;                   /* GPU: weights and activations in half precision, accumulating in fp32
                                 * (default 0) */
    int micro_batch;            /* CPU: samples per run of the plan.  Below `batch`, a batch runs as
                                 * micro-batches on independent lanes, one per thread, each kernel on one
                                 * thread: activations stay in cache and threads never wait for each
                                 * other.  0 (default): chosen from the model; `batch`: never split */
    int64_t cache_max;          /* bytes the plan cache folder may hold; writing a plan removes the least
                                 * recently used ones (a hit counts as a use) beyond it.  0 (default):
                                 * $NN_CACHE_MAX (e.g. 512M, 2G, none), else 1 GiB; -1: no cap */
    nn_precision precision;     /* CPU: NN_PRECISION_FP32 (default) or NN_PRECISION_BF16 */
} nn_options;

typedef struct nn_model nn_model;

/* Options with every field at its default. */
NN_API nn_options nn_options_default(void);

/* Load and prepare an ONNX model.  On failure *model is NULL and
 * nn_last_error() describes the problem in one line. */
NN_API nn_status nn_load(const char *path, const nn_options *options, nn_model **model);

/* Release a model and everything it owns.  NULL is allowed. */
NN_API void nn_free(nn_model *model);

/* Run the model.  inputs[i] matches graph input i (see nn_input_info).
 * When the model has a symbolic batch dimension, the inputs may hold any
 * number of samples along dim 0; they are run in batches of the configured
 * size (or micro-batches, see options.micro_batch) and the outputs gathered:
 * samples are taken to be independent, as in every model whose batch
 * dimension is symbolic.  outputs[i] receives freshly allocated data
 * (release with nn_tensor_release). */
NN_API nn_status nn_predict(nn_model *model, const nn_tensor *inputs, int n_inputs, nn_tensor *outputs, int n_outputs);

/* Like nn_predict, but into caller-owned buffers: outputs[i] must carry the
 * dtype and exact shape nn_output_shapes gives for these inputs, and `data`
 * room for them; the results are written there, nothing is allocated.  On
 * failure the buffers may hold partial results.  NN_ERR_UNSUPPORTED for a
 * model whose output shapes depend on run-time values (use nn_predict). */
NN_API nn_status nn_predict_into(nn_model *model, const nn_tensor *inputs, int n_inputs, nn_tensor *outputs,
                                 int n_outputs);

/* The output shapes (dtype, ndim, dims; data NULL) nn_predict would return
 * for these inputs, which are checked as nn_predict checks them but not
 * run.  NN_ERR_UNSUPPORTED when the shapes depend on run-time values. */
NN_API nn_status nn_output_shapes(nn_model *model, const nn_tensor *inputs, int n_inputs, nn_tensor *shapes,
                                  int n_outputs);

/* Graph inputs/outputs: counts, names and shapes (at the bound batch size). */
NN_API int nn_input_count(const nn_model *model);
NN_API int nn_output_count(const nn_model *model);
NN_API nn_status nn_input_info(const nn_model *model, int index, const char **name, nn_tensor *shape);
NN_API nn_status nn_output_info(const nn_model *model, int index, const char **name, nn_tensor *shape);
/* Index of the input/output called `name`, or -1 (with nn_last_error set). */
NN_API int nn_input_index(const nn_model *model, const char *name);
NN_API int nn_output_index(const nn_model *model, const char *name);
/* The axis that holds the samples of input/output `index`: 0 when its first
 * dimension is the model's symbolic batch dimension (nn_predict takes any
 * count there), -1 when it has none or the index is out of range. */
NN_API int nn_input_batch_axis(const nn_model *model, int index);
NN_API int nn_output_batch_axis(const nn_model *model, int index);

typedef enum nn_cache_state {
    NN_CACHE_OFF = 0, /* caching disabled (options.cache = 0) */
    NN_CACHE_MISS,    /* plan built from the ONNX file (and written to the cache if possible) */
    NN_CACHE_HIT,     /* plan loaded from the cache: no parsing, no passes */
} nn_cache_state;

/* Facts about a loaded model, for reports. */
typedef struct nn_model_stats {
    int nodes;           /* nodes executed per batch */
    int nodes_parsed;    /* nodes in the ONNX file */
    int64_t parameters;  /* elements in initializers */
    int64_t arena_bytes; /* planned activation memory, every lane's */
    int batch;           /* bound batch size */
    int plan_batch;      /* samples one run of the plan holds (below `batch` when a batch is split) */
    int lanes;           /* micro-batches run at once, a thread each (1: one run at a time, on every thread) */
    int threads;
    int64_t weight_bytes;      /* constant tensors and packed weights */
    int64_t workspace_bytes;   /* kernel scratch, every lane's */
    nn_cache_state cache;      /* where the plan came from */
    const char *cache_path;    /* the cache file read or written; NULL when none */
    const char *cache_warning; /* why a cache file was not used or not written; NULL when all went well */
    int64_t io_bytes;          /* inputs and outputs of one nn_predict of `batch` samples */
    int64_t memory_bytes;      /* the whole need options.max_memory is compared with: weights, arena,
                                * scratch and io_bytes (a limit of at least this much lets the model load) */
} nn_model_stats;
NN_API nn_status nn_model_get_stats(const nn_model *model, nn_model_stats *stats);

/* With options.profile set: print time per operator type (fused epilogues
 * counted with their host) accumulated over all nn_predict calls so far. */
NN_API nn_status nn_profile_print(const nn_model *model, FILE *out);

/* With options.profile set: one executed node's share of the time, for
 * per-node tables (nn_profile_node_count nodes, in execution order; -1 when
 * profiling is off).  Times are per run of the plan (one micro-batch when a
 * batch is split), averaged over every run so far. */
typedef struct nn_node_profile {
    const char *name;  /* the node's name (fused nodes keep their host's) */
    const char *op;    /* operator type */
    const char *fused; /* what fusion folded into it, e.g. "BatchNormalization+Relu"; NULL if nothing */
    nn_tensor output;  /* dtype and shape of output 0 (data NULL); ndim 0 and dtype UNDEFINED if unknown */
    double ms;         /* mean milliseconds per run */
    double share;      /* fraction of all nodes' time, 0..1 */
    double flops;      /* floating-point operations per run (a multiply-add counts 2) for Conv, Gemm and
                        * MatMul, integer ones for QLinearConv, ConvInteger, QLinearMatMul and
                        * MatMulInteger; 0 for other ops */
} nn_node_profile;
NN_API int nn_profile_node_count(const nn_model *model);
NN_API nn_status nn_profile_node(const nn_model *model, int index, nn_node_profile *profile);

/* What this build runs with on this machine, for `--version` reports. */
typedef struct nn_build_info {
    const char *version;        /* NN_VERSION_STRING */
    const char *isa;            /* instruction set the CPU kernels use: "avx512", "avx2", "scalar" */
    const char *cpu_kernels;    /* the GEMM kernel family chosen for it */
    int processors;             /* processors OpenMP may use */
    int openmp_version;         /* _OPENMP of the build (yyyymm) */
    const char *openmp_library; /* file of the OpenMP runtime loaded (libomp, libgomp) */
    const char *cuda_plugin;    /* the CUDA backend plugin libnn would load for gpuN (a path), or NULL */
} nn_build_info;
NN_API void nn_get_build_info(nn_build_info *info);
/* The processor's cache sizes the CPU kernels block for, where they were
 * read (NN_CPU_CACHES, sysfs, CPUID, defaults), and the GEMM blocking
 * derived from them, as one line of text into buf. */
NN_API void nn_get_cpu_caches(char *buf, size_t size);

/* Bytes per element of a dtype (0 for an unknown one) and element count of a
 * tensor (-1 when its rank or a dimension is unknown or negative, or the
 * count overflows). */
NN_API size_t nn_dtype_size(nn_dtype dtype);
NN_API int64_t nn_tensor_elements(const nn_tensor *t);
NN_API const char *nn_dtype_name(nn_dtype dtype);

/* Read a tensor from a .npy file or an ONNX TensorProto .pb file (chosen by
 * extension); data is allocated for the caller (nn_tensor_release). */
NN_API nn_status nn_tensor_load(const char *path, nn_tensor *tensor);
/* Write a tensor as .npy. */
NN_API nn_status nn_tensor_save_npy(const char *path, const nn_tensor *tensor);
/* Free data allocated by the library and clear the tensor. */
NN_API void nn_tensor_release(nn_tensor *tensor);

/* Short name of a status code. */
NN_API const char *nn_strerror(nn_status status);
/* One-line description of the last failure on this thread. */
NN_API const char *nn_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
