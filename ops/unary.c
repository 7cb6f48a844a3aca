/* Elementwise unary operators and activations (one output shaped like the input),
 * plus the data-movement ops of the same shape: Identity, Dropout, Cast. */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "act.h"
#include "half.h"
#include "op.h"
#include "par.h"
#include "params.h"
#include "text.h"

#define DT(code) (1u << NN_DTYPE_##code)

/* Attributes of every activation; an op reads the ones it has. */
typedef struct act_params {
    float alpha, beta, gamma;
} act_params;

static const act_params no_params;

typedef struct act_attr {
    const char *name;
    size_t offset;
    float dflt;
} act_attr;

#define ATTR(field, dflt) {#field, offsetof(act_params, field), dflt}

static nn_status parse_act(nn_parse_ctx *ctx, const act_attr *attrs, int n) {
    act_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        nn_status st = nn_attr_float(ctx, attrs[i].name, attrs[i].dflt, (float *)((char *)p + attrs[i].offset));
        if (st != NN_OK) return st;
    }
    ctx->params = p;
    return NN_OK;
}

/* Any finite value is one a model may give; inf or NaN is no activation's. */
static nn_status act_check(const void *params, char *err, size_t err_size) {
    const act_params *p = params;
    if (!isfinite(p->alpha) || !isfinite(p->beta) || !isfinite(p->gamma))
        return nn_check_error(err, err_size, "alpha, beta and gamma must be finite (%g, %g, %g)", (double)p->alpha,
                              (double)p->beta, (double)p->gamma);
    return NN_OK;
}

#define ACT_ATTRS(Name, ...)                                                                  \
    static nn_status parse_##Name(nn_parse_ctx *ctx) {                                        \
        static const act_attr attrs[] = {__VA_ARGS__};                                        \
        return parse_act(ctx, attrs, (int)(sizeof attrs / sizeof attrs[0]));                  \
    }

static bool dtype_in(nn_dtype t, unsigned mask) { return t > 0 && t < 32 && (mask >> t & 1u); }

static nn_status reject_dtype(nn_call *c, nn_dtype t) {
    return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported", nn_dtype_name(t));
}

/* Output has the input's dtype and shape, provided the dtype is in `mask`. */
static nn_status infer_same(nn_call *c, unsigned mask) {
    if (!dtype_in(c->in[0].dtype, mask)) return reject_dtype(c, c->in[0].dtype);
    nn_tensor_set_shape(&c->out[0], c->in[0].dtype, c->in[0].ndim, c->in[0].dims);
    return NN_OK;
}

static int64_t elements(const nn_tensor *t) { return nn_shape_elements(t->dims, t->ndim); }

static void copy_data(const nn_call *c) {
    if (c->out[0].data != c->in[0].data)
        memcpy(c->out[0].data, c->in[0].data, (size_t)elements(&c->in[0]) * nn_dtype_size(c->in[0].dtype));
}

/* Integer negation that wraps instead of overflowing on the most negative value. */
#define NEGV(x) _Generic((x), float: -(x), default: (0 - (uint64_t)(x)))
#define ABSV(x) _Generic((x), float: fabsf((float)(x)), default: ((x) < 0 ? NEGV(x) : (uint64_t)(x)))

/* Dtype lists: X(code, C type, ...) for each dtype an op accepts, the rest passed on. */
#define T_FLOAT(X, ...) X(FLOAT, float, __VA_ARGS__)
#define T_SIGNED(X, ...)                                                                       \
    X(FLOAT, float, __VA_ARGS__) X(INT8, int8_t, __VA_ARGS__) X(INT32, int32_t, __VA_ARGS__)   \
    X(INT64, int64_t, __VA_ARGS__)
#define T_BOOL(X, ...) X(BOOL, uint8_t, __VA_ARGS__)
#define T_FLOAT_MASK DT(FLOAT)
#define T_SIGNED_MASK (DT(FLOAT) | DT(INT8) | DT(INT32) | DT(INT64))
#define T_BOOL_MASK DT(BOOL)

/* What the range functions of the elementwise loops below read. */
typedef struct map_job {
    const void *src;
    void *dst;
    const void *p; /* the op's params */
} map_job;

/* y[i] = expr(x[i]) over items [i_lo, i_hi) of the tensor, for op Name and element type T. */
#define MAP_RANGE(code, T, Name, expr)                                                         \
    static void range_##Name##_##code(void *ctx, int64_t i_lo, int64_t i_hi, int seat) {       \
        (void)seat;                                                                            \
        const map_job *j = ctx;                                                                \
        const act_params *p = j->p;                                                            \
        (void)p;                                                                               \
        const T *src = j->src;                                                                 \
        T *dst = j->dst;                                                                       \
        for (int64_t i = i_lo; i < i_hi; i++) {                                                \
            T x = src[i];                                                                      \
            dst[i] = (T)(expr);                                                                \
        }                                                                                      \
    }

/* The whole tensor, for element type T. */
#define MAP_CASE(code, T, Name)                                                                \
    case NN_DTYPE_##code:                                                                      \
        nn_par_for_range(n > NN_PAR_MIN ? c->threads : 1, n, 4096, range_##Name##_##code, &j); \
        break;

/* One generic body per operator: `expr` computes y from x and the params p;
 * `act_fn` is the as_activation hook (NULL when the op cannot be fused). */
#define UNARY(Name, TYPES, parse_fn, check_fn, act_fn, expr)                                 \
    TYPES(MAP_RANGE, Name, expr)                                                               \
    static nn_status infer_##Name(nn_call *c) { return infer_same(c, TYPES##_MASK); }         \
    static nn_status run_##Name(nn_call *c) {                                                  \
        const act_params *p = c->params ? c->params : &no_params;                              \
        int64_t n = elements(&c->in[0]);                                                       \
        map_job j = {.src = c->in[0].data, .dst = c->out[0].data, .p = p};                     \
        switch (c->in[0].dtype) {                                                              \
            TYPES(MAP_CASE, Name)                                                              \
        default: return reject_dtype(c, c->in[0].dtype);                                       \
        }                                                                                      \
        return NN_OK;                                                                          \
    }                                                                                          \
    const nn_op_desc nn_op_##Name = {.name = #Name, .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,  \
                                     .max_outputs = 1, .flags = NN_OPF_ELEMENTWISE, .parse = parse_fn,  \
                                     .check = check_fn, .infer = infer_##Name, .run = run_##Name,            \
                                     .as_activation = act_fn};

/* log(1 + e^x) without overflow for large x */
static inline float softplus(float x) { return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x)); }

ACT_ATTRS(LeakyRelu, ATTR(alpha, 0.01f))
ACT_ATTRS(Elu, ATTR(alpha, 1.0f))
ACT_ATTRS(Selu, ATTR(alpha, 1.67326319217681884765625f), ATTR(gamma, 1.05070102214813232421875f))
ACT_ATTRS(HardSigmoid, ATTR(alpha, 0.2f), ATTR(beta, 0.5f))

/* ---- activations the fusion passes may fold into their producer (float only) */

static bool fusable(const nn_call *c, nn_epilogue *e, nn_act act) {
    const act_params *p = c->params ? c->params : &no_params;
    if (c->in[0].dtype != NN_DTYPE_FLOAT) return false;
    e->act = act;
    e->alpha = p->alpha;
    e->beta = p->beta;
    return true;
}

#define AS_ACT(Name, act)                                                                      \
    static bool as_act_##Name(const nn_call *c, nn_epilogue *e) { return fusable(c, e, act); }

AS_ACT(Relu, NN_ACT_RELU)
AS_ACT(LeakyRelu, NN_ACT_LEAKY_RELU)
AS_ACT(Sigmoid, NN_ACT_SIGMOID)
AS_ACT(HardSigmoid, NN_ACT_HARD_SIGMOID)
AS_ACT(HardSwish, NN_ACT_HARD_SWISH)
AS_ACT(Tanh, NN_ACT_TANH)

UNARY(Abs, T_SIGNED, NULL, NULL, NULL, ABSV(x))
UNARY(Neg, T_SIGNED, NULL, NULL, NULL, NEGV(x))
UNARY(Sign, T_SIGNED, NULL, NULL, NULL, (x > 0) - (x < 0))
UNARY(Relu, T_SIGNED, NULL, NULL, as_act_Relu, x > 0 ? x : 0)
UNARY(Not, T_BOOL, NULL, NULL, NULL, !x)
UNARY(Sqrt, T_FLOAT, NULL, NULL, NULL, sqrtf(x))
UNARY(Exp, T_FLOAT, NULL, NULL, NULL, expf(x))
UNARY(Log, T_FLOAT, NULL, NULL, NULL, logf(x))
UNARY(Reciprocal, T_FLOAT, NULL, NULL, NULL, 1.0f / x)
UNARY(Floor, T_FLOAT, NULL, NULL, NULL, floorf(x))
UNARY(Ceil, T_FLOAT, NULL, NULL, NULL, ceilf(x))
UNARY(Sin, T_FLOAT, NULL, NULL, NULL, sinf(x))
UNARY(Cos, T_FLOAT, NULL, NULL, NULL, cosf(x))
UNARY(Tanh, T_FLOAT, NULL, NULL, as_act_Tanh, tanhf(x))
UNARY(Erf, T_FLOAT, NULL, NULL, NULL, erff(x))
UNARY(Sigmoid, T_FLOAT, NULL, NULL, as_act_Sigmoid, nn_act_apply(NN_ACT_SIGMOID, 0.0f, 0.0f, x))
UNARY(Softplus, T_FLOAT, NULL, NULL, NULL, softplus(x))
UNARY(Softsign, T_FLOAT, NULL, NULL, NULL, x / (1.0f + fabsf(x)))
UNARY(HardSwish, T_FLOAT, NULL, NULL, as_act_HardSwish, nn_act_apply(NN_ACT_HARD_SWISH, 0.0f, 0.0f, x))
UNARY(LeakyRelu, T_FLOAT, parse_LeakyRelu, act_check, as_act_LeakyRelu, nn_act_apply(NN_ACT_LEAKY_RELU, p->alpha, 0.0f, x))
UNARY(Elu, T_FLOAT, parse_Elu, act_check, NULL, x >= 0.0f ? x : p->alpha * expm1f(x))
UNARY(Selu, T_FLOAT, parse_Selu, act_check, NULL, p->gamma * (x > 0.0f ? x : p->alpha * expm1f(x)))
UNARY(HardSigmoid, T_FLOAT, parse_HardSigmoid, act_check, as_act_HardSigmoid, nn_act_apply(NN_ACT_HARD_SIGMOID, p->alpha, p->beta, x))

/* ---- Gelu (opset 20): approximate "none" (erf) or "tanh" */

static nn_status parse_Gelu(nn_parse_ctx *ctx) {
    nn_gelu_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    const char *s;
    nn_status st = nn_attr_string(ctx, "approximate", "none", &s);
    if (st != NN_OK) return st;
    if (strcmp(s, "none") && strcmp(s, "tanh"))
        return nn_parse_error(ctx, NN_ERR_INVALID, "approximate must be \"none\" or \"tanh\", got \"%s\"", s);
    p->tanh = !strcmp(s, "tanh");
    ctx->params = p;
    return NN_OK;
}

static nn_status gelu_check(const void *params, char *err, size_t err_size) {
    const nn_gelu_params *p = params;
    if (p->tanh != 0 && p->tanh != 1) return nn_check_error(err, err_size, "tanh (%lld) must be 0 or 1", (long long)p->tanh);
    return NN_OK;
}

static nn_status infer_Gelu(nn_call *c) { return infer_same(c, DT(FLOAT)); }

typedef struct gelu_job {
    const float *x;
    float *y;
    bool tanh;
} gelu_job;

static void gelu_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const gelu_job *j = ctx;
    if (!j->tanh)
        for (int64_t i = lo; i < hi; i++) j->y[i] = nn_gelu(j->x[i]);
    else
        for (int64_t i = lo; i < hi; i++) j->y[i] = nn_gelu_tanh(j->x[i]);
}

static nn_status run_Gelu(nn_call *c) {
    const nn_gelu_params *p = c->params;
    if (c->in[0].dtype != NN_DTYPE_FLOAT) return reject_dtype(c, c->in[0].dtype);
    int64_t n = elements(&c->in[0]);
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    gelu_job j = {.x = x, .y = y, .tanh = p && p->tanh};
    nn_par_for_range(n > NN_PAR_MIN ? c->threads : 1, n, 4096, gelu_range, &j);
    return NN_OK;
}

static bool as_act_Gelu(const nn_call *c, nn_epilogue *e) {
    const nn_gelu_params *p = c->params;
    return fusable(c, e, p && p->tanh ? NN_ACT_GELU_TANH : NN_ACT_GELU);
}

const nn_op_desc nn_op_Gelu = {.name = "Gelu", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
                               .flags = NN_OPF_ELEMENTWISE, .parse = parse_Gelu, .check = gelu_check,
                               .infer = infer_Gelu, .run = run_Gelu, .as_activation = as_act_Gelu};

/* ---- Clip: bounds are attributes before opset 11, optional scalar inputs since. */

typedef struct clip_params {
    bool from_attrs;
    float lo, hi;
} clip_params;

static nn_status parse_Clip(nn_parse_ctx *ctx) {
    clip_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    p->from_attrs = ctx->opset < 11;
    if (!p->from_attrs) return NN_OK;
    nn_status st = nn_attr_float(ctx, "min", -FLT_MAX, &p->lo);
    return st != NN_OK ? st : nn_attr_float(ctx, "max", FLT_MAX, &p->hi);
}

static nn_status clip_check(const void *params, char *err, size_t err_size) {
    const clip_params *p = params;
    if (!nn_check_bool(&p->from_attrs)) return nn_check_error(err, err_size, "from_attrs is not a boolean");
    if (isnan(p->lo) || isnan(p->hi)) return nn_check_error(err, err_size, "min or max is NaN");
    return NN_OK;
}

#define CLIP_MASK (DT(FLOAT) | DT(INT8) | DT(UINT8) | DT(INT32) | DT(INT64))

static nn_status infer_Clip(nn_call *c) {
    const clip_params *p = c->params;
    nn_dtype t = c->in[0].dtype;
    if (!dtype_in(t, p->from_attrs ? DT(FLOAT) : CLIP_MASK)) return reject_dtype(c, t);
    for (int i = 1; i < 3; i++) {
        if (!nn_present(c, i)) continue;
        if (c->in[i].dtype != t)
            return nn_call_error(c, NN_ERR_INVALID, "%s bound must be %s like the input, got %s",
                                 i == 1 ? "min" : "max", nn_dtype_name(t), nn_dtype_name(c->in[i].dtype));
        if (elements(&c->in[i]) != 1)
            return nn_call_error(c, NN_ERR_SHAPE, "%s bound must be a scalar, got %lld elements",
                                 i == 1 ? "min" : "max", (long long)elements(&c->in[i]));
    }
    nn_tensor_set_shape(&c->out[0], t, c->in[0].ndim, c->in[0].dims);
    return NN_OK;
}

/* min(max(x, lo), hi): when lo > hi every element becomes hi, as ONNX specifies;
 * NaN passes through. */
#define CLIP_RANGE(code, T)                                                                    \
    typedef struct clip_job_##code {                                                           \
        const T *src;                                                                          \
        T *dst;                                                                                \
        T lo, hi;                                                                              \
    } clip_job_##code;                                                                         \
    static void clip_range_##code(void *ctx, int64_t i_lo, int64_t i_hi, int seat) {           \
        (void)seat;                                                                            \
        const clip_job_##code *j = ctx;                                                        \
        const T *src = j->src;                                                                 \
        T *dst = j->dst;                                                                       \
        T lo = j->lo, hi = j->hi;                                                              \
        for (int64_t i = i_lo; i < i_hi; i++) {                                                \
            T v = src[i] < lo ? lo : src[i];                                                   \
            dst[i] = v > hi ? hi : v;                                                          \
        }                                                                                      \
    }

CLIP_RANGE(FLOAT, float)
CLIP_RANGE(INT8, int8_t)
CLIP_RANGE(UINT8, uint8_t)
CLIP_RANGE(INT32, int32_t)
CLIP_RANGE(INT64, int64_t)

/* The bounds in type T, then the whole tensor. */
#define CLIP_CASE(code, T, lowest, highest)                                                    \
    case NN_DTYPE_##code: {                                                                    \
        T lo = nn_present(c, 1) ? *(const T *)c->in[1].data : (lowest);                        \
        T hi = nn_present(c, 2) ? *(const T *)c->in[2].data : (highest);                       \
        if (p->from_attrs) lo = (T)p->lo, hi = (T)p->hi;                                       \
        clip_job_##code j = {.src = c->in[0].data, .dst = c->out[0].data, .lo = lo, .hi = hi}; \
        nn_par_for_range(n > NN_PAR_MIN ? c->threads : 1, n, 4096, clip_range_##code, &j);     \
        break;                                                                                 \
    }

static nn_status run_Clip(nn_call *c) {
    const clip_params *p = c->params;
    int64_t n = elements(&c->in[0]);
    switch (c->in[0].dtype) {
        CLIP_CASE(FLOAT, float, -INFINITY, INFINITY)
        CLIP_CASE(INT8, int8_t, INT8_MIN, INT8_MAX)
        CLIP_CASE(UINT8, uint8_t, 0, UINT8_MAX)
        CLIP_CASE(INT32, int32_t, INT32_MIN, INT32_MAX)
        CLIP_CASE(INT64, int64_t, INT64_MIN, INT64_MAX)
    default: return reject_dtype(c, c->in[0].dtype);
    }
    return NN_OK;
}

/* Fusable when the bounds are known now; the epilogue clamps in the other order,
 * so min > max (all values become max) is left unfused. */
static bool as_act_Clip(const nn_call *c, nn_epilogue *e) {
    const clip_params *p = c->params;
    if (c->in[0].dtype != NN_DTYPE_FLOAT) return false;
    float bound[2] = {-INFINITY, INFINITY};
    if (p->from_attrs) {
        bound[0] = p->lo;
        bound[1] = p->hi;
    }
    for (int i = 1; i < 3 && !p->from_attrs; i++) {
        if (!nn_present(c, i)) continue;
        if (!c->in[i].data) return false;
        bound[i - 1] = *(const float *)c->in[i].data;
    }
    if (bound[0] > bound[1]) return false;
    e->act = NN_ACT_CLIP;
    e->alpha = bound[0];
    e->beta = bound[1];
    return true;
}

const nn_op_desc nn_op_Clip = {.name = "Clip",
                               .min_inputs = 1,
                               .max_inputs = 3,
                               .min_outputs = 1,
                               .max_outputs = 1,
                               .flags = NN_OPF_ELEMENTWISE,
                               .parse = parse_Clip,
                               .check = clip_check,
                               .infer = infer_Clip,
                               .run = run_Clip,
                               .as_activation = as_act_Clip};

/* ---- Identity */

/* Any tensor, and sequences and optionals too (shared: they are immutable). */
static nn_status infer_Identity(nn_call *c) {
    if (!nn_dtype_is_container(c->in[0].dtype)) return infer_same(c, ~0u);
    if (c->in[0].dtype == NN_DTYPE_SEQUENCE && !c->in[0].data) return NN_DYNAMIC;
    memset(&c->out[0], 0, sizeof c->out[0]);
    c->out[0].dtype = c->in[0].dtype;
    return NN_OK;
}

static nn_status run_Identity(nn_call *c) {
    if (nn_dtype_is_container(c->in[0].dtype))
        c->out[0].data = c->in[0].data;
    else
        copy_data(c);
    return NN_OK;
}

const nn_op_desc nn_op_Identity = {.name = "Identity", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
                                   .max_outputs = 1, .flags = NN_OPF_ELEMENTWISE | NN_OPF_ANY_DTYPE, .infer = infer_Identity,
                                   .run = run_Identity};

/* ---- Dropout: inference only, so the output is the input and the mask all ones.
 * The mask is BOOL since opset 10 and the input's type before. */

typedef struct dropout_params {
    bool bool_mask;
} dropout_params;

static nn_status parse_Dropout(nn_parse_ctx *ctx) {
    dropout_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    p->bool_mask = ctx->opset >= 10;
    ctx->params = p;
    return NN_OK;
}

static nn_status dropout_check(const void *params, char *err, size_t err_size) {
    const dropout_params *p = params;
    if (!nn_check_bool(&p->bool_mask)) return nn_check_error(err, err_size, "bool_mask is not a boolean");
    return NN_OK;
}

static nn_status check_inference_mode(nn_call *c) {
    if (!nn_present(c, 2) || !c->in[2].data) return NN_OK;
    if (c->in[2].dtype != NN_DTYPE_BOOL || elements(&c->in[2]) != 1)
        return nn_call_error(c, NN_ERR_INVALID, "training_mode must be a BOOL scalar");
    if (!*(const uint8_t *)c->in[2].data) return NN_OK;
    /* Training mode with a constant ratio of 0 keeps every element at scale 1: the
     * identity.  torch exports F.dropout(p=0) like that (Swin-T's attention). */
    if (nn_present(c, 1) && c->in[1].data && elements(&c->in[1]) == 1 && c->in[1].dtype == NN_DTYPE_FLOAT &&
        *(const float *)c->in[1].data == 0.0f)
        return NN_OK;
    return nn_call_error(c, NN_ERR_UNSUPPORTED, "training mode is not supported (only with a constant ratio of 0)");
}

static nn_status infer_Dropout(nn_call *c) {
    const dropout_params *p = c->params;
    nn_status st = infer_same(c, DT(FLOAT));
    if (st == NN_OK) st = check_inference_mode(c);
    if (st == NN_OK && c->n_out > 1)
        nn_tensor_set_shape(&c->out[1], p->bool_mask ? NN_DTYPE_BOOL : c->in[0].dtype, c->in[0].ndim,
                            c->in[0].dims);
    return st;
}

static nn_status run_Dropout(nn_call *c) {
    nn_status st = check_inference_mode(c);
    if (st != NN_OK) return st;
    copy_data(c);
    if (c->n_out > 1 && c->out[1].data) {
        int64_t n = elements(&c->out[1]);
        if (c->out[1].dtype == NN_DTYPE_BOOL) {
            memset(c->out[1].data, 1, (size_t)n);
        } else {
            float *m = c->out[1].data;
            for (int64_t i = 0; i < n; i++) m[i] = 1.0f;
        }
    }
    return NN_OK;
}

const nn_op_desc nn_op_Dropout = {.name = "Dropout", .min_inputs = 1, .max_inputs = 3, .min_outputs = 1,
                                  .max_outputs = 2, .flags = NN_OPF_ELEMENTWISE, .parse = parse_Dropout,
                                  .check = dropout_check, .infer = infer_Dropout, .run = run_Dropout};

/* ---- Cast between the engine's dtypes.  Float to integer saturates (NaN gives 0):
 * ONNX leaves out-of-range casts undefined, C makes them undefined behaviour. */

typedef struct cast_params {
    int64_t to;
} cast_params;

/* names Cast used for `to` before opset 6, when it was a string */
static const struct {
    const char *name;
    nn_dtype dtype;
} cast_names[] = {
    {"FLOAT", NN_DTYPE_FLOAT},     {"INT32", NN_DTYPE_INT32},   {"INT64", NN_DTYPE_INT64},   {"BOOL", NN_DTYPE_BOOL},
    {"UINT8", NN_DTYPE_UINT8},     {"INT8", NN_DTYPE_INT8},     {"FLOAT16", NN_DTYPE_FLOAT16}, {"DOUBLE", NN_DTYPE_DOUBLE},
    {"INT16", NN_DTYPE_INT16},     {"UINT16", NN_DTYPE_UINT16}, {"UINT32", NN_DTYPE_UINT32}, {"UINT64", NN_DTYPE_UINT64},
};

static nn_status parse_Cast(nn_parse_ctx *ctx) {
    cast_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    const nn_attr *a = nn_attr_find(ctx, "to");
    if (!a) return nn_parse_error(ctx, NN_ERR_INVALID, "attribute 'to' is required");
    if (a->type != NN_ATTR_STRING) return nn_attr_int(ctx, "to", 0, &p->to);
    for (size_t i = 0; i < sizeof cast_names / sizeof cast_names[0]; i++)
        if (strcmp(a->s, cast_names[i].name) == 0) {
            p->to = cast_names[i].dtype;
            return NN_OK;
        }
    return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "cast to %s not supported", a->s);
}

/* `to` is any integer parse read; infer says which it supports.  Here: a dtype the engine knows. */
static nn_status cast_check(const void *params, char *err, size_t err_size) {
    const cast_params *p = params;
    if (p->to < 0 || p->to >= 32) return nn_check_error(err, err_size, "to = %lld is no dtype", (long long)p->to);
    return NN_OK;
}

/* Cast and CastLike convert between every dtype nn holds. */
#define CAST_MASK                                                                              \
    (DT(FLOAT) | DT(INT32) | DT(INT64) | DT(BOOL) | DT(UINT8) | DT(INT8) | DT(FLOAT16) | DT(DOUBLE) | \
     DT(INT16) | DT(UINT16) | DT(UINT32) | DT(UINT64) | DT(BFLOAT16))

static nn_status infer_cast_to(nn_call *c, int64_t to) {
    nn_dtype from = c->in[0].dtype;
    if (from == NN_DTYPE_STRING || to == NN_DTYPE_STRING) { /* ops/text.c */
        if (!nn_cast_string_supported(from, (nn_dtype)to))
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "cast from %s to %s not supported", nn_dtype_name(from),
                                 nn_dtype_name((nn_dtype)to));
        nn_tensor_set_shape(&c->out[0], (nn_dtype)to, c->in[0].ndim, c->in[0].dims);
        return NN_OK;
    }
    if (!dtype_in(from, CAST_MASK)) return reject_dtype(c, from);
    if (to < 0 || to >= 32 || !dtype_in((nn_dtype)to, CAST_MASK))
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "cast to dtype %s not supported", nn_dtype_name((nn_dtype)to));
    nn_tensor_set_shape(&c->out[0], (nn_dtype)to, c->in[0].ndim, c->in[0].dims);
    return NN_OK;
}

static nn_status infer_Cast(nn_call *c) { return infer_cast_to(c, ((const cast_params *)c->params)->to); }

/* A floating-point value to an integer type: NaN to 0, out-of-range values
 * saturated (ONNX leaves them undefined).  The bounds compare in double, where
 * (double)INT64_MAX is 2^63, so (TD)x only ever sees values in range. */
#define SATURATE(TD, x, lo, hi)                                                                \
    ((x) != (x)               ? (TD)0                                                          \
     : (x) <= (double)(lo)    ? (TD)(lo)                                                       \
     : (x) >= (double)(hi)    ? (TD)(hi)                                                       \
                              : (TD)(x))

/* The dtypes Cast handles, listed twice because a macro cannot expand inside itself:
 * X(code, C type, lowest, highest, ...) for targets, X(code, C type, value type, load, ...)
 * for sources (FLOAT16 is read as the float it holds, exactly). */
#define CAST_TARGETS(X, ...)                                                                   \
    X(FLOAT, float, 0, 0, __VA_ARGS__)                                                         \
    X(DOUBLE, double, 0, 0, __VA_ARGS__)                                                       \
    X(FLOAT16, uint16_t, 0, 0, __VA_ARGS__)                                                    \
    X(BFLOAT16, uint16_t, 0, 0, __VA_ARGS__)                                                   \
    X(INT32, int32_t, INT32_MIN, INT32_MAX, __VA_ARGS__)                                       \
    X(INT64, int64_t, INT64_MIN, INT64_MAX, __VA_ARGS__)                                       \
    X(BOOL, uint8_t, 0, 1, __VA_ARGS__)                                                        \
    X(UINT8, uint8_t, 0, UINT8_MAX, __VA_ARGS__)                                               \
    X(INT8, int8_t, INT8_MIN, INT8_MAX, __VA_ARGS__)                                           \
    X(INT16, int16_t, INT16_MIN, INT16_MAX, __VA_ARGS__)                                       \
    X(UINT16, uint16_t, 0, UINT16_MAX, __VA_ARGS__)                                            \
    X(UINT32, uint32_t, 0, UINT32_MAX, __VA_ARGS__)                                            \
    X(UINT64, uint64_t, 0, UINT64_MAX, __VA_ARGS__)
#define LOAD_PLAIN(v) (v)
#define LOAD_HALF(v) nn_half_to_float(v)
#define LOAD_BF16(v) nn_bf16_to_float(v)
#define CAST_SOURCES(X, ...)                                                                   \
    X(FLOAT, float, float, LOAD_PLAIN, __VA_ARGS__)                                            \
    X(DOUBLE, double, double, LOAD_PLAIN, __VA_ARGS__)                                         \
    X(FLOAT16, uint16_t, float, LOAD_HALF, __VA_ARGS__)                                        \
    X(BFLOAT16, uint16_t, float, LOAD_BF16, __VA_ARGS__)                                       \
    X(INT32, int32_t, int32_t, LOAD_PLAIN, __VA_ARGS__)                                        \
    X(INT64, int64_t, int64_t, LOAD_PLAIN, __VA_ARGS__)                                        \
    X(BOOL, uint8_t, uint8_t, LOAD_PLAIN, __VA_ARGS__)                                         \
    X(UINT8, uint8_t, uint8_t, LOAD_PLAIN, __VA_ARGS__)                                        \
    X(INT8, int8_t, int8_t, LOAD_PLAIN, __VA_ARGS__)                                           \
    X(INT16, int16_t, int16_t, LOAD_PLAIN, __VA_ARGS__)                                        \
    X(UINT16, uint16_t, uint16_t, LOAD_PLAIN, __VA_ARGS__)                                     \
    X(UINT32, uint32_t, uint32_t, LOAD_PLAIN, __VA_ARGS__)                                     \
    X(UINT64, uint64_t, uint64_t, LOAD_PLAIN, __VA_ARGS__)

/* one value x (of a source's value type) to the target type DCODE / TD:
 * integers wrap between integer types, as C converts them */
#define CONVERT(DCODE, TD, lo, hi, x)                                                          \
    (NN_DTYPE_##DCODE == NN_DTYPE_BOOL      ? (TD)((x) != 0)                                   \
     : NN_DTYPE_##DCODE == NN_DTYPE_FLOAT16 ? (TD)nn_half_from_double((double)(x))             \
     : NN_DTYPE_##DCODE == NN_DTYPE_BFLOAT16 ? (TD)nn_bf16_from_double((double)(x))            \
     : NN_DTYPE_##DCODE == NN_DTYPE_FLOAT || NN_DTYPE_##DCODE == NN_DTYPE_DOUBLE ? (TD)(x)     \
     : _Generic((x), float: SATURATE(TD, (double)(x), lo, hi), double: SATURATE(TD, (double)(x), lo, hi), \
                default: (TD)(x)))

/* Items [i_lo, i_hi) from source type SCODE / TS to target type DCODE / TD. */
#define CAST_RANGE(SCODE, TS, TV, load, DCODE, TD, lo, hi)                                     \
    static void cast_##SCODE##_to_##DCODE(void *ctx, int64_t i_lo, int64_t i_hi, int seat) {   \
        (void)seat;                                                                            \
        const map_job *j = ctx;                                                                \
        const TS *src = j->src;                                                                \
        TD *dst = j->dst;                                                                      \
        for (int64_t i = i_lo; i < i_hi; i++) {                                                \
            TV x = load(src[i]);                                                               \
            dst[i] = CONVERT(DCODE, TD, lo, hi, x);                                            \
        }                                                                                      \
    }

#define CAST_RANGES(DCODE, TD, lo, hi, unused) CAST_SOURCES(CAST_RANGE, DCODE, TD, lo, hi)

CAST_TARGETS(CAST_RANGES, 0)

#define CAST_FROM(SCODE, TS, TV, load, DCODE, TD, lo, hi)                                      \
    case NN_DTYPE_##SCODE:                                                                     \
        nn_par_for_range(n > NN_PAR_MIN ? c->threads : 1, n, 4096, cast_##SCODE##_to_##DCODE,  \
                         &j);                                                                  \
        break;

#define CAST_TO(DCODE, TD, lo, hi, unused)                                                     \
    case NN_DTYPE_##DCODE:                                                                     \
        switch (c->in[0].dtype) {                                                              \
            CAST_SOURCES(CAST_FROM, DCODE, TD, lo, hi)                                         \
        default: return reject_dtype(c, c->in[0].dtype);                                       \
        }                                                                                      \
        break;

/* Converts to the output's dtype: Cast and CastLike alike. */
static nn_status run_Cast(nn_call *c) {
    if (c->in[0].dtype == NN_DTYPE_STRING || c->out[0].dtype == NN_DTYPE_STRING) return nn_cast_string(c);
    int64_t n = elements(&c->in[0]);
    if (c->in[0].dtype == c->out[0].dtype) {
        copy_data(c);
        return NN_OK;
    }
    map_job j = {.src = c->in[0].data, .dst = c->out[0].data};
    switch (c->out[0].dtype) {
        CAST_TARGETS(CAST_TO, 0)
    default: return reject_dtype(c, c->out[0].dtype);
    }
    return NN_OK;
}

const nn_op_desc nn_op_Cast = {.name = "Cast", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
                               .flags = NN_OPF_ANY_DTYPE, .parse = parse_Cast, .check = cast_check, .infer = infer_Cast, .run = run_Cast};

/* CastLike: Cast to the dtype of a second input, whose values are not read. */
static nn_status infer_CastLike(nn_call *c) { return infer_cast_to(c, c->in[1].dtype); }

const nn_op_desc nn_op_CastLike = {.name = "CastLike", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1,
                                   .max_outputs = 1, .flags = NN_OPF_ANY_DTYPE, .infer = infer_CastLike,
                                   .run = run_Cast};

/* ---- inverse and hyperbolic trigonometry, Round (halves to even: rintf in
 * the default rounding mode) */

UNARY(Tan, T_FLOAT, NULL, NULL, NULL, tanf(x))
UNARY(Asin, T_FLOAT, NULL, NULL, NULL, asinf(x))
UNARY(Acos, T_FLOAT, NULL, NULL, NULL, acosf(x))
UNARY(Atan, T_FLOAT, NULL, NULL, NULL, atanf(x))
UNARY(Sinh, T_FLOAT, NULL, NULL, NULL, sinhf(x))
UNARY(Cosh, T_FLOAT, NULL, NULL, NULL, coshf(x))
UNARY(Asinh, T_FLOAT, NULL, NULL, NULL, asinhf(x))
UNARY(Acosh, T_FLOAT, NULL, NULL, NULL, acoshf(x))
UNARY(Atanh, T_FLOAT, NULL, NULL, NULL, atanhf(x))
UNARY(Round, T_FLOAT, NULL, NULL, NULL, rintf(x))

/* ---- activations with attributes the generic parse reads under other names */

#define ATTR_AS(name, field, dflt) {name, offsetof(act_params, field), dflt}

ACT_ATTRS(Celu, ATTR(alpha, 1.0f))
ACT_ATTRS(ThresholdedRelu, ATTR(alpha, 1.0f))
ACT_ATTRS(Shrink, ATTR_AS("lambd", alpha, 0.5f), ATTR_AS("bias", beta, 0.0f))

/* A NaN threshold would silently zero or pass everything: refused. */
static nn_status check_no_nan(const act_params *p, const char *a, const char *b, char *err, size_t err_size) {
    const char *bad = isnan(p->alpha) ? a : b && isnan(p->beta) ? b : NULL;
    if (!bad) return NN_OK;
    snprintf(err, err_size, "attribute %s is NaN", bad);
    return NN_ERR_INVALID;
}

static nn_status check_Celu(const void *params, char *err, size_t err_size) {
    const act_params *p = params;
    if (p->alpha == 0.0f) { /* Celu divides by alpha */
        snprintf(err, err_size, "attribute alpha must not be 0");
        return NN_ERR_INVALID;
    }
    return check_no_nan(p, "alpha", NULL, err, err_size);
}

static nn_status check_ThresholdedRelu(const void *params, char *err, size_t err_size) {
    return check_no_nan(params, "alpha", NULL, err, err_size);
}

static nn_status check_Shrink(const void *params, char *err, size_t err_size) {
    return check_no_nan(params, "lambd", "bias", err, err_size);
}

/* Shrink's bias and lambd are floats for every input dtype: integers are
 * compared and shifted in double, then saturated back into their type. */
static inline int64_t sat_int(double v, int64_t lo, int64_t hi) {
    return v != v ? 0 : v <= (double)lo ? lo : v >= (double)hi ? hi : (int64_t)v;
}
#define SHRINK_V(x, v)                                                                         \
    _Generic((x), float: (float)(v), int8_t: sat_int(v, INT8_MIN, INT8_MAX),                   \
             uint8_t: sat_int(v, 0, UINT8_MAX), int32_t: sat_int(v, INT32_MIN, INT32_MAX),     \
             default: sat_int(v, INT64_MIN, INT64_MAX))
#define SHRINK(x)                                                                              \
    SHRINK_V(x, (double)(x) < -(double)p->alpha  ? (double)(x) + p->beta                       \
                : (double)(x) > (double)p->alpha ? (double)(x) - p->beta                       \
                                                 : 0.0)
#define T_SHRINK(X, ...) T_SIGNED(X, __VA_ARGS__) X(UINT8, uint8_t, __VA_ARGS__)
#define T_SHRINK_MASK (T_SIGNED_MASK | DT(UINT8))

UNARY(Celu, T_FLOAT, parse_Celu, check_Celu, NULL, fmaxf(x, 0.0f) + fminf(0.0f, p->alpha * expm1f(x / p->alpha)))
UNARY(ThresholdedRelu, T_FLOAT, parse_ThresholdedRelu, check_ThresholdedRelu, NULL, x > p->alpha ? x : 0.0f)
UNARY(Shrink, T_SHRINK, parse_Shrink, check_Shrink, NULL, SHRINK(x))

/* ---- IsNaN, IsInf: FLOAT in, BOOL out */

typedef struct isinf_params {
    int64_t negative, positive; /* detect_negative, detect_positive: 0 or 1 */
} isinf_params;

static nn_status parse_IsInf(nn_parse_ctx *ctx) {
    isinf_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    nn_status st = nn_attr_int(ctx, "detect_negative", 1, &p->negative);
    if (st == NN_OK) st = nn_attr_int(ctx, "detect_positive", 1, &p->positive);
    p->negative = p->negative != 0;
    p->positive = p->positive != 0;
    return st;
}

static nn_status check_IsInf(const void *params, char *err, size_t err_size) {
    const isinf_params *p = params;
    if ((p->negative == 0 || p->negative == 1) && (p->positive == 0 || p->positive == 1)) return NN_OK;
    snprintf(err, err_size, "detect_negative / detect_positive must be 0 or 1");
    return NN_ERR_INVALID;
}

static nn_status infer_to_bool(nn_call *c) {
    if (c->in[0].dtype != NN_DTYPE_FLOAT) return reject_dtype(c, c->in[0].dtype);
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_BOOL, c->in[0].ndim, c->in[0].dims);
    return NN_OK;
}

#define PREDICATE(Name, expr)                                                                  \
    static void range_##Name(void *ctx, int64_t i_lo, int64_t i_hi, int seat) {                \
        (void)seat;                                                                            \
        const map_job *j = ctx;                                                                \
        const isinf_params *p = j->p;                                                          \
        (void)p;                                                                               \
        const float *src = j->src;                                                             \
        uint8_t *dst = j->dst;                                                                 \
        for (int64_t i = i_lo; i < i_hi; i++) {                                                \
            float x = src[i];                                                                  \
            dst[i] = (uint8_t)(expr);                                                          \
        }                                                                                      \
    }                                                                                          \
    static nn_status run_##Name(nn_call *c) {                                                  \
        map_job j = {.src = c->in[0].data, .dst = c->out[0].data, .p = c->params};             \
        int64_t n = elements(&c->in[0]);                                                       \
        nn_par_for_range(n > NN_PAR_MIN ? c->threads : 1, n, 4096, range_##Name, &j);          \
        return NN_OK;                                                                          \
    }

PREDICATE(IsNaN, isnan(x))
PREDICATE(IsInf, isinf(x) && (x > 0 ? p->positive : p->negative))

const nn_op_desc nn_op_IsNaN = {.name = "IsNaN", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
                                .infer = infer_to_bool, .run = run_IsNaN};
const nn_op_desc nn_op_IsInf = {.name = "IsInf", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
                                .parse = parse_IsInf, .check = check_IsInf, .infer = infer_to_bool, .run = run_IsInf};
