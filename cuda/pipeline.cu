/* Chunks on the GPU: nn_predict (engine/api.c) splits the samples into
 * chunks of m->plan_batch and stages them in two slots (parities) of pinned
 * host buffers; each slot has device staging buffers too, and three streams
 * let the upload of chunk k+1 and the download of chunk k-1 overlap the
 * compute of chunk k:
 *
 *   upload    [h2d k] ............ [h2d k+1] ..........
 *   compute   ........ [batch k: one CUDA graph] ......
 *   download  [d2h k-1] ............ [d2h k] ..........
 *
 * Each batch is one CUDA graph (captured at attach, one per parity) that
 * moves the staged inputs into their planned slots, runs every node and
 * stages the outputs; events order the streams and time the phases. */
#include <stdlib.h>

#include "internal.h"

static nn_status run_node(cu_ctx *c, int i, cudaStream_t s) {
    const cu_node *dn = &c->nodes[i];
    switch (dn->kind) {
    case CU_SKIP: return NN_OK;
    case CU_COPY: return cu_copy_run(c, dn, s);
    case CU_EW: return cu_ew_run(c, dn, s);
    case CU_CONV: return cu_conv_run(c, dn, s);
    case CU_GEMM: return cu_gemm_run(c, dn, s);
    case CU_POOL: return cu_pool_run(c, dn, s);
    case CU_REDUCE: return cu_reduce_run(c, dn, s);
    case CU_SOFTMAX: return cu_softmax_run(c, dn, s);
    case CU_TRANSPOSE: return cu_transpose_run(c, dn, s);
    case CU_CONCAT: return cu_concat_run(c, dn, s);
    case CU_RESIZE: return cu_resize_run(c, dn, s);
    case CU_HOST: return cu_host_run(c, dn, s);
    }
    return NN_OK;
}

/* A tensor between a staging buffer (fp32, as the caller has it) and its
 * device slot (fp16 when the model is). */
static nn_status stage(cu_ctx *c, int v, void *dst, const void *src, bool to_device, cudaStream_t s) {
    const nn_tensor *t = &c->m->g.values[v].t;
    if (nn_tensor_elements(t) == 0) return NN_OK;
    if (cu_half(c, v)) return cu_convert_launch(c, src, dst, nn_tensor_elements(t), to_device, s);
    CU_CUDA(c->device, cudaMemcpyAsync(dst, src, (size_t)nn_tensor_elements(t) * nn_dtype_size(t->dtype),
                                       cudaMemcpyDeviceToDevice, s));
    return NN_OK;
}

nn_status cu_enqueue_batch(cu_ctx *c, int parity) {
    const nn_graph *g = &c->m->g;
    cudaStream_t s = c->compute;
    char *in = c->mem + c->stage_at[0][parity], *out = c->mem + c->stage_at[1][parity];
    for (int i = 0; i < g->n_inputs; i++)
        if (cu_on_device(c, g->inputs[i]))
            CU_TRY(stage(c, g->inputs[i], cu_ptr(c, g->inputs[i]), in + c->in_at[i], true, s));
    cudaEvent_t *marks = c->ev[parity].nodes; /* profiling */
    for (int i = 0; i < g->n_nodes; i++) {
        if (marks) CU_CUDA(c->device, cudaEventRecord(marks[i], s));
        nn_status st = run_node(c, i, s);
        if (st != NN_OK) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", nn_last_error());
            return nn_set_error(st, "node '%s' (%s): %s", g->nodes[i].name, nn_op_get(g->nodes[i].op)->name, msg);
        }
    }
    if (marks) CU_CUDA(c->device, cudaEventRecord(marks[g->n_nodes], s));
    for (int i = 0; i < g->n_outputs; i++) {
        int v = g->outputs[i];
        if (!g->values[v].is_const) CU_TRY(stage(c, v, out + c->out_at[i], cu_ptr(c, v), false, s));
    }
    return NN_OK;
}

static nn_status make_events(cu_ctx *c, bool profiling) {
    CU_CUDA(c->device, cudaEventCreate(&c->begin));
    for (int p = 0; p < 2; p++) {
        cu_batch_events *e = &c->ev[p];
        cudaEvent_t *all[] = {&e->h2d_start,   &e->h2d_end,   &e->compute_start,
                              &e->compute_end, &e->d2h_start, &e->d2h_end};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++)
            CU_CUDA(c->device, cudaEventCreate(all[i]));
        if (!profiling) continue;
        int n = c->m->g.n_nodes + 1;
        if (!(e->nodes = (cudaEvent_t *)calloc((size_t)n, sizeof(cudaEvent_t))))
            return nn_set_error(NN_ERR_NOMEM, "out of memory");
        for (int i = 0; i < n; i++)
            CU_CUDA(c->device, cudaEventCreate(&e->nodes[i]));
    }
    return NN_OK;
}

static nn_status host_failure(cu_ctx *c) {
    nn_status st = __atomic_load_n(&c->host_status, __ATOMIC_ACQUIRE);
    return st == NN_OK ? NN_OK : nn_set_error(st, "%s", c->host_error);
}

/* Capture one parity's batch as a graph; false (and no graph) when some
 * call in it cannot be captured. */
static bool capture(cu_ctx *c, int parity) {
    if (cudaStreamBeginCapture(c->compute, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    nn_status st = cu_enqueue_batch(c, parity);
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(c->compute, &graph);
    if (st == NN_OK && e == cudaSuccess && graph) e = cudaGraphInstantiate(&c->graph[parity], graph, 0);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    return st == NN_OK && e == cudaSuccess && c->graph[parity];
}

nn_status cu_pipeline_prepare(cu_ctx *c) {
    bool profiling = c->m->lanes[0].node_ns != NULL;
    CU_TRY(make_events(c, profiling));
    /* one batch node by node first, so that a failing device call is
     * reported at load, with its node.  Its inputs are zeros: a CPU node
     * may reject those (indices, shapes), which says nothing about real
     * data, so its verdict is dropped. */
    CU_TRY(cu_enqueue_batch(c, 0));
    CU_CUDA(c->device, cudaStreamSynchronize(c->compute));
    c->host_status = NN_OK;
    if (profiling) return NN_OK; /* timing each node needs them enqueued one by one */
    if (!capture(c, 0) || !capture(c, 1)) {
        for (int p = 0; p < 2; p++)
            if (c->graph[p]) {
                cudaGraphExecDestroy(c->graph[p]);
                c->graph[p] = NULL;
            }
        nn_clear_error(); /* batches then run node by node */
    }
    c->stats.graphs = c->graph[0] != NULL;
    return NN_OK;
}

/* ---- one chunk at a time (engine/backend.h): nn_predict stages chunk k
 * in host buffer k % 2, launch enqueues its upload, compute and download,
 * finish waits for them.  nn_predict stages a parity only once its previous
 * chunk is finished, so the device buffers of that parity are free too. */

void *cu_input_buffer(nn_model *m, int slot, int i) {
    const cu_ctx *c = (const cu_ctx *)m->device_state;
    return c->host_stage[0][slot] + c->in_at[i];
}

const void *cu_output_buffer(nn_model *m, int slot, int i) {
    const cu_ctx *c = (const cu_ctx *)m->device_state;
    const nn_value *v = &m->g.values[m->g.outputs[i]];
    return v->is_const ? (const char *)v->t.data : c->host_stage[1][slot] + c->out_at[i];
}

static nn_status enqueue_chunk(cu_ctx *c, int p, int64_t chunk) {
    cu_batch_events *ev = &c->ev[p];
    if (chunk == 0) CU_CUDA(c->device, cudaEventRecord(c->begin, c->upload));
    CU_CUDA(c->device, cudaEventRecord(ev->h2d_start, c->upload));
    CU_CUDA(c->device, cudaMemcpyAsync(c->mem + c->stage_at[0][p], c->host_stage[0][p], c->stage_bytes[0],
                                       cudaMemcpyHostToDevice, c->upload));
    CU_CUDA(c->device, cudaEventRecord(ev->h2d_end, c->upload));

    CU_CUDA(c->device, cudaStreamWaitEvent(c->compute, ev->h2d_end, 0));
    CU_CUDA(c->device, cudaEventRecord(ev->compute_start, c->compute));
    if (c->graph[p])
        CU_CUDA(c->device, cudaGraphLaunch(c->graph[p], c->compute));
    else
        CU_TRY(cu_enqueue_batch(c, p));
    CU_CUDA(c->device, cudaEventRecord(ev->compute_end, c->compute));

    CU_CUDA(c->device, cudaStreamWaitEvent(c->download, ev->compute_end, 0));
    CU_CUDA(c->device, cudaEventRecord(ev->d2h_start, c->download));
    CU_CUDA(c->device, cudaMemcpyAsync(c->host_stage[1][p], c->mem + c->stage_at[1][p], c->stage_bytes[1],
                                       cudaMemcpyDeviceToHost, c->download));
    CU_CUDA(c->device, cudaEventRecord(ev->d2h_end, c->download));
    return NN_OK;
}

/* After a failure nothing may still be copying into or out of the staging
 * buffers that the next call fills. */
static void drain(cu_ctx *c) {
    cudaStreamSynchronize(c->upload);
    cudaStreamSynchronize(c->compute);
    cudaStreamSynchronize(c->download);
    cudaGetLastError();
}

nn_status cu_launch(nn_model *m, int slot, int64_t chunk) {
    cu_ctx *c = (cu_ctx *)m->device_state;
    if (chunk == 0) {
        CU_CUDA(c->device, cudaSetDevice(m->device_index));
        c->host_status = NN_OK;
        c->stats.batches = 0;
        c->stats.upload_ms = c->stats.compute_ms = c->stats.download_ms = c->stats.wall_ms = c->stats.overlap = 0.0;
    }
    nn_status st = enqueue_chunk(c, slot, chunk);
    if (st != NN_OK) drain(c);
    return st;
}

static float elapsed(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0.0f;
    return cudaEventElapsedTime(&ms, a, b) == cudaSuccess ? ms : 0.0f;
}

/* Wait for the slot's chunk, check its CPU nodes, add up what it took:
 * after the call's last chunk the stats cover the whole call. */
nn_status cu_finish(nn_model *m, int slot, int64_t chunk) {
    (void)chunk;
    cu_ctx *c = (cu_ctx *)m->device_state;
    const nn_graph *g = &m->g;
    cu_batch_events *ev = &c->ev[slot];
    cudaError_t e = cudaEventSynchronize(ev->d2h_end);
    if (e != cudaSuccess) {
        drain(c);
        return cu_cuda_error(c->device, e, "cudaEventSynchronize", __FILE__, __LINE__);
    }
    CU_TRY(host_failure(c));
    nn_cuda_stats *s = &c->stats;
    s->batches++;
    s->upload_ms += elapsed(ev->h2d_start, ev->h2d_end);
    s->compute_ms += elapsed(ev->compute_start, ev->compute_end);
    s->download_ms += elapsed(ev->d2h_start, ev->d2h_end);
    if (ev->nodes) {
        for (int i = 0; i < g->n_nodes; i++)
            m->lanes[0].node_ns[i] += 1e6 * elapsed(ev->nodes[i], ev->nodes[i + 1]);
        m->lanes[0].profiled_runs++;
    }
    s->wall_ms = elapsed(c->begin, ev->d2h_end);
    double copies = s->upload_ms + s->download_ms, hidden = copies + s->compute_ms - s->wall_ms;
    s->overlap = copies > 0.0 ? (hidden < 0.0 ? 0.0 : hidden > copies ? 1.0 : hidden / copies) : 0.0;
    return NN_OK;
}
