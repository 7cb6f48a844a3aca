/* Helpers shared by all operators: attribute access, shapes, broadcasting. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/arena.h"
#include "half.h"
#include "op.h"

static const char *attr_type_name(nn_attr_type t) {
    switch (t) {
    case NN_ATTR_FLOAT: return "float";
    case NN_ATTR_INT: return "int";
    case NN_ATTR_STRING: return "string";
    case NN_ATTR_TENSOR: return "tensor";
    case NN_ATTR_GRAPH: return "graph";
    case NN_ATTR_FLOATS: return "floats";
    case NN_ATTR_INTS: return "ints";
    case NN_ATTR_STRINGS: return "strings";
    }
    return "unknown";
}

nn_status nn_parse_error(nn_parse_ctx *ctx, nn_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, ctx->err_size, fmt, ap);
    va_end(ap);
    return st;
}

nn_status nn_check_error(char *err, size_t err_size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
    return NN_ERR_INVALID;
}

nn_status nn_call_error(const nn_call *call, nn_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(call->err, call->err_size, fmt, ap);
    va_end(ap);
    return st;
}

const nn_attr *nn_attr_find(const nn_parse_ctx *ctx, const char *name) {
    for (int i = 0; i < ctx->n_attrs; i++)
        if (strcmp(ctx->attrs[i].name, name) == 0) return &ctx->attrs[i];
    return NULL;
}

static nn_status attr_typed(nn_parse_ctx *ctx, const char *name, nn_attr_type want, const nn_attr **out) {
    *out = nn_attr_find(ctx, name);
    if (*out && (*out)->type != want)
        return nn_parse_error(ctx, NN_ERR_INVALID, "attribute '%s' must be of type %s, got %s", name,
                              attr_type_name(want), attr_type_name((*out)->type));
    return NN_OK;
}

nn_status nn_attr_int(nn_parse_ctx *ctx, const char *name, int64_t dflt, int64_t *out) {
    const nn_attr *a;
    nn_status st = attr_typed(ctx, name, NN_ATTR_INT, &a);
    *out = a ? a->i : dflt;
    return st;
}

nn_status nn_attr_float(nn_parse_ctx *ctx, const char *name, float dflt, float *out) {
    const nn_attr *a;
    nn_status st = attr_typed(ctx, name, NN_ATTR_FLOAT, &a);
    *out = a ? a->f : dflt;
    return st;
}

nn_status nn_attr_string(nn_parse_ctx *ctx, const char *name, const char *dflt, const char **out) {
    const nn_attr *a;
    nn_status st = attr_typed(ctx, name, NN_ATTR_STRING, &a);
    *out = a ? a->s : dflt;
    return st;
}

nn_status nn_attr_ints(nn_parse_ctx *ctx, const char *name, int64_t *out, int cap, int *n) {
    const nn_attr *a;
    nn_status st = attr_typed(ctx, name, NN_ATTR_INTS, &a);
    *n = -1;
    if (st != NN_OK || !a) return st;
    if (a->n > cap)
        return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "attribute '%s' has %d values, at most %d supported", name, a->n,
                              cap);
    memcpy(out, a->ints, sizeof(int64_t) * (size_t)a->n);
    *n = a->n;
    return NN_OK;
}

nn_status nn_attr_floats(nn_parse_ctx *ctx, const char *name, float *out, int cap, int *n) {
    const nn_attr *a;
    nn_status st = attr_typed(ctx, name, NN_ATTR_FLOATS, &a);
    *n = -1;
    if (st != NN_OK || !a) return st;
    if (a->n > cap)
        return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "attribute '%s' has %d values, at most %d supported", name, a->n,
                              cap);
    memcpy(out, a->floats, sizeof(float) * (size_t)a->n);
    *n = a->n;
    return NN_OK;
}

nn_status nn_attr_tensor(nn_parse_ctx *ctx, const char *name, const nn_tensor **out) {
    const nn_attr *a;
    nn_status st = attr_typed(ctx, name, NN_ATTR_TENSOR, &a);
    *out = a ? a->t : NULL;
    return st;
}

void *nn_params_alloc(nn_parse_ctx *ctx, size_t size) {
    if (!ctx->params_size) ctx->params_size = size; /* the first block is the params struct */
    return nn_arena_alloc(ctx->arena, size);
}

int64_t nn_shape_elements(const int64_t *dims, int ndim) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= dims[i];
    return n;
}

bool nn_axis_normalize(int64_t axis, int rank, int64_t *out) {
    if (axis < -rank || axis >= rank) return false;
    *out = axis < 0 ? axis + rank : axis;
    return true;
}

void nn_tensor_set_shape(nn_tensor *t, nn_dtype dtype, int ndim, const int64_t *dims) {
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->dims[i] = dims[i];
}

int64_t nn_tensor_get_int(const nn_tensor *t, int64_t i) {
    switch (t->dtype) {
    case NN_DTYPE_INT64: return ((const int64_t *)t->data)[i];
    case NN_DTYPE_INT32: return ((const int32_t *)t->data)[i];
    case NN_DTYPE_INT8: return ((const int8_t *)t->data)[i];
    case NN_DTYPE_UINT8:
    case NN_DTYPE_BOOL: return ((const uint8_t *)t->data)[i];
    case NN_DTYPE_FLOAT: return (int64_t)((const float *)t->data)[i];
    default: return 0;
    }
}

double nn_tensor_get_double(const nn_tensor *t, int64_t i) {
    if (t->dtype == NN_DTYPE_FLOAT) return ((const float *)t->data)[i];
    return (double)nn_tensor_get_int(t, i);
}

void nn_store_double(void *dst, nn_dtype dt, double v) {
    switch (dt) {
    case NN_DTYPE_FLOAT: *(float *)dst = (float)v; break;
    case NN_DTYPE_DOUBLE: *(double *)dst = v; break;
    case NN_DTYPE_FLOAT16: *(uint16_t *)dst = nn_half_from_double(v); break;
    case NN_DTYPE_BFLOAT16: *(uint16_t *)dst = nn_bf16_from_double(v); break;
    case NN_DTYPE_INT64: *(int64_t *)dst = (int64_t)v; break;
    case NN_DTYPE_UINT64: *(uint64_t *)dst = (uint64_t)v; break;
    case NN_DTYPE_INT32: *(int32_t *)dst = (int32_t)v; break;
    case NN_DTYPE_UINT32: *(uint32_t *)dst = (uint32_t)v; break;
    case NN_DTYPE_INT16: *(int16_t *)dst = (int16_t)v; break;
    case NN_DTYPE_UINT16: *(uint16_t *)dst = (uint16_t)v; break;
    case NN_DTYPE_INT8: *(int8_t *)dst = (int8_t)v; break;
    case NN_DTYPE_UINT8: *(uint8_t *)dst = (uint8_t)v; break;
    case NN_DTYPE_BOOL: *(uint8_t *)dst = v != 0.0; break;
    default: break;
    }
}

nn_status nn_broadcast_shape(nn_call *call, const nn_tensor *a, const nn_tensor *b, nn_tensor *out) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    int64_t dims[NN_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return nn_call_error(call, NN_ERR_SHAPE, "cannot broadcast dimension %d: %lld vs %lld", i, (long long)da,
                                 (long long)db);
        dims[i] = da == 1 ? db : da;
    }
    out->ndim = nd;
    memcpy(out->dims, dims, sizeof(int64_t) * (size_t)nd);
    return NN_OK;
}

void nn_broadcast_strides(const nn_tensor *in, int ndim, const int64_t *out_dims, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        int ii = i - (ndim - in->ndim);
        int64_t d = ii >= 0 ? in->dims[ii] : 1;
        strides[i] = (d == 1 && out_dims[i] != 1) ? 0 : s;
        s *= d;
    }
}

bool nn_env_switch(int *state, const char *name) {
    int on = __atomic_load_n(state, __ATOMIC_RELAXED);
    if (on < 0) {
        const char *env = getenv(name);
        on = !(env && !strcmp(env, "0"));
        __atomic_store_n(state, on, __ATOMIC_RELAXED);
    }
    return on;
}
