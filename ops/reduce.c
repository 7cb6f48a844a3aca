/* Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp
 * and ArgMax/ArgMin.
 *
 * Every Reduce* op shares one kernel body, specialized by a reduction kind
 * (init, accumulate, merge, finalize) and a dtype.  The input is first
 * simplified: size-1 dims are dropped and neighbouring dims that are both
 * reduced or both kept are merged, so that e.g. ReduceMean over H,W of an
 * NCHW tensor becomes "N*C rows of H*W contiguous values". */
#include <math.h>
#include <string.h>

#include "geom.h"
#include "op.h"
#include "par.h"

typedef enum reduce_kind {
    R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L2, R_L1, R_SUM_SQUARE, R_LOG_SUM,
    R_LOG_SUM_EXP, /* a max pass into the output first; the sum pass shifts by it (see run_reduce) */
    R_KIND_COUNT
} reduce_kind;

typedef struct reduce_params {
    reduce_kind kind;
    int64_t keepdims;
    int64_t noop_with_empty_axes;
    int n_axes; /* -1: no axes attribute (they may come as input 1) */
    int64_t axes[NN_MAX_DIMS];
} reduce_params;

static nn_status parse_reduce(nn_parse_ctx *ctx, reduce_kind kind) {
    reduce_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    p->kind = kind;
    ctx->params = p;
    nn_status st = nn_attr_int(ctx, "keepdims", 1, &p->keepdims);
    if (st == NN_OK) st = nn_attr_int(ctx, "noop_with_empty_axes", 0, &p->noop_with_empty_axes);
    if (st == NN_OK) st = nn_attr_ints(ctx, "axes", p->axes, NN_MAX_DIMS, &p->n_axes);
    return st;
}

/* `kind` is the op's own: each Reduce op's check passes the kind its parse sets. */
static nn_status reduce_check(const void *params, reduce_kind kind, char *err, size_t err_size) {
    const reduce_params *p = params;
    if (p->kind != kind) return nn_check_error(err, err_size, "reduction kind %d is not this op's", (int)p->kind);
    if ((p->keepdims != 0 && p->keepdims != 1) || (p->noop_with_empty_axes != 0 && p->noop_with_empty_axes != 1))
        return nn_check_error(err, err_size, "keepdims (%lld) and noop_with_empty_axes (%lld) must be 0 or 1",
                              (long long)p->keepdims, (long long)p->noop_with_empty_axes);
    if (!nn_check_count(p->n_axes, NN_MAX_DIMS))
        return nn_check_error(err, err_size, "axes has %d values (at most %d)", p->n_axes, NN_MAX_DIMS);
    for (int k = 0; k < p->n_axes; k++)
        if (!nn_check_axis(p->axes[k]))
            return nn_check_error(err, err_size, "axes[%d] = %lld is out of range", k, (long long)p->axes[k]);
    return NN_OK;
}

/* Marks the reduced dims of input 0.  Axes come from the attribute (before
 * opset 13 for ReduceSum, 18 for the others) or from input 1; none at all
 * means every dim, or none when noop_with_empty_axes is set. */
static nn_status reduce_mask(nn_call *c, bool reduced[NN_MAX_DIMS], bool *noop) {
    const reduce_params *p = c->params;
    int rank = c->in[0].ndim;
    int64_t axes[NN_MAX_DIMS];
    int n = p->n_axes > 0 ? p->n_axes : 0;
    memcpy(axes, p->axes, sizeof(int64_t) * (size_t)n);
    if (p->n_axes < 0 && nn_present(c, 1)) {
        const nn_tensor *t = &c->in[1];
        if (t->dtype != NN_DTYPE_INT64 && t->dtype != NN_DTYPE_INT32)
            return nn_call_error(c, NN_ERR_INVALID, "axes input must be INT64, got %s",
                                 nn_dtype_name(t->dtype));
        if (t->ndim > 1) return nn_call_error(c, NN_ERR_INVALID, "axes input must be 1-D, got rank %d", t->ndim);
        int64_t cnt = nn_shape_elements(t->dims, t->ndim);
        if (cnt > rank)
            return nn_call_error(c, NN_ERR_INVALID, "%lld axes for an input of rank %d", (long long)cnt, rank);
        if (cnt > 0 && !t->data) return NN_DYNAMIC;
        n = (int)cnt;
        for (int i = 0; i < n; i++) axes[i] = nn_tensor_get_int(t, i);
    }
    *noop = n == 0 && p->noop_with_empty_axes;
    for (int d = 0; d < rank; d++) reduced[d] = n == 0 && !*noop;
    for (int i = 0; i < n; i++) {
        int64_t a;
        if (!nn_axis_normalize(axes[i], rank, &a))
            return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)axes[i],
                                 rank);
        if (reduced[a]) return nn_call_error(c, NN_ERR_INVALID, "axis %lld given twice", (long long)axes[i]);
        reduced[a] = true;
    }
    return NN_OK;
}

nn_status nn_reduce_mask(nn_call *c, bool reduced[NN_MAX_DIMS], bool *noop) { return reduce_mask(c, reduced, noop); }

static bool reduce_dtype_ok(nn_dtype t) {
    return t == NN_DTYPE_FLOAT || t == NN_DTYPE_DOUBLE || t == NN_DTYPE_INT32 || t == NN_DTYPE_INT64;
}

/* The logarithmic kinds would truncate every exp/log to an integer
 * accumulator, so they take floats only. */
static bool reduce_kind_float_only(reduce_kind k) { return k == R_LOG_SUM || k == R_LOG_SUM_EXP; }

static nn_status infer_reduce(nn_call *c) {
    const reduce_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    if (!reduce_dtype_ok(x->dtype))
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported (FLOAT, DOUBLE, INT32, INT64)",
                             nn_dtype_name(x->dtype));
    if (reduce_kind_float_only(p->kind) && x->dtype != NN_DTYPE_FLOAT && x->dtype != NN_DTYPE_DOUBLE)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported (FLOAT, DOUBLE)", nn_dtype_name(x->dtype));
    bool reduced[NN_MAX_DIMS], noop;
    nn_status st = reduce_mask(c, reduced, &noop);
    if (st != NN_OK) return st;
    int64_t dims[NN_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (!reduced[d]) dims[nd++] = x->dims[d];
        else if (p->keepdims) dims[nd++] = 1;
    }
    nn_tensor_set_shape(&c->out[0], x->dtype, nd, dims);
    return NN_OK;
}

/* The simplified iteration space.  Output element (o, j) with o < outer,
 * j < vec reads, for every reduced position r (r_size odometer), the `run`
 * contiguous values at base(o) + roff(r) + j.  Either vec or run is 1: the
 * innermost merged dim is either kept (vectorize across outputs) or reduced
 * (a contiguous run per output). */
typedef struct reduce_plan {
    int nk, nr;
    int64_t k_size[NN_MAX_DIMS], k_stride[NN_MAX_DIMS];
    int64_t r_size[NN_MAX_DIMS], r_stride[NN_MAX_DIMS];
    int64_t outer, vec, run, r_total, count;
} reduce_plan;

static void reduce_plan_make(const nn_tensor *x, const bool reduced[NN_MAX_DIMS], reduce_plan *p) {
    int64_t size[NN_MAX_DIMS], stride[NN_MAX_DIMS], s = 1;
    bool red[NN_MAX_DIMS];
    int ng = 0;
    /* walk from the innermost dim so each group's stride is its last dim's */
    for (int d = x->ndim - 1; d >= 0; d--) {
        int64_t n = x->dims[d];
        if (n != 1) {
            if (ng > 0 && red[ng - 1] == reduced[d]) {
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
    /* groups are innermost-first here */
    p->vec = p->run = 1;
    int first = 0;
    if (ng > 0) {
        if (red[0]) p->run = size[0];
        else p->vec = size[0];
        first = 1;
    }
    p->nk = p->nr = 0;
    p->outer = 1;
    p->r_total = 1;
    for (int g = ng - 1; g >= first; g--) {
        if (red[g]) {
            p->r_size[p->nr] = size[g];
            p->r_stride[p->nr++] = stride[g];
            p->r_total *= size[g];
        } else {
            p->k_size[p->nk] = size[g];
            p->k_stride[p->nk++] = stride[g];
            p->outer *= size[g];
        }
    }
    p->count = p->r_total * p->run;
}

/* Outputs computed together in the vec case: one stack row of accumulators. */
#define REDUCE_CHUNK 256
/* Independent partial results over a contiguous run, so the loop vectorizes
 * without reassociating float math. */
#define REDUCE_LANES 8

/* The reduction kinds.  `K` is a compile-time constant at every use, so
 * each expands to a single expression after constant folding. */
#define R_ADDITIVE(K) ((K) == R_SUM || (K) == R_MEAN || (K) == R_LOG_SUM || (K) == R_LOG_SUM_EXP)
#define R_ACCUM(K, a, x)                                                                            \
    (R_ADDITIVE(K)                   ? (a) + (x)                                                    \
     : (K) == R_L2 || (K) == R_SUM_SQUARE ? (a) + (x) * (x)                                         \
     : (K) == R_L1                   ? (a) + ((x) < 0 ? -(x) : (x))                                 \
     : (K) == R_PROD               ? (a) * (x)                                                      \
     : (K) == R_MAX                ? (((x) > (a) || isnan((double)(x))) ? (x) : (a))                \
                                   : (((x) < (a) || isnan((double)(x))) ? (x) : (a)))
/* combining two partial accumulators (differs from R_ACCUM for the norms) */
#define R_MERGE(K, a, b) ((K) == R_L2 || (K) == R_L1 || (K) == R_SUM_SQUARE ? (a) + (b) : R_ACCUM(K, a, b))
/* an element as the accumulator sees it; s is the output's shift (LogSumExp only) */
#define R_LOAD(K, ACC, x, s) ((K) == R_LOG_SUM_EXP ? (ACC)exp((double)(x) - (double)(s)) : (ACC)(x))
#define R_INIT(K, lo, hi) ((K) == R_PROD ? 1 : (K) == R_MAX ? (lo) : (K) == R_MIN ? (hi) : 0)
#define R_FINAL(K, T, a, n, s)                                                                      \
    ((K) == R_MEAN              ? (T)((a) / (n))                                                    \
     : (K) == R_L2              ? (T)sqrt((double)(a))                                              \
     : (K) == R_LOG_SUM         ? (T)log((double)(a))                                               \
     : (K) == R_LOG_SUM_EXP     ? (T)(log((double)(a)) + (double)(s))                               \
                                : (T)(a))

typedef void (*reduce_item_fn)(const reduce_plan *p, const void *src, void *dst, int64_t item);

/* One work item: output row o, columns [j0, j0 + w).  Generated per dtype
 * (T, accumulator ACC and its extreme values); kind-specialized wrappers
 * call it with a constant K. */
#define DEFINE_REDUCE_BODY(sfx, T, ACC, LO, HI)                                                     \
    static inline __attribute__((always_inline)) void reduce_body_##sfx(                            \
        const reduce_plan *p, const T *x, T *y, int64_t item, reduce_kind K) {                      \
        int64_t chunks = (p->vec + REDUCE_CHUNK - 1) / REDUCE_CHUNK;                                \
        int64_t o = item / chunks, j0 = (item % chunks) * REDUCE_CHUNK;                             \
        int w = (int)(p->vec - j0 < REDUCE_CHUNK ? p->vec - j0 : REDUCE_CHUNK);                     \
        int64_t base = j0, rem = o;                                                                 \
        for (int i = p->nk - 1; i >= 0; i--) {                                                      \
            base += (rem % p->k_size[i]) * p->k_stride[i];                                          \
            rem /= p->k_size[i];                                                                    \
        }                                                                                           \
        ACC acc[REDUCE_CHUNK > REDUCE_LANES ? REDUCE_CHUNK : REDUCE_LANES];                         \
        /* LogSumExp: y holds each output's max; a non-finite one shifts by 0 */                   \
        ACC shift[REDUCE_CHUNK];                                                                    \
        if (K == R_LOG_SUM_EXP)                                                                     \
            for (int j = 0; j < w; j++) {                                                           \
                ACC m = (ACC)y[o * p->vec + j0 + j];                                                \
                shift[j] = isfinite((double)m) ? m : 0;                                             \
            }                                                                                       \
        int na = p->vec > 1 ? w : REDUCE_LANES;                                                     \
        for (int j = 0; j < na; j++) acc[j] = R_INIT(K, LO, HI);                                    \
        int64_t idx[NN_MAX_DIMS] = {0}, roff = 0;                                                   \
        for (int64_t r = 0; r < p->r_total; r++) {                                                  \
            const T *xr = x + base + roff;                                                          \
            if (p->vec > 1) {                                                                       \
                for (int j = 0; j < w; j++) acc[j] = R_ACCUM(K, acc[j], R_LOAD(K, ACC, xr[j], shift[j])); \
            } else {                                                                                \
                int64_t t = 0;                                                                      \
                for (; t + REDUCE_LANES <= p->run; t += REDUCE_LANES)                               \
                    for (int l = 0; l < REDUCE_LANES; l++)                                          \
                        acc[l] = R_ACCUM(K, acc[l], R_LOAD(K, ACC, xr[t + l], shift[0]));           \
                for (; t < p->run; t++) acc[0] = R_ACCUM(K, acc[0], R_LOAD(K, ACC, xr[t], shift[0])); \
            }                                                                                       \
            for (int i = p->nr - 1; i >= 0; i--) { /* odometer over the reduced groups */           \
                roff += p->r_stride[i];                                                             \
                if (++idx[i] < p->r_size[i]) break;                                                 \
                roff -= idx[i] * p->r_stride[i];                                                    \
                idx[i] = 0;                                                                         \
            }                                                                                       \
        }                                                                                           \
        if (p->vec == 1) {                                                                          \
            for (int l = 1; l < REDUCE_LANES; l++) acc[0] = R_MERGE(K, acc[0], acc[l]);             \
            w = 1;                                                                                  \
        }                                                                                           \
        /* an empty mean gives 0 rather than dividing integers by zero */                         \
        ACC n = (ACC)(p->count > 0 ? p->count : 1);                                                 \
        for (int j = 0; j < w; j++) y[o * p->vec + j0 + j] = R_FINAL(K, T, acc[j], n, shift[j]);    \
    }

#define DEFINE_REDUCE_ITEM(sfx, T, kind, K)                                                         \
    static void reduce_##kind##_##sfx(const reduce_plan *p, const void *src, void *dst, int64_t it) { \
        reduce_body_##sfx(p, src, dst, it, K);                                                      \
    }

#define REDUCE_KINDS(X, sfx, T) \
    X(sfx, T, sum, R_SUM) X(sfx, T, mean, R_MEAN) X(sfx, T, max, R_MAX) \
    X(sfx, T, min, R_MIN) X(sfx, T, prod, R_PROD) X(sfx, T, l2, R_L2) X(sfx, T, l1, R_L1) \
    X(sfx, T, sum_square, R_SUM_SQUARE) X(sfx, T, log_sum, R_LOG_SUM) X(sfx, T, log_sum_exp, R_LOG_SUM_EXP)

/* float accumulates in double: sums over whole feature maps stay accurate.
 * Rows in dtype_row's order. */
#define REDUCE_DTYPES(X)                                                         \
    X(f32, float, double, -INFINITY, INFINITY)                                   \
    X(i32, int32_t, int64_t, INT64_MIN, INT64_MAX)                               \
    X(i64, int64_t, int64_t, INT64_MIN, INT64_MAX)                               \
    X(f64, double, double, -INFINITY, INFINITY)

#define DEFINE_REDUCE_DTYPE(sfx, T, ACC, LO, HI) \
    DEFINE_REDUCE_BODY(sfx, T, ACC, LO, HI)      \
    REDUCE_KINDS(DEFINE_REDUCE_ITEM, sfx, T)
REDUCE_DTYPES(DEFINE_REDUCE_DTYPE)

#define REDUCE_FN_ENTRY(sfx, T, kind, K) [K] = reduce_##kind##_##sfx,
#define REDUCE_FN_ROW(sfx, T, ACC, LO, HI) {REDUCE_KINDS(REDUCE_FN_ENTRY, sfx, T)},
static const reduce_item_fn reduce_fns[][R_KIND_COUNT] = {REDUCE_DTYPES(REDUCE_FN_ROW)};

static int dtype_row(nn_dtype t) {
    return t == NN_DTYPE_FLOAT ? 0 : t == NN_DTYPE_INT32 ? 1 : t == NN_DTYPE_INT64 ? 2 : 3;
}

typedef struct reduce_job {
    const reduce_plan *plan;
    const void *x;
    void *y;
    reduce_item_fn fn;
} reduce_job;

static void reduce_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const reduce_job *j = ctx;
    for (int64_t it = lo; it < hi; it++) j->fn(j->plan, j->x, j->y, it);
}

static nn_status run_reduce(nn_call *c) {
    const reduce_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    bool reduced[NN_MAX_DIMS], noop;
    nn_status st = reduce_mask(c, reduced, &noop);
    if (st != NN_OK) return st;
    if (noop) {
        memcpy(c->out[0].data, x->data, (size_t)nn_tensor_elements(x) * nn_dtype_size(x->dtype));
        return NN_OK;
    }
    reduce_plan plan;
    reduce_plan_make(x, reduced, &plan);
    reduce_item_fn fn = reduce_fns[dtype_row(x->dtype)][p->kind];
    int64_t items = plan.outer * ((plan.vec + REDUCE_CHUNK - 1) / REDUCE_CHUNK);
    int64_t total = nn_tensor_elements(x);
    int par = items > 1 && total > NN_PAR_MIN ? c->threads : 1;
    reduce_job j = {.plan = &plan, .x = x->data, .y = c->out[0].data};
    if (p->kind == R_LOG_SUM_EXP) { /* each output's max first: the sum pass reads it back as its shift */
        j.fn = reduce_fns[dtype_row(x->dtype)][R_MAX];
        nn_par_for_range(par, items, 1, reduce_range, &j);
    }
    j.fn = fn;
    nn_par_for_range(par, items, 1, reduce_range, &j);
    return NN_OK;
}

#define DEFINE_REDUCE_OP(Name, K)                                                                   \
    static nn_status parse_##Name(nn_parse_ctx *ctx) { return parse_reduce(ctx, K); }               \
    static nn_status Name##_check(const void *params, char *err, size_t err_size) {                 \
        return reduce_check(params, K, err, err_size);                                              \
    }                                                                                               \
    const nn_op_desc nn_op_##Name = {.name = #Name, .min_inputs = 1, .max_inputs = 2, .min_outputs = 1,     \
                                     .max_outputs = 1, .flags = NN_OPF_ANY_DTYPE, .parse = parse_##Name,   \
                                     .check = Name##_check, .infer = infer_reduce, .run = run_reduce};

DEFINE_REDUCE_OP(ReduceSum, R_SUM)
DEFINE_REDUCE_OP(ReduceMean, R_MEAN)
DEFINE_REDUCE_OP(ReduceMax, R_MAX)
DEFINE_REDUCE_OP(ReduceMin, R_MIN)
DEFINE_REDUCE_OP(ReduceProd, R_PROD)
DEFINE_REDUCE_OP(ReduceL2, R_L2)
DEFINE_REDUCE_OP(ReduceL1, R_L1)
DEFINE_REDUCE_OP(ReduceSumSquare, R_SUM_SQUARE)
DEFINE_REDUCE_OP(ReduceLogSum, R_LOG_SUM)
DEFINE_REDUCE_OP(ReduceLogSumExp, R_LOG_SUM_EXP)

/* ---- ArgMax / ArgMin (DOUBLE included: infer_arg checks the dtype) */

typedef struct arg_params {
    int64_t axis, keepdims, select_last_index;
    bool is_max;
} arg_params;

static nn_status parse_arg(nn_parse_ctx *ctx, bool is_max) {
    arg_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    p->is_max = is_max;
    ctx->params = p;
    nn_status st = nn_attr_int(ctx, "axis", 0, &p->axis);
    if (st == NN_OK) st = nn_attr_int(ctx, "keepdims", 1, &p->keepdims);
    if (st == NN_OK) st = nn_attr_int(ctx, "select_last_index", 0, &p->select_last_index);
    return st;
}
static nn_status parse_ArgMax(nn_parse_ctx *ctx) { return parse_arg(ctx, true); }
static nn_status parse_ArgMin(nn_parse_ctx *ctx) { return parse_arg(ctx, false); }

static nn_status arg_check(const void *params, bool is_max, char *err, size_t err_size) {
    const arg_params *p = params;
    if (!nn_check_bool(&p->is_max) || p->is_max != is_max)
        return nn_check_error(err, err_size, "the params are another arg op's");
    if (!nn_check_axis(p->axis)) return nn_check_error(err, err_size, "axis %lld is out of range", (long long)p->axis);
    if ((p->keepdims != 0 && p->keepdims != 1) || (p->select_last_index != 0 && p->select_last_index != 1))
        return nn_check_error(err, err_size, "keepdims (%lld) and select_last_index (%lld) must be 0 or 1",
                              (long long)p->keepdims, (long long)p->select_last_index);
    return NN_OK;
}
static nn_status ArgMax_check(const void *params, char *err, size_t err_size) {
    return arg_check(params, true, err, err_size);
}
static nn_status ArgMin_check(const void *params, char *err, size_t err_size) {
    return arg_check(params, false, err, err_size);
}

static nn_status infer_arg(nn_call *c) {
    const arg_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    if (!reduce_dtype_ok(x->dtype))
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported (FLOAT, INT32, INT64)",
                             nn_dtype_name(x->dtype));
    int64_t axis;
    if (!nn_axis_normalize(p->axis, x->ndim, &axis))
        return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)p->axis, x->ndim);
    if (x->dims[axis] == 0)
        return nn_call_error(c, NN_ERR_SHAPE, "cannot take the arg of an empty axis %lld", (long long)axis);
    int64_t dims[NN_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (d != axis) dims[nd++] = x->dims[d];
        else if (p->keepdims) dims[nd++] = 1;
    }
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_INT64, nd, dims);
    return NN_OK;
}

typedef void (*arg_item_fn)(const void *src, int64_t *y, int64_t n, int64_t inner, int64_t o, int64_t j0,
                            int w, bool last);

/* Columns [j0, j0 + w) of block o in the [outer, n, inner] view.  Ties keep
 * the first index met, so select_last_index only walks the axis backwards. */
#define DEFINE_ARG_ITEM(name, T, BETTER)                                                            \
    static void name(const void *src, int64_t *y, int64_t n, int64_t inner, int64_t o, int64_t j0,  \
                     int w, bool last) {                                                            \
        T best[REDUCE_CHUNK];                                                                       \
        int64_t arg[REDUCE_CHUNK];                                                                  \
        int64_t k = last ? n - 1 : 0, step = last ? -1 : 1;                                         \
        const T *xb = (const T *)src + o * n * inner + j0;                                          \
        for (int j = 0; j < w; j++) {                                                               \
            best[j] = xb[k * inner + j];                                                            \
            arg[j] = k;                                                                             \
        }                                                                                           \
        for (int64_t i = 1; i < n; i++) {                                                           \
            k += step;                                                                              \
            const T *xr = xb + k * inner;                                                           \
            for (int j = 0; j < w; j++) {                                                           \
                if (xr[j] BETTER best[j]) {                                                         \
                    best[j] = xr[j];                                                                \
                    arg[j] = k;                                                                     \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
        memcpy(y + o * inner + j0, arg, sizeof(int64_t) * (size_t)w);                               \
    }

/* same row order as REDUCE_DTYPES (see dtype_row) */
#define ARG_DTYPES(X) X(f32, float) X(i32, int32_t) X(i64, int64_t) X(f64, double)
#define DEFINE_ARG_DTYPE(sfx, T) DEFINE_ARG_ITEM(argmax_##sfx, T, >) DEFINE_ARG_ITEM(argmin_##sfx, T, <)
ARG_DTYPES(DEFINE_ARG_DTYPE)
#define ARG_FN_ROW(sfx, T) {argmin_##sfx, argmax_##sfx},
static const arg_item_fn arg_fns[][2] = {ARG_DTYPES(ARG_FN_ROW)};

typedef struct arg_job {
    const void *x;
    int64_t *y;
    arg_item_fn fn;
    int64_t n, inner, chunks;
    bool last;
} arg_job;

/* Items [lo, hi): item it is columns chunk it % chunks of block it / chunks. */
static void arg_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const arg_job *aj = ctx;
    int64_t inner = aj->inner, chunks = aj->chunks;
    for (int64_t it = lo; it < hi; it++) {
        int64_t o = it / chunks, j0 = (it % chunks) * REDUCE_CHUNK;
        int w = (int)(inner - j0 < REDUCE_CHUNK ? inner - j0 : REDUCE_CHUNK);
        aj->fn(aj->x, aj->y, aj->n, inner, o, j0, w, aj->last);
    }
}

static nn_status run_arg(nn_call *c) {
    const arg_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    int64_t axis;
    if (!nn_axis_normalize(p->axis, x->ndim, &axis))
        return nn_call_error(c, NN_ERR_INVALID, "axis %lld out of range for rank %d", (long long)p->axis, x->ndim);
    int64_t outer = nn_shape_elements(x->dims, (int)axis), n = x->dims[axis];
    int64_t inner = nn_shape_elements(x->dims + axis + 1, x->ndim - (int)axis - 1);
    int64_t chunks = (inner + REDUCE_CHUNK - 1) / REDUCE_CHUNK, items = outer * chunks;
    bool last = p->select_last_index != 0;
    arg_item_fn fn = arg_fns[dtype_row(x->dtype)][p->is_max];
    arg_job j = {.x = x->data, .y = c->out[0].data, .fn = fn, .n = n, .inner = inner, .chunks = chunks, .last = last};
    nn_par_for_range(items > 1 && outer * n * inner > NN_PAR_MIN ? c->threads : 1, items, 1, arg_range, &j);
    return NN_OK;
}

const nn_op_desc nn_op_ArgMax = {.name = "ArgMax", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
                                 .flags = NN_OPF_ANY_DTYPE, .parse = parse_ArgMax, .check = ArgMax_check,
                                 .infer = infer_arg, .run = run_arg};
const nn_op_desc nn_op_ArgMin = {.name = "ArgMin", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
                                 .flags = NN_OPF_ANY_DTYPE, .parse = parse_ArgMin, .check = ArgMin_check,
                                 .infer = infer_arg, .run = run_arg};
