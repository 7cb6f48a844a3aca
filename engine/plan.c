/* Static memory planning: every intermediate gets an offset in one arena,
 * reusing space once its last consumer has run.  Greedy by size, best fit
 * among the gaps left by buffers whose lifetimes overlap. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/registry.h"
#include "error.h"
#include "model.h"

enum { PLAN_ALIGN = 64 };

typedef struct placed {
    int64_t begin, end; /* byte range */
} placed;

static int cmp_placed(const void *a, const void *b) {
    const placed *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

static size_t value_bytes(const nn_value *v) {
    size_t b = (size_t)nn_tensor_elements(&v->t) * nn_dtype_size(v->t.dtype);
    return (b + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
}

/* Liveness over the node order: [first_use, last_use] per buffer.  An
 * aliased value (views, Concat slices) lives in its root's buffer, whose
 * lifetime then covers every value inside it. */
static void liveness(const nn_graph *g, nn_plan *p, const int *root) {
    for (int v = 0; v < g->n_values; v++)
        p->first_use[v] = p->last_use[v] = -1;
    for (int i = 0; i < g->n_inputs; i++)
        p->first_use[root[g->inputs[i]]] = p->last_use[root[g->inputs[i]]] = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in + n->n_out; k++) {
            int v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
            if (v < 0 || g->values[v].is_const) continue;
            int r = root[v];
            if (p->first_use[r] < 0 || i < p->first_use[r]) p->first_use[r] = i;
            if (i > p->last_use[r]) p->last_use[r] = i;
        }
    }
    /* graph outputs stay until the caller has them */
    for (int i = 0; i < g->n_outputs; i++)
        if (p->first_use[root[g->outputs[i]]] >= 0) p->last_use[root[g->outputs[i]]] = g->n_nodes;
}

/* In-place reuse: an elementwise node whose input dies with it writes its
 * output over that input.  Only buffers nothing else lives in (no views or
 * slices), never a graph input or output, and only for ops whose kernels
 * allow it (NN_OPF_ELEMENTWISE). */
static nn_status plan_in_place(nn_graph *g) {
    int *last_read = malloc(sizeof(int) * ((size_t)g->n_values + 1));
    bool *hosts_alias = malloc((size_t)g->n_values + 1);
    if (!last_read || !hosts_alias) {
        free(last_read);
        free(hosts_alias);
        return nn_set_error(NN_ERR_NOMEM, "out of memory planning %d values", g->n_values);
    }
    for (int v = 0; v < g->n_values; v++) {
        last_read[v] = -1;
        hosts_alias[v] = false;
    }
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].alias >= 0) hosts_alias[nn_value_root(g, v, NULL)] = true;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0) last_read[g->nodes[i].in[k]] = i;
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        if (n->elided || !(nn_op_get(n->op)->flags & NN_OPF_ELEMENTWISE) || n->n_in < 1 || n->in[0] < 0 ||
            n->out[0] < 0)
            continue;
        int src = n->in[0], dst = n->out[0];
        const nn_value *s = &g->values[src], *d = &g->values[dst];
        bool reads_twice = false;
        for (int k = 1; k < n->n_in; k++)
            reads_twice |= n->in[k] == src;
        bool free_buffer = !s->is_const && !s->is_input && !s->is_output && s->alias < 0 && !hosts_alias[src] &&
                           !d->is_output && d->alias < 0 && !hosts_alias[dst];
        if (!free_buffer || reads_twice || last_read[src] != i || s->t.dtype != d->t.dtype ||
            nn_tensor_elements(&s->t) != nn_tensor_elements(&d->t))
            continue;
        g->values[dst].alias = src;
        g->values[dst].alias_offset = 0;
        hosts_alias[src] = true;
    }
    free(last_read);
    free(hosts_alias);
    return NN_OK;
}

nn_status nn_plan_memory(nn_model *m) {
    const nn_graph *g = &m->g;
    nn_plan *p = &m->plan;
    size_t nv = (size_t)g->n_values + 1;
    p->offset = malloc(sizeof(int64_t) * nv);
    p->first_use = malloc(sizeof(int) * nv);
    p->last_use = malloc(sizeof(int) * nv);
    int *order = malloc(sizeof(int) * nv);
    int *root = malloc(sizeof(int) * nv);
    int64_t *delta = malloc(sizeof(int64_t) * nv);
    placed *busy = malloc(sizeof(placed) * nv);
    nn_status st = NN_OK;
    if (!p->offset || !p->first_use || !p->last_use || !order || !busy || !root || !delta) {
        st = nn_set_error(NN_ERR_NOMEM, "out of memory planning %d values", g->n_values);
        goto done;
    }
    if ((st = plan_in_place(&m->g)) != NN_OK) goto done;
    for (int v = 0; v < g->n_values; v++)
        root[v] = nn_value_root(g, v, &delta[v]);
    liveness(g, p, root);
    int n_planned = 0;
    for (int v = 0; v < g->n_values; v++) {
        p->offset[v] = -1;
        if (root[v] == v && p->first_use[v] >= 0 && !g->values[v].is_const) order[n_planned++] = v;
    }
    /* largest first; ties by earlier start for a stable, reproducible plan */
    for (int i = 1; i < n_planned; i++) {
        int v = order[i], j = i;
        size_t bv = value_bytes(&g->values[v]);
        while (j > 0) {
            int u = order[j - 1];
            size_t bu = value_bytes(&g->values[u]);
            if (bu > bv || (bu == bv && p->first_use[u] <= p->first_use[v])) break;
            order[j] = u;
            j--;
        }
        order[j] = v;
    }
    /* naive: every intermediate in a buffer of its own, aliases included */
    size_t arena = 0, naive = 0;
    for (int v = 0; v < g->n_values; v++)
        if (p->first_use[root[v]] >= 0 && !g->values[v].is_const) naive += value_bytes(&g->values[v]);
    for (int i = 0; i < n_planned; i++) {
        int v = order[i];
        size_t size = value_bytes(&g->values[v]);
        int nb = 0;
        for (int j = 0; j < i; j++) {
            int u = order[j];
            if (p->first_use[u] <= p->last_use[v] && p->first_use[v] <= p->last_use[u])
                busy[nb++] = (placed){p->offset[u], p->offset[u] + (int64_t)value_bytes(&g->values[u])};
        }
        qsort(busy, (size_t)nb, sizeof *busy, cmp_placed);
        /* best fit: the smallest gap that holds it, else after the last */
        int64_t best = -1, best_gap = INT64_MAX, cursor = 0;
        for (int j = 0; j < nb; j++) {
            int64_t gap = busy[j].begin - cursor;
            if (gap >= (int64_t)size && gap < best_gap) {
                best = cursor;
                best_gap = gap;
            }
            if (busy[j].end > cursor) cursor = busy[j].end;
        }
        p->offset[v] = best >= 0 ? best : cursor;
        if ((size_t)p->offset[v] + size > arena) arena = (size_t)p->offset[v] + size;
    }
    for (int v = 0; v < g->n_values; v++)
        if (root[v] != v && p->offset[root[v]] >= 0) {
            p->offset[v] = p->offset[root[v]] + delta[v];
            p->first_use[v] = p->first_use[root[v]];
            p->last_use[v] = p->last_use[root[v]];
        }
    /* lower bound: the most bytes live at any one step */
    size_t lower = 0;
    for (int t = 0; t <= g->n_nodes; t++) {
        size_t live = 0;
        for (int i = 0; i < n_planned; i++)
            if (p->first_use[order[i]] <= t && t <= p->last_use[order[i]]) live += value_bytes(&g->values[order[i]]);
        if (live > lower) lower = live;
    }
    p->arena_bytes = arena;
    p->naive_bytes = naive;
    p->lower_bound_bytes = lower;
done:
    free(root);
    free(delta);
    free(order);
    free(busy);
    return st;
}

void nn_plan_free(nn_plan *p) {
    free(p->offset);
    free(p->first_use);
    free(p->last_use);
    memset(p, 0, sizeof *p);
}

size_t nn_weight_bytes(const nn_model *m) { return m->g.weights.total + m->cache_data_bytes; }

size_t nn_io_bytes(const nn_model *m) {
    const nn_graph *g = &m->g;
    size_t total = 0;
    for (int k = 0; k < g->n_inputs + g->n_outputs; k++) {
        const nn_value *v = &g->values[k < g->n_inputs ? g->inputs[k] : g->outputs[k - g->n_inputs]];
        nn_tensor t = v->t;
        if (!v->shape_known) continue;
        if (v->batched && t.ndim > 0) t.dims[0] = m->batch; /* the caller's tensors hold the whole batch */
        int64_t n = nn_tensor_elements(&t);
        if (n > 0) total += (size_t)n * nn_dtype_size(t.dtype);
    }
    return total;
}

size_t nn_memory_need(const nn_model *m, size_t workspace) {
    size_t lanes = m->n_lanes > 1 ? (size_t)m->n_lanes : 1;
    return nn_weight_bytes(m) + lanes * (m->plan.arena_bytes + workspace) + nn_io_bytes(m);
}

nn_status nn_check_memory_limit(const nn_model *m, size_t workspace) {
    if (m->opt.max_memory <= 0) return NN_OK;
    size_t lanes = m->n_lanes > 1 ? (size_t)m->n_lanes : 1, total = nn_memory_need(m, workspace);
    if (total <= (uint64_t)m->opt.max_memory) return NN_OK;
    const double mib = 1048576.0;
    /* rounded up, so that a limit of the figure shown is enough */
    double need = ceil((double)total / (mib / 10)) / 10;
    return nn_set_error(NN_ERR_NOMEM,
                        "model needs %.1f MiB (%zu bytes: weights %.1f, activations %.1f, scratch %.1f, inputs and "
                        "outputs %.1f MiB), more than the memory limit of %.1f MiB",
                        need, total, nn_weight_bytes(m) / mib, lanes * m->plan.arena_bytes / mib,
                        lanes * workspace / mib, nn_io_bytes(m) / mib, m->opt.max_memory / mib);
}
