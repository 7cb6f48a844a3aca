/* A loaded model: the IR plus what execution needs (memory plan, buffers). */
#ifndef NN_MODEL_H
#define NN_MODEL_H

#include <pthread.h>

#include "ir.h"

typedef struct nn_plan {
    int64_t *offset;           /* per value: byte offset in the activation arena, -1 if not there */
    int *first_use, *last_use; /* per value: node index range where it is live (planned values) */
    size_t arena_bytes;        /* planned size */
    size_t naive_bytes;        /* every intermediate in its own buffer */
    size_t lower_bound_bytes;  /* most bytes live at one point */
    size_t workspace_bytes;    /* largest scratch any kernel needs */
} nn_plan;

/* One executor of the static plan: its own activations, scratch and
 * run-time tensors.  Lanes share the graph and the prepared weights, so a
 * batch split into micro-batches runs one micro-batch per lane at once. */
typedef struct nn_lane {
    nn_tensor *rt;                 /* per value: shape and data during a run */
    nn_tensor *call_in, *call_out; /* argument arrays sized for the widest node */
    void *arena;                   /* activations (static plan) */
    void *workspace;
    nn_arena pool;   /* strings and sequences a run makes (ops/op.h), freed when it ends */
    double *node_ns; /* per node: accumulated run time when profiling */
    int64_t profiled_runs;
    int64_t failed_chunk; /* in the last split run: the chunk that failed (-1: none), */
    nn_status status;     /* its status */
    char error[512];      /* and its message */
} nn_lane;

struct nn_model {
    nn_graph g;
    nn_options opt;
    char device[16];
    int threads;
    int batch;          /* bound size of the symbolic batch dimension: the samples one nn_predict chunk holds */
    int plan_batch;     /* samples one run of the plan holds: `batch`, or less when a batch is split over lanes */
    int kernel_threads; /* threads each kernel uses: `threads`, or 1 once lanes run side by side */
    bool has_batch;     /* some input has a symbolic dim 0 */
    bool whole_batch;   /* the samples do not stay in their rows: a call holds exactly `batch` of them (batch.c) */
    char whole_batch_why[200];
    bool dynamic;       /* some shape depends on run-time values: infer while running */
    int depth;          /* 0 for the model loaded, 1 + its parent's for a control-flow body */
    nn_plan plan;
    nn_lane *lanes; /* lanes[0] serves every run but a split batch's */
    int n_lanes;
    int n_slots; /* chunks the target holds at once (backend.h): its lanes on the CPU */
    int *last_use; /* per value: last node reading it (n_nodes for graph outputs) */
    pthread_mutex_t lock;
    const struct nn_backend *backend; /* the target: nn_cpu_backend or a device's (backend.h) */
    int device_index;                 /* gpuN: N */
    void *device_state;               /* the backend's */
    const void *device_choices;       /* from the plan cache: what an earlier attach measured (backend.h) */
    size_t device_choices_bytes;
    /* plan cache (engine/cache_*.c) */
    nn_cache_state cache_state;
    bool from_cache;            /* graph, plan and prepared weights came from the cache file */
    bool cache_key_known;       /* cache_key was computed (the model file was readable) */
    uint64_t cache_key[2];      /* model bytes, options and CPU features the plan was made for */
    uint64_t cache_content[2];  /* hash of the model file's bytes */
    uint64_t cache_model_id[5]; /* the model file's identity (device, inode, size, times) */
    char *cache_path;           /* the cache file for this model and these options */
    bool cache_written;         /* a miss wrote it */
    char cache_warning[320];
    int64_t cache_cap; /* bytes the cache folder may hold, -1 for no cap (nn_cache_cap) */
    void *cache_map;   /* the mapped cache file on a hit (weights are used in place) */
    size_t cache_map_bytes;
    size_t cache_data_bytes; /* constants and prepared blocks inside the mapping */
};

/* A node's kernel call over argument arrays the caller filled (n->n_in and
 * n->n_out entries): the node's params, fusions and prepared block, the
 * model's kernel options (threads, winograd); no workspace (a run sets
 * it).  Clears err.  The only builder of nn_call. */
nn_call nn_node_call(const nn_model *m, const nn_node *n, const nn_tensor *in, nn_tensor *out, char *err,
                     size_t err_size);
/* Copy a node's tensors from `values` (one per value id: a lane's run-time
 * tensors) into in[] and out[]; absent ones are zeroed. */
void nn_node_gather(const nn_node *n, const nn_tensor *values, nn_tensor *in, nn_tensor *out);

/* Infer the shapes not yet known, in node order.  Nodes without inputs
 * (Constant) are always evaluated: that is how their value is defined.  With
 * `fold`, so is every node whose inputs are all known (constant folding);
 * folded nodes leave the graph and *n_folded counts them. */
nn_status nn_infer_graph(nn_model *m, bool fold, int *n_folded);
/* NN_ERR_INVALID with a message when an input or output the node's op
 * requires is absent (an empty name in the file). */
nn_status nn_node_check_wiring(const nn_node *n, const nn_op_desc *d);

/* ---- the batch and the micro-batch policy (batch.c).  nn_value.batched
 * is set here only (and restored by the plan cache, which checks it with
 * nn_batch_check). */
/* Bind the symbolic batch dimension of the graph inputs to m->plan_batch;
 * those inputs are the batched ones. */
nn_status nn_bind_inputs(nn_model *m);
/* Forget every inferred shape and infer again with the graph inputs' batch
 * dimension bound to `plan_batch` (before optimization only). */
nn_status nn_rebind_batch(nn_model *m, int plan_batch);
/* After nn_infer_graph at m->batch, before optimization: mark the values
 * whose dim 0 follows the batch (shape inference at a second batch size),
 * decide whether the samples may be split (else m->whole_batch and its
 * reason), choose m->plan_batch (options.micro_batch, else from the model)
 * and leave the shapes inferred at it. */
nn_status nn_choose_plan_batch(nn_model *m);
/* NULL when the batch facts of a model (its flags, plan batch) agree with
 * its shapes; else what is wrong (for the plan cache reader). */
const char *nn_batch_check(const nn_model *m);
/* NN_ERR_SHAPE with the reason when a model that runs whole batches is
 * given another sample count (samples < 0: no batched input). */
nn_status nn_batch_check_samples(const nn_model *m, int64_t samples);
/* How many lanes run micro-batches side by side (m->n_lanes), and the
 * threads each kernel then has (m->kernel_threads). */
void nn_choose_lanes(nn_model *m);
/* A call's samples run in chunks of `step` (the plan batch); chunk
 * [start, start + count) holds count = nn_chunk_count(start, step, total)
 * of them.  nn_chunk_in copies graph input v's rows of the chunk from the
 * caller's `in` into `dst` (the plan's buffer of `step` rows), zeroing the
 * rows past the last sample; an input without the batch is copied whole.
 * nn_chunk_out copies graph output v's rows from the plan's `src` into the
 * caller's `out`; an output without the batch is copied at the first chunk.
 * nn_predict (api.c) stages every target's chunks through them. */
int64_t nn_chunk_count(int64_t start, int64_t step, int64_t total);
void nn_chunk_in(const nn_value *v, const nn_tensor *in, void *dst, int64_t start, int64_t count, int64_t step);
void nn_chunk_out(const nn_value *v, const void *src, nn_tensor *out, int64_t start, int64_t count);

/* ---- loading ends in phases, each its module's, in this order (api.c):
 * lanes (exec.c), the memory plan (plan.c), then the target's step: a
 * backend attaches to the plan; the CPU prepares its weights (prepare.c)
 * and allocates the lanes' buffers (exec.c). */
/* The lanes (exec.c) and each one's run-time tensors, after inference;
 * their arenas and workspaces come with nn_runtime_alloc. */
nn_status nn_runtime_init(nn_model *m);
/* Check the IR's invariants (passes/verify.c; the passes and the plan cache
 * reader run it); NN_OK or NN_ERR_INTERNAL naming the first violation. */
nn_status nn_verify_graph(nn_model *m, const char *after_pass);
/* Assign arena offsets by liveness (static models). */
nn_status nn_plan_memory(nn_model *m);
void nn_plan_free(nn_plan *p);
/* CPU, static plan: each node's prepare packs its constants (freeing those
 * nothing else reads), and m->plan.workspace_bytes is sized to the
 * hungriest kernel.  A plan from the cache keeps its prepared blocks. */
nn_status nn_prepare_weights(nn_model *m);
/* CPU, static plan: each lane's activation arena and workspace. */
nn_status nn_runtime_alloc(nn_model *m);
void nn_runtime_free(nn_model *m);
/* Bytes of constants and prepared weights the model holds. */
size_t nn_weight_bytes(const nn_model *m);
/* Bytes of the graph inputs and outputs at the bound batch (one nn_predict's). */
size_t nn_io_bytes(const nn_model *m);
/* The whole memory a static CPU model needs: weights, every lane's arena and
 * `workspace` bytes of scratch, and nn_io_bytes. */
size_t nn_memory_need(const nn_model *m, size_t workspace);
/* NN_ERR_NOMEM with a message naming the whole need when nn_memory_need
 * exceeds options.max_memory.  Checked once, when everything but the
 * arenas and scratch is in place, so that the figure is final. */
nn_status nn_check_memory_limit(const nn_model *m, size_t workspace);
/* Run the graph once on one lane.  Inputs are in lane->rt[input].  Static
 * models write into the lane's planned arena; dynamic ones (one lane) infer
 * and allocate node by node and leave graph outputs allocated
 * (nn_execute_release frees them). */
nn_status nn_execute(nn_model *m, nn_lane *lane);
void nn_execute_release(nn_model *m);

/* The phases after a final graph (api.c): lanes, memory plan, weights. */
nn_status nn_make_runnable(nn_model *m);

/* ---- control-flow bodies (subgraph.c, docs/control-flow.md) */
/* A fresh model for a body at `depth` (options come from the parent later);
 * its graph is for the importer to fill. */
nn_model *nn_body_new(int depth);
/* Once the parent's graph is final: give each body the types of the
 * outer-scope values it reads, then infer, optimize and plan it as a graph
 * of its own (and its bodies in turn). */
nn_status nn_bodies_prepare(nn_model *m);

/* nn_load with a callback after parsing ("parsed") and after every pass. */
typedef void (*nn_pass_hook)(void *ctx, const nn_model *m, const char *pass, int rewrites);
nn_status nn_load_hooked(const char *path, const nn_options *options, nn_pass_hook hook, void *hook_ctx,
                         nn_model **out);

#endif
