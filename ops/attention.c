/* FusedAttention (ops/attention.h): a block of query rows at a time, its
 * scores kept in a small per-thread buffer: GEMM Q_rows K^T into the
 * buffer, add the masks and take the softmax in place, GEMM with V into
 * the output rows.  The scores never go through memory as a tensor, and
 * the tasks (batch entry, row block) run in parallel. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>

#include "act_x86.h"
#include "attention.h"
#include "gemm.h"
#include "isa.h"
#include "par.h"
#include "softmax_row.h"

/* Score rows per block: the buffer (rows x n floats) stays within about
 * 32 KiB, an L1 data cache, while it goes from one GEMM to the other. */
#define SCORE_BLOCK_FLOATS 8192
#define MAX_BLOCK_ROWS     64

static nn_status parse_FusedAttention(nn_parse_ctx *ctx) {
    return nn_parse_error(ctx, NN_ERR_UNSUPPORTED,
                          "FusedAttention is made by the optimizer and cannot be read from a model file");
}

static bool dims_ok(const int64_t *dims, int rank) {
    int64_t total = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 1 || dims[i] > NN_ATTR_EXTENT_MAX || total > INT64_MAX / 4 / dims[i]) return false;
        total *= dims[i];
    }
    return true;
}

static bool view_ok(const nn_attn_view *v, int rank) {
    if (v->offset < 0 || v->offset > NN_ATTR_EXTENT_MAX * (int64_t)1024) return false;
    for (int i = 0; i < rank; i++)
        if (v->stride[i] < 0 || v->stride[i] > NN_ATTR_EXTENT_MAX) return false;
    return true;
}

static nn_status check_FusedAttention(const void *params, char *err, size_t err_size) {
    const nn_attention_params *p = params;
    if (p->rank < 2 || p->rank > NN_MAX_DIMS)
        return nn_check_error(err, err_size, "rank %d (2 to %d)", p->rank, NN_MAX_DIMS);
    if (!isfinite(p->scale)) return nn_check_error(err, err_size, "scale is not finite");
    int64_t all[NN_MAX_DIMS + 4];
    int nb = p->rank - 2;
    for (int i = 0; i < nb; i++)
        all[i] = p->batch[i];
    all[nb] = p->m, all[nb + 1] = p->n, all[nb + 2] = p->d, all[nb + 3] = p->dv;
    if (!dims_ok(all, nb + 4)) return nn_check_error(err, err_size, "dims out of range");
    if (!view_ok(&p->q, p->rank) || !view_ok(&p->k, p->rank) || !view_ok(&p->v, p->rank) || !view_ok(&p->o, p->rank))
        return nn_check_error(err, err_size, "view offset or stride out of range");
    if (p->out_rank < 1 || p->out_rank > NN_MAX_DIMS || !dims_ok(p->out_dims, p->out_rank))
        return nn_check_error(err, err_size, "output shape out of range");
    if (p->n_masks < 0 || p->n_masks > NN_ATTN_MAX_MASKS)
        return nn_check_error(err, err_size, "%d masks (0 to %d)", p->n_masks, NN_ATTN_MAX_MASKS);
    for (int i = 0; i < p->n_masks; i++)
        if (p->mask[i].rank < 1 || p->mask[i].rank > NN_MAX_DIMS || !dims_ok(p->mask[i].dims, p->mask[i].rank) ||
            p->mask[i].dims[p->mask[i].rank - 1] != p->n)
            return nn_check_error(err, err_size, "mask %d: shape out of range", i);
    return NN_OK;
}

/* The logical dims of view `which` (0 Q, 1 K, 2 V, 3 O). */
static void view_dims(const nn_attention_params *p, int which, int64_t *dims) {
    for (int i = 0; i < p->rank - 2; i++)
        dims[i] = p->batch[i];
    static const int rows[4] = {0, 1, 1, 0}, cols[4] = {2, 2, 3, 3};
    const int64_t mndv[4] = {p->m, p->n, p->d, p->dv};
    dims[p->rank - 2] = mndv[rows[which]];
    dims[p->rank - 1] = mndv[cols[which]];
}

/* The view lies inside t, and its matrices have one unit stride (or a
 * dim of 1), so a GEMM can read them plainly or transposed. */
static nn_status view_fits(const nn_call *c, const nn_attention_params *p, int which, const nn_attn_view *v,
                           int64_t elements) {
    static const char *names[4] = {"Q", "K", "V", "output"};
    int64_t dims[NN_MAX_DIMS], last = v->offset, step;
    view_dims(p, which, dims);
    bool overflow = false; /* params from a plan cache are untrusted */
    for (int i = 0; i < p->rank; i++)
        overflow |=
            __builtin_mul_overflow(dims[i] - 1, v->stride[i], &step) || __builtin_add_overflow(last, step, &last);
    if (overflow || last >= elements)
        return nn_call_error(c, NN_ERR_SHAPE, "%s view reaches element %lld of %lld", names[which], (long long)last,
                             (long long)elements);
    int r = p->rank;
    bool unit = v->stride[r - 1] == 1 || v->stride[r - 2] == 1 || dims[r - 1] == 1 || dims[r - 2] == 1;
    if (!unit) return nn_call_error(c, NN_ERR_SHAPE, "%s view has no unit stride in its matrices", names[which]);
    return NN_OK;
}

static nn_status infer_FusedAttention(nn_call *c) {
    const nn_attention_params *p = c->params;
    for (int i = 0; i < c->n_in; i++)
        if (!nn_present(c, i) || c->in[i].dtype != NN_DTYPE_FLOAT)
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "input %d must be a float tensor", i);
    if (c->n_in != 3 + p->n_masks) return nn_call_error(c, NN_ERR_SHAPE, "%d inputs for %d masks", c->n_in, p->n_masks);
    int64_t out_elements = nn_shape_elements(p->out_dims, p->out_rank);
    int64_t want = p->m * p->dv;
    for (int i = 0; i < p->rank - 2; i++)
        want *= p->batch[i];
    if (out_elements != want) return nn_call_error(c, NN_ERR_SHAPE, "output shape does not hold the product");
    const nn_attn_view *views[3] = {&p->q, &p->k, &p->v};
    nn_status st;
    for (int i = 0; i < 3; i++)
        if ((st = view_fits(c, p, i, views[i], nn_tensor_elements(&c->in[i]))) != NN_OK) return st;
    if ((st = view_fits(c, p, 3, &p->o, out_elements)) != NN_OK) return st;
    for (int i = 0; i < p->n_masks; i++) {
        const nn_attn_mask *mk = &p->mask[i];
        const nn_tensor *t = &c->in[3 + i];
        if (nn_shape_elements(mk->dims, mk->rank) != want / p->dv * p->n)
            return nn_call_error(c, NN_ERR_SHAPE, "mask %d: its shape does not hold the scores", i);
        if (t->ndim > mk->rank)
            return nn_call_error(c, NN_ERR_SHAPE, "mask %d: rank %d above %d", i, t->ndim, mk->rank);
        for (int d = 0; d < t->ndim; d++) {
            int64_t md = mk->dims[mk->rank - t->ndim + d];
            if (t->dims[d] != 1 && t->dims[d] != md)
                return nn_call_error(c, NN_ERR_SHAPE, "mask %d: dim %d (%lld) does not broadcast to %lld", i, d,
                                     (long long)t->dims[d], (long long)md);
        }
    }
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, p->out_rank, p->out_dims);
    return NN_OK;
}

static int64_t block_rows(const nn_attention_params *p) {
    int64_t rb = SCORE_BLOCK_FLOATS / p->n;
    rb = rb < 1 ? 1 : rb > MAX_BLOCK_ROWS ? MAX_BLOCK_ROWS : rb;
    return rb < p->m ? rb : p->m;
}

/* A logical matrix (rows x cols, strides rs and cs) as a GEMM operand. */
static void layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t *ld, bool *trans) {
    if (cs == 1 || cols == 1) {
        *trans = false;
        *ld = rows > 1 ? rs : cols;
    } else {
        *trans = true;
        *ld = cols > 1 ? cs : rows;
    }
}

/* The two products of one row block; pointers set per task. */
static void make_gemms(const nn_attention_params *p, int64_t rows, nn_gemm *s, nn_gemm *o) {
    int r = p->rank;
    *s = (nn_gemm){.m = rows, .n = p->n, .k = p->d, .alpha = p->scale, .ldc = p->n};
    layout(rows, p->d, p->q.stride[r - 2], p->q.stride[r - 1], &s->lda, &s->trans_a);
    /* B = K^T: B(p, j) = K(j, p) */
    bool kt;
    layout(p->d, p->n, p->k.stride[r - 1], p->k.stride[r - 2], &s->ldb, &kt);
    s->trans_b = kt;
    *o = (nn_gemm){.m = rows, .n = p->dv, .k = p->n, .alpha = 1.0f, .lda = p->n};
    layout(p->n, p->dv, p->v.stride[r - 2], p->v.stride[r - 1], &o->ldb, &o->trans_b);
    layout(rows, p->dv, p->o.stride[r - 2], p->o.stride[r - 1], &o->ldc, &o->trans_c);
}

/* Per-thread floats: the score block, then GEMM scratch, 64-byte aligned. */
static size_t thread_floats(const nn_attention_params *p) {
    nn_gemm s, o;
    make_gemms(p, block_rows(p), &s, &o);
    size_t ws = nn_gemm_workspace(&s, 1), wo = nn_gemm_workspace(&o, 1);
    size_t gw = (ws > wo ? ws : wo) / sizeof(float) + 1;
    return (size_t)nn_round_up(block_rows(p) * p->n, 16) + (size_t)nn_round_up((int64_t)gw, 16);
}

static size_t workspace_FusedAttention(const nn_call *c) {
    return thread_floats(c->params) * sizeof(float) * (size_t)(c->threads > 0 ? c->threads : 1) + 64;
}

/* Element offset of batch entry b in a view. */
static int64_t batch_offset(const nn_attention_params *p, const nn_attn_view *v, int64_t b) {
    int64_t off = v->offset;
    for (int i = p->rank - 3; i >= 0; i--) {
        off += b % p->batch[i] * v->stride[i];
        b /= p->batch[i];
    }
    return off;
}

typedef struct mask_ref {
    const float *data;
    int rank;
    const int64_t *dims;
    int64_t stride[NN_MAX_DIMS]; /* broadcast strides against dims */
} mask_ref;

/* The mask row added to score row `row` (flat over batch and m). */
static const float *mask_row(const mask_ref *mr, int64_t row) {
    int64_t off = 0;
    for (int i = mr->rank - 2; i >= 0; i--) {
        off += row % mr->dims[i] * mr->stride[i];
        row /= mr->dims[i];
    }
    return mr->data + off;
}

/* Softmax of one score row in place, after adding the masks: the steps of
 * ops/softmax.c's rows (softmax_row.h), which vectorize.  The plain loops
 * kept the row scalar: ViT-B/16's 12 x 12 x 197 rows of 197 took 29.5 of
 * its 213 ms at batch 1 (Zen 4). */
static inline __attribute__((always_inline)) void score_row_body(float *x, int64_t n, const mask_ref *masks,
                                                                 int n_masks, int64_t row) {
    for (int i = 0; i < n_masks; i++) {
        const float *mk = mask_row(&masks[i], row);
        if (masks[i].stride[masks[i].rank - 1])
            for (int64_t j = 0; j < n; j++)
                x[j] += mk[j];
        else
            for (int64_t j = 0; j < n; j++)
                x[j] += mk[0];
    }
    float mx = nn_softmax_row_max(x, n);
    if (mx == -INFINITY) mx = 0; /* a fully masked row: exp gives 0s, the division NaN, as unfused */
    nn_softmax_row_exp(x, x, n, mx);
}

/* `rows` score rows from flat row `row0` on, compiled once per ISA. */
typedef void (*score_rows_fn)(float *x, int64_t rows, int64_t n, const mask_ref *masks, int n_masks, int64_t row0);
static void score_rows_portable(float *x, int64_t rows, int64_t n, const mask_ref *masks, int n_masks, int64_t row0) {
    for (int64_t i = 0; i < rows; i++)
        score_row_body(x + i * n, n, masks, n_masks, row0 + i);
}
#if NN_HAVE_X86
static T256 void score_rows_avx2(float *x, int64_t rows, int64_t n, const mask_ref *masks, int n_masks, int64_t row0) {
    for (int64_t i = 0; i < rows; i++)
        score_row_body(x + i * n, n, masks, n_masks, row0 + i);
}
static T512 void score_rows_avx512(float *x, int64_t rows, int64_t n, const mask_ref *masks, int n_masks,
                                   int64_t row0) {
    for (int64_t i = 0; i < rows; i++)
        score_row_body(x + i * n, n, masks, n_masks, row0 + i);
}
#endif

/* One task: query rows [i0, i0 + rb) of one (batch, head), its scores in
 * the seat's scratch. */
typedef struct attn_job {
    const nn_attention_params *p;
    const mask_ref *masks;
    float *ws;
    size_t per;
    int64_t rb, blocks;
    const float *q, *k, *v;
    float *out;
    score_rows_fn score_rows;
    atomic_int failed;
} attn_job;

static void attn_task(void *ctx, int64_t t, int seat) {
    attn_job *j = ctx;
    const nn_attention_params *p = j->p;
    int r = p->rank;
    int64_t rb = j->rb;
    float *scores = j->ws + j->per * (size_t)seat;
    float *scratch = scores + nn_round_up(rb * p->n, 16);
    size_t scratch_bytes = (j->per - (size_t)nn_round_up(rb * p->n, 16)) * sizeof(float);
    int64_t b = t / j->blocks, i0 = t % j->blocks * rb, rows = p->m - i0 < rb ? p->m - i0 : rb;
    nn_gemm s, o;
    make_gemms(p, rows, &s, &o);
    s.a = j->q + batch_offset(p, &p->q, b) + i0 * p->q.stride[r - 2];
    s.b = j->k + batch_offset(p, &p->k, b);
    s.c = scores;
    bool ok = nn_gemm_run(&s, scratch, scratch_bytes, 1);
    j->score_rows(scores, rows, p->n, j->masks, p->n_masks, b * p->m + i0);
    o.a = scores;
    o.b = j->v + batch_offset(p, &p->v, b);
    o.c = j->out + batch_offset(p, &p->o, b) + i0 * p->o.stride[r - 2];
    ok &= nn_gemm_run(&o, scratch, scratch_bytes, 1);
    if (!ok) atomic_store_explicit(&j->failed, 1, memory_order_relaxed);
}

static nn_status run_FusedAttention(nn_call *c) {
    const nn_attention_params *p = c->params;
    int64_t batches = 1;
    for (int i = 0; i < p->rank - 2; i++)
        batches *= p->batch[i];
    int64_t rb = block_rows(p), blocks = (p->m + rb - 1) / rb, tasks = batches * blocks;
    mask_ref masks[NN_ATTN_MAX_MASKS];
    for (int i = 0; i < p->n_masks; i++) {
        masks[i] = (mask_ref){.data = c->in[3 + i].data, .rank = p->mask[i].rank, .dims = p->mask[i].dims};
        nn_broadcast_strides(&c->in[3 + i], p->mask[i].rank, p->mask[i].dims, masks[i].stride);
    }
    size_t per = thread_floats(p);
    int threads = c->threads > 0 ? c->threads : 1;
    if (c->workspace_size < per * sizeof(float) * (size_t)threads)
        return nn_call_error(c, NN_ERR_INTERNAL, "workspace too small");
    attn_job job = {.p = p, .masks = masks, .ws = (float *)(((uintptr_t)c->workspace + 63) & ~(uintptr_t)63),
                    .per = per, .rb = rb, .blocks = blocks, .q = c->in[0].data, .k = c->in[1].data,
                    .v = c->in[2].data, .out = c->out[0].data, .score_rows = NN_ISA_PICK(score_rows)};
    double work = (double)tasks * (double)rb * (double)p->n * (double)(p->d + p->dv);
    nn_par_for(work > NN_PAR_MIN ? threads : 1, tasks, attn_task, &job);
    int failed = atomic_load_explicit(&job.failed, memory_order_relaxed);
    if (failed) return nn_call_error(c, NN_ERR_INTERNAL, "attention GEMM workspace too small");
    return NN_OK;
}

static void describe_FusedAttention(const nn_call *c, char *buf, size_t size) {
    const nn_attention_params *p = c->params;
    snprintf(buf, size, "m %lld n %lld d %lld, scale %g, %d mask%s, %lld-row blocks", (long long)p->m, (long long)p->n,
             (long long)p->d, (double)p->scale, p->n_masks, p->n_masks == 1 ? "" : "s", (long long)block_rows(p));
}

const nn_op_desc nn_op_FusedAttention = {.name = "FusedAttention",
                                         .flags = NN_OPF_INTERNAL,
                                         .min_inputs = 3,
                                         .max_inputs = 3 + NN_ATTN_MAX_MASKS,
                                         .min_outputs = 1,
                                         .max_outputs = 1,
                                         .parse = parse_FusedAttention,
                                         .check = check_FusedAttention,
                                         .infer = infer_FusedAttention,
                                         .workspace = workspace_FusedAttention,
                                         .run = run_FusedAttention,
                                         .describe = describe_FusedAttention};
