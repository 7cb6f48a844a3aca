/* Elementwise operators over numpy-broadcast inputs: arithmetic, comparisons,
 * logic, the variadic Max/Min/Sum/Mean, Where and PRelu.
 *
 * Every op runs through one broadcast loop (ew_apply): the output's dims are
 * collapsed so that the innermost run is contiguous in the output and, in each
 * input, either contiguous or a single repeated element.  A row kernel then
 * handles that run with a plain vectorizable loop; the index arithmetic is paid
 * once per row, not per element. */
#include <math.h>
#include <string.h>

#include "epilogue.h"
#include "half.h"
#include "op.h"
#include "par.h"

#define TILE 8192     /* elements per parallel work item */
#define MAX_IN 3

/* out[0..n) = f(in[k][i * step[k]]), step[k] being 0 (repeated) or 1 */
typedef void (*row_fn)(void *out, const void *const *in, const int *step, int64_t n);

typedef struct ew_plan {
    int nin;
    int ndim; /* outer dims, the inner run excluded */
    int64_t dims[NN_MAX_DIMS];
    int64_t strides[MAX_IN][NN_MAX_DIMS];
    int64_t outer, inner;
    int step[MAX_IN];
    size_t esize[MAX_IN], osize;
} ew_plan;

static void plan_init(ew_plan *p, const nn_tensor *out, const nn_tensor *const *in, int nin) {
    int64_t st[MAX_IN][NN_MAX_DIMS];
    for (int k = 0; k < nin; k++) {
        nn_broadcast_strides(in[k], out->ndim, out->dims, st[k]);
        p->esize[k] = nn_dtype_size(in[k]->dtype);
    }
    p->nin = nin;
    p->osize = nn_dtype_size(out->dtype);

    /* Walk the dims from the innermost, dropping size-1 ones and merging a dim
     * into the group inside it when every input's strides stay linear. */
    int64_t gd[NN_MAX_DIMS], gs[MAX_IN][NN_MAX_DIMS];
    int ng = 0;
    for (int i = out->ndim - 1; i >= 0; i--) {
        int64_t d = out->dims[i];
        if (d == 1) continue;
        bool merge = ng > 0;
        for (int k = 0; k < nin && merge; k++) merge = st[k][i] == gs[k][ng - 1] * gd[ng - 1];
        if (merge) {
            gd[ng - 1] *= d;
            continue;
        }
        gd[ng] = d;
        for (int k = 0; k < nin; k++) gs[k][ng] = st[k][i];
        ng++;
    }
    /* Group 0 is the inner run.  Each input's stride there is 0 or 1: past the
     * innermost non-1 output dim every input dim is 1. */
    p->inner = ng > 0 ? gd[0] : 1;
    for (int k = 0; k < nin; k++) p->step[k] = ng > 0 && gs[k][0] != 0;
    p->ndim = ng > 0 ? ng - 1 : 0;
    p->outer = 1;
    for (int g = 1; g < ng; g++) {
        int d = ng - 1 - g; /* outermost first */
        p->dims[d] = gd[g];
        p->outer *= gd[g];
        for (int k = 0; k < nin; k++) p->strides[k][d] = gs[k][g];
    }
}

/* A fused epilogue and its residual (shaped like the output), or e NULL. */
typedef struct ew_epilogue {
    const nn_epilogue *e;
    const float *residual;
} ew_epilogue;

/* Rows [r0, r1), columns [j0, j1) of the collapsed output. */
static void plan_tile(const ew_plan *p, char *out, const void *const *in, row_fn row, const ew_epilogue *epi,
                      int64_t r0, int64_t r1, int64_t j0, int64_t j1) {
    int64_t idx[NN_MAX_DIMS], off[MAX_IN] = {0};
    int64_t r = r0;
    for (int d = p->ndim - 1; d >= 0; d--) {
        idx[d] = r % p->dims[d];
        r /= p->dims[d];
        for (int k = 0; k < p->nin; k++) off[k] += idx[d] * p->strides[k][d];
    }
    for (int64_t ri = r0; ri < r1; ri++) {
        const void *src[MAX_IN];
        for (int k = 0; k < p->nin; k++)
            src[k] = (const char *)in[k] + (size_t)(off[k] + j0 * p->step[k]) * p->esize[k];
        int64_t at = ri * p->inner + j0;
        row(out + (size_t)at * p->osize, src, p->step, j1 - j0);
        if (epi->e)
            nn_epilogue_apply(epi->e, (float *)out + at, epi->residual ? epi->residual + at : NULL, j1 - j0);
        for (int d = p->ndim - 1; d >= 0; d--) {
            for (int k = 0; k < p->nin; k++) off[k] += p->strides[k][d];
            if (++idx[d] < p->dims[d]) break;
            for (int k = 0; k < p->nin; k++) off[k] -= p->strides[k][d] * p->dims[d];
            idx[d] = 0;
        }
    }
}

typedef struct tile_job {
    const ew_plan *p;
    char *dst;
    const void *const *src;
    row_fn row;
    const ew_epilogue *epi;
    int64_t per_row, width, rows;
} tile_job;

static void tile_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const tile_job *j = ctx;
    const ew_plan *p = j->p;
    for (int64_t t = lo; t < hi; t++) {
        if (j->per_row > 1) {
            int64_t j0 = t % j->per_row * j->width, j1 = j0 + j->width < p->inner ? j0 + j->width : p->inner;
            plan_tile(p, j->dst, j->src, j->row, j->epi, t / j->per_row, t / j->per_row + 1, j0, j1);
        } else {
            int64_t r0 = t * j->rows, r1 = r0 + j->rows < p->outer ? r0 + j->rows : p->outer;
            plan_tile(p, j->dst, j->src, j->row, j->epi, r0, r1, 0, p->inner);
        }
    }
}

/* out = row(in...) broadcast over out's shape, then the call's epilogue when
 * `fused` (FLOAT outputs only).  Work is cut into tiles of about TILE
 * elements: pieces of one long row, or runs of short rows. */
static void ew_apply(const nn_call *c, nn_tensor *out, const nn_tensor *const *in, int nin, row_fn row, bool fused) {
    ew_epilogue epi = {fused ? c->epilogue : NULL, fused ? nn_epilogue_residual(c) : NULL};
    ew_plan p;
    plan_init(&p, out, in, nin);
    int64_t total = p.outer * p.inner;
    if (total == 0) return;
    int64_t per_row = (p.inner + TILE - 1) / TILE;
    int64_t width = (p.inner + per_row - 1) / per_row;
    int64_t rows = per_row > 1 ? 1 : (TILE / p.inner > 1 ? TILE / p.inner : 1);
    int64_t ntiles = per_row > 1 ? p.outer * per_row : (p.outer + rows - 1) / rows;
    const void *src[MAX_IN];
    for (int k = 0; k < nin; k++) src[k] = in[k]->data;
    tile_job j = {.p = &p, .dst = out->data, .src = src, .row = row, .epi = &epi, .per_row = per_row, .width = width,
                  .rows = rows};
    nn_par_for_range(total > NN_PAR_MIN && ntiles > 1 ? c->threads : 1, ntiles, 1, tile_range, &j);
}

/* ---- row kernels */

/* One body per (op, types): the three stride cases get their own loop so the
 * compiler vectorizes each. */
#define BIN_ROW(name, TA, TB, TO, expr)                                                        \
    static void name(void *po, const void *const *pi, const int *step, int64_t n) {            \
        TO *o = po;                                                                            \
        const TA *a = pi[0];                                                                   \
        const TB *b = pi[1];                                                                   \
        if (step[0] && step[1]) {                                                              \
            for (int64_t i = 0; i < n; i++) {                                                  \
                TA x = a[i];                                                                   \
                TB y = b[i];                                                                   \
                o[i] = (TO)(expr);                                                             \
            }                                                                                  \
        } else if (step[0]) {                                                                  \
            TB y = b[0];                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                  \
                TA x = a[i];                                                                   \
                o[i] = (TO)(expr);                                                             \
            }                                                                                  \
        } else {                                                                               \
            TA x = a[0];                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                  \
                TB y = b[i];                                                         \
                o[i] = (TO)(expr);                                                             \
            }                                                                                  \
        }                                                                                      \
    }

/* Integer arithmetic wraps (through uint64) instead of overflowing; integer
 * division truncates like C, and gives 0 for a zero divisor rather than trapping. */
static inline int64_t idiv(int64_t x, int64_t y) {
    if (y == 0) return 0;
    if (y == -1) return (int64_t)(0 - (uint64_t)x);
    return x / y;
}

/* x^y for integers; a negative exponent leaves only |x| == 1 nonzero */
static inline int64_t ipow(int64_t x, int64_t y) {
    if (y < 0) return x == 1 ? 1 : x == -1 ? (y % 2 ? -1 : 1) : 0;
    uint64_t r = 1, b = (uint64_t)x;
    for (; y; y >>= 1, b *= b)
        if (y & 1) r *= b;
    return (int64_t)r;
}

static inline uint64_t udiv(uint64_t x, uint64_t y) { return y ? x / y : 0; }

static inline float maxf(float x, float y) { return x > y || x != x ? x : y; }
static inline float minf(float x, float y) { return x < y || x != x ? x : y; }
static inline double maxd(double x, double y) { return x > y || x != x ? x : y; }
static inline double mind(double x, double y) { return x < y || x != x ? x : y; }
/* FLOAT16 Max/Min compare the values in fp32 (exactly) and keep the winner's bits */
static inline uint16_t maxh(uint16_t x, uint16_t y) {
    float a = nn_half_to_float(x), b = nn_half_to_float(y);
    return a > b || a != a ? x : y;
}
static inline uint16_t minh(uint16_t x, uint16_t y) {
    float a = nn_half_to_float(x), b = nn_half_to_float(y);
    return a < b || a != a ? x : y;
}

#define ADDV(x, y) _Generic((x), float: (x) + (y), double: (x) + (y), default: (uint64_t)(x) + (uint64_t)(y))
#define SUBV(x, y) _Generic((x), float: (x) - (y), double: (x) - (y), default: (uint64_t)(x) - (uint64_t)(y))
#define MULV(x, y) _Generic((x), float: (x) * (y), double: (x) * (y), default: (uint64_t)(x) * (uint64_t)(y))
#define DIVV(x, y) _Generic((x), float: (x) / (y), double: (x) / (y), uint64_t: udiv((x), (y)), default: idiv((x), (y)))
#define MAXV(x, y)                                                                             \
    _Generic((x), float: maxf((float)(x), (float)(y)), double: maxd((double)(x), (double)(y)), \
             default: ((x) > (y) ? (x) : (y)))
#define MINV(x, y)                                                                             \
    _Generic((x), float: minf((float)(x), (float)(y)), double: mind((double)(x), (double)(y)), \
             default: ((x) < (y) ? (x) : (y)))

/* Dtype lists: X(code, C type, ...) */
#define NUMERIC(X, ...)                                                                        \
    X(FLOAT, float, __VA_ARGS__)                                                               \
    X(INT32, int32_t, __VA_ARGS__)                                                             \
    X(INT64, int64_t, __VA_ARGS__)                                                             \
    X(UINT8, uint8_t, __VA_ARGS__)                                                             \
    X(INT8, int8_t, __VA_ARGS__)
#define SIGNED_WIDE(X, ...)                                                                    \
    X(FLOAT, float, __VA_ARGS__)                                                               \
    X(INT32, int32_t, __VA_ARGS__)                                                             \
    X(INT64, int64_t, __VA_ARGS__)
/* arithmetic and Max/Min also take the wider dtypes */
#define ARITH(X, ...)                                                                          \
    NUMERIC(X, __VA_ARGS__)                                                                    \
    X(DOUBLE, double, __VA_ARGS__)                                                             \
    X(INT16, int16_t, __VA_ARGS__)                                                             \
    X(UINT16, uint16_t, __VA_ARGS__)                                                           \
    X(UINT32, uint32_t, __VA_ARGS__)                                                           \
    X(UINT64, uint64_t, __VA_ARGS__)
#define BOOLEAN(X, ...) X(BOOL, uint8_t, __VA_ARGS__)

/* kernels keyed by the inputs' dtype */
#define MAX_DTYPE NN_DTYPE_UINT64
typedef row_fn row_table[MAX_DTYPE + 1];

#define SAME_ROW(code, T, op, expr) BIN_ROW(op##_##code, T, T, T, expr)
#define BOOL_ROW(code, T, op, expr) BIN_ROW(op##_##code, T, T, uint8_t, expr)
#define ROW_ENTRY(code, T, op) [NN_DTYPE_##code] = op##_##code,

/* ROWS(op, dtype list, kernel kind, expr): the kernels and their table op_rows */
#define ROWS(op, TYPES, KIND, expr)                                                            \
    TYPES(KIND, op, expr)                                                                      \
    static const row_table op##_rows = {TYPES(ROW_ENTRY, op)};

ROWS(add, ARITH, SAME_ROW, ADDV(x, y))
ROWS(sub, ARITH, SAME_ROW, SUBV(x, y))
ROWS(mul, ARITH, SAME_ROW, MULV(x, y))
ROWS(div, ARITH, SAME_ROW, DIVV(x, y))
ARITH(SAME_ROW, max, MAXV(x, y))
BIN_ROW(max_FLOAT16, uint16_t, uint16_t, uint16_t, maxh(x, y))
static const row_table max_rows = {ARITH(ROW_ENTRY, max)[NN_DTYPE_FLOAT16] = max_FLOAT16};
ARITH(SAME_ROW, min, MINV(x, y))
BIN_ROW(min_FLOAT16, uint16_t, uint16_t, uint16_t, minh(x, y))
static const row_table min_rows = {ARITH(ROW_ENTRY, min)[NN_DTYPE_FLOAT16] = min_FLOAT16};
ROWS(prelu, SIGNED_WIDE, SAME_ROW, x < 0 ? MULV(x, y) : MULV(x, 1))
ROWS(and, BOOLEAN, SAME_ROW, x && y)
ROWS(or, BOOLEAN, SAME_ROW, x || y)
ROWS(less, NUMERIC, BOOL_ROW, x < y)
ROWS(greater, NUMERIC, BOOL_ROW, x > y)
ROWS(less_eq, NUMERIC, BOOL_ROW, x <= y)
ROWS(greater_eq, NUMERIC, BOOL_ROW, x >= y)
NUMERIC(BOOL_ROW, equal, x == y)
BOOL_ROW(BOOL, uint8_t, equal, x == y)
static const row_table equal_rows = {NUMERIC(ROW_ENTRY, equal) ROW_ENTRY(BOOL, uint8_t, equal)};

/* ---- two-input ops, with the legacy (opset < 7) broadcast attributes */

typedef struct bin_params {
    bool legacy_axis;  /* B is laid against A from `axis`, not from the end */
    bool channel_slope; /* PRelu < 7: a 1-D slope runs along dim 1 */
    int64_t axis;
} bin_params;

static const bin_params numpy_bcast; /* for nodes built without parse */

static nn_status parse_binary(nn_parse_ctx *ctx) {
    bin_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    if (ctx->opset >= 7) return NN_OK;
    int64_t broadcast;
    nn_status st = nn_attr_int(ctx, "broadcast", 0, &broadcast);
    if (st == NN_OK) st = nn_attr_int(ctx, "axis", 0, &p->axis);
    p->legacy_axis = broadcast && nn_attr_find(ctx, "axis");
    return st;
}

static nn_status parse_PRelu(nn_parse_ctx *ctx) {
    nn_status st = parse_binary(ctx);
    if (st == NN_OK) ((bin_params *)ctx->params)->channel_slope = ctx->opset < 7;
    return st;
}

static nn_status binary_check(const void *params, char *err, size_t err_size) {
    const bin_params *p = params;
    if (!nn_check_bool(&p->legacy_axis) || !nn_check_bool(&p->channel_slope))
        return nn_check_error(err, err_size, "broadcast flags are not booleans");
    if (!nn_check_axis(p->axis)) return nn_check_error(err, err_size, "axis %lld is out of range", (long long)p->axis);
    return NN_OK;
}

/* B's shape as numpy broadcasting should see it: legacy placements pad B with
 * trailing 1s so its dims line up with A's from the given axis. */
static nn_status view_b(nn_call *c, nn_tensor *b) {
    const bin_params *p = c->params ? c->params : &numpy_bcast;
    const nn_tensor *a = &c->in[0];
    *b = c->in[1];
    int64_t axis = -1;
    if (p->legacy_axis) {
        if (!nn_axis_normalize(p->axis, a->ndim, &axis) || axis + b->ndim > a->ndim)
            return nn_call_error(c, NN_ERR_SHAPE, "cannot lay rank %d B against rank %d A at axis %lld", b->ndim,
                                 a->ndim, (long long)p->axis);
    } else if (p->channel_slope && b->ndim == 1 && a->ndim >= 2 && b->dims[0] == a->dims[1]) {
        axis = 1;
    }
    if (axis >= 0)
        while (b->ndim < a->ndim - axis) b->dims[b->ndim++] = 1;
    return NN_OK;
}

static bool supported(const row_table t, nn_dtype d) { return d > 0 && d <= MAX_DTYPE && t[d]; }

static nn_status reject_dtype(nn_call *c, nn_dtype t) {
    return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported", nn_dtype_name(t));
}

static nn_status same_dtype(nn_call *c, int i, int j) {
    if (c->in[i].dtype == c->in[j].dtype) return NN_OK;
    return nn_call_error(c, NN_ERR_INVALID, "inputs %d and %d differ in dtype: %s vs %s", i, j,
                         nn_dtype_name(c->in[i].dtype), nn_dtype_name(c->in[j].dtype));
}

static nn_status binary_infer(nn_call *c, const row_table rows, bool to_bool) {
    nn_tensor b;
    nn_status st = same_dtype(c, 0, 1);
    if (st == NN_OK) st = view_b(c, &b);
    if (st != NN_OK) return st;
    if (!supported(rows, c->in[0].dtype)) return reject_dtype(c, c->in[0].dtype);
    st = nn_broadcast_shape(c, &c->in[0], &b, &c->out[0]);
    c->out[0].dtype = to_bool ? NN_DTYPE_BOOL : c->in[0].dtype;
    if (st == NN_OK && c->epilogue && c->out[0].dtype != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "fused epilogue on a %s output", nn_dtype_name(c->out[0].dtype));
    return st;
}

static nn_status binary_run(nn_call *c, row_fn row) {
    nn_tensor b;
    nn_status st = view_b(c, &b);
    if (st != NN_OK) return st;
    const nn_tensor *in[2] = {&c->in[0], &b};
    ew_apply(c, &c->out[0], in, 2, row, true);
    return NN_OK;
}

/* flags: NN_OPF_EPILOGUE for arithmetic (a residual or activation folds in); binary_infer
 * checks the dtype against the op's row table, hence NN_OPF_ANY_DTYPE */
#define BINARY(Name, op, to_bool, op_flags)                                                    \
    static nn_status infer_##Name(nn_call *c) { return binary_infer(c, op##_rows, to_bool); }   \
    static nn_status run_##Name(nn_call *c) { return binary_run(c, op##_rows[c->in[0].dtype]); } \
    const nn_op_desc nn_op_##Name = {.name = #Name, .min_inputs = 2, .max_inputs = 2, .min_outputs = 1,   \
                                     .max_outputs = 1, .flags = (op_flags) | NN_OPF_ANY_DTYPE,         \
                                     .parse = parse_binary, .check = binary_check,                     \
                                     .infer = infer_##Name, .run = run_##Name};

BINARY(Add, add, false, NN_OPF_EPILOGUE)
BINARY(Sub, sub, false, NN_OPF_EPILOGUE)
BINARY(Mul, mul, false, NN_OPF_EPILOGUE)
BINARY(Div, div, false, NN_OPF_EPILOGUE)
BINARY(And, and, true, 0)
BINARY(Or, or, true, 0)
BINARY(Equal, equal, true, 0)
BINARY(Less, less, true, 0)
BINARY(Greater, greater, true, 0)
BINARY(LessOrEqual, less_eq, true, 0)
BINARY(GreaterOrEqual, greater_eq, true, 0)

/* PRelu: the slope broadcasts to X, never the other way. */
static nn_status infer_PRelu(nn_call *c) {
    nn_status st = binary_infer(c, prelu_rows, false);
    if (st != NN_OK) return st;
    const nn_tensor *x = &c->in[0], *y = &c->out[0];
    if (y->ndim != x->ndim || memcmp(y->dims, x->dims, sizeof(int64_t) * (size_t)x->ndim) != 0)
        return nn_call_error(c, NN_ERR_SHAPE, "slope of rank %d does not broadcast to X of rank %d", c->in[1].ndim,
                             x->ndim);
    return NN_OK;
}

static nn_status run_PRelu(nn_call *c) { return binary_run(c, prelu_rows[c->in[0].dtype]); }

const nn_op_desc nn_op_PRelu = {.name = "PRelu", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1,
                                .max_outputs = 1, .parse = parse_PRelu, .check = binary_check, .infer = infer_PRelu,
                                .run = run_PRelu};

/* ---- Pow: the exponent may have another dtype than the base; the output has
 * the base's.  Integer powers stay exact; mixed ones go through double. */

#define POW_FF(x, y) powf(x, y)
#define POW_II(x, y) ipow(x, y)
#define POW_MIX(x, y) pow((double)(x), (double)(y))

BIN_ROW(pow_ff_any, float, float, float, POW_FF(x, y))

/* sqrt(x) with powf's results for -0 (+0) and -inf (+inf) */
static inline float pow_half(float x) { return x == -INFINITY ? INFINITY : sqrtf(x) + 0.0f; }

/* A scalar exponent of 1, 2, 3 or 0.5 (x^2 inside an exported LayerNorm)
 * skips powf, which costs far more than the product (one or two roundings)
 * or the correctly rounded sqrt it reduces to. */
static void pow_ff(void *po, const void *const *pi, const int *step, int64_t n) {
    float *o = po;
    const float *a = pi[0];
    float y = *(const float *)pi[1];
    if (step[1] || !step[0] || !(y == 1.0f || y == 2.0f || y == 3.0f || y == 0.5f)) {
        pow_ff_any(po, pi, step, n);
        return;
    }
    if (y == 1.0f)
        for (int64_t i = 0; i < n; i++) o[i] = a[i];
    else if (y == 2.0f)
        for (int64_t i = 0; i < n; i++) o[i] = a[i] * a[i];
    else if (y == 3.0f)
        for (int64_t i = 0; i < n; i++) o[i] = a[i] * a[i] * a[i];
    else
        for (int64_t i = 0; i < n; i++) o[i] = pow_half(a[i]);
}
BIN_ROW(pow_fi32, float, int32_t, float, POW_MIX(x, y))
BIN_ROW(pow_fi64, float, int64_t, float, POW_MIX(x, y))
BIN_ROW(pow_fu32, float, uint32_t, float, POW_MIX(x, y))
BIN_ROW(pow_fu64, float, uint64_t, float, POW_MIX(x, y))
BIN_ROW(pow_i32f, int32_t, float, int32_t, POW_MIX(x, y))
BIN_ROW(pow_i64f, int64_t, float, int64_t, POW_MIX(x, y))
BIN_ROW(pow_i32i32, int32_t, int32_t, int32_t, POW_II(x, y))
BIN_ROW(pow_i32i64, int32_t, int64_t, int32_t, POW_II(x, y))
BIN_ROW(pow_i64i32, int64_t, int32_t, int64_t, POW_II(x, y))
BIN_ROW(pow_i64i64, int64_t, int64_t, int64_t, POW_II(x, y))

static row_fn pow_row(nn_dtype base, nn_dtype exp) {
    static const row_table rows[NN_DTYPE_BOOL + 1] = {
        [NN_DTYPE_FLOAT] = {[NN_DTYPE_FLOAT] = pow_ff, [NN_DTYPE_INT32] = pow_fi32, [NN_DTYPE_INT64] = pow_fi64,
                            [NN_DTYPE_UINT32] = pow_fu32, [NN_DTYPE_UINT64] = pow_fu64},
        [NN_DTYPE_INT32] = {[NN_DTYPE_FLOAT] = pow_i32f, [NN_DTYPE_INT32] = pow_i32i32, [NN_DTYPE_INT64] = pow_i32i64},
        [NN_DTYPE_INT64] = {[NN_DTYPE_FLOAT] = pow_i64f, [NN_DTYPE_INT32] = pow_i64i32, [NN_DTYPE_INT64] = pow_i64i64},
    };
    return base > 0 && base <= NN_DTYPE_BOOL && exp > 0 && exp <= MAX_DTYPE ? rows[base][exp] : NULL;
}

static nn_status infer_Pow(nn_call *c) {
    nn_tensor b;
    nn_status st = view_b(c, &b);
    if (st != NN_OK) return st;
    if (!pow_row(c->in[0].dtype, c->in[1].dtype))
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "%s raised to %s not supported", nn_dtype_name(c->in[0].dtype),
                             nn_dtype_name(c->in[1].dtype));
    st = nn_broadcast_shape(c, &c->in[0], &b, &c->out[0]);
    c->out[0].dtype = c->in[0].dtype;
    return st;
}

static nn_status run_Pow(nn_call *c) { return binary_run(c, pow_row(c->in[0].dtype, c->in[1].dtype)); }

const nn_op_desc nn_op_Pow = {.name = "Pow", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
                              .flags = NN_OPF_ANY_DTYPE, .parse = parse_binary, .check = binary_check, .infer = infer_Pow, .run = run_Pow};

/* ---- Where(cond, x, y): selection only moves bytes, so one kernel per element size. */

#define WHERE_ROW(name, T)                                                                     \
    static void name(void *po, const void *const *pi, const int *step, int64_t n) {            \
        T *o = po;                                                                             \
        const uint8_t *cond = pi[0];                                                           \
        const T *x = pi[1], *y = pi[2];                                                        \
        for (int64_t i = 0; i < n; i++) o[i] = cond[i * step[0]] ? x[i * step[1]] : y[i * step[2]]; \
    }

WHERE_ROW(where_1, uint8_t)
WHERE_ROW(where_4, uint32_t)
WHERE_ROW(where_8, uint64_t)

static row_fn where_row(nn_dtype t) {
    switch (nn_dtype_size(t)) {
    case 1: return where_1;
    case 4: return where_4;
    case 8: return where_8;
    default: return NULL;
    }
}

static nn_status infer_Where(nn_call *c) {
    if (c->in[0].dtype != NN_DTYPE_BOOL)
        return nn_call_error(c, NN_ERR_INVALID, "condition must be BOOL, got %s", nn_dtype_name(c->in[0].dtype));
    nn_status st = same_dtype(c, 1, 2);
    if (st != NN_OK) return st;
    if (!where_row(c->in[1].dtype)) return reject_dtype(c, c->in[1].dtype);
    st = nn_broadcast_shape(c, &c->in[0], &c->in[1], &c->out[0]);
    if (st == NN_OK) st = nn_broadcast_shape(c, &c->out[0], &c->in[2], &c->out[0]);
    c->out[0].dtype = c->in[1].dtype;
    return st;
}

static nn_status run_Where(nn_call *c) {
    const nn_tensor *in[3] = {&c->in[0], &c->in[1], &c->in[2]};
    ew_apply(c, &c->out[0], in, 3, where_row(c->in[1].dtype), false);
    return NN_OK;
}

const nn_op_desc nn_op_Where = {.name = "Where", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1,
                                .max_outputs = 1, .infer = infer_Where, .run = run_Where};

/* ---- variadic Max / Min / Sum / Mean: folded pairwise into the output,
 * every step broadcast against the full output shape. */

static nn_status variadic_infer(nn_call *c, const row_table rows) {
    if (!supported(rows, c->in[0].dtype)) return reject_dtype(c, c->in[0].dtype);
    nn_tensor_set_shape(&c->out[0], c->in[0].dtype, c->in[0].ndim, c->in[0].dims);
    for (int i = 1; i < c->n_in; i++) {
        nn_status st = same_dtype(c, 0, i);
        if (st == NN_OK) st = nn_broadcast_shape(c, &c->out[0], &c->in[i], &c->out[0]);
        if (st != NN_OK) return st;
    }
    return NN_OK;
}

static void variadic_run(nn_call *c, row_fn row) {
    nn_tensor *out = &c->out[0];
    if (c->n_in == 1) {
        if (out->data != c->in[0].data)
            memcpy(out->data, c->in[0].data, (size_t)nn_tensor_elements(out) * nn_dtype_size(out->dtype));
        return;
    }
    const nn_tensor *in[2] = {&c->in[0], &c->in[1]};
    ew_apply(c, out, in, 2, row, false);
    in[0] = out;
    for (int i = 2; i < c->n_in; i++) {
        in[1] = &c->in[i];
        ew_apply(c, out, in, 2, row, false);
    }
}

#define VARIADIC(Name, op)                                                                     \
    static nn_status infer_##Name(nn_call *c) { return variadic_infer(c, op##_rows); }          \
    static nn_status run_##Name(nn_call *c) {                                                  \
        variadic_run(c, op##_rows[c->in[0].dtype]);                                            \
        return NN_OK;                                                                          \
    }                                                                                          \
    const nn_op_desc nn_op_##Name = {.name = #Name, .min_inputs = 1, .max_inputs = -1, .min_outputs = 1,  \
                                     .max_outputs = 1, .flags = NN_OPF_ANY_DTYPE, .infer = infer_##Name, \
                                     .run = run_##Name};

VARIADIC(Max, max)
VARIADIC(Min, min)
VARIADIC(Sum, add)

static nn_status infer_Mean(nn_call *c) {
    static const row_table float_only = {[NN_DTYPE_FLOAT] = add_FLOAT};
    return variadic_infer(c, float_only);
}

/* the sum divided by the count, as the reference computes it */
static nn_status run_Mean(nn_call *c) {
    variadic_run(c, add_FLOAT);
    float count = (float)c->n_in;
    nn_tensor k = {.dtype = NN_DTYPE_FLOAT, .ndim = 0, .data = &count};
    const nn_tensor *in[2] = {&c->out[0], &k};
    ew_apply(c, &c->out[0], in, 2, div_FLOAT, false);
    return NN_OK;
}

const nn_op_desc nn_op_Mean = {.name = "Mean", .min_inputs = 1, .max_inputs = -1, .min_outputs = 1, .max_outputs = 1,
                               .infer = infer_Mean, .run = run_Mean};

/* ---- Xor: logic like And/Or (legacy broadcast attributes before opset 7) */

ROWS(xor, BOOLEAN, SAME_ROW, x != y)
BINARY(Xor, xor, true, 0)

/* ---- Mod.  fmod=0: the remainder takes the divisor's sign (integers only,
 * as ONNX requires); fmod=1: the dividend's, as C's fmod and %.  An integer
 * remainder by zero is 0 (as numpy gives) rather than a trap, and so is one
 * by -1, whose C form overflows for the most negative value. */

static inline int64_t imod_trunc(int64_t x, int64_t y) { return y == 0 || y == -1 ? 0 : x % y; }

static inline int64_t imod_floor(int64_t x, int64_t y) {
    int64_t r = imod_trunc(x, y);
    return r != 0 && (r < 0) != (y < 0) ? r + y : r;
}

/* UINT64 stays unsigned: through int64 the values from 2^63 on would turn negative */
static inline uint64_t umod(uint64_t x, uint64_t y) { return y ? x % y : 0; }

/* FLOAT16 through fp32: fmod's result is exact in any binary format, and the
 * remainder of two halves is itself a half, so rounding back changes nothing */
static inline uint16_t fmodh(uint16_t x, uint16_t y) {
    return nn_half_from_float(fmodf(nn_half_to_float(x), nn_half_to_float(y)));
}

#define FMODV(x, y)                                                                            \
    _Generic((x), float: fmodf((float)(x), (float)(y)), double: fmod((double)(x), (double)(y)), \
             uint64_t: umod((uint64_t)(x), (uint64_t)(y)), default: imod_trunc((x), (y)))
#define FLOORMODV(x, y) _Generic((x), uint64_t: umod((uint64_t)(x), (uint64_t)(y)), default: imod_floor((x), (y)))

#define INTEGERS(X, ...)                                                                       \
    X(INT32, int32_t, __VA_ARGS__)                                                             \
    X(INT64, int64_t, __VA_ARGS__)                                                             \
    X(UINT8, uint8_t, __VA_ARGS__)                                                             \
    X(INT8, int8_t, __VA_ARGS__)                                                               \
    X(INT16, int16_t, __VA_ARGS__)                                                             \
    X(UINT16, uint16_t, __VA_ARGS__)                                                           \
    X(UINT32, uint32_t, __VA_ARGS__)                                                           \
    X(UINT64, uint64_t, __VA_ARGS__)

ROWS(mod_floor, INTEGERS, SAME_ROW, FLOORMODV(x, y))
ARITH(SAME_ROW, mod_trunc, FMODV(x, y))
BIN_ROW(mod_trunc_FLOAT16, uint16_t, uint16_t, uint16_t, fmodh(x, y))
static const row_table mod_trunc_rows = {ARITH(ROW_ENTRY, mod_trunc)[NN_DTYPE_FLOAT16] = mod_trunc_FLOAT16};

/* The broadcast params come first: binary_infer and binary_run read them. */
typedef struct mod_params {
    bin_params bin;
    int64_t fmod;
} mod_params;

static nn_status parse_Mod(nn_parse_ctx *ctx) {
    mod_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    return nn_attr_int(ctx, "fmod", 0, &p->fmod);
}

static nn_status check_Mod(const void *params, char *err, size_t err_size) {
    const mod_params *p = params;
    nn_status st = binary_check(&p->bin, err, err_size); /* binary_infer reads it */
    if (st != NN_OK) return st;
    if (p->fmod == 0 || p->fmod == 1) return NN_OK;
    snprintf(err, err_size, "fmod must be 0 or 1, got %lld", (long long)p->fmod);
    return NN_ERR_INVALID;
}

static const row_fn *mod_rows(const nn_call *c) {
    return ((const mod_params *)c->params)->fmod ? mod_trunc_rows : mod_floor_rows;
}

static nn_status infer_Mod(nn_call *c) {
    nn_dtype t = c->in[0].dtype;
    if ((t == NN_DTYPE_FLOAT || t == NN_DTYPE_DOUBLE || t == NN_DTYPE_FLOAT16) &&
        !((const mod_params *)c->params)->fmod)
        return nn_call_error(c, NN_ERR_INVALID, "fmod must be 1 for %s inputs", nn_dtype_name(t));
    return binary_infer(c, mod_rows(c), false);
}

static nn_status run_Mod(nn_call *c) { return binary_run(c, mod_rows(c)[c->in[0].dtype]); }

/* binary_infer checks the dtype against the row tables, hence NN_OPF_ANY_DTYPE */
const nn_op_desc nn_op_Mod = {.name = "Mod", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
                              .flags = NN_OPF_ANY_DTYPE, .parse = parse_Mod, .check = check_Mod, .infer = infer_Mod,
                              .run = run_Mod};

/* ---- BitShift on the unsigned dtypes.  A shift by the width or more gives 0
 * (C leaves it undefined); the left shift runs in uint64 (no int promotion to
 * overflow) and the row's cast back to the dtype drops the bits shifted out. */

#define UNSIGNED(X, ...)                                                                       \
    X(UINT8, uint8_t, __VA_ARGS__)                                                             \
    X(UINT16, uint16_t, __VA_ARGS__)                                                           \
    X(UINT32, uint32_t, __VA_ARGS__)                                                           \
    X(UINT64, uint64_t, __VA_ARGS__)

ROWS(shl, UNSIGNED, SAME_ROW, y >= 8 * sizeof x ? 0 : (uint64_t)x << y)
ROWS(shr, UNSIGNED, SAME_ROW, y >= 8 * sizeof x ? 0 : x >> y)

typedef struct bitshift_params {
    bin_params bin; /* first, as for Mod */
    int64_t right;
} bitshift_params;

static nn_status parse_BitShift(nn_parse_ctx *ctx) {
    bitshift_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    const char *dir;
    nn_status st = nn_attr_string(ctx, "direction", "", &dir);
    if (st != NN_OK) return st;
    if (strcmp(dir, "LEFT") != 0 && strcmp(dir, "RIGHT") != 0)
        return nn_parse_error(ctx, NN_ERR_INVALID, "direction must be LEFT or RIGHT, got '%s'", dir);
    p->right = strcmp(dir, "RIGHT") == 0;
    return NN_OK;
}

static nn_status check_BitShift(const void *params, char *err, size_t err_size) {
    const bitshift_params *p = params;
    nn_status st = binary_check(&p->bin, err, err_size); /* binary_infer reads it */
    if (st != NN_OK) return st;
    if (p->right == 0 || p->right == 1) return NN_OK;
    snprintf(err, err_size, "direction flag must be 0 or 1, got %lld", (long long)p->right);
    return NN_ERR_INVALID;
}

static const row_fn *shift_rows(const nn_call *c) {
    return ((const bitshift_params *)c->params)->right ? shr_rows : shl_rows;
}

static nn_status infer_BitShift(nn_call *c) { return binary_infer(c, shift_rows(c), false); }
static nn_status run_BitShift(nn_call *c) { return binary_run(c, shift_rows(c)[c->in[0].dtype]); }

const nn_op_desc nn_op_BitShift = {.name = "BitShift", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1,
                                   .max_outputs = 1, .flags = NN_OPF_ANY_DTYPE, .parse = parse_BitShift,
                                   .check = check_BitShift, .infer = infer_BitShift, .run = run_BitShift};
