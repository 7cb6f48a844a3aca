/* The batch, in one place: which graph inputs carry it (their symbolic dim
 * 0, bound at load), which values follow it, whether the model's samples
 * may be split into chunks at all, how many samples one run of the plan
 * holds (plan_batch), and how many lanes run those micro-batches side by
 * side.  nn_predict (api.c) then splits a call's samples into chunks of
 * plan_batch through nn_chunk_in / nn_chunk_out.
 *
 * A value is batched when its dim 0 follows the bound batch: shape
 * inference at two batch sizes (a differential probe) gives it dim 0 equal
 * to each and its other dims unchanged.  A value computed from the samples'
 * data that is not batched (a Reshape folding the batch into another dim, a
 * Transpose moving it, a reduction over it) means samples do not stay in
 * their rows, and the model then runs whole batches only: a call must hold
 * exactly `batch` samples.  Nothing is inferred from a dim that merely
 * equals the batch. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/registry.h"
#include "backend.h"
#include "error.h"
#include "model.h"
#include "onnx_tensor.h"

nn_status nn_bind_inputs(nn_model *m) {
    nn_graph *g = &m->g;
    /* a symbolic dim 0 is the batch, unless an op runs across it (an RNN's
     * time axis): then it stays a run-time dimension, so nothing splits it */
    bool dim0_batch = m->depth == 0; /* a body's inputs are whatever its node feeds it */
    for (int n = 0; n < g->n_nodes; n++)
        if (nn_op_get(g->nodes[n].op)->flags & NN_OPF_SPANS_DIM0) dim0_batch = false;
    for (int i = 0; i < g->n_inputs; i++) {
        nn_value *v = &g->values[g->inputs[i]];
        v->batched = false;
        if (v->kind != NN_KIND_TENSOR) { /* a sequence or optional: what it holds is known when it comes */
            v->shape_known = false;
            m->dynamic = true;
            continue;
        }
        if (v->t.ndim < 0) {
            m->dynamic = true;
            continue;
        }
        bool known = true;
        for (int d = 0; d < v->t.ndim; d++) {
            if (v->t.dims[d] >= 0) continue;
            if (d == 0 && dim0_batch) {
                v->t.dims[0] = m->plan_batch;
                v->batched = m->has_batch = true;
            } else {
                known = false; /* only the batch dimension is bound at load */
            }
        }
        v->shape_known = known;
        if (!known) m->dynamic = true;
        int64_t n = known ? nn_dims_checked_elements(v->t.dims, (size_t)v->t.ndim) : 0;
        if (nn_dtype_size(v->t.dtype) && (n < 0 || n > INT64_MAX / (int64_t)nn_dtype_size(v->t.dtype)))
            return nn_set_error(NN_ERR_SHAPE, "graph input '%s': its size overflows 64 bits", v->name);
    }
    return NN_OK;
}

nn_status nn_rebind_batch(nn_model *m, int plan_batch) {
    nn_graph *g = &m->g;
    for (int v = 0; v < g->n_values; v++) {
        nn_value *val = &g->values[v];
        if (val->is_input && val->batched)
            val->t.dims[0] = plan_batch;
        else if (!val->is_input && !val->is_const)
            val->shape_known = false;
    }
    m->plan_batch = plan_batch;
    int folded;
    return nn_infer_graph(m, false, &folded);
}

/* Samples per run of the plan when options.micro_batch leaves it to us:
 * one, when a sample's activations (every value the graph as exported
 * computes) take at least as many bytes as the weights.  A lane then keeps
 * its sample's activations in cache and reads every weight once per sample;
 * a whole batch reads every weight once but streams every activation through
 * memory.  On a 2-core Zen 5 at batch 64, one sample per lane ran
 * MobileNetV2, EfficientNet-B0 and DenseNet-201 1.3-1.45x as fast,
 * GoogLeNet 1.12x and ResNet-50 (activations 1.5x its weights) on par; VGG-19
 * (activations 0.22x) 0.83x. */
static int auto_plan_batch(const nn_model *m) {
    const nn_graph *g = &m->g;
    double weights = 0, activations = 0;
    for (int v = 0; v < g->n_values; v++) {
        const nn_value *val = &g->values[v];
        double bytes = (double)nn_tensor_elements(&val->t) * (double)nn_dtype_size(val->t.dtype);
        if (val->is_const)
            weights += bytes;
        else if (val->shape_known)
            activations += bytes / m->batch;
    }
    return activations >= weights ? 1 : m->batch;
}

/* The model runs whole batches only, for the reason given. */
__attribute__((format(printf, 2, 3))) static void run_whole(nn_model *m, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    m->whole_batch = true;
    vsnprintf(m->whole_batch_why, sizeof m->whole_batch_why, fmt, ap);
    va_end(ap);
}

/* Whether value v, `at` the bound batch and `now` at the probe batch,
 * has dim 0 following the batch and every other dim fixed. */
static bool follows(const nn_tensor *at, int batch, const nn_tensor *now, int probe) {
    if (at->ndim < 1 || now->ndim != at->ndim || now->dtype != at->dtype) return false;
    if (at->dims[0] != batch || now->dims[0] != probe) return false;
    return !memcmp(at->dims + 1, now->dims + 1, sizeof(int64_t) * (size_t)(at->ndim - 1));
}

/* Mark the values that follow the batch, from their shapes at m->batch
 * (`at`, `known`) and now (at `probe`), and decide whether the samples may
 * be split.  `data` per value: computed from a batched input's elements;
 * `size`: computed from its size only (Shape, Size and their arithmetic,
 * which a run of the plan evaluates at the plan batch). */
static void mark_batched(nn_model *m, const nn_tensor *at, const bool *known, int probe, bool *data, bool *size) {
    nn_graph *g = &m->g;
    for (int v = 0; v < g->n_values; v++) {
        nn_value *val = &g->values[v];
        data[v] = val->is_input && val->batched;
        size[v] = false;
        if (!val->is_input)
            val->batched = !val->is_const && known[v] && val->shape_known && follows(&at[v], m->batch, &val->t, probe);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        bool shape_op = nn_op_get(n->op)->flags & NN_OPF_SHAPE_ONLY, d = false, s = false;
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] < 0) continue;
            d |= data[n->in[k]] && !shape_op;
            s |= size[n->in[k]] || (data[n->in[k]] && shape_op);
        }
        for (int k = 0; k < n->n_out; k++) {
            int v = n->out[k];
            if (v < 0) continue;
            data[v] = d;
            size[v] = s && !d;
            if (d && !g->values[v].batched && !m->whole_batch)
                run_whole(m, "node '%s' (%s): output '%s' does not keep the batch in dim 0", n->name,
                          nn_op_get(n->op)->name, g->values[v].name);
        }
    }
    for (int i = 0; i < g->n_outputs && !m->whole_batch; i++) {
        const nn_value *val = &g->values[g->outputs[i]];
        if (size[g->outputs[i]] && !val->batched)
            run_whole(m, "graph output '%s' is computed from the batch size", val->name);
    }
}

nn_status nn_choose_plan_batch(nn_model *m) {
    nn_graph *g = &m->g;
    m->whole_batch = false;
    m->whole_batch_why[0] = 0;
    for (int v = 0; v < g->n_values; v++)
        if (!g->values[v].is_input) g->values[v].batched = false;
    if (!m->has_batch || m->dynamic) return NN_OK; /* dynamic plans run whole calls, inferred as they go */
    int want = m->opt.micro_batch > 0 ? m->opt.micro_batch : auto_plan_batch(m);
    if (!nn_target_has(m, NN_TARGET_MICRO_BATCH) || want > m->batch) want = m->batch; /* a device runs whole batches */
    /* the probe batch: the micro-batch when there is one to try, else the next size */
    int probe = want < m->batch ? want : m->batch < INT_MAX ? m->batch + 1 : m->batch - 1;
    size_t nv = (size_t)g->n_values + 1;
    nn_tensor *at = malloc(sizeof *at * nv);
    bool *known = malloc(nv), *data = malloc(nv), *size = malloc(nv);
    nn_status st = NN_OK;
    if (!at || !known || !data || !size) {
        st = nn_set_error(NN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int v = 0; v < g->n_values; v++) {
        at[v] = g->values[v].t;
        known[v] = g->values[v].shape_known;
    }
    st = nn_rebind_batch(m, probe);
    if (st != NN_OK || m->dynamic) {
        char why[200];
        snprintf(why, sizeof why, "%s", st != NN_OK ? nn_last_error() : "shapes depend on run-time values");
        nn_clear_error();
        st = NN_OK;
        run_whole(m, "at a batch of %d its shapes do not follow the batch (%s)", probe, why);
        for (int v = 0; v < g->n_values; v++)
            if (!g->values[v].is_input) g->values[v].batched = false;
    } else {
        mark_batched(m, at, known, probe, data, size);
    }
    if (m->whole_batch || probe != want) {
        bool *keep = data; /* the flags, across the inference at the bound batch */
        for (int v = 0; v < g->n_values; v++)
            keep[v] = g->values[v].batched;
        st = nn_rebind_batch(m, m->batch);
        for (int v = 0; v < g->n_values; v++)
            g->values[v].batched = keep[v];
    }
done:
    free(at);
    free(known);
    free(data);
    free(size);
    return st;
}

const char *nn_batch_check(const nn_model *m) {
    const nn_graph *g = &m->g;
    if (m->whole_batch && m->plan_batch != m->batch) return "a batch it runs whole is split";
    if (!m->has_batch && m->plan_batch != m->batch) return "a plan without a batch is split";
    for (int v = 0; v < g->n_values; v++) {
        const nn_value *val = &g->values[v];
        if (!val->batched) continue;
        if (!m->has_batch || !val->shape_known || val->t.ndim < 1 || val->t.dims[0] != m->plan_batch)
            return "a batched value does not hold the plan batch in dim 0";
    }
    return NULL;
}

nn_status nn_batch_check_samples(const nn_model *m, int64_t samples) {
    if (!m->whole_batch || samples < 0 || samples == m->batch) return NN_OK;
    return nn_set_error(NN_ERR_SHAPE,
                        "this model runs whole batches of %d samples only (got %lld): %s", m->batch,
                        (long long)samples, m->whole_batch_why);
}

/* Lanes for a static plan on the CPU: one per thread while there are
 * micro-batches to give them; kernels then run on one thread each. */
void nn_choose_lanes(nn_model *m) {
    int chunks = (m->batch + m->plan_batch - 1) / m->plan_batch;
    m->n_lanes = m->dynamic || !nn_target_has(m, NN_TARGET_MICRO_BATCH) ? 1 : m->threads < chunks ? m->threads : chunks;
    m->kernel_threads = m->n_lanes > 1 ? 1 : m->threads;
}

/* The bytes of one sample (dim 0 row) of t. */
static size_t row_bytes(const nn_tensor *t) {
    size_t b = nn_dtype_size(t->dtype);
    for (int d = 1; d < t->ndim; d++)
        b *= (size_t)t->dims[d];
    return b;
}

int64_t nn_chunk_count(int64_t start, int64_t step, int64_t total) {
    return total - start < step ? total - start : step;
}

void nn_chunk_in(const nn_value *v, const nn_tensor *in, void *dst, int64_t start, int64_t count, int64_t step) {
    if (!v->batched) {
        memcpy(dst, in->data, (size_t)nn_tensor_elements(&v->t) * nn_dtype_size(v->t.dtype));
        return;
    }
    size_t rb = row_bytes(&v->t);
    memcpy(dst, (const char *)in->data + (size_t)start * rb, (size_t)count * rb);
    memset((char *)dst + (size_t)count * rb, 0, (size_t)(step - count) * rb);
}

void nn_chunk_out(const nn_value *v, const void *src, nn_tensor *out, int64_t start, int64_t count) {
    if (!v->batched) {
        if (start == 0) memcpy(out->data, src, (size_t)nn_tensor_elements(&v->t) * nn_dtype_size(v->t.dtype));
        return;
    }
    size_t rb = row_bytes(&v->t);
    memcpy((char *)out->data + (size_t)start * rb, src, (size_t)count * rb);
}
