/* Host-side planning of the CUDA kernels: from a node's shapes and resolved
 * geometry to the descriptors that cuda/index.h's element functions, cuDNN
 * and cuBLASLt take.  Plain C (and C++): the backend builds its kernels with
 * these functions, and tests/test_cuda_host.c builds the same descriptors
 * and checks what they compute against the CPU ops. */
#ifndef NN_CUDA_LAYOUT_H
#define NN_CUDA_LAYOUT_H

#include <string.h>

#include "index.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "../ops/params.h"
#include "../ops/registry.h"
#ifdef __cplusplus
}
#endif

/* ---- elementwise */

/* Lay n_in operands (shapes only) against an output of ndim dims by numpy
 * broadcasting, then merge neighbouring dims wherever every operand's
 * strides stay linear, so that the kernel divides as little as possible. */
static inline void nn_cu_ew_layout(nn_cu_ew *e, int ndim, const int64_t *out_dims, int n_in, const nn_tensor *in) {
    int64_t st[NN_EW_MAX_INPUTS][NN_MAX_DIMS], gd[NN_MAX_DIMS], gs[NN_EW_MAX_INPUTS][NN_MAX_DIMS];
    for (int k = 0; k < n_in; k++)
        nn_broadcast_strides(&in[k], ndim, out_dims, st[k]);
    int ng = 0;
    e->total = 1;
    for (int i = ndim - 1; i >= 0; i--) { /* innermost first */
        int64_t d = out_dims[i];
        e->total *= d;
        if (d == 1) continue;
        bool merge = ng > 0;
        for (int k = 0; k < n_in && merge; k++)
            merge = st[k][i] == gs[k][ng - 1] * gd[ng - 1];
        if (merge) {
            gd[ng - 1] *= d;
            continue;
        }
        gd[ng] = d;
        for (int k = 0; k < n_in; k++)
            gs[k][ng] = st[k][i];
        ng++;
    }
    e->ndim = ng;
    e->n_in = n_in;
    for (int g = 0; g < ng; g++) {
        e->dims[ng - 1 - g] = gd[g];
        for (int k = 0; k < n_in; k++)
            e->strides[k][ng - 1 - g] = gs[k][g];
    }
    e->n_steps = 0;
}

static inline nn_ew_step nn_cu_step(int op, int operand, nn_act act, float alpha, float beta) {
    nn_ew_step st;
    memset(&st, 0, sizeof st);
    st.op = op;
    st.operand = operand;
    st.act = act;
    st.alpha = alpha;
    st.beta = beta;
    return st;
}

/* Append a step; false when the program is full. */
static inline bool nn_cu_ew_push(nn_cu_ew *e, nn_ew_step step) {
    if (e->n_steps >= NN_EW_MAX_STEPS) return false;
    e->steps[e->n_steps++] = step;
    return true;
}

/* y = act(y + bias + residual): the steps for the operands given (-1: none). */
static inline bool nn_cu_ew_push_epilogue(nn_cu_ew *e, int bias, int residual, nn_act act, float alpha, float beta) {
    bool ok = true;
    if (bias >= 0) ok &= nn_cu_ew_push(e, nn_cu_step(NN_EW_Add, bias, NN_ACT_NONE, 0.0f, 0.0f));
    if (residual >= 0) ok &= nn_cu_ew_push(e, nn_cu_step(NN_EW_Add, residual, NN_ACT_NONE, 0.0f, 0.0f));
    if (act != NN_ACT_NONE) ok &= nn_cu_ew_push(e, nn_cu_step(NN_EW_Act, 0, act, alpha, beta));
    return ok;
}

/* The program of an elementwise node whose operands are its inputs (the
 * call holds their shapes, constants with data), with the fused epilogue
 * if any.  false (and *why) when the node is not one the kernel runs. */
static inline bool nn_cu_ew_for_node(nn_cu_ew *e, int op, const nn_call *c, int opset, const char **why) {
    const nn_tensor *y = &c->out[0];
    *why = "not a float elementwise node";
    if (c->n_out != 1 || y->dtype != NN_DTYPE_FLOAT || c->n_in > NN_EW_MAX_INPUTS) return false;
    for (int k = 0; k < c->n_in; k++)
        if (!nn_present(c, k) || c->in[k].dtype != NN_DTYPE_FLOAT) return false;
    nn_cu_ew_layout(e, y->ndim, y->dims, c->n_in, c->in);
    nn_epilogue act_step;
    switch (op) {
    case NN_OP_FusedElementwise: {
        const nn_ew_program *p = (const nn_ew_program *)c->params;
        e->n_steps = p->n_steps;
        memcpy(e->steps, p->steps, sizeof(nn_ew_step) * (size_t)p->n_steps);
        break;
    }
#define NN_CU_UNARY_NODE(name, expr)                                                                                   \
    case NN_OP_##name: nn_cu_ew_push(e, nn_cu_step(NN_EW_##name, 0, NN_ACT_NONE, 0.0f, 0.0f)); break;
        NN_EW_UNARY_OPS(NN_CU_UNARY_NODE)
#undef NN_CU_UNARY_NODE
    case NN_OP_Add:
    case NN_OP_Sub:
    case NN_OP_Mul:
    case NN_OP_Div:
    case NN_OP_Pow:
    case NN_OP_PRelu:
    case NN_OP_Max:
    case NN_OP_Min:
    case NN_OP_Sum: {
        /* before opset 7 a second input may be laid from an `axis`, not from the end */
        if (opset < 7) {
            *why = "broadcasting before opset 7";
            return false;
        }
        int ew_op = op == NN_OP_Add || op == NN_OP_Sum ? NN_EW_Add
                    : op == NN_OP_Sub                  ? NN_EW_Sub
                    : op == NN_OP_Mul                  ? NN_EW_Mul
                    : op == NN_OP_Div                  ? NN_EW_Div
                    : op == NN_OP_Pow                  ? NN_EW_Pow
                    : op == NN_OP_PRelu                ? NN_EW_PRelu
                    : op == NN_OP_Max                  ? NN_EW_Max
                                                       : NN_EW_Min;
        /* the variadic ones fold their inputs left to right, like ops/binary.c */
        int operands = c->epilogue && c->epilogue->residual >= 0 ? c->n_in - 1 : c->n_in;
        if (operands > 2 && op != NN_OP_Max && op != NN_OP_Min && op != NN_OP_Sum) return false;
        for (int k = 1; k < operands; k++)
            nn_cu_ew_push(e, nn_cu_step(ew_op, k, NN_ACT_NONE, 0.0f, 0.0f));
        break;
    }
    default:
        /* activations (Relu, Clip, Sigmoid, ...) describe themselves as an epilogue */
        if (!nn_op_get(op) || !nn_op_get(op)->as_activation || c->n_in < 1 ||
            !nn_op_get(op)->as_activation(c, &act_step)) {
            *why = "no GPU kernel for this elementwise op";
            return false;
        }
        nn_cu_ew_push(e, nn_cu_step(NN_EW_Act, 0, act_step.act, act_step.alpha, act_step.beta));
        /* Clip's bounds are inputs, not operands */
        e->n_in = 1;
        break;
    }
    const nn_epilogue *ep = c->epilogue;
    if (ep && !nn_cu_ew_push_epilogue(e, -1, ep->residual, ep->act, ep->alpha, ep->beta)) {
        *why = "program too long";
        return false;
    }
    return true;
}

/* ---- pooling, reductions, softmax */

static inline void nn_cu_pool_make(nn_cu_pool *p, const nn_pool_geom *g, bool max, bool include_pad) {
    memset(p, 0, sizeof *p);
    p->nsp = g->nsp;
    p->max = max;
    p->include_pad = include_pad;
    p->total = g->planes * g->out_size;
    p->in_size = g->in_size;
    p->out_size = g->out_size;
    for (int d = 0; d < g->nsp; d++) {
        p->in[d] = g->in[d];
        p->out[d] = g->out[d];
        p->kernel[d] = g->kernel[d];
        p->stride[d] = g->stride[d];
        p->dilation[d] = g->dilation[d];
        p->pad[d] = g->pad[d];
        p->pad_end[d] = g->pad_end[d];
    }
}

/* Reduce dims of x marked in `reduced`: size-1 dims are dropped and
 * neighbouring dims of the same kind merged; kept dims stay in order, which
 * is the output's order with or without keepdims. */
static inline void nn_cu_reduce_make(nn_cu_reduce *r, const nn_tensor *x, const bool *reduced, int kind) {
    int64_t size[NN_MAX_DIMS], stride[NN_MAX_DIMS], s = 1;
    bool red[NN_MAX_DIMS];
    int ng = 0;
    for (int d = x->ndim - 1; d >= 0; d--) {
        int64_t n = x->dims[d];
        if (n != 1) {
            if (ng > 0 && red[ng - 1] == reduced[d] && stride[ng - 1] * size[ng - 1] == s) {
                size[ng - 1] *= n;
            } else {
                size[ng] = n;
                stride[ng] = s;
                red[ng] = reduced[d];
                ng++;
            }
        }
        s *= n;
    }
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->segments = r->count = 1;
    for (int g = ng - 1; g >= 0; g--) { /* outermost first */
        if (red[g]) {
            r->r_size[r->nr] = size[g];
            r->r_stride[r->nr++] = stride[g];
            r->count *= size[g];
        } else {
            r->k_size[r->nk] = size[g];
            r->k_stride[r->nk++] = stride[g];
            r->segments *= size[g];
        }
    }
}

/* The reduction kind of a Reduce* or global pooling op; -1 for others. */
static inline int nn_cu_reduce_kind_of(int op) {
    switch (op) {
    case NN_OP_ReduceSum: return NN_CU_SUM;
    case NN_OP_ReduceMean:
    case NN_OP_GlobalAveragePool: return NN_CU_MEAN;
    case NN_OP_ReduceMax:
    case NN_OP_GlobalMaxPool: return NN_CU_MAX;
    case NN_OP_ReduceMin: return NN_CU_MIN;
    case NN_OP_ReduceProd: return NN_CU_PROD;
    case NN_OP_ReduceL2: return NN_CU_L2;
    default: return -1;
    }
}

static inline void nn_cu_softmax_make(nn_cu_softmax *s, int64_t outer, int64_t n, int64_t inner, bool log_form) {
    s->outer = outer;
    s->n = n;
    s->inner = inner;
    s->segments = outer * inner;
    s->log = log_form;
}

/* ---- data movement */

static inline void nn_cu_transpose_make(nn_cu_transpose *t, const nn_tensor *x, const int64_t *perm) {
    int64_t in_strides[NN_MAX_DIMS], s = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        in_strides[d] = s;
        s *= x->dims[d];
    }
    t->ndim = x->ndim;
    t->esize = (int)nn_dtype_size(x->dtype);
    t->total = s;
    for (int k = 0; k < x->ndim; k++) {
        t->dims[k] = x->dims[perm[k]];
        t->strides[k] = in_strides[perm[k]];
    }
}

static inline void nn_cu_resize_make(nn_cu_resize *r, const nn_tensor *y, bool linear) {
    r->ndim = y->ndim;
    r->linear = linear;
    r->total = 1;
    int64_t at = 0;
    for (int d = 0; d < y->ndim; d++) {
        r->dims[d] = y->dims[d];
        r->first[d] = at;
        at += y->dims[d];
        r->total *= y->dims[d];
    }
}

/* One Concat input as a 2-D copy (cudaMemcpy2DAsync): `rows` rows of
 * `width` bytes, `src_pitch` apart in the input, `dst_pitch` apart in the
 * output from `dst_offset` on. */
typedef struct nn_cu_slice {
    int64_t rows, width, src_pitch, dst_pitch, dst_offset;
} nn_cu_slice;

/* The Concat input that starts `before` elements along `axis` and spans
 * `len` of them, into output y (elements of esize bytes). */
static inline void nn_cu_concat_slice(const nn_tensor *y, int64_t axis, int64_t before, int64_t len, int64_t esize,
                                      nn_cu_slice *s) {
    int64_t tail = nn_shape_elements(y->dims + axis + 1, y->ndim - (int)axis - 1) * esize;
    s->rows = nn_shape_elements(y->dims, (int)axis);
    s->width = len * tail;
    s->src_pitch = s->width;
    s->dst_pitch = y->dims[axis] * tail;
    s->dst_offset = before * tail;
}

/* ---- convolution through cuDNN's legacy API */

/* What cuDNN is told: tensors of rank nd (4, or 5 for 3-D convs; a 1-D
 * conv is a 2-D one of width 1), NCHW-packed, and symmetric pads. */
typedef struct nn_cu_conv {
    int nd, nsp;
    int x[5], w[5], y[5];
    int pad[3], stride[3], dilation[3];
    int group;
} nn_cu_conv;

/* false (and *why) when cuDNN cannot express the convolution: cuDNN pads
 * both ends alike, so an asymmetric pair is accepted only when the end pad
 * makes no difference to the output (the same output length with the
 * leading pad on both ends). */
static inline bool nn_cu_conv_make(nn_cu_conv *cv, const nn_conv_geom *g, const char **why) {
    if (g->nsp < 1 || g->nsp > 3) {
        *why = "cuDNN convolutions have 1 to 3 spatial dims";
        return false;
    }
    memset(cv, 0, sizeof *cv);
    cv->nsp = g->nsp;
    cv->nd = g->nsp == 3 ? 5 : 4;
    int lifted = cv->nd - 2;
    int64_t v[] = {g->batch, g->in_ch, g->out_ch, g->group, g->in_ch / g->group};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        if (v[i] > INT32_MAX) {
            *why = "dimensions beyond cuDNN's 32-bit sizes";
            return false;
        }
    if (g->batch * g->in_ch * g->in_size > INT32_MAX || g->batch * g->out_ch * g->out_size > INT32_MAX) {
        *why = "tensors beyond cuDNN's 32-bit strides";
        return false;
    }
    cv->x[0] = cv->y[0] = (int)g->batch;
    cv->x[1] = (int)g->in_ch;
    cv->y[1] = cv->w[0] = (int)g->out_ch;
    cv->w[1] = (int)(g->in_ch / g->group);
    cv->group = (int)g->group;
    for (int d = 0; d < lifted; d++) {
        bool real = d < g->nsp;
        int64_t in = real ? g->in[d] : 1, out = real ? g->out[d] : 1, k = real ? g->kernel[d] : 1;
        int64_t s = real ? g->stride[d] : 1, dil = real ? g->dilation[d] : 1, pad = real ? g->pad[d] : 0;
        if (in > INT32_MAX || k > INT32_MAX || s > INT32_MAX || dil > INT32_MAX || pad > INT32_MAX) {
            *why = "dimensions beyond cuDNN's 32-bit sizes";
            return false;
        }
        int64_t span = in + 2 * pad - ((k - 1) * dil + 1);
        if (span < 0 || span / s + 1 != out) {
            *why = "asymmetric pads cuDNN cannot express";
            return false;
        }
        cv->x[2 + d] = (int)in;
        cv->y[2 + d] = (int)out;
        cv->w[2 + d] = (int)k;
        cv->pad[d] = (int)pad;
        cv->stride[d] = (int)s;
        cv->dilation[d] = (int)dil;
    }
    return true;
}

/* ---- matrix products through cuBLASLt (column-major): the row-major
 * Y (m x n) = A' (m x k) B' (k x n) is, read column-major, Y^T = B'^T A'^T,
 * so cuBLASLt's A is our B and its B is our A, each transposed when ours is
 * not stored transposed. */
typedef struct nn_cu_matmul {
    int64_t m, n, k;
    bool trans_a, trans_b;                /* cuBLASLt's op on its A (our B) and its B (our A) */
    int64_t a_rows, a_cols, lda;          /* cuBLASLt's A as stored (column-major) */
    int64_t b_rows, b_cols, ldb;          /* cuBLASLt's B as stored */
    int64_t batch;                        /* products in one strided call */
    int64_t stride_a, stride_b, stride_d; /* elements between them (cuBLASLt's A, B and D); 0 repeats */
} nn_cu_matmul;

/* ours_trans_a/b: our A is stored k x m / our B n x k (Gemm's transA/transB). */
static inline void nn_cu_matmul_make(nn_cu_matmul *g, int64_t m, int64_t n, int64_t k, bool ours_trans_a,
                                     bool ours_trans_b) {
    memset(g, 0, sizeof *g);
    g->m = m;
    g->n = n;
    g->k = k;
    g->batch = 1;
    /* our B: k x n row-major is n x k column-major, already B'^T */
    g->trans_a = ours_trans_b;
    g->a_rows = ours_trans_b ? k : n;
    g->a_cols = ours_trans_b ? n : k;
    g->lda = g->a_rows;
    /* our A: m x k row-major is k x m column-major, already A'^T */
    g->trans_b = ours_trans_a;
    g->b_rows = ours_trans_a ? m : k;
    g->b_cols = ours_trans_a ? k : m;
    g->ldb = g->b_rows;
}

/* MatMul's batch dims (numpy: 1-D operands promoted, batch dims
 * broadcast).  Fills the product of one batch entry and returns how the
 * entries are laid: NN_CU_BATCH_STRIDED (one call, constant strides),
 * NN_CU_BATCH_TALL (B shared: the batch folds into m), or
 * NN_CU_BATCH_EACH (a call per entry; offsets from nn_cu_matmul_entry). */
enum { NN_CU_BATCH_STRIDED, NN_CU_BATCH_TALL, NN_CU_BATCH_EACH };
typedef struct nn_cu_batch {
    int rank;
    int64_t dims[NN_MAX_DIMS];
    int64_t a_stride[NN_MAX_DIMS], b_stride[NN_MAX_DIMS]; /* our A's and B's, 0 where broadcast */
    int64_t entries;
} nn_cu_batch;

static inline int nn_cu_matmul_batched(nn_cu_matmul *g, nn_cu_batch *bt, const nn_tensor *a, const nn_tensor *b) {
    int64_t m = a->ndim == 1 ? 1 : a->dims[a->ndim - 2], k = a->dims[a->ndim - 1];
    int64_t n = b->ndim == 1 ? 1 : b->dims[b->ndim - 1];
    int ra = a->ndim > 2 ? a->ndim - 2 : 0, rb = b->ndim > 2 ? b->ndim - 2 : 0;
    bt->rank = ra > rb ? ra : rb;
    bt->entries = 1;
    int64_t sa = m * k, sb = k * n;
    for (int d = bt->rank - 1; d >= 0; d--) {
        int ia = d - (bt->rank - ra), ib = d - (bt->rank - rb);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        bt->dims[d] = da == 1 ? db : da;
        bt->a_stride[d] = da == 1 ? 0 : sa;
        bt->b_stride[d] = db == 1 ? 0 : sb;
        sa *= da;
        sb *= db;
        bt->entries *= bt->dims[d];
    }
    bool a_dense = true, a_shared = true, b_dense = true, b_shared = true;
    int64_t run = 1; /* entries inside dim d */
    for (int d = bt->rank - 1; d >= 0; d--) {
        if (bt->dims[d] != 1) {
            a_dense &= bt->a_stride[d] == m * k * run;
            b_dense &= bt->b_stride[d] == k * n * run;
            a_shared &= bt->a_stride[d] == 0;
            b_shared &= bt->b_stride[d] == 0;
        }
        run *= bt->dims[d];
    }
    if (b_shared && a_dense) { /* one tall product: the batch entries of A are consecutive rows */
        nn_cu_matmul_make(g, m * bt->entries, n, k, false, false);
        return NN_CU_BATCH_TALL;
    }
    nn_cu_matmul_make(g, m, n, k, false, false);
    if ((a_dense || a_shared) && (b_dense || b_shared)) {
        g->batch = bt->entries;
        g->stride_a = b_shared ? 0 : k * n; /* cuBLASLt's A is our B */
        g->stride_b = a_shared ? 0 : m * k;
        g->stride_d = m * n;
        return NN_CU_BATCH_STRIDED;
    }
    return NN_CU_BATCH_EACH;
}

/* Element offsets of our A and B for batch entry e (NN_CU_BATCH_EACH). */
static inline void nn_cu_matmul_entry(const nn_cu_batch *bt, int64_t e, int64_t *a_off, int64_t *b_off) {
    *a_off = nn_cu_offset(e, bt->rank, bt->dims, bt->a_stride);
    *b_off = nn_cu_offset(e, bt->rank, bt->dims, bt->b_stride);
}

/* How a product's epilogue is split between cuBLASLt and the elementwise
 * kernel.  cuBLASLt computes D = relu?(alpha * op(A) op(B) + beta * C + bias)
 * with C shaped like D and a bias per row of D (per column of our Y); the
 * rest runs after it as an elementwise pass over Y, whose operand 0 is Y and
 * operand j > 0 the node input ew_inputs[j]. */
typedef struct nn_cu_gemm_epilogue {
    int c_input; /* node input in cuBLASLt's C slot (Gemm's C or the residual); -1: none */
    float beta;
    int bias_input; /* node input as cuBLASLt's bias vector; -1: none */
    bool relu;
    int n_ew_inputs;
    int ew_inputs[NN_EW_MAX_INPUTS];
    nn_cu_ew ew; /* n_steps == 0: no pass */
} nn_cu_gemm_epilogue;

/* y: the product's output; c: Gemm's C (NULL for none, MatMul, or beta 0)
 * with its beta, c_const when it is a constant; ep: the fused epilogue (NULL for none), whose residual is
 * shaped like y.  false when the split needs what the kernels lack (*why). */
static inline bool nn_cu_gemm_epilogue_make(nn_cu_gemm_epilogue *s, const nn_tensor *y, int c_input, const nn_tensor *c,
                                            float beta, bool c_const, const nn_epilogue *ep, const char **why) {
    memset(s, 0, sizeof *s);
    s->c_input = s->bias_input = -1;
    int64_t n = y->ndim ? y->dims[y->ndim - 1] : 1;
    bool c_full = c && c->ndim == y->ndim && !memcmp(c->dims, y->dims, sizeof(int64_t) * (size_t)y->ndim);
    /* cuBLASLt's bias wants an aligned vector: a constant's (cuda/backend.cu aligns them) */
    bool c_row_bias = c && c_const && beta == 1.0f && n > 1 && c->ndim >= 1 && c->dims[c->ndim - 1] == n &&
                      nn_shape_elements(c->dims, c->ndim) == n;
    int residual = ep && ep->residual >= 0 ? ep->residual : -1, leftover = -1;
    const nn_tensor *leftover_shape = NULL;
    if (c_full) { /* cuBLASLt's C takes a full C with its beta; the residual is added after */
        s->c_input = c_input;
        s->beta = beta;
        if (residual >= 0) {
            leftover = residual;
            leftover_shape = y;
        }
    } else {
        if (residual >= 0) { /* else the residual, and C goes to the bias or is added after */
            s->c_input = residual;
            s->beta = 1.0f;
        }
        if (c && c_row_bias) {
            s->bias_input = c_input;
        } else if (c && beta == 1.0f) {
            leftover = c_input;
            leftover_shape = c;
        } else if (c) {
            *why = "Gemm's C broadcast with beta != 1";
            return false;
        }
    }
    nn_tensor shapes[2] = {*y};
    s->ew_inputs[0] = -1;
    s->n_ew_inputs = 1;
    if (leftover >= 0) {
        s->ew_inputs[1] = leftover;
        shapes[s->n_ew_inputs++] = *leftover_shape;
    }
    nn_act act = ep ? ep->act : NN_ACT_NONE;
    s->relu = act == NN_ACT_RELU && leftover < 0;
    nn_cu_ew_layout(&s->ew, y->ndim, y->dims, s->n_ew_inputs, shapes);
    nn_cu_ew_push_epilogue(&s->ew, leftover >= 0 ? 1 : -1, -1, s->relu ? NN_ACT_NONE : act, ep ? ep->alpha : 0.0f,
                           ep ? ep->beta : 0.0f);
    return true;
}

#endif
