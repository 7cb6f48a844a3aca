/* nn_predict on the GPU: the samples run in batches of m->batch, pipelined
 * over two parities of pinned host and device staging buffers and three
 * streams, so that the upload of batch k+1 and the download of batch k-1
 * overlap the compute of batch k:
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

/* ---- nn_predict */

/* Copy batch k of the caller's inputs into host staging buffer k % 2 and
 * enqueue its upload, compute and download. */
static nn_status launch_batch(cu_ctx *c, const nn_tensor *in, int64_t k, int64_t step, int64_t total) {
    const nn_graph *g = &c->m->g;
    int p = (int)(k & 1);
    cu_batch_events *ev = &c->ev[p];
    if (k >= 2) CU_CUDA(c->device, cudaEventSynchronize(ev->h2d_end)); /* batch k-2 has left the buffer */
    int64_t start = k * step, count = nn_chunk_count(start, step, total);
    char *host = c->host_stage[0][p];
    for (int i = 0; i < g->n_inputs; i++)
        nn_chunk_in(&g->values[g->inputs[i]], &in[i], host + c->in_at[i], start, count, step);
    if (k == 0) CU_CUDA(c->device, cudaEventRecord(c->begin, c->upload));
    if (k >= 2) CU_CUDA(c->device, cudaStreamWaitEvent(c->upload, ev->compute_end, 0)); /* its device buffer too */
    CU_CUDA(c->device, cudaEventRecord(ev->h2d_start, c->upload));
    CU_CUDA(c->device,
            cudaMemcpyAsync(c->mem + c->stage_at[0][p], host, c->stage_bytes[0], cudaMemcpyHostToDevice, c->upload));
    CU_CUDA(c->device, cudaEventRecord(ev->h2d_end, c->upload));

    CU_CUDA(c->device, cudaStreamWaitEvent(c->compute, ev->h2d_end, 0));
    if (k >= 2) CU_CUDA(c->device, cudaStreamWaitEvent(c->compute, ev->d2h_end, 0)); /* outputs of k-2 are down */
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

static float elapsed(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0.0f;
    return cudaEventElapsedTime(&ms, a, b) == cudaSuccess ? ms : 0.0f;
}

/* Wait for batch k, check its CPU nodes, copy its rows to the caller. */
static nn_status finish_batch(cu_ctx *c, nn_tensor *out, int n_out, int64_t k, int64_t step, int64_t total) {
    const nn_graph *g = &c->m->g;
    int p = (int)(k & 1);
    cu_batch_events *ev = &c->ev[p];
    CU_CUDA(c->device, cudaEventSynchronize(ev->d2h_end));
    CU_TRY(host_failure(c));
    int64_t start = k * step, count = nn_chunk_count(start, step, total);
    const char *host = c->host_stage[1][p];
    for (int i = 0; i < n_out; i++) {
        const nn_value *v = &g->values[g->outputs[i]];
        nn_chunk_out(v, v->is_const ? (const char *)v->t.data : host + c->out_at[i], &out[i], start, count);
    }
    c->stats.batches++;
    c->stats.upload_ms += elapsed(ev->h2d_start, ev->h2d_end);
    c->stats.compute_ms += elapsed(ev->compute_start, ev->compute_end);
    c->stats.download_ms += elapsed(ev->d2h_start, ev->d2h_end);
    if (ev->nodes) {
        for (int i = 0; i < g->n_nodes; i++)
            c->m->lanes[0].node_ns[i] += 1e6 * elapsed(ev->nodes[i], ev->nodes[i + 1]);
        c->m->lanes[0].profiled_runs++;
    }
    return NN_OK;
}

nn_status cu_predict(nn_model *m, const nn_tensor *in, nn_tensor *out, int n_out, int64_t samples) {
    cu_ctx *c = (cu_ctx *)m->device_state;
    CU_CUDA(c->device, cudaSetDevice(m->device_index));
    int64_t step = m->has_batch ? m->batch : 1, total = samples >= 0 ? samples : 1;
    int64_t batches = (total + step - 1) / step;
    c->host_status = NN_OK;
    c->stats.batches = 0;
    c->stats.upload_ms = c->stats.compute_ms = c->stats.download_ms = c->stats.wall_ms = c->stats.overlap = 0.0;
    nn_status st = NN_OK;
    for (int64_t k = 0; k < batches && st == NN_OK; k++) {
        st = launch_batch(c, in, k, step, total);
        if (st == NN_OK && k > 0) st = finish_batch(c, out, n_out, k - 1, step, total);
    }
    if (st == NN_OK) st = finish_batch(c, out, n_out, batches - 1, step, total);
    if (st != NN_OK) { /* nothing may still be writing when the caller frees its buffers */
        cudaStreamSynchronize(c->upload);
        cudaStreamSynchronize(c->compute);
        cudaStreamSynchronize(c->download);
        cudaGetLastError();
        return st;
    }
    nn_cuda_stats *s = &c->stats;
    s->wall_ms = elapsed(c->begin, c->ev[(batches - 1) & 1].d2h_end);
    double copies = s->upload_ms + s->download_ms, hidden = copies + s->compute_ms - s->wall_ms;
    s->overlap = copies > 0.0 ? (hidden < 0.0 ? 0.0 : hidden > copies ? 1.0 : hidden / copies) : 0.0;
    return NN_OK;
}
