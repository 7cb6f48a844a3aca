/* Matrix products (fp32): MatMul (numpy semantics) and Gemm, through
 * ops/gemm.c, which also applies the fused epilogue and Gemm's C when it is a
 * bias vector.  A constant B (the weights) is packed once in prepare. */
#include "../engine/arena.h"
#include "epilogue.h"
#include "gemm.h"
#include "op.h"
#include "par.h"
#include "params.h"

/* B packed ahead is worth its memory only when several rows of A reuse it;
 * a product with fewer rows streams B once anyway (matrix-vector). */
#define PACK_B_MIN_ROWS 2

static nn_status check_float(const nn_call *c) {
    for (int i = 0; i < c->n_in; i++)
        if (nn_present(c, i) && c->in[i].dtype != NN_DTYPE_FLOAT)
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "input %d: dtype %s not supported (float only)", i,
                                 nn_dtype_name(c->in[i].dtype));
    return NN_OK;
}

/* The epilogue part of a product on this call's output (residual: C's layout). */
static void set_epilogue(const nn_call *c, nn_gemm *g) {
    const nn_epilogue *e = c->epilogue;
    g->residual = nn_epilogue_residual(c);
    g->ldr = g->ldc;
    if (!e) return;
    g->act = e->act;
    g->act_alpha = e->alpha;
    g->act_beta = e->beta;
}

/* Bytes of B = in[1] packed for `g` when it is constant and worth packing; 0 otherwise. */
static size_t packed_b_bytes(const nn_call *c, const nn_gemm *g) {
    if (!c->in[1].data || g->m < PACK_B_MIN_ROWS || g->n <= 0) return 0;
    return nn_gemm_pack_b_block_bytes(g);
}

/* The B that prepare packed, as an operand; NULL when there is none. */
static const nn_gemm_packed *prepared_b(const nn_call *c, nn_gemm_packed *view) {
    if (!c->prepared) return NULL;
    *view = nn_gemm_block_view(c->prepared);
    return view;
}

/* ---- MatMul: 1-D operands are promoted to a row (A) / column (B) and the
 *      promoted dim dropped from the result; batch dims broadcast.  Inside
 *      the engine (passes/fuse_bias.c) a MatMul may carry a bias of N
 *      values as input 2, added in the epilogue like Gemm's C. */

/* The fused bias, when input 2 is one and not the epilogue's residual. */
static const nn_tensor *matmul_bias(const nn_call *c) {
    if (!nn_present(c, 2) || (c->epilogue && c->epilogue->residual == 2)) return NULL;
    return &c->in[2];
}

typedef struct matmul_geom {
    int64_t m, k, n;
    int batch_rank;
    int64_t batch[NN_MAX_DIMS];
    /* element strides of A's and B's matrices along each batch dim; 0 where broadcast */
    int64_t a_stride[NN_MAX_DIMS], b_stride[NN_MAX_DIMS];
    int64_t batches;
} matmul_geom;

/* Strides of one operand's matrices laid against the broadcast batch dims. */
static void batch_strides(const nn_tensor *t, const matmul_geom *g, int64_t matrix, int64_t *stride) {
    int own = t->ndim > 2 ? t->ndim - 2 : 0;
    int64_t s = matrix;
    for (int d = g->batch_rank - 1; d >= 0; d--) {
        int td = d - (g->batch_rank - own);
        int64_t dim = td >= 0 ? t->dims[td] : 1;
        stride[d] = dim == 1 ? 0 : s;
        s *= dim;
    }
}

static nn_status matmul_resolve(const nn_call *c, matmul_geom *g) {
    const nn_tensor *a = &c->in[0], *b = &c->in[1];
    nn_status st = check_float(c);
    if (st != NN_OK) return st;
    if (a->ndim < 1 || b->ndim < 1) return nn_call_error(c, NN_ERR_SHAPE, "operands must have rank >= 1");
    g->m = a->ndim == 1 ? 1 : a->dims[a->ndim - 2];
    g->k = a->dims[a->ndim - 1];
    int64_t kb = b->ndim == 1 ? b->dims[0] : b->dims[b->ndim - 2];
    g->n = b->ndim == 1 ? 1 : b->dims[b->ndim - 1];
    if (g->k != kb)
        return nn_call_error(c, NN_ERR_SHAPE, "inner dims differ: A has %lld, B has %lld", (long long)g->k,
                             (long long)kb);
    int ra = a->ndim > 2 ? a->ndim - 2 : 0, rb = b->ndim > 2 ? b->ndim - 2 : 0;
    g->batch_rank = ra > rb ? ra : rb;
    g->batches = 1;
    for (int d = 0; d < g->batch_rank; d++) {
        int ia = d - (g->batch_rank - ra), ib = d - (g->batch_rank - rb);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return nn_call_error(c, NN_ERR_SHAPE, "batch dim %d does not broadcast: %lld vs %lld", d, (long long)da,
                                 (long long)db);
        g->batch[d] = da == 1 ? db : da;
        g->batches *= g->batch[d];
    }
    batch_strides(a, g, g->m * g->k, g->a_stride);
    batch_strides(b, g, g->k * g->n, g->b_stride);
    return NN_OK;
}

static nn_status infer_matmul(nn_call *c) {
    matmul_geom g;
    nn_status st = matmul_resolve(c, &g);
    if (st != NN_OK) return st;
    const nn_tensor *bias = matmul_bias(c);
    if (bias && (c->in[1].ndim < 2 || nn_tensor_elements(bias) != g.n))
        return nn_call_error(c, NN_ERR_SHAPE, "fused bias has %lld values for %lld columns",
                             (long long)nn_tensor_elements(bias), (long long)g.n);
    int64_t dims[NN_MAX_DIMS];
    int nd = g.batch_rank;
    for (int d = 0; d < nd; d++)
        dims[d] = g.batch[d];
    if (c->in[0].ndim > 1) dims[nd++] = g.m;
    if (c->in[1].ndim > 1) dims[nd++] = g.n;
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, nd, dims);
    return NN_OK;
}

/* B shared by all batches and A's batches contiguous: one tall product. */
static bool matmul_tall(const matmul_geom *g) {
    bool b_shared = true, a_dense = true;
    for (int d = 0; d < g->batch_rank; d++) {
        b_shared = b_shared && g->b_stride[d] == 0;
        a_dense = a_dense && (g->a_stride[d] != 0 || g->batch[d] == 1);
    }
    return b_shared && a_dense;
}

/* The product of the first batch entry (or the tall product). */
static nn_gemm matmul_gemm(const nn_call *c, const matmul_geom *g, const nn_gemm_packed *packed) {
    bool tall = matmul_tall(g);
    nn_gemm gm = {.m = tall ? g->batches * g->m : g->m,
                  .n = g->n,
                  .k = g->k,
                  .a = c->in[0].data,
                  .lda = g->k,
                  .b = c->in[1].data,
                  .ldb = g->n,
                  .b_packed = tall ? packed : NULL,
                  .c = c->out[0].data,
                  .ldc = g->n,
                  .alpha = 1.0f,
                  .bf16 = c->bf16 && tall && packed};
    const nn_tensor *bias = matmul_bias(c);
    if (bias) {
        gm.bias_kind = NN_GEMM_BIAS_COL;
        gm.bias = bias->data;
    }
    set_epilogue(c, &gm);
    return gm;
}

static size_t workspace_matmul(const nn_call *c) {
    matmul_geom g;
    if (matmul_resolve(c, &g) != NN_OK) return 0;
    nn_gemm_packed view;
    nn_gemm gm = matmul_gemm(c, &g, prepared_b(c, &view));
    return nn_gemm_workspace(&gm, c->threads);
}

static size_t prepared_size_matmul(const nn_call *c) {
    matmul_geom g;
    if (matmul_resolve(c, &g) != NN_OK || !matmul_tall(&g)) return 0;
    nn_gemm gm = matmul_gemm(c, &g, NULL);
    gm.bf16 = c->bf16; /* packed B: the constant weights, in bf16 when asked */
    return packed_b_bytes(c, &gm);
}

static nn_status prepare_matmul(const nn_call *c, void *prepared) {
    matmul_geom g;
    nn_status st = matmul_resolve(c, &g);
    if (st != NN_OK) return st;
    nn_gemm gm = matmul_gemm(c, &g, NULL);
    gm.bf16 = c->bf16; /* packed B: the constant weights, in bf16 when asked */
    nn_gemm_pack_b_block(&gm, prepared);
    return NN_OK;
}

static bool prepared_fits_matmul(const nn_call *c, const void *prepared, size_t size) {
    matmul_geom g;
    if (matmul_resolve(c, &g) != NN_OK || !matmul_tall(&g)) return false;
    nn_gemm gm = matmul_gemm(c, &g, NULL);
    gm.bf16 = c->bf16; /* packed B: the constant weights, in bf16 when asked */
    return nn_gemm_block_fits_b(&gm, prepared, size);
}

static nn_status run_matmul(nn_call *c) {
    matmul_geom g;
    nn_status st = matmul_resolve(c, &g);
    if (st != NN_OK) return st;
    nn_gemm_packed view;
    nn_gemm gm = matmul_gemm(c, &g, prepared_b(c, &view));
    const float *a = gm.a, *b = gm.b, *res = gm.residual;
    int64_t pos[NN_MAX_DIMS] = {0}, entries = matmul_tall(&g) ? 1 : g.batches;
    for (int64_t i = 0; i < entries; i++) {
        int64_t ao = 0, bo = 0;
        for (int d = 0; d < g.batch_rank && entries > 1; d++) {
            ao += pos[d] * g.a_stride[d];
            bo += pos[d] * g.b_stride[d];
        }
        gm.a = a + ao;
        gm.b = b + bo;
        gm.c = (float *)c->out[0].data + i * g.m * g.n;
        gm.residual = res ? res + i * g.m * g.n : NULL;
        if (!nn_gemm_run(&gm, c->workspace, c->workspace_size, c->threads))
            return nn_call_error(c, NN_ERR_INTERNAL, "matmul workspace too small or B packed for another kernel");
        for (int d = g.batch_rank - 1; d >= 0; d--) {
            if (++pos[d] < g.batch[d]) break;
            pos[d] = 0;
        }
    }
    return NN_OK;
}

/* ---- Gemm: Y = alpha * A' B' + beta * C, C broadcast to (M, N) */

static nn_status parse_gemm(nn_parse_ctx *ctx) {
    nn_gemm_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    nn_status st;
    /* opset < 7 `broadcast` is not read: C is always broadcast, which covers broadcast=0's exact shape */
    if ((st = nn_attr_float(ctx, "alpha", 1.0f, &p->alpha)) || (st = nn_attr_float(ctx, "beta", 1.0f, &p->beta)) ||
        (st = nn_attr_int(ctx, "transA", 0, &p->trans_a)) || (st = nn_attr_int(ctx, "transB", 0, &p->trans_b)))
        return st;
    ctx->params = p;
    return NN_OK;
}

static nn_status gemm_check(const void *params, char *err, size_t err_size) {
    const nn_gemm_params *p = params;
    if ((p->trans_a != 0 && p->trans_a != 1) || (p->trans_b != 0 && p->trans_b != 1))
        return nn_check_error(err, err_size, "transA (%lld) and transB (%lld) must be 0 or 1", (long long)p->trans_a,
                              (long long)p->trans_b);
    return NN_OK;
}

typedef struct gemm_geom {
    int64_t m, k, n;
    int64_t c_row, c_col; /* element strides of C over Y's rows / columns; 0 where broadcast */
} gemm_geom;

static nn_status gemm_resolve(const nn_call *c, gemm_geom *g) {
    const nn_gemm_params *p = c->params;
    const nn_tensor *a = &c->in[0], *b = &c->in[1];
    nn_status st = check_float(c);
    if (st != NN_OK) return st;
    if (a->ndim != 2 || b->ndim != 2)
        return nn_call_error(c, NN_ERR_SHAPE, "A and B must be 2-D (got rank %d and %d)", a->ndim, b->ndim);
    g->m = a->dims[p->trans_a ? 1 : 0];
    g->k = a->dims[p->trans_a ? 0 : 1];
    int64_t kb = b->dims[p->trans_b ? 1 : 0];
    g->n = b->dims[p->trans_b ? 0 : 1];
    if (g->k != kb)
        return nn_call_error(c, NN_ERR_SHAPE, "inner dims differ: A' has %lld, B' has %lld", (long long)g->k,
                             (long long)kb);
    g->c_row = g->c_col = 0;
    if (nn_present(c, 2)) {
        const nn_tensor *t = &c->in[2];
        int64_t cm = t->ndim == 2 ? t->dims[0] : 1, cn = t->ndim >= 1 ? t->dims[t->ndim - 1] : 1;
        if (t->ndim > 2 || (cm != g->m && cm != 1) || (cn != g->n && cn != 1))
            return nn_call_error(c, NN_ERR_SHAPE, "C does not broadcast to (%lld, %lld)", (long long)g->m,
                                 (long long)g->n);
        g->c_row = cm == 1 ? 0 : cn;
        g->c_col = cn == 1 ? 0 : 1;
    }
    return NN_OK;
}

static nn_status infer_gemm(nn_call *c) {
    gemm_geom g;
    nn_status st = gemm_resolve(c, &g);
    if (st != NN_OK) return st;
    int64_t dims[2] = {g.m, g.n};
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, 2, dims);
    return NN_OK;
}

/* Y = alpha A' B' + beta C: a C that is a plain bias vector (beta 1, one
 * row or one column) rides in the epilogue; any other C is written into Y
 * first (prefill) and the product added to it. */
static nn_gemm gemm_gemm(const nn_call *c, const gemm_geom *g, const nn_gemm_packed *packed, bool *prefill) {
    const nn_gemm_params *p = c->params;
    const nn_tensor *a = &c->in[0], *b = &c->in[1];
    nn_gemm gm = {.m = g->m,
                  .n = g->n,
                  .k = g->k,
                  .a = a->data,
                  .lda = a->dims[1],
                  .trans_a = p->trans_a,
                  .b = b->data,
                  .ldb = b->dims[1],
                  .trans_b = p->trans_b,
                  .b_packed = packed,
                  .c = c->out[0].data,
                  .ldc = g->n,
                  .alpha = p->alpha,
                  .bf16 = c->bf16 && packed};
    *prefill = false;
    if (nn_present(c, 2) && p->beta != 0.0f) {
        if (p->beta == 1.0f && g->c_row == 0 && g->c_col == 1)
            gm.bias_kind = NN_GEMM_BIAS_COL;
        else if (p->beta == 1.0f && g->c_row == 1 && g->c_col == 0)
            gm.bias_kind = NN_GEMM_BIAS_ROW;
        else
            *prefill = gm.accumulate = true;
        if (!*prefill) gm.bias = c->in[2].data;
    }
    set_epilogue(c, &gm);
    return gm;
}

static size_t workspace_gemm(const nn_call *c) {
    gemm_geom g;
    bool prefill;
    if (gemm_resolve(c, &g) != NN_OK) return 0;
    nn_gemm_packed view;
    nn_gemm gm = gemm_gemm(c, &g, prepared_b(c, &view), &prefill);
    return nn_gemm_workspace(&gm, c->threads);
}

static size_t prepared_size_gemm(const nn_call *c) {
    gemm_geom g;
    bool prefill;
    if (gemm_resolve(c, &g) != NN_OK) return 0;
    nn_gemm gm = gemm_gemm(c, &g, NULL, &prefill);
    gm.bf16 = c->bf16; /* packed B: the constant weights, in bf16 when asked */
    return packed_b_bytes(c, &gm);
}

static nn_status prepare_gemm(const nn_call *c, void *prepared) {
    gemm_geom g;
    bool prefill;
    nn_status st = gemm_resolve(c, &g);
    if (st != NN_OK) return st;
    nn_gemm gm = gemm_gemm(c, &g, NULL, &prefill);
    gm.bf16 = c->bf16; /* packed B: the constant weights, in bf16 when asked */
    nn_gemm_pack_b_block(&gm, prepared);
    return NN_OK;
}

static bool prepared_fits_gemm(const nn_call *c, const void *prepared, size_t size) {
    gemm_geom g;
    bool prefill;
    if (gemm_resolve(c, &g) != NN_OK) return false;
    nn_gemm gm = gemm_gemm(c, &g, NULL, &prefill);
    gm.bf16 = c->bf16; /* packed B: the constant weights, in bf16 when asked */
    return nn_gemm_block_fits_b(&gm, prepared, size);
}

typedef struct prefill_job {
    const float *cv;
    float *y;
    const gemm_geom *g;
    float beta;
} prefill_job;

/* Rows [lo, hi) of Y = beta * C (C broadcast), before the GEMM accumulates. */
static void prefill_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const prefill_job *j = ctx;
    const gemm_geom *g = j->g;
    for (int64_t i = lo; i < hi; i++)
        for (int64_t k = 0; k < g->n; k++)
            j->y[i * g->n + k] = j->beta * j->cv[i * g->c_row + k * g->c_col];
}

static nn_status run_gemm(nn_call *c) {
    const nn_gemm_params *p = c->params;
    gemm_geom g;
    bool prefill;
    nn_status st = gemm_resolve(c, &g);
    if (st != NN_OK) return st;
    nn_gemm_packed view;
    nn_gemm gm = gemm_gemm(c, &g, prepared_b(c, &view), &prefill);
    if (prefill) {
        prefill_job j = {.cv = c->in[2].data, .y = c->out[0].data, .g = &g, .beta = p->beta};
        nn_par_for_range(g.m * g.n > 2 * NN_PAR_MIN ? c->threads : 1, g.m, 4096 / (g.n > 0 ? g.n : 1), prefill_range,
                         &j);
    }
    if (!nn_gemm_run(&gm, c->workspace, c->workspace_size, c->threads))
        return nn_call_error(c, NN_ERR_INTERNAL, "gemm workspace too small or B packed for another kernel");
    return NN_OK;
}

const nn_op_desc nn_op_MatMul = {.name = "MatMul",
                                 .min_inputs = 2,
                                 .max_inputs = 2,
                                 .min_outputs = 1,
                                 .max_outputs = 1,
                                 .flags = NN_OPF_EPILOGUE,
                                 .infer = infer_matmul,
                                 .workspace = workspace_matmul,
                                 .run = run_matmul,
                                 .prepared_size = prepared_size_matmul,
                                 .prepare = prepare_matmul,
                                 .prepared_fits = prepared_fits_matmul,
                                 .prepared_inputs = 1u << 1};
const nn_op_desc nn_op_Gemm = {.name = "Gemm",
                               .min_inputs = 2,
                               .max_inputs = 3,
                               .min_outputs = 1,
                               .max_outputs = 1,
                               .flags = NN_OPF_EPILOGUE,
                               .parse = parse_gemm,
                               .check = gemm_check,
                               .infer = infer_gemm,
                               .workspace = workspace_gemm,
                               .run = run_gemm,
                               .prepared_size = prepared_size_gemm,
                               .prepare = prepare_gemm,
                               .prepared_fits = prepared_fits_gemm,
                               .prepared_inputs = 1u << 1};
