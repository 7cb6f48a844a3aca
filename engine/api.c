/* The public entry points: load, predict with automatic batching, info. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/gemm.h"
#include "../ops/par.h"
#include "../passes/pass.h"
#include "backend.h"
#include "cache.h"
#include "error.h"
#include "import.h"
#include "model.h"
#include "plugin.h"
#include "values.h"

NN_API nn_options nn_options_default(void) {
    nn_options o = {.device = "cpu", .batch = 1, .threads = 0, .optimize = 1, .winograd = 1, .cache = 1};
    return o;
}

/* "cpu": the CPU executor; "gpuN": the CUDA backend, from its plugin. */
static nn_status select_device(nn_model *m, const char *device) {
    m->backend = &nn_cpu_backend;
    if (!device || !strcmp(device, "cpu")) return NN_OK;
    if (!strncmp(device, "gpu", 3)) {
        char *end;
        long idx = strtol(device + 3, &end, 10);
        if (end != device + 3 && !*end && idx >= 0 && idx < 1024) {
            const nn_backend *cuda;
            nn_status st = nn_plugin_backend_for(device, &cuda);
            if (st != NN_OK) return st;
            m->backend = cuda;
            m->device_index = (int)idx;
            return NN_OK;
        }
    }
    return nn_set_error(NN_ERR_ARG, "unknown device '%s' (expected cpu or gpuN)", device);
}

/* The phases that follow a final graph, in order (see model.h).  A plan
 * from the cache comes with its offsets and prepared weights. */
nn_status nn_make_runnable(nn_model *m) {
    nn_status st = nn_runtime_init(m);
    if (st != NN_OK) return st;
    if (m->dynamic && !nn_target_has(m, NN_TARGET_DYNAMIC))
        return nn_set_error(NN_ERR_UNSUPPORTED,
                            "device '%s' needs a static plan, and this model's shapes depend on run-time values",
                            m->device);
    if (m->dynamic) return NN_OK;
    if (!m->from_cache && (st = nn_plan_memory(m)) != NN_OK) return st;
    m->n_slots = 1;
    return m->backend->attach(m, m->device_index);
}

nn_status nn_load_hooked(const char *path, const nn_options *options, nn_pass_hook hook, void *hook_ctx,
                         nn_model **out) {
    if (!out) return nn_set_error(NN_ERR_ARG, "nn_load: model pointer is NULL");
    *out = NULL;
    if (!path) return nn_set_error(NN_ERR_ARG, "nn_load: path is NULL");
    nn_clear_error();
    nn_options opt = options ? *options : nn_options_default();
    if (opt.batch < 1) return nn_set_error(NN_ERR_ARG, "batch size must be at least 1 (got %d)", opt.batch);
    if (opt.threads < 0) return nn_set_error(NN_ERR_ARG, "thread count must not be negative (got %d)", opt.threads);
    if ((opt.tf32 || opt.fp16) && (!opt.device || !strcmp(opt.device, "cpu")))
        return nn_set_error(NN_ERR_ARG, "tf32 and fp16 apply to GPU devices only (device is cpu)");
    if (opt.precision != NN_PRECISION_FP32 && opt.precision != NN_PRECISION_BF16)
        return nn_set_error(NN_ERR_ARG, "precision must be fp32 or bf16 (got %d)", (int)opt.precision);
    if (opt.precision == NN_PRECISION_BF16 && opt.device && strcmp(opt.device, "cpu"))
        return nn_set_error(NN_ERR_ARG, "bf16 precision applies to the CPU only (device is %s; GPUs take fp16)",
                            opt.device);
    /* no silent fp32 fallback: asking for bf16 where it cannot run is an error */
    if (opt.precision == NN_PRECISION_BF16 && !nn_gemm_bf16_available())
        return nn_set_error(NN_ERR_UNSUPPORTED,
                            "bf16 precision needs AVX512-BF16 or AMX-BF16; this processor (or NN_ISA=%s) has neither",
                            nn_gemm_kernel_name());
    if (opt.micro_batch < 0)
        return nn_set_error(NN_ERR_ARG, "micro-batch size must not be negative (got %d)", opt.micro_batch);
    if (opt.cache_max < -1)
        return nn_set_error(NN_ERR_ARG, "plan cache cap must be -1 (none), 0 (default) or bytes (got %lld)",
                            (long long)opt.cache_max);
    if (opt.max_memory < 0)
        return nn_set_error(NN_ERR_ARG, "memory limit must not be negative (got %lld)", (long long)opt.max_memory);
    nn_model *m = calloc(1, sizeof *m);
    if (!m) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    nn_status st = select_device(m, opt.device);
    if (st != NN_OK) {
        free(m);
        return st;
    }
    snprintf(m->device, sizeof m->device, "%s", opt.device ? opt.device : "cpu");
    opt.device = m->device;
    m->opt = opt;
    m->batch = m->plan_batch = opt.batch;
    m->threads = opt.threads ? opt.threads : omp_get_num_procs();
    m->kernel_threads = m->threads; /* until lanes share them out (exec.c) */
    pthread_mutex_init(&m->lock, NULL);
    bool hit = false;
    if (opt.cache) nn_cache_load(m, path, &hit);
    if (hit) {
        if ((st = nn_bodies_prepare(m)) != NN_OK || (st = nn_make_runnable(m)) != NN_OK) {
            nn_free(m);
            return st;
        }
        *out = m;
        return NN_OK;
    }
    if ((st = nn_import_onnx(path, &m->g)) != NN_OK) {
        nn_free(m);
        return st;
    }
    int folded;
    if ((st = nn_bind_inputs(m)) == NN_OK &&
        (st = nn_infer_graph(m, false, &folded)) == NN_OK && (st = nn_choose_plan_batch(m)) == NN_OK && hook)
        hook(hook_ctx, m, "parsed", 0);
    if (st != NN_OK || (opt.optimize && (st = nn_optimize(m, hook, hook_ctx)) != NN_OK) ||
        (st = nn_bodies_prepare(m)) != NN_OK || (st = nn_make_runnable(m)) != NN_OK) {
        nn_free(m);
        return st;
    }
    if (opt.cache) nn_cache_store(m);
    *out = m;
    return NN_OK;
}

NN_API nn_status nn_load(const char *path, const nn_options *options, nn_model **out) {
    return nn_load_hooked(path, options, NULL, NULL, out);
}

NN_API void nn_free(nn_model *m) {
    if (!m) return;
    if (m->backend && m->backend->detach) m->backend->detach(m); /* also after a failed attach */
    nn_runtime_free(m);
    nn_graph_free(&m->g);
    nn_cache_release(m);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

NN_API int nn_input_count(const nn_model *m) { return m ? m->g.n_inputs : 0; }
NN_API int nn_output_count(const nn_model *m) { return m ? m->g.n_outputs : 0; }

static nn_status io_info(const nn_model *m, const int *ids, int count, int index, const char **name, nn_tensor *shape) {
    if (!m || index < 0 || index >= count) return nn_set_error(NN_ERR_ARG, "no such input/output index %d", index);
    const nn_value *v = &m->g.values[ids[index]];
    if (name) *name = v->name;
    if (shape) {
        *shape = v->t;
        shape->data = NULL;
        if (v->batched && shape->ndim > 0) shape->dims[0] = m->batch; /* the plan may hold fewer */
    }
    return NN_OK;
}

NN_API nn_status nn_input_info(const nn_model *m, int i, const char **name, nn_tensor *shape) {
    return io_info(m, m ? m->g.inputs : NULL, nn_input_count(m), i, name, shape);
}
NN_API nn_status nn_output_info(const nn_model *m, int i, const char **name, nn_tensor *shape) {
    return io_info(m, m ? m->g.outputs : NULL, nn_output_count(m), i, name, shape);
}

static int io_index(const nn_model *m, const int *ids, int count, const char *name, const char *what) {
    for (int i = 0; m && name && i < count; i++)
        if (!strcmp(m->g.values[ids[i]].name, name)) return i;
    nn_set_error(NN_ERR_ARG, "the model has no %s named '%s'", what, name ? name : "(null)");
    return -1;
}

NN_API int nn_input_index(const nn_model *m, const char *name) {
    return io_index(m, m ? m->g.inputs : NULL, nn_input_count(m), name, "input");
}
NN_API int nn_output_index(const nn_model *m, const char *name) {
    return io_index(m, m ? m->g.outputs : NULL, nn_output_count(m), name, "output");
}

static int batch_axis(const nn_model *m, const int *ids, int count, int index) {
    if (!m || index < 0 || index >= count) return -1;
    const nn_value *v = &m->g.values[ids[index]];
    return v->batched && v->t.ndim > 0 ? 0 : -1;
}
NN_API int nn_input_batch_axis(const nn_model *m, int i) {
    return batch_axis(m, m ? m->g.inputs : NULL, nn_input_count(m), i);
}
NN_API int nn_output_batch_axis(const nn_model *m, int i) {
    return batch_axis(m, m ? m->g.outputs : NULL, nn_output_count(m), i);
}

NN_API nn_status nn_model_get_stats(const nn_model *m, nn_model_stats *s) {
    if (!m || !s) return nn_set_error(NN_ERR_ARG, "nn_model_get_stats: NULL argument");
    s->nodes = m->g.n_nodes;
    s->nodes_parsed = m->g.nodes_parsed;
    s->parameters = m->g.parameters;
    int lanes = m->n_lanes > 1 ? m->n_lanes : 1;
    s->arena_bytes = (int64_t)m->plan.arena_bytes * lanes;
    s->batch = m->batch;
    s->plan_batch = m->plan_batch;
    s->lanes = lanes;
    s->threads = m->threads;
    s->weight_bytes = (int64_t)nn_weight_bytes(m);
    s->workspace_bytes = (int64_t)m->plan.workspace_bytes * lanes;
    s->cache = m->cache_state;
    s->cache_path = m->cache_state == NN_CACHE_HIT || m->cache_written ? m->cache_path : NULL;
    s->cache_warning = m->cache_warning[0] ? m->cache_warning : NULL;
    s->io_bytes = m->dynamic ? 0 : (int64_t)nn_io_bytes(m);
    s->memory_bytes = m->dynamic ? 0 : (int64_t)nn_memory_need(m, m->plan.workspace_bytes);
    return NN_OK;
}

NN_API void nn_tensor_release(nn_tensor *t) {
    if (!t) return;
    free(t->data);
    memset(t, 0, sizeof *t);
}

/* Every element of a STRING input points at a string. */
static nn_status check_strings(const char *name, const nn_tensor *t) {
    int64_t n = t->dtype == NN_DTYPE_STRING ? nn_tensor_elements(t) : 0;
    for (int64_t i = 0; i < n; i++)
        if (!((char *const *)t->data)[i])
            return nn_set_error(NN_ERR_ARG, "input '%s': string %lld is NULL", name, (long long)i);
    return NN_OK;
}

/* A tensor as the caller hands it: a known dtype, a valid shape, data. */
static nn_status check_tensor(const char *name, const nn_tensor *t, nn_dtype want) {
    if (t->dtype != want && want != NN_DTYPE_UNDEFINED)
        return nn_set_error(NN_ERR_ARG, "input '%s' must hold %s, got %s", name, nn_dtype_name(want),
                            nn_dtype_name(t->dtype));
    if (!nn_dtype_size(t->dtype) || t->ndim < 0 || t->ndim > NN_MAX_DIMS || nn_tensor_elements(t) < 0)
        return nn_set_error(NN_ERR_ARG, "input '%s' holds an invalid tensor", name);
    if (!t->data && nn_tensor_elements(t) > 0) return nn_set_error(NN_ERR_ARG, "input '%s' has no data", name);
    return check_strings(name, t);
}

/* A sequence or optional graph input (docs/sequences.md). */
static nn_status check_value_input(const nn_value *v, const nn_tensor *t) {
    if (v->kind == NN_KIND_TENSOR)
        return nn_set_error(NN_ERR_ARG, "input '%s' is a tensor, got a sequence or optional", v->name);
    bool seq = v->kind == NN_KIND_SEQUENCE || v->elem_kind == NN_KIND_SEQUENCE;
    if (v->kind == NN_KIND_OPTIONAL && t->dtype == NN_DTYPE_NONE) return NN_OK;
    if (!seq) return check_tensor(v->name, t, v->t.dtype);
    const nn_seq *s = t->data;
    if (t->dtype != NN_DTYPE_SEQUENCE || !s)
        return nn_set_error(NN_ERR_ARG, "input '%s' must be a sequence, got %s", v->name, nn_dtype_name(t->dtype));
    if (s->n < 0 || s->n > NN_SEQ_MAX_LENGTH || (s->n && !s->items))
        return nn_set_error(NN_ERR_ARG, "input '%s': a sequence of %lld tensors (at most NN_SEQ_MAX_LENGTH, %d)",
                            v->name, (long long)s->n, NN_SEQ_MAX_LENGTH);
    for (int64_t k = 0; k < s->n; k++) {
        nn_status st = check_tensor(v->name, &s->items[k], s->n ? v->t.dtype : NN_DTYPE_UNDEFINED);
        if (st != NN_OK) return st;
    }
    return NN_OK;
}

/* Inputs must match the model: dtype, rank, and every fixed dimension.
 * Returns the sample count of batched inputs in *samples. */
static nn_status check_inputs(const nn_model *m, const nn_tensor *in, int n_in, int64_t *samples) {
    const nn_graph *g = &m->g;
    if (n_in != g->n_inputs) return nn_set_error(NN_ERR_ARG, "model takes %d inputs, got %d", g->n_inputs, n_in);
    *samples = -1;
    for (int i = 0; i < n_in; i++) {
        const nn_value *v = &g->values[g->inputs[i]];
        if (v->kind != NN_KIND_TENSOR || nn_dtype_is_container(in[i].dtype)) {
            nn_status st = check_value_input(v, &in[i]);
            if (st != NN_OK) return st;
            continue;
        }
        if (!in[i].data && nn_tensor_elements(&in[i]) > 0)
            return nn_set_error(NN_ERR_ARG, "input '%s' has no data", v->name);
        if (in[i].data && in[i].dtype == NN_DTYPE_STRING && in[i].ndim >= 0 && in[i].ndim <= NN_MAX_DIMS) {
            nn_status st = check_strings(v->name, &in[i]);
            if (st != NN_OK) return st;
        }
        if (in[i].dtype != v->t.dtype)
            return nn_set_error(NN_ERR_ARG, "input '%s' must be %s, got %s", v->name, nn_dtype_name(v->t.dtype),
                                nn_dtype_name(in[i].dtype));
        if (v->t.ndim >= 0 && in[i].ndim != v->t.ndim)
            return nn_set_error(NN_ERR_SHAPE, "input '%s' must have %d dimensions, got %d", v->name, v->t.ndim,
                                in[i].ndim);
        if (in[i].ndim < 0 || in[i].ndim > NN_MAX_DIMS)
            return nn_set_error(NN_ERR_SHAPE, "input '%s' has %d dimensions", v->name, in[i].ndim);
        for (int d = 0; d < in[i].ndim; d++) {
            if (in[i].dims[d] < 0) return nn_set_error(NN_ERR_SHAPE, "input '%s' has a negative dimension", v->name);
            bool free_dim = v->t.ndim < 0 || !v->shape_known || (d == 0 && v->batched);
            if (!free_dim && in[i].dims[d] != v->t.dims[d])
                return nn_set_error(NN_ERR_SHAPE, "input '%s' dimension %d must be %lld, got %lld", v->name, d,
                                    (long long)v->t.dims[d], (long long)in[i].dims[d]);
        }
        if (v->batched && !m->dynamic) {
            if (*samples >= 0 && in[i].dims[0] != *samples)
                return nn_set_error(NN_ERR_SHAPE, "batched inputs disagree on the sample count (%lld vs %lld)",
                                    (long long)*samples, (long long)in[i].dims[0]);
            *samples = in[i].dims[0];
        }
    }
    return NN_OK;
}

/* Output i's shape: the static plan's, or for dynamic models what the run
 * just produced; batched outputs hold `samples` rows. */
static nn_tensor output_shape(const nn_model *m, const nn_tensor *shapes, int i, int64_t samples) {
    int v = m->g.outputs[i];
    nn_tensor t = shapes[v];
    t.data = NULL;
    if (m->g.values[v].batched && samples >= 0) t.dims[0] = samples;
    return t;
}

static nn_status alloc_outputs(nn_model *m, const nn_tensor *shapes, nn_tensor *out, int n_out, int64_t samples) {
    for (int i = 0; i < n_out; i++) {
        out[i] = output_shape(m, shapes, i, samples);
        size_t bytes = (size_t)nn_tensor_elements(&out[i]) * nn_dtype_size(out[i].dtype);
        out[i].data = malloc(bytes ? bytes : 1);
        if (!out[i].data) {
            for (int j = 0; j < i; j++)
                nn_tensor_release(&out[j]);
            return nn_set_error(NN_ERR_NOMEM, "out of memory for output '%s' (%zu bytes)",
                                m->g.values[m->g.outputs[i]].name, bytes);
        }
    }
    return NN_OK;
}

/* Caller-owned outputs (nn_predict_into) must have exactly the shapes the
 * run produces: they are written in place, row by row. */
static nn_status check_outputs(const nn_model *m, const nn_tensor *out, int n_out, int64_t samples) {
    for (int i = 0; i < n_out; i++) {
        nn_tensor want = output_shape(m, m->lanes[0].rt, i, samples);
        const char *name = m->g.values[m->g.outputs[i]].name;
        if (out[i].dtype != want.dtype)
            return nn_set_error(NN_ERR_ARG, "output '%s' must be %s, got %s", name, nn_dtype_name(want.dtype),
                                nn_dtype_name(out[i].dtype));
        bool same = out[i].ndim == want.ndim;
        for (int d = 0; same && d < want.ndim; d++)
            same = out[i].dims[d] == want.dims[d];
        if (!same)
            return nn_set_error(NN_ERR_SHAPE, "output '%s' buffer has the wrong shape (see nn_output_shapes)", name);
        if (!out[i].data && nn_tensor_elements(&want) > 0)
            return nn_set_error(NN_ERR_ARG, "output '%s' has no data", name);
    }
    return NN_OK;
}

static nn_status predict_dynamic(nn_model *m, const nn_tensor *in, nn_tensor *out, int n_out) {
    nn_lane *lane = &m->lanes[0];
    for (int i = 0; i < m->g.n_inputs; i++)
        lane->rt[m->g.inputs[i]] = in[i];
    nn_status st = nn_execute(m, lane);
    /* each output in one block of its own: strings and sequences with what they point to */
    for (int i = 0; i < n_out && st == NN_OK; i++) {
        const nn_value *v = &m->g.values[m->g.outputs[i]];
        if ((st = nn_value_pack(&lane->rt[m->g.outputs[i]], &out[i], v->name)) != NN_OK) break;
        if (v->kind == NN_KIND_TENSOR && nn_dtype_is_container(out[i].dtype))
            st = nn_set_error(NN_ERR_INVALID, "graph output '%s' is declared a tensor, but came out a %s", v->name,
                              out[i].dtype == NN_DTYPE_NONE ? "empty optional" : "sequence");
    }
    if (st != NN_OK)
        for (int i = 0; i < n_out; i++)
            nn_tensor_release(&out[i]);
    nn_execute_release(m);
    return st;
}

/* Chunk c of a static plan in one of the target's slots: copy samples
 * [c * step, c * step + step) into the slot's input buffers (zero-padding a
 * short last chunk) and launch it. */
static nn_status launch_chunk(nn_model *m, const nn_tensor *in, int slot, int64_t c, int64_t step, int64_t total) {
    const nn_graph *g = &m->g;
    int64_t start = c * step, count = nn_chunk_count(start, step, total);
    /* inputs without the batch too, every chunk: the plan may reuse their buffers once read */
    for (int i = 0; i < g->n_inputs; i++)
        nn_chunk_in(&g->values[g->inputs[i]], &in[i], m->backend->input_buffer(m, slot, i), start, count, step);
    return m->backend->launch(m, slot, c);
}

/* Wait for chunk c in `slot` and copy its rows out. */
static nn_status finish_chunk(nn_model *m, nn_tensor *out, int n_out, int slot, int64_t c, int64_t step,
                              int64_t total) {
    const nn_graph *g = &m->g;
    nn_status st = m->backend->finish ? m->backend->finish(m, slot, c) : NN_OK;
    if (st != NN_OK) return st;
    int64_t start = c * step, count = nn_chunk_count(start, step, total);
    for (int i = 0; i < n_out; i++)
        nn_chunk_out(&g->values[g->outputs[i]], m->backend->output_buffer(m, slot, i), &out[i], start, count);
    return NN_OK;
}

/* The chunks in turn over the target's slots, round robin: chunk c is
 * staged once the slot's previous chunk (c - slots) is finished and copied
 * out, so a device copies and computes the chunks in flight meanwhile.
 * After an error every chunk in flight is still finished. */
static nn_status run_pipelined(nn_model *m, const nn_tensor *in, nn_tensor *out, int n_out, int64_t chunks,
                               int64_t step, int64_t total) {
    int64_t slots = m->n_slots > 1 ? m->n_slots : 1, c = 0, done = 0;
    nn_status st = NN_OK;
    for (; c < chunks && st == NN_OK; c++) {
        if (c >= slots && (st = finish_chunk(m, out, n_out, (int)(done % slots), done, step, total)) != NN_OK) break;
        if (c >= slots) done++;
        st = launch_chunk(m, in, (int)(c % slots), c, step, total);
    }
    for (; done < c; done++) {
        nn_status fst = st == NN_OK ? finish_chunk(m, out, n_out, (int)(done % slots), done, step, total)
                        : m->backend->finish ? m->backend->finish(m, (int)(done % slots), done)
                                             : NN_OK;
        if (st == NN_OK) st = fst;
    }
    return st;
}

/* Slots that run side by side (the CPU's lanes), a thread each, taking
 * chunks in turn: the engine's parallel for (ops/par.h), whose seats are the
 * slots (no two chunks running at once share one), and inside which a
 * lane's kernels run on their own thread.  A lane's error is reported on the
 * caller's thread: the earliest chunk's. */
typedef struct lanes_job {
    nn_model *m;
    const nn_tensor *in;
    nn_tensor *out;
    int n_out;
    int64_t step, total;
    int stop; /* read and written atomically */
} lanes_job;

static void lane_chunk(void *ctx, int64_t c, int slot) {
    lanes_job *j = ctx;
    nn_model *m = j->m;
    nn_lane *lane = &m->lanes[slot];
    if (__atomic_load_n(&j->stop, __ATOMIC_RELAXED)) return;
    nn_status cst = launch_chunk(m, j->in, slot, c, j->step, j->total);
    nn_status fst = cst == NN_OK                ? finish_chunk(m, j->out, j->n_out, slot, c, j->step, j->total)
                    : m->backend->finish ? m->backend->finish(m, slot, c)
                                         : NN_OK;
    if (cst == NN_OK) cst = fst;
    if (cst == NN_OK) return;
    if (lane->failed_chunk < 0 || c < lane->failed_chunk) {
        lane->failed_chunk = c;
        lane->status = cst;
        snprintf(lane->error, sizeof lane->error, "%s", nn_last_error());
    }
    __atomic_store_n(&j->stop, 1, __ATOMIC_RELAXED);
}

static nn_status run_concurrent(nn_model *m, const nn_tensor *in, nn_tensor *out, int n_out, int64_t chunks,
                                int64_t step, int64_t total, int slots) {
    for (int l = 0; l < slots; l++)
        m->lanes[l].failed_chunk = -1;
    lanes_job j = {.m = m, .in = in, .out = out, .n_out = n_out, .step = step, .total = total};
    nn_par_for(slots, chunks, lane_chunk, &j);
    const nn_lane *first = NULL;
    for (int l = 0; l < slots; l++)
        if (m->lanes[l].failed_chunk >= 0 && (!first || m->lanes[l].failed_chunk < first->failed_chunk))
            first = &m->lanes[l];
    return first ? nn_set_error(first->status, "%s", first->error) : NN_OK;
}

/* Static plan: the samples run in chunks of the plan's batch on the
 * model's target. */
static nn_status predict_static(nn_model *m, const nn_tensor *in, nn_tensor *out, int n_out, int64_t samples,
                                bool into) {
    nn_status st = into ? check_outputs(m, out, n_out, samples) : alloc_outputs(m, m->lanes[0].rt, out, n_out, samples);
    if (st != NN_OK) return st;
    int64_t step = m->has_batch ? m->plan_batch : 1, total = samples >= 0 ? samples : 1;
    int64_t chunks = (total + step - 1) / step;
    int slots = chunks < m->n_slots ? (int)chunks : m->n_slots;
    if (slots > 1 && nn_target_has(m, NN_TARGET_CONCURRENT))
        st = run_concurrent(m, in, out, n_out, chunks, step, total, slots);
    else
        st = run_pipelined(m, in, out, n_out, chunks, step, total);
    if (st != NN_OK && !into)
        for (int i = 0; i < n_out; i++)
            nn_tensor_release(&out[i]);
    return st;
}

/* Validate the inputs under the model's lock; *samples as check_inputs. */
static nn_status begin_predict(nn_model *m, const nn_tensor *in, int n_in, int64_t *samples) {
    nn_status st = check_inputs(m, in, n_in, samples);
    if (st == NN_OK && *samples == 0) st = nn_set_error(NN_ERR_SHAPE, "inputs hold no samples");
    if (st == NN_OK) st = nn_batch_check_samples(m, *samples);
    return st;
}

/* How a call hands its values: into caller-owned outputs, and whether graph
 * inputs and outputs may be sequences and optionals (values.h). */
enum { PREDICT_INTO = 1, PREDICT_VALUES = 2 };

static nn_status predict(nn_model *m, const nn_tensor *in, int n_in, nn_tensor *out, int n_out, unsigned mode) {
    bool into = mode & PREDICT_INTO;
    if (!m || (!in && n_in) || !out) return nn_set_error(NN_ERR_ARG, "nn_predict: NULL argument");
    for (int i = 0; i < m->g.n_inputs + m->g.n_outputs && !(mode & PREDICT_VALUES); i++) {
        bool is_in = i < m->g.n_inputs;
        const nn_value *v = &m->g.values[is_in ? m->g.inputs[i] : m->g.outputs[i - m->g.n_inputs]];
        if (v->kind != NN_KIND_TENSOR)
            return nn_set_error(NN_ERR_UNSUPPORTED,
                                "graph %s '%s' is %s: nn_predict takes and returns tensors only (docs/sequences.md)",
                                is_in ? "input" : "output", v->name,
                                v->kind == NN_KIND_SEQUENCE ? "a sequence" : "an optional");
    }
    if (n_out != m->g.n_outputs)
        return nn_set_error(NN_ERR_ARG, "model has %d outputs, %d requested", m->g.n_outputs, n_out);
    if (!into) memset(out, 0, sizeof *out * (size_t)n_out);
    pthread_mutex_lock(&m->lock);
    int64_t samples = -1;
    nn_status st = begin_predict(m, in, n_in, &samples);
    if (st == NN_OK && into && m->dynamic)
        st = nn_set_error(NN_ERR_UNSUPPORTED, "this model's output shapes depend on run-time values: use nn_predict");
    if (st == NN_OK)
        st = m->dynamic ? predict_dynamic(m, in, out, n_out) : predict_static(m, in, out, n_out, samples, into);
    pthread_mutex_unlock(&m->lock);
    return st;
}

NN_API nn_status nn_predict(nn_model *m, const nn_tensor *in, int n_in, nn_tensor *out, int n_out) {
    return predict(m, in, n_in, out, n_out, 0);
}

nn_status nn_predict_values(nn_model *m, const nn_tensor *in, int n_in, nn_tensor *out, int n_out) {
    return predict(m, in, n_in, out, n_out, PREDICT_VALUES);
}

NN_API nn_status nn_predict_into(nn_model *m, const nn_tensor *in, int n_in, nn_tensor *out, int n_out) {
    return predict(m, in, n_in, out, n_out, PREDICT_INTO);
}

NN_API nn_status nn_output_shapes(nn_model *m, const nn_tensor *in, int n_in, nn_tensor *shapes, int n_out) {
    if (!m || (!in && n_in) || !shapes) return nn_set_error(NN_ERR_ARG, "nn_output_shapes: NULL argument");
    if (n_out != m->g.n_outputs)
        return nn_set_error(NN_ERR_ARG, "model has %d outputs, %d requested", m->g.n_outputs, n_out);
    pthread_mutex_lock(&m->lock); /* lane 0's shapes are rewritten while a dynamic model runs */
    int64_t samples;
    nn_status st = begin_predict(m, in, n_in, &samples);
    if (st == NN_OK && m->dynamic)
        st = nn_set_error(NN_ERR_UNSUPPORTED, "this model's output shapes depend on run-time values: use nn_predict");
    for (int i = 0; st == NN_OK && i < n_out; i++)
        shapes[i] = output_shape(m, m->lanes[0].rt, i, samples);
    pthread_mutex_unlock(&m->lock);
    return st;
}
