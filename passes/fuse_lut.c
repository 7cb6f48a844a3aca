/* fuse_lut: a QuantizeLinear whose input is computed, elementwise, from one
 * per-tensor DequantizeLinear's output alone (QDQ exports leave the
 * activations they do not fuse in float between the two: SiLU as Sigmoid
 * and Mul, HardSwish, GELU, LeakyRelu, ...) gives each output byte as a
 * function of one input byte.  The chain becomes one QLookup (ops/quant.c)
 * whose 256-byte table comes from running those very nodes, with their
 * own kernels, on all 256 bytes: one pass over bytes instead of three or
 * more over floats.
 *
 * The chain, found backwards from the Q: nodes of the elementwise kinds
 * below whose inputs are the DQ's output, another chain node's output, or
 * one-element constants (scales, a HardSwish's 3 and 6); no value made in
 * the chain is read outside it or returned; the Q and the DQ are per
 * tensor with 8-bit data.  The DQ stays when something else reads it.
 * Runs after the elementwise fusions (a FusedElementwise is one node
 * here) and before layout_nhwc, which keeps QLookups in its regions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/registry.h"
#include "pass.h"

enum { MAX_CHAIN = 16, MAX_IN = 16 };

static bool int8_dtype(nn_dtype t) { return t == NN_DTYPE_UINT8 || t == NN_DTYPE_INT8; }

/* A one-element constant: a scale, a zero point, an activation's bound. */
static bool scalar_const(const nn_graph *g, int v) {
    return v >= 0 && g->values[v].is_const && g->values[v].t.data && nn_tensor_elements(&g->values[v].t) == 1;
}

/* Q or DQ with a per-tensor scale and zero point (the zero point may be absent). */
static bool per_tensor_qdq(const nn_graph *g, const nn_node *n) {
    return n->n_in >= 2 && n->n_in <= 3 && n->n_out == 1 && !n->has_epilogue && scalar_const(g, n->in[1]) &&
           g->values[n->in[1]].t.dtype == NN_DTYPE_FLOAT && (n->n_in < 3 || n->in[2] < 0 || scalar_const(g, n->in[2]));
}

typedef struct chain {
    int nodes[MAX_CHAIN]; /* node indices, in graph order once sorted */
    int n;
    int dq; /* the DequantizeLinear feeding it */
} chain;

static bool in_chain(const chain *c, int node) {
    for (int i = 0; i < c->n; i++)
        if (c->nodes[i] == node) return true;
    return false;
}

/* The chain that makes float value v, backwards; false when v is not made
 * as a chain is. */
static bool collect(const nn_graph *g, int v, chain *c) {
    int p = g->values[v].producer;
    if (p < 0 || g->values[v].t.dtype != NN_DTYPE_FLOAT) return false;
    const nn_node *n = &g->nodes[p];
    if (n->op == NN_OP_DequantizeLinear) {
        if (c->dq >= 0 && c->dq != p) return false; /* a second varying input */
        if (!per_tensor_qdq(g, n) || !int8_dtype(g->values[n->in[0]].t.dtype)) return false;
        c->dq = p;
        return true;
    }
    if (in_chain(c, p)) return true; /* reached twice: x * sigmoid(x) */
    if (!nn_float_elementwise(n) || n->n_out != 1 || n->has_prologue || n->n_in > MAX_IN || c->n == MAX_CHAIN) return false;
    c->nodes[c->n++] = p;
    for (int k = 0; k < n->n_in; k++)
        if (n->in[k] >= 0 && !scalar_const(g, n->in[k]) && !collect(g, n->in[k], c)) return false;
    return true;
}

/* No value the chain makes is read outside it (but by `q`) or returned. */
static bool chain_closed(const nn_graph *g, const chain *c, int q) {
    for (int i = 0; i < c->n; i++)
        if (g->values[g->nodes[c->nodes[i]].out[0]].is_output) return false;
    for (int j = 0; j < g->n_nodes; j++) {
        if (j == q || in_chain(c, j) || g->nodes[j].op < 0) continue;
        for (int k = 0; k < g->nodes[j].n_in; k++) {
            int u = g->nodes[j].in[k], p = u >= 0 ? g->values[u].producer : -1;
            if (p >= 0 && in_chain(c, p)) return false;
        }
    }
    return true;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* Run node n with its chain inputs taken from vals (by value id; NULL data
 * where the chain has not made one) into out; the caller frees out.data. */
static nn_status eval_node(const nn_model *m, const nn_node *n, nn_tensor *const *vals, nn_tensor *out) {
    const nn_graph *g = &m->g;
    const nn_op_desc *d = nn_op_get(n->op);
    nn_tensor in[MAX_IN];
    for (int k = 0; k < n->n_in; k++) {
        memset(&in[k], 0, sizeof in[k]);
        if (n->in[k] < 0) continue;
        in[k] = vals[n->in[k]] ? *vals[n->in[k]] : g->values[n->in[k]].t;
    }
    memset(out, 0, sizeof *out);
    char err[256];
    nn_call call = nn_node_call(m, n, in, out, err, sizeof err);
    call.threads = 1;
    nn_status st = nn_op_check_dtypes(d, &call);
    if (st == NN_OK) st = d->infer(&call);
    if (st != NN_OK) return st;
    size_t bytes = (size_t)nn_tensor_elements(out) * nn_dtype_size(out->dtype);
    out->data = malloc(bytes ? bytes : 1);
    size_t ws = d->workspace ? d->workspace(&call) : 0;
    call.workspace = ws ? malloc(ws) : NULL;
    call.workspace_size = ws;
    st = !out->data || (ws && !call.workspace) ? NN_ERR_NOMEM : d->run(&call);
    free(call.workspace);
    if (st != NN_OK) {
        free(out->data);
        out->data = NULL;
    }
    return st;
}

/* The table: DQ, the chain and Q run on bytes 0..255, shaped [1, ..., 256]
 * at the rank of the DQ's input.  false (nothing changes) when any node
 * does not run on it. */
static bool tabulate(const nn_model *m, const chain *c, const nn_node *q, uint8_t *table) {
    const nn_graph *g = &m->g;
    const nn_node *dq = &g->nodes[c->dq];
    nn_tensor **vals = calloc((size_t)g->n_values, sizeof *vals);
    nn_tensor *made = calloc((size_t)c->n + 3, sizeof *made);
    bool ok = vals && made;
    int n_made = 0;
    if (ok) {
        nn_tensor *probe = &made[n_made++];
        const nn_tensor *x = &g->values[dq->in[0]].t;
        *probe = (nn_tensor){.dtype = x->dtype, .ndim = x->ndim > 0 ? x->ndim : 1};
        for (int k = 0; k < probe->ndim; k++)
            probe->dims[k] = k == probe->ndim - 1 ? 256 : 1;
        probe->data = malloc(256);
        ok = probe->data != NULL;
        for (int i = 0; ok && i < 256; i++)
            ((uint8_t *)probe->data)[i] = (uint8_t)i;
        vals[dq->in[0]] = probe;
    }
    const nn_node *order[MAX_CHAIN + 2];
    int n_order = 0;
    order[n_order++] = dq;
    for (int i = 0; i < c->n; i++)
        order[n_order++] = &g->nodes[c->nodes[i]];
    order[n_order++] = q;
    for (int i = 0; ok && i < n_order; i++) {
        nn_tensor *out = &made[n_made++];
        ok = eval_node(m, order[i], vals, out) == NN_OK && nn_tensor_elements(out) == 256;
        if (ok) vals[order[i]->out[0]] = out;
    }
    if (ok) memcpy(table, made[n_made - 1].data, 256);
    for (int i = 0; made && i < n_made; i++)
        free(made[i].data);
    free(made);
    free(vals);
    return ok;
}

static nn_status fuse_lut(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    if (m->dynamic) return NN_OK;
    int *uses = nn_value_uses(g);
    if (!uses) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    nn_status st = NN_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        nn_node *q = &g->nodes[i];
        if (q->op != NN_OP_QuantizeLinear || !per_tensor_qdq(g, q) || q->in[0] < 0) continue;
        chain c = {.n = 0, .dq = -1};
        if (!collect(g, q->in[0], &c) || c.n == 0 || c.dq < 0 || !chain_closed(g, &c, i)) continue;
        qsort(c.nodes, (size_t)c.n, sizeof c.nodes[0], cmp_int);
        uint8_t table[256];
        if (!tabulate(m, &c, q, table)) continue;
        nn_tensor t = {.dtype = g->values[q->out[0]].t.dtype, .ndim = 1, .dims = {256}, .data = table};
        char name[512];
        snprintf(name, sizeof name, "%s/table", q->name);
        int tv = nn_graph_add_const(g, name, &t), x = g->nodes[c.dq].in[0];
        int *in = tv >= 0 ? nn_arena_alloc(&g->meta, sizeof(int) * 2) : NULL;
        q = &g->nodes[i];
        if (!in || !nn_node_set_params(g, q, NULL, 0)) {
            st = nn_set_error(NN_ERR_NOMEM, "out of memory");
            break;
        }
        in[0] = x;
        in[1] = tv;
        /* the chain's nodes go; the DQ too when the chain was its only reader */
        int dq_reads = 0;
        for (int k = 0; k < c.n; k++) {
            nn_node *n = &g->nodes[c.nodes[k]];
            for (int j = 0; j < n->n_in; j++)
                dq_reads += n->in[j] == g->nodes[c.dq].out[0];
            n->op = -1;
        }
        uses[g->nodes[c.dq].out[0]] -= dq_reads;
        if (uses[g->nodes[c.dq].out[0]] == 0) g->nodes[c.dq].op = -1;
        q->op = NN_OP_QLookup;
        q->in = in;
        q->n_in = 2;
        nn_node_note_fused(g, q, "DequantizeLinear->elementwise->QuantizeLinear");
        (*rewrites)++;
    }
    free(uses);
    nn_graph_compact(g);
    return st;
}

const nn_pass nn_pass_fuse_lut = {
    "fuse_lut", "run DequantizeLinear -> elementwise float nodes -> QuantizeLinear as one table lookup on the bytes",
    fuse_lut};
