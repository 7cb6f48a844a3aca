/* The CPU executor: runs the nodes in order with their planned buffers, or,
 * for graphs whose shapes depend on run-time values, infers and allocates
 * node by node. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../ops/registry.h"
#include "backend.h"
#include "error.h"
#include "model.h"

static size_t tensor_bytes(const nn_tensor *t) { return (size_t)nn_tensor_elements(t) * nn_dtype_size(t->dtype); }

/* The node's call on this lane: its run-time tensors and its workspace. */
static void gather_call(const nn_model *m, nn_lane *lane, const nn_node *n, nn_call *call, char *err, size_t err_size) {
    nn_node_gather(n, lane->rt, lane->call_in, lane->call_out);
    *call = nn_node_call(m, n, lane->call_in, lane->call_out, err, err_size);
    call->workspace = lane->workspace;
    call->workspace_size = m->plan.workspace_bytes;
    call->pool = (nn_arena *)&lane->pool;
}

static nn_status lane_init(const nn_model *m, nn_lane *lane, int max_io) {
    const nn_graph *g = &m->g;
    lane->rt = calloc((size_t)g->n_values + 1, sizeof *lane->rt);
    lane->call_in = calloc((size_t)max_io, sizeof(nn_tensor));
    lane->call_out = calloc((size_t)max_io, sizeof(nn_tensor));
    if (!lane->rt || !lane->call_in || !lane->call_out) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    for (int v = 0; v < g->n_values; v++)
        lane->rt[v] = g->values[v].t;
    if (m->opt.profile && !(lane->node_ns = calloc((size_t)g->n_nodes + 1, sizeof(double))))
        return nn_set_error(NN_ERR_NOMEM, "out of memory");
    return NN_OK;
}

/* The lane's planned arena, and the values in it pointed there. */
static nn_status lane_alloc_arena(const nn_model *m, nn_lane *lane) {
    const nn_graph *g = &m->g;
    lane->arena = aligned_alloc(64, m->plan.arena_bytes ? (m->plan.arena_bytes + 63) / 64 * 64 : 64);
    if (!lane->arena)
        return nn_set_error(NN_ERR_NOMEM, "out of memory for %zu bytes of activations", m->plan.arena_bytes);
    for (int v = 0; v < g->n_values; v++)
        if (m->plan.offset[v] >= 0) lane->rt[v].data = (char *)lane->arena + m->plan.offset[v];
    return NN_OK;
}

nn_status nn_runtime_init(nn_model *m) {
    nn_graph *g = &m->g;
    int max_io = 1;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].n_in > max_io) max_io = g->nodes[i].n_in;
        if (g->nodes[i].n_out > max_io) max_io = g->nodes[i].n_out;
    }
    nn_choose_lanes(m);
    m->last_use = malloc(sizeof(int) * ((size_t)g->n_values + 1));
    m->lanes = calloc((size_t)m->n_lanes, sizeof *m->lanes);
    if (!m->last_use || !m->lanes) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    nn_status st;
    for (int l = 0; l < m->n_lanes; l++)
        if ((st = lane_init(m, &m->lanes[l], max_io)) != NN_OK) return st;
    for (int v = 0; v < g->n_values; v++)
        m->last_use[v] = -1;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0) m->last_use[g->nodes[i].in[k]] = i;
    for (int i = 0; i < g->n_outputs; i++)
        m->last_use[g->outputs[i]] = g->n_nodes;
    return NN_OK;
}

nn_status nn_runtime_alloc(nn_model *m) {
    nn_status st;
    size_t ws = m->plan.workspace_bytes;
    for (int l = 0; l < m->n_lanes; l++)
        if ((st = lane_alloc_arena(m, &m->lanes[l])) != NN_OK) return st;
    for (int l = 0; l < m->n_lanes && ws; l++)
        if (!(m->lanes[l].workspace = aligned_alloc(64, (ws + 63) / 64 * 64)))
            return nn_set_error(NN_ERR_NOMEM, "out of memory for %zu bytes of workspace", ws);
    return NN_OK;
}

void nn_runtime_free(nn_model *m) {
    nn_execute_release(m);
    for (int l = 0; l < m->n_lanes; l++) {
        nn_lane *lane = &m->lanes[l];
        free(lane->rt);
        free(lane->call_in);
        free(lane->call_out);
        free(lane->arena);
        free(lane->workspace);
        free(lane->node_ns);
    }
    free(m->lanes);
    m->lanes = NULL;
    m->n_lanes = 0;
    free(m->last_use);
    nn_plan_free(&m->plan);
}

/* Dynamic mode: values produced during a run own malloc'ed data. */
static bool run_owned(const nn_model *m, int v) {
    const nn_value *val = &m->g.values[v];
    return m->dynamic && !val->is_const && !val->is_input && val->producer >= 0;
}

static void free_value(nn_lane *lane, int v) {
    /* a sequence lives in the pool or the caller's memory, never on its own */
    if (!nn_dtype_is_container(lane->rt[v].dtype)) free(lane->rt[v].data);
    lane->rt[v].data = NULL;
}

/* Infer the node's outputs from the run-time inputs and allocate them. */
static nn_status prepare_dynamic(nn_lane *lane, const nn_node *n, nn_call *call) {
    const nn_op_desc *d = nn_op_get(n->op);
    nn_status st = nn_op_check_dtypes(d, call);
    if (st == NN_OK) st = d->infer(call);
    if (st == NN_DYNAMIC && d->bound) st = d->bound(call); /* run shrinks the outputs to what it found */
    if (st == NN_DYNAMIC)
        return nn_set_error(NN_ERR_INTERNAL, "node '%s' (%s): shape still unknown at run time", n->name, d->name);
    if (st != NN_OK)
        return nn_set_error(st, "node '%s' (%s): %s", n->name, d->name, call->err[0] ? call->err : nn_strerror(st));
    for (int k = 0; k < n->n_out; k++) {
        nn_tensor *t = &call->out[k];
        if (nn_dtype_is_container(t->dtype)) { /* run makes it in the pool */
            t->data = NULL;
            if (n->out[k] >= 0) lane->rt[n->out[k]] = *t;
            continue;
        }
        if (!nn_dtype_size(t->dtype) || t->ndim < 0 || t->ndim > NN_MAX_DIMS)
            return nn_set_error(NN_ERR_INTERNAL, "node '%s' (%s): invalid output shape", n->name, d->name);
        size_t bytes = tensor_bytes(t);
        t->data = malloc(bytes ? bytes : 1);
        if (!t->data) return nn_set_error(NN_ERR_NOMEM, "node '%s': out of memory for %zu bytes", n->name, bytes);
        if (n->out[k] >= 0) lane->rt[n->out[k]] = *t;
    }
    size_t ws = d->workspace ? d->workspace(call) : 0;
    call->workspace = ws ? malloc(ws) : NULL;
    call->workspace_size = ws;
    if (ws && !call->workspace) return nn_set_error(NN_ERR_NOMEM, "node '%s': out of memory for workspace", n->name);
    return NN_OK;
}

nn_status nn_execute(nn_model *m, nn_lane *lane) {
    nn_graph *g = &m->g;
    char err[256];
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        if (n->elided) continue; /* its outputs alias memory other nodes write */
        const nn_op_desc *d = nn_op_get(n->op);
        nn_call call;
        gather_call(m, lane, n, &call, err, sizeof err);
        nn_status st;
        /* control flow sizes and allocates its outputs as it runs */
        bool allocates = d->flags & NN_OPF_SUBGRAPH;
        if (allocates && !m->dynamic)
            return nn_set_error(NN_ERR_INTERNAL, "node '%s' (%s) in a static plan", n->name, d->name);
        if (allocates) {
            memset(call.out, 0, sizeof *call.out * (size_t)n->n_out);
            call.workspace = NULL;
            call.workspace_size = 0;
        } else if (m->dynamic) {
            st = prepare_dynamic(lane, n, &call);
            if (st != NN_OK) {
                for (int k = 0; k < n->n_out; k++)
                    if (n->out[k] < 0 && !nn_dtype_is_container(call.out[k].dtype)) free(call.out[k].data);
                free(call.workspace);
                return st;
            }
        }
        struct timespec t0, t1;
        if (lane->node_ns) clock_gettime(CLOCK_MONOTONIC, &t0);
        st = d->run(&call);
        if (lane->node_ns) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            lane->node_ns[i] += (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
        }
        if (m->dynamic) {
            free(call.workspace);
            for (int k = 0; k < n->n_out; k++) /* the shapes run settled on (bound), the sequences it made */
                if (n->out[k] >= 0) lane->rt[n->out[k]] = call.out[k];
            for (int k = 0; k < n->n_out; k++)
                if (n->out[k] < 0 && !nn_dtype_is_container(call.out[k].dtype))
                    free(call.out[k].data); /* an output nobody named */
            for (int k = 0; k < n->n_in; k++) {
                int v = n->in[k];
                if (v >= 0 && m->last_use[v] == i && run_owned(m, v) && lane->rt[v].data) free_value(lane, v);
            }
            for (int k = 0; k < n->n_out; k++) {
                int v = n->out[k];
                if (v >= 0 && m->last_use[v] < 0) free_value(lane, v); /* never read */
            }
        }
        if (st != NN_OK)
            return nn_set_error(st, "node '%s' (%s): %s", n->name, d->name, err[0] ? err : nn_strerror(st));
    }
    if (lane->node_ns) lane->profiled_runs++;
    return NN_OK;
}

NN_API nn_status nn_profile_print(const nn_model *m, FILE *out) {
    if (!m || !out) return nn_set_error(NN_ERR_ARG, "nn_profile_print: NULL argument");
    if (!m->n_lanes || !m->lanes[0].node_ns)
        return nn_set_error(NN_ERR_ARG, "profiling is off: load with options.profile = 1");
    const nn_graph *g = &m->g;
    double per_op[NN_OP_COUNT] = {0}, total = 0;
    int count[NN_OP_COUNT] = {0};
    int64_t plan_runs = 0;
    for (int l = 0; l < m->n_lanes; l++) {
        const nn_lane *lane = &m->lanes[l];
        plan_runs += lane->profiled_runs;
        for (int i = 0; i < g->n_nodes; i++) {
            per_op[g->nodes[i].op] += lane->node_ns[i];
            total += lane->node_ns[i];
        }
    }
    for (int i = 0; i < g->n_nodes; i++)
        count[g->nodes[i].op]++;
    double runs = plan_runs ? (double)plan_runs : 1.0;
    if (m->n_lanes > 1)
        fprintf(out, "(a run is one micro-batch of %d on one of %d lanes, each kernel on one thread)\n", m->plan_batch,
                m->n_lanes);
    fprintf(out, "%-24s %6s %12s %7s\n", "operator", "nodes", "ms per run", "share");
    for (;;) { /* largest first */
        int best = -1;
        for (int op = 0; op < NN_OP_COUNT; op++)
            if (count[op] && (best < 0 || per_op[op] > per_op[best])) best = op;
        if (best < 0) break;
        fprintf(out, "%-24s %6d %12.3f %6.1f%%\n", nn_op_get(best)->name, count[best], per_op[best] / runs / 1e6,
                total > 0 ? 100.0 * per_op[best] / total : 0.0);
        count[best] = 0;
    }
    fprintf(out, "%-24s %6d %12.3f\n", "total", g->n_nodes, total / runs / 1e6);
    return NN_OK;
}

void nn_execute_release(nn_model *m) {
    if (!m->dynamic || !m->n_lanes) return;
    for (int v = 0; v < m->g.n_values; v++)
        if (run_owned(m, v) && m->lanes[0].rt[v].data) free_value(&m->lanes[0], v);
    for (int l = 0; l < m->n_lanes; l++)
        nn_arena_free(&m->lanes[l].pool);
}

/* ---- the CPU executor as the reference target (backend.h) */

/* Prepared weights, then each lane's buffers; the memory limit is checked
 * once, when the figure is whole (model.h). */
static nn_status cpu_attach(nn_model *m, int device_index) {
    (void)device_index;
    nn_status st;
    if ((st = nn_prepare_weights(m)) != NN_OK || (st = nn_check_memory_limit(m, m->plan.workspace_bytes)) != NN_OK ||
        (st = nn_runtime_alloc(m)) != NN_OK)
        return st;
    m->n_slots = m->n_lanes;
    return NN_OK;
}

/* Every op has its CPU kernel, with every fusion the passes make. */
static bool cpu_supports_node(const nn_model *m, const nn_node *n) {
    (void)m;
    return n->op >= 0 && n->op < NN_OP_COUNT;
}

static void *cpu_input_buffer(nn_model *m, int slot, int i) { return m->lanes[slot].rt[m->g.inputs[i]].data; }

static const void *cpu_output_buffer(nn_model *m, int slot, int i) {
    return m->lanes[slot].rt[m->g.outputs[i]].data;
}

static nn_status cpu_launch(nn_model *m, int slot, int64_t chunk) {
    (void)chunk;
    return nn_execute(m, &m->lanes[slot]);
}

const nn_backend nn_cpu_backend = {
    .name = "cpu",
    .caps = NN_TARGET_MICRO_BATCH | NN_TARGET_CONCURRENT | NN_TARGET_DYNAMIC,
    .attach = cpu_attach,
    .supports_node = cpu_supports_node,
    .input_buffer = cpu_input_buffer,
    .output_buffer = cpu_output_buffer,
    .launch = cpu_launch,
};
