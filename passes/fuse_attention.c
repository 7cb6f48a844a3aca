/* Scaled-dot-product attention as one FusedAttention node (ops/attention.h):
 *
 *     MatMul(Q, Kt) -> [Mul/Div by a constant scalar]... -> [Add mask, Reshape]...
 *         -> Softmax(last axis) -> [inference Dropout] -> MatMul(., V)
 *
 * as torch 1.13 exports nn.MultiheadAttention, torchvision's ViT and Swin's
 * window attention (relative position bias, shifted-window mask added in a
 * reshaped view).  A constant scalar Mul/Div on Q joins the scale.  The
 * Transposes and constant-index Gathers that make Q, K, V (the head split,
 * Swin's qkv unbinding) and the Transpose that merges the heads after are
 * read through strides instead of copied (the FusedAttention takes their
 * inputs; they die unless something else reads them).  Rewritten only when
 * every shape is static, batch dims match without broadcasting, the Softmax
 * normalizes the last axis alone and each mask Add keeps the scores' shape. */
#include <math.h>
#include <stdlib.h>

#include "../ops/attention.h"
#include "../ops/geom.h"
#include "../ops/params.h"
#include "../ops/registry.h"
#include "pass.h"

enum { MAX_CHAIN = 16 };

static const nn_tensor *shape_of(const nn_graph *g, int v) {
    if (v < 0 || !g->values[v].shape_known || g->values[v].t.dtype != NN_DTYPE_FLOAT) return NULL;
    return &g->values[v].t;
}

static bool same_dims(const nn_tensor *a, const nn_tensor *b) {
    return a->ndim == b->ndim && !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim);
}

static bool const_scalar(const nn_graph *g, int v, float *out) {
    const nn_value *c = v >= 0 ? &g->values[v] : NULL;
    if (!c || !c->is_const || c->t.dtype != NN_DTYPE_FLOAT || !c->t.data || nn_tensor_elements(&c->t) != 1)
        return false;
    *out = *(const float *)c->t.data;
    return isfinite(*out) && *out != 0;
}

/* Scale of a Mul/Div node by a constant scalar (on the right for Div); -1 when it is not one. */
static int scaled_input(const nn_graph *g, const nn_node *n, float *scale) {
    float k;
    if (n->has_epilogue || n->n_in != 2) return -1;
    if (n->op == NN_OP_Div && const_scalar(g, n->in[1], &k)) return *scale = 1.0f / k, n->in[0];
    if (n->op != NN_OP_Mul) return -1;
    if (const_scalar(g, n->in[1], &k)) return *scale = k, n->in[0];
    if (const_scalar(g, n->in[0], &k)) return *scale = k, n->in[1];
    return -1;
}

static void dense_strides(const nn_tensor *t, int64_t *s) {
    int64_t acc = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        s[i] = acc;
        acc *= t->dims[i];
    }
}

/* Where a view's axes lie in tensor t: logical axis i moves coef[i] steps
 * along t's axis axis[i] (-1: extent 1, it never moves), starting at t's
 * multi-index at[].  False when a logical axis would carry from one axis
 * of t into the next, which strides per axis of t cannot express. */
typedef struct axis_map {
    int axis[NN_MAX_DIMS];
    int64_t coef[NN_MAX_DIMS], at[NN_MAX_DIMS];
} axis_map;

static bool split_view(const nn_tensor *t, const int64_t *dims, int rank, int64_t off, const int64_t *stride,
                       axis_map *map) {
    int64_t dense[NN_MAX_DIMS], reach[NN_MAX_DIMS];
    dense_strides(t, dense);
    for (int j = t->ndim - 1; j >= 0; j--) {
        map->at[j] = off / dense[j] % t->dims[j];
        reach[j] = map->at[j];
    }
    if (off >= nn_tensor_elements(t)) return false;
    for (int i = 0; i < rank; i++) {
        map->axis[i] = -1;
        map->coef[i] = 0;
        if (dims[i] == 1) continue;
        for (int j = 0; j < t->ndim && map->axis[i] < 0; j++)
            if (t->dims[j] > 1 && stride[i] >= dense[j] && stride[i] % dense[j] == 0 &&
                stride[i] / dense[j] < t->dims[j])
                map->axis[i] = j, map->coef[i] = stride[i] / dense[j];
        if (map->axis[i] < 0) return false;
        reach[map->axis[i]] += (dims[i] - 1) * map->coef[i];
    }
    for (int j = 0; j < t->ndim; j++)
        if (reach[j] >= t->dims[j]) return false;
    return true;
}

/* The view again, as offset and strides in x's dense layout; to_x[j] is the
 * axis of x that t's axis j is. */
static void join_view(const nn_tensor *x, const axis_map *map, const int64_t *at_x, const int *to_x, int rank,
                      int64_t *off, int64_t *stride) {
    int64_t dense[NN_MAX_DIMS];
    dense_strides(x, dense);
    *off = 0;
    for (int j = 0; j < x->ndim; j++)
        *off += at_x[j] * dense[j];
    for (int i = 0; i < rank; i++)
        stride[i] = map->axis[i] < 0 ? 0 : map->coef[i] * dense[to_x[map->axis[i]]];
}

/* Constant int input k of node n, element e, or false. */
static bool const_int(const nn_graph *g, const nn_node *n, int k, int64_t e, int64_t *out) {
    const nn_value *c = k < n->n_in && n->in[k] >= 0 ? &g->values[n->in[k]] : NULL;
    if (!c || !c->is_const || !c->t.data || (c->t.dtype != NN_DTYPE_INT64 && c->t.dtype != NN_DTYPE_INT32) ||
        e >= nn_tensor_elements(&c->t))
        return false;
    *out = nn_tensor_get_int(&c->t, e);
    return true;
}

/* One step back from t = node n (x its input): the view of t as one of x.
 * Reshapes keep the dense order; Transposes, constant-index Gathers and
 * unit-step Slices move along x's axes. */
static bool step_back(const nn_graph *g, const nn_node *n, const nn_tensor *t, const int64_t *dims, int rank,
                      int64_t *off, int64_t *stride) {
    const nn_tensor *x = shape_of(g, n->in[0]);
    if (!x || n->has_epilogue) return false;
    if (n->op == NN_OP_Reshape || n->op == NN_OP_Flatten || n->op == NN_OP_Squeeze || n->op == NN_OP_Unsqueeze)
        return nn_tensor_elements(x) == nn_tensor_elements(t);
    axis_map map;
    int to_x[NN_MAX_DIMS];
    int64_t at_x[NN_MAX_DIMS] = {0};
    if (n->op != NN_OP_Transpose && n->op != NN_OP_Gather && n->op != NN_OP_Slice) return false;
    if (!split_view(t, dims, rank, *off, stride, &map)) return false;
    if (n->op == NN_OP_Transpose) {
        int64_t perm[NN_MAX_DIMS];
        char err[8];
        nn_call call = {.params = n->params, .n_in = 1, .in = x, .err = err, .err_size = sizeof err};
        if (n->n_in != 1 || nn_transpose_perm(&call, perm) != NN_OK) return false;
        for (int j = 0; j < t->ndim; j++)
            to_x[j] = (int)perm[j], at_x[perm[j]] = map.at[j];
    } else if (n->op == NN_OP_Gather) {
        int64_t axis, k;
        const nn_value *idx = n->n_in == 2 ? &g->values[n->in[1]] : NULL;
        if (!idx || idx->t.ndim != 0 || !const_int(g, n, 1, 0, &k) ||
            !nn_axis_normalize(((const nn_axis_params *)n->params)->axis, x->ndim, &axis))
            return false;
        if (k < 0) k += x->dims[axis];
        if (k < 0 || k >= x->dims[axis]) return false;
        for (int j = 0; j < t->ndim; j++)
            to_x[j] = j < axis ? j : j + 1, at_x[to_x[j]] = map.at[j];
        at_x[axis] = k;
    } else { /* Slice (opset >= 10: starts, ends, axes, steps as inputs) */
        if (n->n_in < 3 || x->ndim != t->ndim) return false;
        for (int j = 0; j < t->ndim; j++)
            to_x[j] = j, at_x[j] = map.at[j];
        int64_t count = nn_tensor_elements(&g->values[n->in[1]].t);
        for (int64_t e = 0; e < count; e++) {
            int64_t start, axis = e, step = 1;
            if (!const_int(g, n, 1, e, &start) || (n->n_in > 3 && n->in[3] >= 0 && !const_int(g, n, 3, e, &axis)) ||
                (n->n_in > 4 && n->in[4] >= 0 && !const_int(g, n, 4, e, &step)) || step != 1 ||
                !nn_axis_normalize(axis, x->ndim, &axis))
                return false;
            if (start < 0) start += x->dims[axis];
            start = start < 0 ? 0 : start > x->dims[axis] ? x->dims[axis] : start;
            at_x[axis] += start;
        }
    }
    join_view(x, &map, at_x, to_x, rank, off, stride);
    return true;
}

/* The operand value v as a strided view of the tensor its Reshapes,
 * Transposes, constant-index Gathers and Slices read: sets *view (its axes
 * are v's axes) and returns the value read. */
static int view_through(const nn_graph *g, int v, nn_attn_view *view) {
    const nn_tensor *vt = &g->values[v].t;
    int rank = vt->ndim, t = v;
    dense_strides(vt, view->stride);
    view->offset = 0;
    for (int steps = 0; steps < MAX_CHAIN; steps++) {
        int p = g->values[t].producer;
        if (p < 0 || g->nodes[p].n_in < 1) break;
        nn_attn_view back = *view;
        if (!step_back(g, &g->nodes[p], &g->values[t].t, vt->dims, rank, &back.offset, back.stride)) break;
        *view = back;
        t = g->nodes[p].in[0];
    }
    return t;
}

/* A GEMM can read the view's matrices (one of its two last strides is 1). */
static bool gemm_readable(const nn_attn_view *v, int r, int64_t rows, int64_t cols) {
    return v->stride[r - 1] == 1 || v->stride[r - 2] == 1 || rows == 1 || cols == 1;
}

static bool fuse_one(nn_graph *g, const int *uses, nn_node *sm, bool *nomem) {
    nn_node *dead[2 * MAX_CHAIN + 4];
    int nd = 0;
    const nn_tensor *x = shape_of(g, sm->in[0]);
    if (!x || x->ndim < 2 || x->ndim > NN_MAX_DIMS || sm->has_epilogue) return false;
    int r = x->ndim;
    const softmax_params *sp = sm->params;
    int64_t axis;
    if (!sp || !nn_axis_normalize(sp->axis, r, &axis) || axis != r - 1) return false;
    dead[nd++] = sm;
    /* forward: [Dropout] then the MatMul with V */
    int cur = sm->out[0], next = nn_fusable(g, uses, cur) ? nn_sole_consumer(g, uses, cur) : -1;
    if (next >= 0 && g->nodes[next].op == NN_OP_Dropout) {
        nn_node *dr = &g->nodes[next];
        /* a no-op: not training, or training with a constant ratio of 0 (Swin exports it so) */
        const nn_value *ratio = dr->n_in > 1 && dr->in[1] >= 0 ? &g->values[dr->in[1]] : NULL;
        bool training = dr->n_in > 2 && dr->in[2] >= 0 &&
                        !(g->values[dr->in[2]].is_const && g->values[dr->in[2]].t.dtype == NN_DTYPE_BOOL &&
                          g->values[dr->in[2]].t.data && !*(const bool *)g->values[dr->in[2]].t.data);
        bool zero_ratio = ratio && ratio->is_const && ratio->t.dtype == NN_DTYPE_FLOAT && ratio->t.data &&
                          nn_tensor_elements(&ratio->t) == 1 && *(const float *)ratio->t.data == 0.0f;
        if ((training && !zero_ratio) || (dr->n_out > 1 && dr->out[1] >= 0 && uses[dr->out[1]]) || dr->in[0] != cur)
            return false;
        dead[nd++] = dr;
        cur = dr->out[0];
        next = nn_fusable(g, uses, cur) ? nn_sole_consumer(g, uses, cur) : -1;
    }
    if (next < 0) return false;
    nn_node *mm2 = &g->nodes[next];
    if (mm2->op != NN_OP_MatMul || mm2->n_in != 2 || mm2->has_epilogue || mm2->in[0] != cur || mm2->in[1] == cur)
        return false;
    const nn_tensor *vt = shape_of(g, mm2->in[1]), *ot = shape_of(g, mm2->out[0]);
    if (!vt || !ot || vt->ndim != r || ot->ndim != r || !shape_of(g, cur) || !same_dims(shape_of(g, cur), x))
        return false;
    /* backward from the Softmax: Add (mask), Reshape, then Mul/Div (scale), to the MatMul */
    nn_attention_params p;
    memset(&p, 0, sizeof p); /* padding too: the plan cache stores the bytes */
    p.scale = 1.0f;
    p.rank = r;
    int masks[NN_ATTN_MAX_MASKS], v = sm->in[0];
    bool scaling = false;
    nn_node *mm1 = NULL;
    for (int steps = 0; steps < MAX_CHAIN && !mm1; steps++) {
        int pi = g->values[v].producer;
        if (pi < 0 || !nn_fusable(g, uses, v)) return false;
        nn_node *n = &g->nodes[pi];
        const nn_tensor *nt = shape_of(g, v);
        if (!nt || n->has_epilogue || nt->dims[nt->ndim - 1] != x->dims[r - 1]) return false;
        float k;
        int in;
        if (n->op == NN_OP_MatMul && n->n_in == 2) {
            mm1 = n;
        } else if ((in = scaled_input(g, n, &k)) >= 0 && shape_of(g, in) && same_dims(shape_of(g, in), nt)) {
            scaling = true;
            p.scale *= k;
            v = in;
        } else if (n->op == NN_OP_Add && n->n_in == 2 && !scaling && p.n_masks < NN_ATTN_MAX_MASKS) {
            /* the scores side keeps the output's shape; the mask broadcasts into it */
            int side = shape_of(g, n->in[0]) && same_dims(shape_of(g, n->in[0]), nt) && n->in[0] != n->in[1] ? 0 : 1;
            const nn_tensor *st = shape_of(g, n->in[side]), *mt = shape_of(g, n->in[1 - side]);
            if (!st || !mt || !same_dims(st, nt) || mt->ndim > nt->ndim) return false;
            masks[p.n_masks] = n->in[1 - side];
            p.mask[p.n_masks].rank = nt->ndim;
            memcpy(p.mask[p.n_masks].dims, nt->dims, sizeof(int64_t) * (size_t)nt->ndim);
            p.n_masks++;
            v = n->in[side];
        } else if (n->op == NN_OP_Reshape && shape_of(g, n->in[0])) {
            v = n->in[0];
        } else {
            return false;
        }
        dead[nd++] = n;
    }
    if (!mm1 || !same_dims(shape_of(g, mm1->out[0]), x)) return false;
    const nn_tensor *qt = shape_of(g, mm1->in[0]), *kt = shape_of(g, mm1->in[1]);
    if (!qt || !kt || qt->ndim != r || kt->ndim != r) return false;
    for (int i = 0; i < r - 2; i++) {
        if (qt->dims[i] != x->dims[i] || kt->dims[i] != x->dims[i] || vt->dims[i] != x->dims[i]) return false;
        p.batch[i] = x->dims[i];
    }
    p.m = qt->dims[r - 2], p.d = qt->dims[r - 1], p.n = kt->dims[r - 1], p.dv = vt->dims[r - 1];
    if (kt->dims[r - 2] != p.d || vt->dims[r - 2] != p.n || x->dims[r - 2] != p.m || x->dims[r - 1] != p.n)
        return false;
    /* Q: a constant scalar Mul/Div joins the scale (it stays if others read it) */
    int q = mm1->in[0], pq = g->values[q].producer;
    float k;
    if (pq >= 0 && g->nodes[pq].op != NN_OP_MatMul) {
        int in = scaled_input(g, &g->nodes[pq], &k);
        if (in >= 0 && shape_of(g, in) && same_dims(shape_of(g, in), qt)) {
            p.scale *= k;
            q = in;
        }
    }
    nn_attn_view kt_view = {0};
    int src[3] = {view_through(g, q, &p.q), view_through(g, mm1->in[1], &kt_view), view_through(g, mm2->in[1], &p.v)};
    p.k = kt_view;
    p.k.stride[r - 2] = kt_view.stride[r - 1], p.k.stride[r - 1] = kt_view.stride[r - 2];
    if (!gemm_readable(&p.q, r, p.m, p.d) || !gemm_readable(&p.k, r, p.n, p.d) || !gemm_readable(&p.v, r, p.n, p.dv))
        return false;
    /* the output: through a Transpose that merges the heads back, when it is the only reader */
    int out = mm2->out[0], tr = nn_fusable(g, uses, out) ? nn_sole_consumer(g, uses, out) : -1;
    nn_node *trn = tr >= 0 && g->nodes[tr].op == NN_OP_Transpose && !g->nodes[tr].has_epilogue ? &g->nodes[tr] : NULL;
    int64_t perm[NN_MAX_DIMS];
    if (trn) {
        char err[8];
        nn_call call = {.params = trn->params, .n_in = 1, .in = ot, .err = err, .err_size = sizeof err};
        if (nn_transpose_perm(&call, perm) != NN_OK || !shape_of(g, trn->out[0])) trn = NULL;
    }
    const nn_tensor *yt = trn ? shape_of(g, trn->out[0]) : ot;
    int64_t ys[NN_MAX_DIMS];
    dense_strides(yt, ys);
    p.o.offset = 0;
    for (int j = 0; j < r; j++)
        p.o.stride[trn ? perm[j] : j] = ys[j];
    if (!gemm_readable(&p.o, r, p.m, p.dv)) {
        if (!trn) return false;
        trn = NULL;
        yt = ot;
        dense_strides(ot, p.o.stride);
    }
    p.out_rank = yt->ndim;
    memcpy(p.out_dims, yt->dims, sizeof(int64_t) * (size_t)yt->ndim);
    /* rewrite: the second MatMul becomes the FusedAttention */
    int n_in = 3 + p.n_masks;
    int *ins = nn_arena_alloc(&g->meta, sizeof(int) * (size_t)n_in);
    if (!ins || !nn_node_set_params(g, mm2, &p, sizeof p)) return *nomem = true;
    ins[0] = src[0], ins[1] = src[1], ins[2] = src[2];
    for (int i = 0; i < p.n_masks; i++)
        ins[3 + i] = masks[i];
    mm2->in = ins;
    mm2->n_in = n_in;
    mm2->op = NN_OP_FusedAttention;
    nn_node_note_fused(g, mm2, "MatMul+Softmax+MatMul");
    if (trn) {
        mm2->out[0] = trn->out[0];
        g->values[trn->out[0]].producer = (int)(mm2 - g->nodes);
        trn->op = -1;
    }
    for (int i = 0; i < nd; i++)
        dead[i]->op = -1;
    mm1->op = -1;
    return true;
}

static nn_status fuse_attention(nn_model *m, int *rewrites) {
    nn_graph *g = &m->g;
    int *uses = nn_value_uses(g);
    if (!uses) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    bool nomem = false;
    for (int i = 0; i < g->n_nodes && !nomem; i++) {
        nn_node *n = &g->nodes[i];
        if (n->op == NN_OP_Softmax && n->n_in == 1 && fuse_one(g, uses, n, &nomem) && !nomem) (*rewrites)++;
    }
    free(uses);
    nn_graph_compact(g);
    return nomem ? nn_set_error(NN_ERR_NOMEM, "fuse_attention: out of memory") : NN_OK;
}

const nn_pass nn_pass_fuse_attention = {
    "fuse_attention",
    "turn MatMul -> scale -> mask -> Softmax -> MatMul into one FusedAttention, reading Transposes through strides",
    fuse_attention};
