/* The operator contract.
 *
 * Every ONNX operator is one `nn_op_desc` named `nn_op_<OnnxName>`, defined in
 * the family file under ops/ and listed once in ops/ops.def.  Its life cycle:
 *
 *   parse     once at import: read attributes into a small typed params struct
 *             (allocated with nn_params_alloc; freed with the model).
 *   check     after parse, and on every params block the plan cache reads
 *             back: every field in range, so that no later arithmetic on
 *             params can overflow, divide by zero or index out of bounds.
 *   infer     output dtypes and shapes from input dtypes/shapes.  An input's
 *             `data` is non-NULL when its value is known (an initializer, a
 *             folded constant, or at run time); an op whose output shape needs
 *             a value that is not known returns NN_DYNAMIC.
 *   workspace optional: scratch bytes `run` needs for these shapes (asked
 *             after prepare, with call->prepared set).
 *   prepare   optional: once at load, precompute from constant inputs (packed
 *             weights) into one flat block; it reaches run as call->prepared.
 *   run       compute.  Kernels see plain tensors and their params, never the
 *             graph; they never allocate (scratch comes in `workspace`).
 *
 * Errors: return a status and describe it with nn_call_error / nn_parse_error;
 * the engine prefixes the node name and op type.
 */
#ifndef NN_OP_H
#define NN_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../engine/nn.h"

/* Returned by infer when an output shape depends on a value only known at run time. */
#define NN_DYNAMIC ((nn_status)100)

typedef struct nn_arena nn_arena;

typedef enum nn_attr_type {
    NN_ATTR_FLOAT = 1,
    NN_ATTR_INT = 2,
    NN_ATTR_STRING = 3,
    NN_ATTR_TENSOR = 4,
    NN_ATTR_GRAPH = 5,
    NN_ATTR_FLOATS = 6,
    NN_ATTR_INTS = 7,
    NN_ATTR_STRINGS = 8,
} nn_attr_type; /* values are ONNX's AttributeProto.AttributeType */

/* An ONNX attribute, already copied out of the protobuf. */
typedef struct nn_attr {
    const char *name;
    nn_attr_type type;
    int64_t i;
    float f;
    const char *s;
    int n; /* element count of ints / floats */
    const int64_t *ints;
    const float *floats;
    const char *const *strings; /* n strings, NUL-terminated */
    const nn_tensor *t;
    /* NN_ATTR_GRAPH: the body, imported as a nested model whose inputs are
     * its formal inputs followed by the n_captured outer-scope values it
     * reads; the importer appends those values to the node's inputs from
     * index capture_first on (docs/control-flow.md) */
    nn_model *graph;
    int capture_first, n_captured;
} nn_attr;

/* A body a control-flow node runs.  The params of every NN_OPF_SUBGRAPH op
 * start with an nn_subgraph_set, so that the engine finds the bodies
 * without knowing the op. */
typedef struct nn_subgraph {
    nn_model *body;
    int n_formal;      /* body inputs the op feeds (Loop: iteration, cond, carried) */
    int capture_first; /* node input holding the first outer-scope value; the rest follow */
    int n_captured;
} nn_subgraph;
typedef struct nn_subgraph_set {
    int n; /* bodies in use: If has two, Loop and Scan one */
    nn_subgraph g[2];
} nn_subgraph_set;

/* Params are plain bytes (no pointers; Constant's are the one exception, and
 * Constant nodes are always folded away before a plan exists): the plan
 * cache stores them as they are.  They take at most NN_PARAMS_MAX bytes: the
 * cache reads each block back into that many zeroed bytes, so that a block
 * shorter than its op's struct reads zeros, which check then judges. */
#define NN_PARAMS_MAX 1024
typedef struct nn_parse_ctx {
    const nn_attr *attrs;
    int n_attrs;
    int opset;    /* opset version of the default domain the model imports */
    int n_inputs; /* inputs named on the node (absent optional ones included) */
    int n_outputs;
    nn_arena *arena;
    void *params;       /* out: set by parse */
    size_t params_size; /* out: its size in bytes (set by nn_params_alloc) */
    char *err;
    size_t err_size;
} nn_parse_ctx;

/* A fused epilogue, applied by kernels that declare NN_OPF_EPILOGUE to each
 * output element while it is still in cache:
 *     y = act(op(x) + residual)
 * The optimizer's fusion passes fill it; kernels read it from nn_call. */
typedef enum nn_act {
    NN_ACT_NONE = 0,
    NN_ACT_RELU,
    NN_ACT_CLIP,       /* min(max(y, alpha), beta) */
    NN_ACT_LEAKY_RELU, /* y < 0 ? alpha * y : y */
    NN_ACT_SIGMOID,
    NN_ACT_HARD_SIGMOID, /* max(0, min(1, alpha * y + beta)) */
    NN_ACT_HARD_SWISH,
    NN_ACT_SILU, /* y * sigmoid(y) */
    NN_ACT_TANH,
    NN_ACT_GELU,      /* y * Phi(y), Phi the normal CDF (erf form) */
    NN_ACT_GELU_TANH, /* GELU's tanh approximation */
} nn_act;
/* How many activations there are, for range checks on untrusted params (kept
 * out of the enum so that switches over nn_act need no case for it). */
enum { NN_ACT_COUNT = NN_ACT_GELU_TANH + 1 };

typedef struct nn_epilogue {
    int residual; /* index of the input added to the output (same shape), -1 for none */
    nn_act act;
    float alpha, beta;
} nn_epilogue;

/* A fused prologue, applied by kernels that declare NN_OPF_PROLOGUE to input
 * 0 as they read it, per channel c (dim 1):
 *     x' = act(x * scale[c] + shift[c])
 * DenseNet's BatchNormalization+Relu ahead of each pointwise conv, applied
 * while the conv packs its input instead of in a pass over memory of its
 * own.  scale and shift are input indices (C floats each). */
typedef struct nn_prologue {
    int scale, shift;
    nn_act act; /* NN_ACT_NONE or NN_ACT_RELU */
} nn_prologue;

typedef struct nn_call {
    const void *params;
    int n_in, n_out;
    const nn_tensor *in; /* an absent optional input has dtype NN_DTYPE_UNDEFINED */
    nn_tensor *out;
    void *workspace;
    size_t workspace_size;
    int threads;
    const nn_epilogue *epilogue; /* NULL when nothing is fused */
    const nn_prologue *prologue; /* NULL when nothing is fused */
    const void *prepared;        /* what the op's prepare made at load; NULL if it has none */
    nn_arena *pool;              /* where run puts strings and sequence items (see nn_seq) */
    bool winograd;               /* convs may use Winograd (nn_options.winograd) */
    bool bf16;                   /* GEMMs with constant weights run in bf16 (nn_options.precision) */
    char *err;
    size_t err_size;
} nn_call;

enum nn_op_flags {
    /* output values follow from input shapes alone (Shape, Size): foldable
     * even when the input's data is not known */
    NN_OPF_SHAPE_ONLY = 1u << 0,
    /* run applies call->epilogue (ops/epilogue.h) */
    NN_OPF_EPILOGUE = 1u << 1,
    /* output = f(input elementwise), same shape: may run in place */
    NN_OPF_ELEMENTWISE = 1u << 2,
    /* run applies call->prologue (see nn_prologue for which shapes) */
    NN_OPF_PROLOGUE = 1u << 3,
    /* infer checks every input dtype itself, FLOAT16, DOUBLE, INT16, UINT16,
     * UINT32 and UINT64 included; other ops are refused inputs of those dtypes
     * before infer (nn_op_check_dtypes), so no kernel written for the older
     * dtypes ever sees them */
    NN_OPF_ANY_DTYPE = 1u << 4,
    /* dim 0 of an input is not a sample axis (a seq-major recurrence runs
     * across time there): a symbolic dim 0 must not be bound as the batch,
     * which the engine would split into micro-batches or chunks */
    NN_OPF_SPANS_DIM0 = 1u << 5,
    /* takes or makes sequence / optional values (nn_seq): a graph with such
     * a node runs through the dynamic executor */
    NN_OPF_CONTAINER = 1u << 6,
    /* params point into the model's arena (long attribute lists: an n-gram
     * pool, stopwords), which the plan cache cannot store: a graph with such
     * a node is never cached */
    NN_OPF_UNCACHED = 1u << 7,
    /* control flow: params start with an nn_subgraph_set; infer returns
     * NN_DYNAMIC, and run (only ever in a dynamic plan) sets each output's
     * shape and malloc()s its data itself, since a Loop's outputs are
     * known only once it stopped; on failure it leaves none allocated */
    NN_OPF_SUBGRAPH = 1u << 8,
    /* made by nn's own passes, not an ONNX operator: a model file that
     * names one is refused at import (the plan cache still reads them) */
    NN_OPF_INTERNAL = 1u << 9,
};

typedef struct nn_op_desc {
    const char *name;
    int min_inputs, max_inputs;   /* max_inputs -1: variadic */
    int min_outputs, max_outputs; /* max_outputs -1: variadic */
    unsigned flags;
    nn_status (*parse)(nn_parse_ctx *ctx); /* NULL: the op has no attributes */
    /* Validates params (fresh from parse, or read back from the plan cache and so untrusted): every
     * field in the range parse would produce.  Required when parse is set. */
    nn_status (*check)(const void *params, char *err, size_t err_size);
    nn_status (*infer)(nn_call *call);
    size_t (*workspace)(const nn_call *call); /* NULL: needs none */
    nn_status (*run)(nn_call *call);
    /* Optional pair: once at load, for static shapes, precompute what run can
     * reuse (e.g. weights packed for the GEMM kernel) from constant inputs,
     * which have data here.  prepared_size says how many bytes (0: nothing
     * to prepare for this call); prepare fills that many zeroed, 64-byte
     * aligned bytes, which run then sees as call->prepared.  The block must
     * be position-independent (offsets, never pointers): the plan cache
     * stores it as bytes and maps it back at another address.  run must
     * still work when call->prepared is NULL. */
    size_t (*prepared_size)(const nn_call *call);
    nn_status (*prepare)(const nn_call *call, void *prepared);
    /* Required with prepare: whether a block of `size` bytes, read back
     * from the plan cache and so untrusted, is exactly one this op's run
     * can use with these shapes (layout header and size). */
    bool (*prepared_fits)(const nn_call *call, const void *prepared, size_t size);
    /* bit k set: once prepared, run no longer reads input k's data, so the
     * engine may free a constant input k that nothing else reads (run then
     * sees its shape with data NULL) */
    unsigned prepared_inputs;
    /* Optional, for activations: describe this node as an epilogue
     * activation (call->in holds the node's inputs, constants with data)
     * so that fusion can fold it into its producer.  false: it cannot be. */
    bool (*as_activation)(const nn_call *call, nn_epilogue *e);
    /* Optional, for ops whose output shape is only known once they ran
     * (NonMaxSuppression, Unique): at run time, when infer still says
     * NN_DYNAMIC, output shapes no smaller than the result; the engine
     * allocates those, and run shrinks call->out[k].dims to the result
     * (the elements written densely for the shrunk shape). */
    nn_status (*bound)(nn_call *call);
    /* Optional, for tools (nndump's node labels): how this call runs, in a
     * few words: the attributes that shape the work and the kernel chosen,
     * e.g. "3x3 stride 2 group 32, depthwise".  Writes "" when it cannot tell. */
    void (*describe)(const nn_call *call, char *buf, size_t size);
} nn_op_desc;

/* ---- values that are not tensors (docs/sequences.md).
 * At run time every value travels as an nn_tensor.  A sequence has dtype
 * NN_DTYPE_SEQUENCE and data pointing at an nn_seq; an optional holds its
 * element itself (a tensor or a sequence), or is empty: dtype NN_DTYPE_NONE,
 * data NULL.  Strings (NN_DTYPE_STRING: a char * per element), sequences
 * and their items are immutable once made and live in call->pool, the
 * run's region (freed when the run ends; the weights for folded
 * constants), or in the caller's / the model's memory: ops copy pointers,
 * never free them.  These dtypes are not nn_dtype enumerators, so never
 * use them as case labels. */
#define NN_DTYPE_SEQUENCE ((nn_dtype)64)
#define NN_DTYPE_NONE     ((nn_dtype)65)
/* Most tensors a sequence may hold: far beyond the sequences models build
 * (SplitToSequence over a long axis, a Loop appending per step), small
 * enough that a runaway loop fails with a clear error instead of eating
 * memory.  Raise it here and rebuild if a model needs more. */
#define NN_SEQ_MAX_LENGTH (1 << 20)
typedef struct nn_seq {
    nn_dtype elem; /* the items' dtype (also for an empty sequence) */
    int64_t n;     /* items[0..n) */
    const nn_tensor *items;
    /* Appending: the item array is shared by the sequences made from one
     * another; one whose n equals *used may append in place (older ones
     * only ever read their first n items). */
    int64_t *used, cap;
} nn_seq;
static inline bool nn_dtype_is_container(nn_dtype t) { return t == NN_DTYPE_SEQUENCE || t == NN_DTYPE_NONE; }
/* A new sequence in `pool` with room for `cap` items; NULL when out of memory. */
nn_seq *nn_seq_new(nn_arena *pool, nn_dtype elem, int64_t cap);
/* A copy of tensor `t` (data and strings stay shared) into pool memory:
 * its bytes copied, since the engine frees a tensor once its last reader ran. */
nn_status nn_seq_item(nn_call *c, const nn_tensor *t, nn_tensor *item);
/* The sequence of input i (NN_ERR_INVALID when it holds something else). */
nn_status nn_input_seq(nn_call *c, int i, const nn_seq **out);
/* Write a sequence as output k. */
void nn_output_seq(nn_call *c, int k, const nn_seq *s);
/* A copy of NUL-terminated s (len bytes) in pool; NULL when out of memory */
char *nn_pool_strndup(nn_arena *pool, const char *s, size_t len);

/* ---- attribute helpers: return NN_OK (value or default stored), or
 *      NN_ERR_INVALID with a message when the attribute has the wrong type. */
const nn_attr *nn_attr_find(const nn_parse_ctx *ctx, const char *name);
nn_status nn_attr_int(nn_parse_ctx *ctx, const char *name, int64_t dflt, int64_t *out);
nn_status nn_attr_float(nn_parse_ctx *ctx, const char *name, float dflt, float *out);
nn_status nn_attr_string(nn_parse_ctx *ctx, const char *name, const char *dflt, const char **out);
/* ints: *n = -1 when absent.  At most `cap` values are accepted. */
nn_status nn_attr_ints(nn_parse_ctx *ctx, const char *name, int64_t *out, int cap, int *n);
nn_status nn_attr_floats(nn_parse_ctx *ctx, const char *name, float *out, int cap, int *n);
/* tensor attribute: *out = NULL when absent; the tensor lives as long as the model */
nn_status nn_attr_tensor(nn_parse_ctx *ctx, const char *name, const nn_tensor **out);
/* zeroed params memory owned by the model */
void *nn_params_alloc(nn_parse_ctx *ctx, size_t size);
nn_status nn_parse_error(nn_parse_ctx *ctx, nn_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
nn_status nn_call_error(const nn_call *call, nn_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- helpers for check: a params block read back from the plan cache may
 *      hold any bytes, so every field is tested before anything uses it. */
/* NN_ERR_INVALID with the message in err (what check returns on a bad field). */
nn_status nn_check_error(char *err, size_t err_size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A bool field holds 0 or 1: it is read as a byte, since loading any other
 * byte as a bool is undefined behaviour. */
static inline bool nn_check_bool(const bool *b) {
    unsigned char c;
    memcpy(&c, b, 1);
    return c <= 1;
}
/* An element count of an array attribute: -1 (absent) to cap. */
static inline bool nn_check_count(int n, int cap) { return n >= -1 && n <= cap; }
/* An axis attribute: within [-NN_MAX_DIMS, NN_MAX_DIMS) (infer checks it against the rank). */
static inline bool nn_check_axis(int64_t axis) { return axis >= -NN_MAX_DIMS && axis < NN_MAX_DIMS; }
/* Sizes, strides, pads and groups: far beyond any real model, small enough
 * that products of two of them and sums of a few fit an int64. */
#define NN_ATTR_EXTENT_MAX INT32_MAX
static inline bool nn_check_extent(int64_t v) { return v >= -NN_ATTR_EXTENT_MAX && v <= NN_ATTR_EXTENT_MAX; }

/* ---- shape helpers */
int64_t nn_shape_elements(const int64_t *dims, int ndim);
/* normalize a possibly negative axis into [0, rank); false if out of range */
bool nn_axis_normalize(int64_t axis, int rank, int64_t *out);
/* out = in with the given dtype and shape */
void nn_tensor_set_shape(nn_tensor *t, nn_dtype dtype, int ndim, const int64_t *dims);
/* read element i of an integer tensor (INT32 / INT64) as int64 */
int64_t nn_tensor_get_int(const nn_tensor *t, int64_t i);
/* read element i of a FLOAT / INT32 / INT64 tensor as double */
double nn_tensor_get_double(const nn_tensor *t, int64_t i);
/* Store v into one element of dtype dt, any dtype the IR holds (v must be
 * in the dtype's range: callers check) */
void nn_store_double(void *dst, nn_dtype dt, double v);
static inline bool nn_present(const nn_call *c, int i) { return i < c->n_in && c->in[i].dtype != NN_DTYPE_UNDEFINED; }
/* x rounded up to a multiple of m (> 0) */
static inline int64_t nn_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* ---- numpy broadcasting (ops/support.c) */
/* output shape of broadcasting a and b; NN_ERR_SHAPE with message if they do not fit */
nn_status nn_broadcast_shape(nn_call *call, const nn_tensor *a, const nn_tensor *b, nn_tensor *out);
/* Strides of `in` (in elements) laid against an output of rank `ndim`:
 * 0 where `in` broadcasts. */
void nn_broadcast_strides(const nn_tensor *in, int ndim, const int64_t *out_dims, int64_t *strides);

/* ---- strided copies (ops/copy.c) */
/* Views may have twice the rank of a tensor (Tile: repeat x input dim per axis). */
#define VIEW_MAX_DIMS (2 * NN_MAX_DIMS)
/* Write the view of `src` with shape `dims` and element strides `strides`
 * (0 broadcasts, negative walks backwards) densely into `dst`; elements are
 * `esz` opaque bytes, so one body serves every dtype. */
void nn_copy_strided(void *dst, const void *src, size_t esz, int ndim, const int64_t *dims, const int64_t *strides,
                     int threads);
/* Copy `len` elements of `esz` bytes taken `step` elements apart (0 repeats one). */
void nn_copy_run(char *dst, const char *src, size_t esz, int64_t len, int64_t step);
/* Read integer input i (INT32 or INT64, rank 0 or 1) into out[0..*n).
 * NN_DYNAMIC when its value is not known yet. */
nn_status nn_input_ints(nn_call *c, int i, const char *what, int64_t *out, int cap, int *n);

/* ---- control flow (engine/subgraph.c): run a body on in[0..n_in) (its
 * formal inputs, then its captured values); out[0..n_out) get malloc'ed
 * data (release with nn_tensor_release).  Each output is checked against
 * the body's declared type; errors describe the body and go to call->err. */
nn_status nn_body_run(const nn_call *call, nn_model *body, const nn_tensor *in, int n_in, nn_tensor *out, int n_out);
/* The same for loop-carried values: a sequence output k whose items are
 * prev[k]'s (by data) shares them, and packs only the new ones, into
 * `keep` (which must outlive every output); its header stays malloc'ed. */
nn_status nn_body_run_carried(const nn_call *call, nn_model *body, const nn_tensor *in, int n_in, nn_tensor *out,
                              int n_out, const nn_tensor *prev, nn_arena *keep);
/* A carried copy of an input t that outlives the loop: a sequence gets a
 * malloc'ed header sharing t's items; anything else as nn_body_copy. */
nn_status nn_body_copy_carried(const nn_call *call, const nn_model *body, const nn_tensor *t, nn_arena *keep,
                               nn_tensor *out);
/* Body input/output counts and the declared type of output k (dtype
 * NN_DTYPE_UNDEFINED / ndim -1 where the file leaves them open). */
int nn_body_inputs(const nn_model *body);
int nn_body_outputs(const nn_model *body);
nn_tensor nn_body_declared_output(const nn_model *body, int k);
const char *nn_body_name(const nn_model *body);
/* The declared kind of body output k (an nn_value_kind), -1 when its type is open. */
int nn_body_output_kind(const nn_model *body, int k);
/* Move a sequence or optional a kernel got from nn_body_run (malloc'ed)
 * into call->pool, where the executor expects a node's sequences; other
 * values are left as they are. */
nn_status nn_body_keep(nn_call *call, nn_tensor *t);
/* Move any value from nn_body_run into call->pool (released on failure). */
nn_status nn_body_to_pool(nn_call *call, nn_tensor *t);
/* A malloc'ed deep copy of t (a sequence's items and strings included),
 * released with nn_tensor_release; errors name `body`. */
nn_status nn_body_copy(const nn_call *call, const nn_model *body, const nn_tensor *t, nn_tensor *out);
/* The most iterations a Loop may run: $NN_LOOP_MAX, else NN_LOOP_MAX_DEFAULT. */
#define NN_LOOP_MAX_DEFAULT 1000000
int64_t nn_loop_max(void);

/* Kernels parallelize with nn_par_for / nn_par_for_range (ops/par.h) on
 * call->threads: tasks taken on demand by the engine's one set of workers, the
 * calling thread included, so a thread the OS deschedules delays no layer.  No
 * process-wide thread setting, so models with different thread counts run side
 * by side.  Loops not yet converted (off the batch-1 path of the CNNs measured in
 * docs/perf-notes.md, "Batch 1: tasks taken on demand") are still
 * `#pragma omp parallel for num_threads(call->threads)`. */

/* Work (elements, or multiply-adds) below which a kernel's loop stays on one
 * thread: waking the team costs more than it saves on smaller loops. */
#define NN_PAR_MIN 32768

/* A kernel's A/B switch from the environment (ops/support.c): false when
 * variable `name` is "0", else true, read once into *state (-1 until then;
 * accessed atomically, first callers may race to set it to the same value,
 * and a test may store 0 or 1 there itself). */
bool nn_env_switch(int *state, const char *name);

#endif
