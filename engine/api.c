/* The public entry points: load, predict with automatic batching, info. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../passes/pass.h"
#include "backend.h"
#include "cache.h"
#include "error.h"
#include "import.h"
#include "model.h"

NN_API nn_options nn_options_default(void) {
    nn_options o = {.device = "cpu", .batch = 1, .threads = 0, .optimize = 1, .winograd = 1, .cache = 1};
    return o;
}

/* "cpu": the CPU executor; "gpuN": the CUDA backend, in builds that have it. */
static nn_status select_device(nn_model *m, const char *device) {
    if (!device || !strcmp(device, "cpu")) return NN_OK;
    if (!strncmp(device, "gpu", 3)) {
        char *end;
        long idx = strtol(device + 3, &end, 10);
        if (end != device + 3 && !*end && idx >= 0 && idx < 1024) {
#ifdef NN_HAVE_CUDA
            m->backend = &nn_cuda_backend;
            m->device_index = (int)idx;
            return NN_OK;
#else
            (void)m;
            return nn_set_error(NN_ERR_DEVICE, "device '%s' is not available: this build has no CUDA support", device);
#endif
        }
    }
    return nn_set_error(NN_ERR_ARG, "unknown device '%s' (expected cpu or gpuN)", device);
}

/* The phases that follow a final graph, in order (see model.h).  A plan
 * from the cache comes with its offsets and prepared weights. */
nn_status nn_make_runnable(nn_model *m) {
    nn_status st = nn_runtime_init(m);
    if (st != NN_OK) return st;
    if (m->dynamic && m->backend)
        return nn_set_error(NN_ERR_UNSUPPORTED,
                            "device '%s' needs a static plan, and this model's shapes depend on run-time values",
                            m->device);
    if (m->dynamic) return NN_OK;
    if (!m->from_cache && (st = nn_plan_memory(m)) != NN_OK) return st;
    if (m->backend) return m->backend->attach(m, m->device_index);
    if ((st = nn_check_memory_limit(m, 0)) != NN_OK || (st = nn_prepare_weights(m)) != NN_OK ||
        (st = nn_check_memory_limit(m, m->plan.workspace_bytes)) != NN_OK)
        return st;
    return nn_runtime_alloc(m);
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
    if (opt.micro_batch < 0)
        return nn_set_error(NN_ERR_ARG, "micro-batch size must not be negative (got %d)", opt.micro_batch);
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
    if ((st = nn_check_memory_limit(m, 0)) == NN_OK && (st = nn_bind_inputs(m)) == NN_OK &&
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
    if (m->backend && m->device_state) m->backend->detach(m);
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
    return NN_OK;
}

NN_API void nn_tensor_release(nn_tensor *t) {
    if (!t) return;
    free(t->data);
    memset(t, 0, sizeof *t);
}

/* Inputs must match the model: dtype, rank, and every fixed dimension.
 * Returns the sample count of batched inputs in *samples. */
static nn_status check_inputs(const nn_model *m, const nn_tensor *in, int n_in, int64_t *samples) {
    const nn_graph *g = &m->g;
    if (n_in != g->n_inputs) return nn_set_error(NN_ERR_ARG, "model takes %d inputs, got %d", g->n_inputs, n_in);
    *samples = -1;
    for (int i = 0; i < n_in; i++) {
        const nn_value *v = &g->values[g->inputs[i]];
        if (!in[i].data && nn_tensor_elements(&in[i]) > 0)
            return nn_set_error(NN_ERR_ARG, "input '%s' has no data", v->name);
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

/* Output shapes: the static plan's, or for dynamic models what the run
 * just produced; batched outputs hold `samples` rows. */
static nn_status alloc_outputs(nn_model *m, const nn_tensor *shapes, nn_tensor *out, int n_out, int64_t samples) {
    for (int i = 0; i < n_out; i++) {
        int v = m->g.outputs[i];
        out[i] = shapes[v];
        if (m->g.values[v].batched && samples >= 0) out[i].dims[0] = samples;
        size_t bytes = (size_t)nn_tensor_elements(&out[i]) * nn_dtype_size(out[i].dtype);
        out[i].data = malloc(bytes ? bytes : 1);
        if (!out[i].data) {
            for (int j = 0; j < i; j++)
                nn_tensor_release(&out[j]);
            return nn_set_error(NN_ERR_NOMEM, "out of memory for output '%s' (%zu bytes)", m->g.values[v].name, bytes);
        }
    }
    return NN_OK;
}

static nn_status predict_dynamic(nn_model *m, const nn_tensor *in, nn_tensor *out, int n_out) {
    nn_lane *lane = &m->lanes[0];
    for (int i = 0; i < m->g.n_inputs; i++)
        lane->rt[m->g.inputs[i]] = in[i];
    nn_status st = nn_execute(m, lane);
    if (st == NN_OK) st = alloc_outputs(m, lane->rt, out, n_out, -1);
    if (st == NN_OK)
        for (int i = 0; i < n_out; i++)
            memcpy(out[i].data, lane->rt[m->g.outputs[i]].data,
                   (size_t)nn_tensor_elements(&out[i]) * nn_dtype_size(out[i].dtype));
    nn_execute_release(m);
    return st;
}

/* One chunk of a static plan on one lane: copy samples [start, start +
 * step) into the lane's input buffers (zero-padding a short last chunk),
 * run, copy the rows out. */
static nn_status run_chunk(nn_model *m, nn_lane *lane, const nn_tensor *in, nn_tensor *out, int n_out, int64_t start,
                           int64_t step, int64_t total) {
    const nn_graph *g = &m->g;
    int64_t count = nn_chunk_count(start, step, total);
    /* inputs without the batch too, every chunk: the plan may reuse their buffers once read */
    for (int i = 0; i < g->n_inputs; i++)
        nn_chunk_in(&g->values[g->inputs[i]], &in[i], lane->rt[g->inputs[i]].data, start, count, step);
    nn_status st = nn_execute(m, lane);
    if (st != NN_OK) return st;
    for (int i = 0; i < n_out; i++)
        nn_chunk_out(&g->values[g->outputs[i]], lane->rt[g->outputs[i]].data, &out[i], start, count);
    return NN_OK;
}

/* Static plan: the samples run in chunks of the plan's batch.  With one
 * lane, in turn, each kernel on every thread; with several, the lanes take
 * chunks side by side, a thread each.  A lane's error is reported on the
 * caller's thread. */
static nn_status predict_batched(nn_model *m, const nn_tensor *in, nn_tensor *out, int n_out, int64_t samples) {
    nn_status st = alloc_outputs(m, m->lanes[0].rt, out, n_out, samples);
    if (st != NN_OK) return st;
    int64_t step = m->has_batch ? m->plan_batch : 1, total = samples >= 0 ? samples : 1;
    int64_t chunks = (total + step - 1) / step;
    int lanes = chunks < m->n_lanes ? (int)chunks : m->n_lanes;
    if (lanes <= 1) {
        for (int64_t c = 0; c < chunks && st == NN_OK; c++)
            st = run_chunk(m, &m->lanes[0], in, out, n_out, c * step, step, total);
    } else {
        /* each lane keeps its first failure; the earliest chunk's is reported
         * (OpenMP may start fewer threads than lanes: those never fail) */
        int stop = 0;
        for (int l = 0; l < lanes; l++)
            m->lanes[l].failed_chunk = -1;
#pragma omp parallel num_threads(lanes)
        {
            nn_lane *lane = &m->lanes[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 1)
            for (int64_t c = 0; c < chunks; c++) {
                int stopped;
#pragma omp atomic read
                stopped = stop;
                if (stopped) continue;
                nn_status cst = run_chunk(m, lane, in, out, n_out, c * step, step, total);
                if (cst == NN_OK) continue;
                lane->failed_chunk = c;
                lane->status = cst;
                snprintf(lane->error, sizeof lane->error, "%s", nn_last_error());
#pragma omp atomic write
                stop = 1;
            }
        }
        const nn_lane *first = NULL;
        for (int l = 0; l < lanes; l++)
            if (m->lanes[l].failed_chunk >= 0 && (!first || m->lanes[l].failed_chunk < first->failed_chunk))
                first = &m->lanes[l];
        if (first) st = nn_set_error(first->status, "%s", first->error);
    }
    if (st != NN_OK)
        for (int i = 0; i < n_out; i++)
            nn_tensor_release(&out[i]);
    return st;
}

static nn_status predict_on_device(nn_model *m, const nn_tensor *in, nn_tensor *out, int n_out, int64_t samples) {
    nn_status st = alloc_outputs(m, m->lanes[0].rt, out, n_out, samples);
    if (st == NN_OK && (st = m->backend->predict(m, in, out, n_out, samples)) != NN_OK)
        for (int i = 0; i < n_out; i++)
            nn_tensor_release(&out[i]);
    return st;
}

NN_API nn_status nn_predict(nn_model *m, const nn_tensor *in, int n_in, nn_tensor *out, int n_out) {
    if (!m || (!in && n_in) || !out) return nn_set_error(NN_ERR_ARG, "nn_predict: NULL argument");
    if (n_out != m->g.n_outputs)
        return nn_set_error(NN_ERR_ARG, "model has %d outputs, %d requested", m->g.n_outputs, n_out);
    memset(out, 0, sizeof *out * (size_t)n_out);
    pthread_mutex_lock(&m->lock);
    int64_t samples;
    nn_status st = check_inputs(m, in, n_in, &samples);
    if (st == NN_OK && samples == 0) st = nn_set_error(NN_ERR_SHAPE, "inputs hold no samples");
    if (st == NN_OK) {
        if (m->backend)
            st = predict_on_device(m, in, out, n_out, samples);
        else
            st = m->dynamic ? predict_dynamic(m, in, out, n_out) : predict_batched(m, in, out, n_out, samples);
    }
    pthread_mutex_unlock(&m->lock);
    return st;
}
