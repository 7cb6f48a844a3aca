/* The micro-batch policy, in one place: which graph outputs carry the
 * batch, how many samples one run of the plan holds (plan_batch), and how
 * many lanes run those micro-batches side by side.  nn_predict (api.c)
 * then splits a call's samples into chunks of plan_batch (the CUDA backend
 * still chunks on its own, in cuda/pipeline.cu). */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "model.h"

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

/* A graph output declared with a symbolic dim 0 carries the batch when
 * that dim follows the bound batch; one that came out fixed (a Reshape to a
 * set sample count) does not, and is returned whole. */
void nn_batch_refine_outputs(nn_model *m) {
    nn_graph *g = &m->g;
    for (int i = 0; i < g->n_outputs; i++) {
        nn_value *v = &g->values[g->outputs[i]];
        if (v->batched && v->shape_known) v->batched = m->has_batch && v->t.ndim > 0 && v->t.dims[0] == m->plan_batch;
    }
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

/* What a graph output was at the bound batch: its shape, and whether its
 * dim 0 is the batch. */
typedef struct output_at_batch {
    nn_tensor t;
    bool batched;
} output_at_batch;

/* Each graph output's shape at plan batch `to` follows from its shape at
 * `from`: dim 0 scaled where it is the batch, the rest unchanged. */
static bool outputs_scale(const nn_graph *g, const output_at_batch *at_from, int from, int to) {
    for (int i = 0; i < g->n_outputs; i++) {
        const nn_value *v = &g->values[g->outputs[i]];
        nn_tensor want = at_from[i].t;
        if (at_from[i].batched) {
            if (want.dims[0] != from) return false;
            want.dims[0] = to;
        }
        if (!v->shape_known || v->batched != at_from[i].batched || v->t.dtype != want.dtype || v->t.ndim != want.ndim ||
            memcmp(v->t.dims, want.dims, sizeof(int64_t) * (size_t)want.ndim))
            return false;
    }
    return true;
}

nn_status nn_choose_plan_batch(nn_model *m) {
    int want = m->opt.micro_batch > 0 ? m->opt.micro_batch : auto_plan_batch(m);
    if (want >= m->batch || m->dynamic || !m->has_batch || m->backend) return NN_OK;
    nn_graph *g = &m->g;
    output_at_batch *full = malloc(sizeof *full * ((size_t)g->n_outputs + 1));
    if (!full) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_outputs; i++)
        full[i] = (output_at_batch){g->values[g->outputs[i]].t, g->values[g->outputs[i]].batched};
    /* a graph whose shapes do not follow the batch (a Reshape to a fixed
     * sample count) runs whole batches, as it was exported */
    nn_status st = nn_rebind_batch(m, want);
    if (st != NN_OK || m->dynamic || !outputs_scale(g, full, m->batch, want)) {
        nn_clear_error();
        for (int i = 0; i < g->n_outputs; i++) /* inference at `want` may have cleared them */
            g->values[g->outputs[i]].batched = full[i].batched;
        st = nn_rebind_batch(m, m->batch);
    }
    free(full);
    return st;
}

/* Lanes for a static plan on the CPU: one per thread while there are
 * micro-batches to give them; kernels then run on one thread each. */
void nn_choose_lanes(nn_model *m) {
    int chunks = (m->batch + m->plan_batch - 1) / m->plan_batch;
    m->n_lanes = m->dynamic || m->backend ? 1 : m->threads < chunks ? m->threads : chunks;
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
