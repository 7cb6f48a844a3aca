/* Ops that make values rather than move them: Constant (folded away at
 * load), ConstantOfShape and Range. */
#include <math.h>
#include <string.h>

#include "op.h"
#include "params.h"

/* ---- Constant */

typedef struct constant_params {
    nn_tensor value;
} constant_params;

static nn_status parse_constant(nn_parse_ctx *ctx) {
    constant_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    static const char *const unsupported[] = {"sparse_value", "value_string", "value_strings"};
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++)
        if (nn_attr_find(ctx, unsupported[i]))
            return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "attribute '%s' not supported", unsupported[i]);
    const nn_attr *a;
    if ((a = nn_attr_find(ctx, "value"))) {
        const nn_tensor *t;
        nn_status st = nn_attr_tensor(ctx, "value", &t);
        if (st != NN_OK) return st;
        if (nn_dtype_size(t->dtype) == 0)
            return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "value of dtype %s not supported", nn_dtype_name(t->dtype));
        p->value = *t;
        return NN_OK;
    }
    /* the value_* forms: a FLOAT or INT64 scalar or 1-D tensor */
    static const struct {
        const char *name;
        nn_attr_type type;
    } forms[] = {{"value_float", NN_ATTR_FLOAT},
                 {"value_floats", NN_ATTR_FLOATS},
                 {"value_int", NN_ATTR_INT},
                 {"value_ints", NN_ATTR_INTS}};
    size_t f = 0;
    while (f < sizeof forms / sizeof *forms && !(a = nn_attr_find(ctx, forms[f].name))) f++;
    if (!a) return nn_parse_error(ctx, NN_ERR_INVALID, "no value attribute");
    nn_attr_type want = forms[f].type;
    if (a->type != want) return nn_parse_error(ctx, NN_ERR_INVALID, "attribute '%s' has the wrong type", a->name);
    bool is_float = want == NN_ATTR_FLOAT || want == NN_ATTR_FLOATS;
    bool list = want == NN_ATTR_FLOATS || want == NN_ATTR_INTS;
    int n = list ? a->n : 1;
    p->value.dtype = is_float ? NN_DTYPE_FLOAT : NN_DTYPE_INT64;
    p->value.ndim = list ? 1 : 0;
    p->value.dims[0] = n;
    size_t esz = nn_dtype_size(p->value.dtype);
    p->value.data = nn_params_alloc(ctx, esz * (size_t)(n > 0 ? n : 1));
    if (!p->value.data) return NN_ERR_NOMEM;
    const void *src = want == NN_ATTR_FLOATS ? (const void *)a->floats
                      : want == NN_ATTR_INTS ? (const void *)a->ints
                      : want == NN_ATTR_FLOAT ? (const void *)&a->f
                                              : (const void *)&a->i;
    if (n > 0) memcpy(p->value.data, src, esz * (size_t)n);
    return NN_OK;
}

/* Fresh params only: the value points into the model, so Constant nodes are
 * folded before a plan exists and the plan cache refuses them. */
static nn_status constant_check(const void *params, char *err, size_t err_size) {
    const constant_params *p = params;
    if (!nn_dtype_size(p->value.dtype) || p->value.ndim < 0 || p->value.ndim > NN_MAX_DIMS)
        return nn_check_error(err, err_size, "value has dtype %d and rank %d", (int)p->value.dtype, p->value.ndim);
    return NN_OK;
}

static nn_status infer_constant(nn_call *c) {
    const constant_params *p = c->params;
    nn_tensor_set_shape(&c->out[0], p->value.dtype, p->value.ndim, p->value.dims);
    return NN_OK;
}

static nn_status run_constant(nn_call *c) {
    const constant_params *p = c->params;
    int64_t n = nn_tensor_elements(&p->value);
    if (n > 0) memcpy(c->out[0].data, p->value.data, (size_t)n * nn_dtype_size(p->value.dtype));
    return NN_OK;
}

const nn_op_desc nn_op_Constant = {.name = "Constant",
                                   .min_inputs = 0,
                                   .max_inputs = 0,
                                   .min_outputs = 1,
                                   .max_outputs = 1,
                                   .parse = parse_constant,
                                   .check = constant_check,
                                   .infer = infer_constant,
                                   .run = run_constant};

/* ---- ConstantOfShape */

typedef struct constant_of_shape_params {
    nn_dtype dtype;
    uint64_t value; /* one element of dtype */
} constant_of_shape_params;

static nn_status parse_constant_of_shape(nn_parse_ctx *ctx) {
    constant_of_shape_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    p->dtype = NN_DTYPE_FLOAT;
    const nn_tensor *t;
    nn_status st = nn_attr_tensor(ctx, "value", &t);
    if (st != NN_OK || !t) return st;
    if (nn_dtype_size(t->dtype) == 0)
        return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "value of dtype %s not supported", nn_dtype_name(t->dtype));
    if (nn_tensor_elements(t) != 1)
        return nn_parse_error(ctx, NN_ERR_INVALID, "value must have one element, has %lld",
                              (long long)nn_tensor_elements(t));
    p->dtype = t->dtype;
    memcpy(&p->value, t->data, nn_dtype_size(t->dtype));
    return NN_OK;
}

static nn_status constant_of_shape_check(const void *params, char *err, size_t err_size) {
    const constant_of_shape_params *p = params;
    if (!nn_dtype_size(p->dtype) || nn_dtype_size(p->dtype) > sizeof p->value)
        return nn_check_error(err, err_size, "value of dtype %d not supported", (int)p->dtype);
    return NN_OK;
}

static nn_status infer_constant_of_shape(nn_call *c) {
    const constant_of_shape_params *p = c->params;
    int64_t dims[NN_MAX_DIMS];
    int n;
    nn_status st = nn_input_ints(c, 0, "shape", dims, NN_MAX_DIMS, &n);
    if (st != NN_OK) return st;
    for (int k = 0; k < n; k++)
        if (dims[k] < 0) return nn_call_error(c, NN_ERR_INVALID, "shape[%d] is negative (%lld)", k, (long long)dims[k]);
    nn_tensor_set_shape(&c->out[0], p->dtype, n, dims);
    return NN_OK;
}

static nn_status run_constant_of_shape(nn_call *c) {
    const constant_of_shape_params *p = c->params;
    int64_t n = nn_tensor_elements(&c->out[0]);
    if (n > 0) nn_copy_run(c->out[0].data, (const char *)&p->value, nn_dtype_size(p->dtype), n, 0);
    return NN_OK;
}

const nn_op_desc nn_op_ConstantOfShape = {.name = "ConstantOfShape",
                                          .min_inputs = 1,
                                          .max_inputs = 1,
                                          .min_outputs = 1,
                                          .max_outputs = 1,
                                          .parse = parse_constant_of_shape,
                                          .check = constant_of_shape_check,
                                          .infer = infer_constant_of_shape,
                                          .run = run_constant_of_shape};

/* ---- Range */

/* Element count max(ceil((limit - start) / delta), 0), exact for integers. */
static nn_status range_count(nn_call *c, int64_t *count) {
    const nn_tensor *t = c->in;
    if (t[0].dtype == NN_DTYPE_FLOAT) {
        double start = nn_tensor_get_double(&t[0], 0), limit = nn_tensor_get_double(&t[1], 0);
        double delta = nn_tensor_get_double(&t[2], 0);
        double n = ceil((limit - start) / delta);
        if (delta == 0.0 || !isfinite(n) || n > 9007199254740992.0)
            return nn_call_error(c, NN_ERR_INVALID, "range(%g, %g, %g) has no finite length", start, limit, delta);
        *count = n > 0 ? (int64_t)n : 0;
        return NN_OK;
    }
    int64_t start = nn_tensor_get_int(&t[0], 0), limit = nn_tensor_get_int(&t[1], 0);
    int64_t delta = nn_tensor_get_int(&t[2], 0), diff;
    if (delta == 0 || __builtin_sub_overflow(limit, start, &diff))
        return nn_call_error(c, NN_ERR_INVALID, "range(%lld, %lld, %lld) has no finite length", (long long)start,
                             (long long)limit, (long long)delta);
    int64_t n = diff / delta;
    if (n * delta != diff && (diff < 0) == (delta < 0)) n++;
    *count = n > 0 ? n : 0;
    return NN_OK;
}

static nn_status infer_range(nn_call *c) {
    nn_dtype dt = c->in[0].dtype;
    if (dt != NN_DTYPE_FLOAT && dt != NN_DTYPE_INT32 && dt != NN_DTYPE_INT64)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported", nn_dtype_name(dt));
    static const char *const names[] = {"start", "limit", "delta"};
    for (int i = 0; i < 3; i++) {
        if (c->in[i].dtype != dt)
            return nn_call_error(c, NN_ERR_INVALID, "%s is %s, start is %s", names[i], nn_dtype_name(c->in[i].dtype),
                                 nn_dtype_name(dt));
        if (nn_tensor_elements(&c->in[i]) != 1)
            return nn_call_error(c, NN_ERR_SHAPE, "%s must be a scalar", names[i]);
        if (!c->in[i].data) return NN_DYNAMIC;
    }
    int64_t n;
    nn_status st = range_count(c, &n);
    if (st != NN_OK) return st;
    nn_tensor_set_shape(&c->out[0], dt, 1, &n);
    return NN_OK;
}

static nn_status run_range(nn_call *c) {
    nn_tensor *y = &c->out[0];
    int64_t n = y->dims[0];
    size_t esz = nn_dtype_size(y->dtype);
    char *dst = y->data;
    if (y->dtype == NN_DTYPE_FLOAT) {
        double start = nn_tensor_get_double(&c->in[0], 0), delta = nn_tensor_get_double(&c->in[2], 0);
        for (int64_t i = 0; i < n; i++) nn_store_double(dst + i * (int64_t)esz, y->dtype, start + (double)i * delta);
        return NN_OK;
    }
    /* integers stay exact beyond 2^53, so no detour through double */
    int64_t start = nn_tensor_get_int(&c->in[0], 0), delta = nn_tensor_get_int(&c->in[2], 0);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = start + i * delta;
        if (y->dtype == NN_DTYPE_INT64) ((int64_t *)dst)[i] = v;
        else ((int32_t *)dst)[i] = (int32_t)v;
    }
    return NN_OK;
}

const nn_op_desc nn_op_Range = {.name = "Range", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
                                .infer = infer_range, .run = run_range};
