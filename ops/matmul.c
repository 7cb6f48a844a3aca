/* Matrix products through OpenBLAS (fp32): MatMul (numpy semantics) and Gemm. */
#include <cblas.h>
#include <limits.h>

#include "epilogue.h"
#include "op.h"
#include "params.h"

static int blas_ld(int64_t n) { return n > 1 ? (int)n : 1; }

/* C (m x n, row-major) = alpha * op(A) op(B) + beta * C.  A single-row
 * product goes through sgemv, which skips the panel packing of sgemm (for a
 * classifier layer at batch 1 that is most of the time). */
static void product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                    const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    if (m == 1 && k > 0) {
        /* op(A) is one row; its k values are contiguous either way */
        cblas_sgemv(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, (int)(tb ? n : k), (int)(tb ? k : n), alpha, b,
                    blas_ld(ldb), a, 1, beta, c, 1);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k,
                alpha, a, blas_ld(lda), b, blas_ld(ldb), beta, c, blas_ld(ldc));
}

static nn_status check_float(nn_call *c) {
    for (int i = 0; i < c->n_in; i++)
        if (nn_present(c, i) && c->in[i].dtype != NN_DTYPE_FLOAT)
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "input %d: dtype %s not supported (float only)", i,
                                 nn_dtype_name(c->in[i].dtype));
    return NN_OK;
}

/* The fused epilogue over an output of `rows` rows of `cols` values. */
static void apply_epilogue(const nn_call *c, int64_t rows, int64_t cols) {
    if (!c->epilogue) return;
    const float *res = nn_epilogue_residual(c);
    float *y = c->out[0].data;
#pragma omp parallel for num_threads(c->threads) if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; r++) nn_epilogue_apply(c->epilogue, y + r * cols, res ? res + r * cols : NULL, cols);
}

/* ---- MatMul: 1-D operands are promoted to a row (A) / column (B) and the
 *      promoted dim dropped from the result; batch dims broadcast. */

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

static nn_status matmul_resolve(nn_call *c, matmul_geom *g) {
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
    if (g->m * g->batches > INT_MAX || g->n > INT_MAX || g->k > INT_MAX)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "matrices too large for 32-bit BLAS sizes");
    batch_strides(a, g, g->m * g->k, g->a_stride);
    batch_strides(b, g, g->k * g->n, g->b_stride);
    return NN_OK;
}

static nn_status infer_matmul(nn_call *c) {
    matmul_geom g;
    nn_status st = matmul_resolve(c, &g);
    if (st != NN_OK) return st;
    int64_t dims[NN_MAX_DIMS];
    int nd = g.batch_rank;
    for (int d = 0; d < nd; d++) dims[d] = g.batch[d];
    if (c->in[0].ndim > 1) dims[nd++] = g.m;
    if (c->in[1].ndim > 1) dims[nd++] = g.n;
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, nd, dims);
    return NN_OK;
}

static nn_status run_matmul(nn_call *c) {
    matmul_geom g;
    nn_status st = matmul_resolve(c, &g);
    if (st != NN_OK) return st;
    const float *a = c->in[0].data, *b = c->in[1].data;
    float *y = c->out[0].data;
    bool b_shared = true, a_dense = true;
    for (int d = 0; d < g.batch_rank; d++) {
        b_shared = b_shared && g.b_stride[d] == 0;
        a_dense = a_dense && (g.a_stride[d] != 0 || g.batch[d] == 1);
    }
    if (b_shared && a_dense) {
        /* A's batches are contiguous rows against one B: a single tall GEMM */
        product(false, false, g.batches * g.m, g.n, g.k, 1.0f, a, g.k, b, g.n, 0.0f, y, g.n);
        apply_epilogue(c, g.batches * g.m, g.n);
        return NN_OK;
    }
    int64_t pos[NN_MAX_DIMS] = {0};
    for (int64_t i = 0; i < g.batches; i++) {
        int64_t ao = 0, bo = 0;
        for (int d = 0; d < g.batch_rank; d++) {
            ao += pos[d] * g.a_stride[d];
            bo += pos[d] * g.b_stride[d];
        }
        product(false, false, g.m, g.n, g.k, 1.0f, a + ao, g.k, b + bo, g.n, 0.0f, y + i * g.m * g.n, g.n);
        for (int d = g.batch_rank - 1; d >= 0; d--) {
            if (++pos[d] < g.batch[d]) break;
            pos[d] = 0;
        }
    }
    apply_epilogue(c, g.batches * g.m, g.n);
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

typedef struct gemm_geom {
    int64_t m, k, n;
    int64_t c_row, c_col; /* element strides of C over Y's rows / columns; 0 where broadcast */
} gemm_geom;

static nn_status gemm_resolve(nn_call *c, gemm_geom *g) {
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
    if (a->dims[0] > INT_MAX || a->dims[1] > INT_MAX || b->dims[0] > INT_MAX || b->dims[1] > INT_MAX)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "matrices too large for 32-bit BLAS sizes");
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

static nn_status run_gemm(nn_call *c) {
    const nn_gemm_params *p = c->params;
    gemm_geom g;
    nn_status st = gemm_resolve(c, &g);
    if (st != NN_OK) return st;
    float *y = c->out[0].data, beta = 0.0f;
    if (nn_present(c, 2) && p->beta != 0.0f) {
        const float *cv = c->in[2].data;
#pragma omp parallel for num_threads(c->threads) if (g.m * g.n > 65536)
        for (int64_t i = 0; i < g.m; i++)
            for (int64_t j = 0; j < g.n; j++) y[i * g.n + j] = p->beta * cv[i * g.c_row + j * g.c_col];
        beta = 1.0f;
    }
    if (g.m == 0 || g.n == 0) return NN_OK;
    product(p->trans_a, p->trans_b, g.m, g.n, g.k, p->alpha, c->in[0].data, c->in[0].dims[1], c->in[1].data,
            c->in[1].dims[1], beta, y, g.n);
    apply_epilogue(c, g.m, g.n);
    return NN_OK;
}

const nn_op_desc nn_op_MatMul = {.name = "MatMul", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1,
                                 .max_outputs = 1, .flags = NN_OPF_EPILOGUE, .infer = infer_matmul,
                                 .run = run_matmul};
const nn_op_desc nn_op_Gemm = {.name = "Gemm", .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
                               .flags = NN_OPF_EPILOGUE, .parse = parse_gemm, .infer = infer_gemm, .run = run_gemm};
