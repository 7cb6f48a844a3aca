/* QDQ fusion: DequantizeLinear -> Conv -> QuantizeLinear, as ONNX Runtime's
 * static quantizer writes a quantized conv, runs as one QLinearConv on the
 * 8-bit values (the int8 GEMM, ops/qgemm.h) instead of dequantizing input
 * and weights to float.  This is the rewrite ONNX Runtime makes itself, so
 * the two engines then compute the same int32 sums and requantize them the
 * same way.
 *
 * The pattern: Conv(DQ(x), DQ(w) [, DQ(b)]) whose output has one reader, a
 * QuantizeLinear, and is not a graph output; x per tensor, w and its DQ
 * constant (per tensor, or per output channel on axis 0), the bias a
 * constant int32 whose scale is exactly x_scale * w_scale (what QLinearConv
 * assumes: its B is added to the int32 sums), zero point 0.  Runs before
 * constant folding, which would otherwise turn DQ(w) into float weights.
 * DQ nodes that nothing else reads are removed with the Conv's float
 * output; the rest stay for their other readers.  Then DQ, DQ -> Add -> Q
 * becomes a QLinearAdd, DQ -> MaxPool -> Q with one scale and zero
 * point a MaxPool on the bytes (fuse_maxpool), and DQ -> Gemm -> Q a 1 x 1
 * QLinearConv (fuse_gemm). */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/geom.h"
#include "../ops/params.h"
#include "../ops/quant.h"
#include "../ops/registry.h"
#include "pass.h"

/* The producer of v when it is a DequantizeLinear, else NULL. */
static nn_node *dq_of(nn_graph *g, int v) {
    if (v < 0 || g->values[v].producer < 0) return NULL;
    nn_node *n = &g->nodes[g->values[v].producer];
    return n->op == NN_OP_DequantizeLinear && n->n_in >= 2 ? n : NULL;
}

static const nn_value *input_value(const nn_graph *g, const nn_node *n, int k) {
    return k < n->n_in && n->in[k] >= 0 ? &g->values[n->in[k]] : NULL;
}

static bool is_const(const nn_value *v) { return v && v->is_const && v->t.data; }

/* One scale and zero point (per tensor), the zero point present. */
static bool per_tensor(const nn_graph *g, const nn_node *qdq) {
    const nn_value *s = input_value(g, qdq, 1), *z = input_value(g, qdq, 2);
    return is_const(s) && s->t.dtype == NN_DTYPE_FLOAT && nn_tensor_elements(&s->t) == 1 && s->t.ndim <= 1 &&
           is_const(z) && nn_tensor_elements(&z->t) == 1 && z->t.ndim <= 1;
}

static bool int8_dtype(nn_dtype t) { return t == NN_DTYPE_UINT8 || t == NN_DTYPE_INT8; }

/* w's DQ: constant int8/uint8 weights of rank >= min_rank, scale and zero point of 1 or M values (axis 0). */
static bool weights_ok(const nn_graph *g, const nn_node *dq, int64_t m, int min_rank) {
    const nn_value *w = input_value(g, dq, 0), *s = input_value(g, dq, 1), *z = input_value(g, dq, 2);
    if (!is_const(w) || !int8_dtype(w->t.dtype) || w->t.ndim < min_rank || w->t.dims[0] != m) return false;
    if (!is_const(s) || s->t.dtype != NN_DTYPE_FLOAT || !is_const(z) || z->t.dtype != w->t.dtype) return false;
    int64_t ns = nn_tensor_elements(&s->t);
    if (ns != nn_tensor_elements(&z->t) || s->t.ndim > 1 || z->t.ndim > 1) return false;
    if (ns == 1) return true;
    int64_t axis = dq->params ? ((const nn_qdq_params *)dq->params)->axis : 1;
    return ns == m && (axis == 0 || axis == -w->t.ndim);
}

/* b's DQ: constant int32, zero point 0, scale[c] == x_scale * w_scale[c] bit for bit. */
static bool bias_ok(const nn_graph *g, const nn_node *dq, const nn_node *dqx, const nn_node *dqw, int64_t m) {
    const nn_value *b = input_value(g, dq, 0), *s = input_value(g, dq, 1), *z = input_value(g, dq, 2);
    if (!is_const(b) || b->t.dtype != NN_DTYPE_INT32 || b->t.ndim != 1 || b->t.dims[0] != m) return false;
    if (!is_const(s) || s->t.dtype != NN_DTYPE_FLOAT || s->t.ndim > 1) return false;
    int64_t ns = nn_tensor_elements(&s->t);
    if (ns != 1 && ns != m) return false;
    if (z) {
        if (!is_const(z) || z->t.dtype != NN_DTYPE_INT32 || nn_tensor_elements(&z->t) != ns) return false;
        for (int64_t i = 0; i < ns; i++)
            if (((const int32_t *)z->t.data)[i] != 0) return false;
    }
    float xs = *(const float *)input_value(g, dqx, 1)->t.data;
    const nn_value *ws = input_value(g, dqw, 1);
    int64_t nw = nn_tensor_elements(&ws->t);
    for (int64_t c = 0; c < m; c++) {
        float want = xs * ((const float *)ws->t.data)[nw > 1 ? c : 0];
        float got = ((const float *)s->t.data)[ns > 1 ? c : 0];
        if (memcmp(&want, &got, sizeof want)) return false;
    }
    return true;
}

/* DQ(a), DQ(b) -> Add -> Q, all per tensor, a and b 8-bit of one known
 * shape (no broadcasting), the Add's output read only by the Q: one
 * QLinearAdd (ops/quant.c), which computes the same float expression
 * without the float tensors between the nodes. */
static nn_status fuse_add(nn_graph *g, int *uses, nn_node *add, int *rewrites) {
    if (add->has_epilogue || add->has_prologue || add->n_in != 2 || add->n_out != 1) return NN_OK;
    int y = add->out[0], qi = nn_sole_consumer(g, uses, y);
    nn_node *q = qi >= 0 ? &g->nodes[qi] : NULL;
    if (!q || q->op != NN_OP_QuantizeLinear || q->in[0] != y || !per_tensor(g, q)) return NN_OK;
    nn_node *dq[2] = {dq_of(g, add->in[0]), dq_of(g, add->in[1])};
    const nn_value *x[2];
    for (int k = 0; k < 2; k++) {
        if (!dq[k] || !per_tensor(g, dq[k])) return NN_OK;
        x[k] = input_value(g, dq[k], 0);
        if (!x[k] || !x[k]->shape_known || !int8_dtype(x[k]->t.dtype) ||
            input_value(g, dq[k], 2)->t.dtype != x[k]->t.dtype)
            return NN_OK;
    }
    if (x[0]->t.ndim != x[1]->t.ndim || memcmp(x[0]->t.dims, x[1]->t.dims, sizeof(int64_t) * (size_t)x[0]->t.ndim))
        return NN_OK;
    int ins[8] = {dq[0]->in[0], dq[0]->in[1], dq[0]->in[2], dq[1]->in[0], dq[1]->in[1], dq[1]->in[2], q->in[1], q->in[2]};
    int *in = nn_arena_alloc(&g->meta, sizeof ins);
    if (!in || !nn_node_set_params(g, add, NULL, 0)) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    memcpy(in, ins, sizeof ins);
    for (int k = 0; k < 2; k++) /* a DQ read twice (a + a) loses both reads */
        if (--uses[dq[k]->out[0]] == 0) dq[k]->op = -1;
    add->in = in;
    add->n_in = 8;
    add->op = NN_OP_QLinearAdd;
    nn_node_absorb(g, add, q, "DequantizeLinear->Add->QuantizeLinear");
    (*rewrites)++;
    return NN_OK;
}

/* The same scale and zero point in two per-tensor DQ / Q nodes: bit for bit. */
static bool same_quant(const nn_graph *g, const nn_node *a, const nn_node *b) {
    const nn_value *sa = input_value(g, a, 1), *sb = input_value(g, b, 1), *za = input_value(g, a, 2),
                   *zb = input_value(g, b, 2);
    return za->t.dtype == zb->t.dtype && memcmp(sa->t.data, sb->t.data, sizeof(float)) == 0 &&
           memcmp(za->t.data, zb->t.data, nn_dtype_size(za->t.dtype)) == 0;
}

/* DQ(x) -> MaxPool -> Q with Q's scale and zero point those of the DQ: the
 * MaxPool on x's bytes, the pair dropped.  Exact: DQ is non-decreasing for
 * a positive scale, so it commutes with max, and Q(DQ(v)) is v when
 * (v - z) * s, at most 255 times s, is a normal float (the division back
 * is within a few ulps of v - z, far from a rounding boundary); a window
 * with no input is -inf before Q, which saturates to the least byte, what
 * the byte pool gives. */
static nn_status fuse_maxpool(nn_graph *g, int *uses, nn_node *pool, int *rewrites) {
    if (pool->has_epilogue || pool->has_prologue || pool->n_in != 1 || pool->n_out < 1 ||
        (pool->n_out > 1 && pool->out[1] >= 0) || !nn_fusable(g, uses, pool->out[0]))
        return NN_OK;
    int qi = nn_sole_consumer(g, uses, pool->out[0]);
    nn_node *q = qi >= 0 ? &g->nodes[qi] : NULL, *dq = dq_of(g, pool->in[0]);
    if (!q || q->op != NN_OP_QuantizeLinear || q->in[0] != pool->out[0] || !per_tensor(g, q) || !dq ||
        !per_tensor(g, dq))
        return NN_OK;
    const nn_value *x = input_value(g, dq, 0);
    if (!x || !x->shape_known || !int8_dtype(x->t.dtype) || input_value(g, dq, 2)->t.dtype != x->t.dtype ||
        !same_quant(g, dq, q))
        return NN_OK;
    float s;
    memcpy(&s, input_value(g, dq, 1)->t.data, sizeof s);
    if (!(s >= FLT_MIN && s <= FLT_MAX / 256)) return NN_OK; /* NaN too */
    int *in = nn_arena_alloc(&g->meta, sizeof(int));
    if (!in) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    in[0] = dq->in[0];
    if (--uses[dq->out[0]] == 0) dq->op = -1;
    pool->in = in;
    nn_node_absorb(g, pool, q, "DequantizeLinear->MaxPool->QuantizeLinear");
    (*rewrites)++;
    return NN_OK;
}

/* A Reshape from value `from` into value `to` (shape known) at node index
 * `at`, its target shape a new constant (0 copies a dim: the batch). */
static bool insert_reshape(nn_graph *g, int at, int from, int to, int ndim, const int64_t *target) {
    char name[512];
    snprintf(name, sizeof name, "%s/shape", g->values[to].name);
    nn_tensor t = {.dtype = NN_DTYPE_INT64, .ndim = 1, .dims = {ndim}, .data = (void *)target};
    int sv = nn_graph_add_const(g, name, &t);
    snprintf(name, sizeof name, "%s/reshape", g->values[to].name);
    if (sv < 0 || nn_graph_insert_node(g, at, name, NN_OP_Reshape, 2, 1) < 0) return false;
    nn_node *r = &g->nodes[at];
    nn_reshape_params rp = {.allowzero = 0, .n_shape = -1};
    if (!nn_node_set_params(g, r, &rp, sizeof rp)) return false;
    r->in[0] = from;
    r->in[1] = sv;
    r->out[0] = to;
    g->values[to].producer = at;
    return true;
}

/* A new value named v's name + suffix: v's dtype, `ndim` dims. */
static int new_value(nn_graph *g, int v, const char *suffix, int ndim, const int64_t *dims) {
    char name[512];
    snprintf(name, sizeof name, "%s%s", g->values[v].name, suffix);
    int nv = nn_graph_add_value(g, name);
    if (nv < 0) return -1;
    nn_value *o = &g->values[nv];
    o->t.dtype = g->values[v].t.dtype;
    o->t.ndim = ndim;
    memcpy(o->t.dims, dims, sizeof(int64_t) * (size_t)ndim);
    o->shape_known = true;
    return nv;
}

/* DQ(x) -> Gemm(DQ(w) [, DQ(b)]) -> Q, a fully connected layer as the
 * static quantizer writes it (A [N, K]; B [M, K] with transB; alpha and
 * beta 1): a 1 x 1 QLinearConv on x viewed as [N, K, 1, 1], whose output
 * the Q's output value views back as [N, M].  The int8 weights are read
 * instead of dequantized float ones, a quarter of the bytes, which is what
 * a batch-1 classifier is bound by.  x, w and b as for the convs below.
 * *at moves past the two Reshapes inserted. */
static nn_status fuse_gemm(nn_graph *g, int *at) {
    int i = *at, *uses = nn_value_uses(g);
    if (!uses) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    nn_node *gemm = &g->nodes[i], *q = NULL, *dqx = NULL, *dqw = NULL, *dqb = NULL;
    const nn_gemm_params *gp = gemm->params;
    bool has_b = gemm->n_in > 2 && gemm->in[2] >= 0;
    int qi = -1;
    bool ok = gp && !gemm->has_epilogue && !gemm->has_prologue && gemm->n_out == 1 && gemm->n_in >= 2 &&
              gp->alpha == 1.0f && !gp->trans_a && gp->trans_b && (!has_b || gp->beta == 1.0f) &&
              nn_fusable(g, uses, gemm->out[0]);
    if (ok) {
        qi = nn_sole_consumer(g, uses, gemm->out[0]);
        q = qi >= 0 ? &g->nodes[qi] : NULL;
        dqx = dq_of(g, gemm->in[0]);
        dqw = dq_of(g, gemm->in[1]);
        dqb = has_b ? dq_of(g, gemm->in[2]) : NULL;
        ok = q && q->op == NN_OP_QuantizeLinear && q->in[0] == gemm->out[0] && per_tensor(g, q) && dqx && dqw &&
             (!has_b || dqb) && per_tensor(g, dqx);
    }
    const nn_value *x = ok ? input_value(g, dqx, 0) : NULL, *w = ok ? input_value(g, dqw, 0) : NULL;
    ok = ok && x && x->shape_known && x->t.ndim == 2 && int8_dtype(x->t.dtype) &&
         input_value(g, dqx, 2)->t.dtype == x->t.dtype && w && w->shape_known && w->t.ndim == 2 &&
         w->t.dims[1] == x->t.dims[1] && weights_ok(g, dqw, w->t.dims[0], 2) &&
         (!dqb || bias_ok(g, dqb, dqx, dqw, w->t.dims[0]));
    if (!ok) {
        free(uses);
        return NN_OK;
    }
    int64_t n = x->t.dims[0], k = x->t.dims[1], mo = w->t.dims[0];
    int xin = dqx->in[0], y = q->out[0];
    int ins[9] = {-1, dqx->in[1], dqx->in[2], -1, dqw->in[1], dqw->in[2], q->in[1], q->in[2], dqb ? dqb->in[0] : -1};
    /* the weights as [M, K, 1, 1] (a copy of the bytes), x and the output as 4-D views */
    char name[512];
    snprintf(name, sizeof name, "%s/as_conv", w->name);
    nn_tensor w4 = w->t;
    w4.ndim = 4;
    w4.dims[2] = w4.dims[3] = 1;
    ins[3] = nn_graph_add_const(g, name, &w4);
    ins[0] = ins[3] >= 0 ? new_value(g, xin, "/as_conv", 4, (int64_t[]){n, k, 1, 1}) : -1;
    int y4 = ins[0] >= 0 ? new_value(g, y, "/as_conv", 4, (int64_t[]){n, mo, 1, 1}) : -1;
    int *in = y4 >= 0 ? nn_arena_alloc(&g->meta, sizeof ins) : NULL;
    nn_qconv_params qp;
    memset(&qp, 0, sizeof qp);
    qp.w.n_kernel = qp.w.n_strides = qp.w.n_dilations = qp.w.n_pads = -1;
    qp.group = 1;
    if (!in || !nn_node_set_params(g, gemm, &qp, sizeof qp)) {
        free(uses);
        return nn_set_error(NN_ERR_NOMEM, "out of memory");
    }
    memcpy(in, ins, sizeof ins);
    /* the DQs the Gemm read lose a reader; the Q's work is the conv's now */
    nn_node *dqs[3] = {dqx, dqw, dqb};
    for (int d = 0; d < 3; d++)
        if (dqs[d] && --uses[dqs[d]->out[0]] == 0) dqs[d]->op = -1;
    free(uses);
    q->op = -1;
    gemm->op = NN_OP_QLinearConv;
    gemm->in = in;
    gemm->n_in = dqb ? 9 : 8;
    gemm->out[0] = y4;
    g->values[y4].producer = i;
    nn_node_note_fused(g, gemm, "DequantizeLinear->Gemm->QuantizeLinear");
    static const int64_t x_target[4] = {0, -1, 1, 1};
    int64_t y_target[2] = {0, mo};
    if (!insert_reshape(g, i, xin, ins[0], 4, x_target) || !insert_reshape(g, i + 2, y4, y, 2, y_target))
        return nn_set_error(NN_ERR_NOMEM, "out of memory");
    *at = i + 2;
    return NN_OK;
}

static nn_status fuse_qdq(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    int *uses = nn_value_uses(g);
    if (!uses) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    nn_status st = NN_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        nn_node *conv = &g->nodes[i];
        if (conv->op != NN_OP_Conv || conv->has_epilogue || conv->has_prologue || conv->n_out != 1) continue;
        int y = conv->out[0];
        if (!nn_fusable(g, uses, y)) continue;
        int qi = nn_sole_consumer(g, uses, y);
        nn_node *q = qi >= 0 ? &g->nodes[qi] : NULL;
        if (!q || q->op != NN_OP_QuantizeLinear || q->in[0] != y || !per_tensor(g, q)) continue;
        nn_node *dqx = dq_of(g, conv->in[0]), *dqw = conv->n_in > 1 ? dq_of(g, conv->in[1]) : NULL;
        nn_node *dqb = conv->n_in > 2 && conv->in[2] >= 0 ? dq_of(g, conv->in[2]) : NULL;
        if (!dqx || !dqw || (conv->n_in > 2 && conv->in[2] >= 0 && !dqb)) continue;
        const nn_value *x = input_value(g, dqx, 0);
        if (!x || !x->shape_known || !int8_dtype(x->t.dtype) || !per_tensor(g, dqx)) continue;
        if (input_value(g, dqx, 2)->t.dtype != x->t.dtype) continue;
        const nn_value *w = input_value(g, dqw, 0);
        if (!w || !w->shape_known) continue;
        int64_t out_ch = w->t.dims[0];
        if (!weights_ok(g, dqw, out_ch, 3) || (dqb && !bias_ok(g, dqb, dqx, dqw, out_ch))) continue;
        nn_qconv_params qp;
        memset(&qp, 0, sizeof qp);
        if (!nn_conv_window(conv->params, &qp.w, &qp.group)) continue;
        int ins[9] = {dqx->in[0], dqx->in[1], dqx->in[2], dqw->in[0], dqw->in[1],
                      dqw->in[2], q->in[1],   q->in[2],   dqb ? dqb->in[0] : -1};
        int *in = nn_arena_alloc(&g->meta, sizeof ins);
        if (!in || !nn_node_set_params(g, conv, &qp, sizeof qp)) {
            st = nn_set_error(NN_ERR_NOMEM, "out of memory");
            break;
        }
        memcpy(in, ins, sizeof ins);
        /* the DQ outputs the Conv read lose a reader; those left with none go */
        nn_node *dqs[3] = {dqx, dqw, dqb};
        for (int k = 0; k < 3; k++)
            if (dqs[k] && --uses[dqs[k]->out[0]] == 0) dqs[k]->op = -1;
        conv->in = in;
        conv->n_in = dqb ? 9 : 8;
        conv->op = NN_OP_QLinearConv;
        nn_node_absorb(g, conv, q, "DequantizeLinear->Conv->QuantizeLinear");
        (*rewrites)++;
    }
    for (int i = 0; st == NN_OK && i < g->n_nodes; i++)
        if (g->nodes[i].op == NN_OP_Add) st = fuse_add(g, uses, &g->nodes[i], rewrites);
        else if (g->nodes[i].op == NN_OP_MaxPool)
            st = fuse_maxpool(g, uses, &g->nodes[i], rewrites);
    free(uses);
    /* the Gemms last: each rewrite adds values and nodes, and counts its readers afresh */
    for (int i = 0; st == NN_OK && i < g->n_nodes; i++)
        if (g->nodes[i].op == NN_OP_Gemm) {
            int before = i;
            st = fuse_gemm(g, &i);
            if (i != before) (*rewrites)++;
        }
    nn_graph_compact(g);
    return st;
}

const nn_pass nn_pass_fuse_qdq = {"fuse_qdq",
                                  "run DequantizeLinear -> Conv / Gemm / Add -> QuantizeLinear as one QLinearConv / "
                                  "QLinearAdd, and DequantizeLinear -> MaxPool -> QuantizeLinear on the bytes",
                                  fuse_qdq};
