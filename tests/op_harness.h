/* Test harness for single ops: seeded random tensors, attributes, and one
 * op run through the op table (parse, infer, run) as the engine runs it.
 * Checks come from check.h. */
#ifndef NN_TEST_OP_HARNESS_H
#define NN_TEST_OP_HARNESS_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/arena.h"
#include "../ops/registry.h"
#include "check.h"

/* threads each cpu_run gives the op */
static int cpu_threads = 1;
/* whether cpu_run prepares the op (as the engine does for constant
 * weights) before it runs it, and checks prepared_fits on the result */
static bool cpu_prepare = false;
/* whether cpu_run lets a Conv take Winograd (nn_options.winograd: the engine's default) */
static bool cpu_winograd = false;

static uint32_t seed = 2024;
static inline float uniform(float lo, float hi) {
    seed = seed * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(seed >> 8) / (float)(1u << 24);
}

/* ---- tensors and attributes */

/* dtype and ndim int dims from ap; no data yet */
static inline nn_tensor shape_of(nn_dtype dt, int ndim, va_list ap) {
    nn_tensor t = {.dtype = dt, .ndim = ndim};
    for (int d = 0; d < ndim; d++)
        t.dims[d] = va_arg(ap, int);
    return t;
}

static inline nn_tensor tensor(nn_dtype dt, int ndim, ...) {
    va_list ap;
    va_start(ap, ndim);
    nn_tensor t = shape_of(dt, ndim, ap);
    va_end(ap);
    t.data = calloc((size_t)nn_tensor_elements(&t) + 1, nn_dtype_size(dt));
    return t;
}

/* random floats in [lo, hi] */
static inline nn_tensor rand_tensor(float lo, float hi, int ndim, ...) {
    va_list ap;
    va_start(ap, ndim);
    nn_tensor t = shape_of(NN_DTYPE_FLOAT, ndim, ap);
    va_end(ap);
    int64_t n = nn_tensor_elements(&t);
    float *p = malloc(sizeof(float) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++)
        p[i] = uniform(lo, hi);
    t.data = p;
    return t;
}

static inline nn_tensor int64_tensor(int n, const int64_t *v) {
    nn_tensor t = tensor(NN_DTYPE_INT64, 1, n);
    memcpy(t.data, v, sizeof(int64_t) * (size_t)n);
    return t;
}

static inline nn_tensor float_values(int n, const float *v) {
    nn_tensor t = tensor(NN_DTYPE_FLOAT, 1, n);
    memcpy(t.data, v, sizeof(float) * (size_t)n);
    return t;
}

static inline nn_attr attr_int(const char *name, int64_t v) {
    return (nn_attr){.name = name, .type = NN_ATTR_INT, .i = v};
}
static inline nn_attr attr_float(const char *name, float v) {
    return (nn_attr){.name = name, .type = NN_ATTR_FLOAT, .f = v};
}
static inline nn_attr attr_string(const char *name, const char *s) {
    return (nn_attr){.name = name, .type = NN_ATTR_STRING, .s = s};
}
/* ints from a static list (the attribute points at it) */
static inline nn_attr attr_ints(const char *name, int n, const int64_t *v) {
    return (nn_attr){.name = name, .type = NN_ATTR_INTS, .n = n, .ints = v};
}

/* ---- one CPU op through the op table */

enum { MAX_IO = 9 }; /* QLinearConv's */

typedef struct op_run {
    nn_arena arena;
    nn_call call;
    nn_tensor in[MAX_IO], out[2];
    char err[256];
} op_run;

/* Parse (unless params are given), infer and run op `name` on inputs `in`;
 * the run keeps the call, whose params and shapes the descriptors come from.
 * Call release afterwards, whether it succeeded or not. */
static inline bool cpu_run(op_run *r, const char *name, int opset, const nn_attr *attrs, int n_attrs,
                           const void *params, const nn_tensor *in, int n_in, int n_out, const nn_epilogue *ep) {
    memset(r, 0, sizeof *r);
    /* the run owns the inputs from here: release frees them whatever fails */
    memcpy(r->in, in, sizeof(nn_tensor) * (size_t)n_in);
    r->call.n_in = n_in;
    const nn_op_desc *d = nn_op_get(nn_op_lookup(name));
    if (!CHECK(d != NULL, "%s: expected in the op table, not found", name)) return false;
    if (!params && d->parse) {
        nn_parse_ctx ctx = {.attrs = attrs,
                            .n_attrs = n_attrs,
                            .opset = opset,
                            .n_inputs = n_in,
                            .n_outputs = n_out,
                            .arena = &r->arena,
                            .err = r->err,
                            .err_size = sizeof r->err};
        if (!CHECK(d->parse(&ctx) == NN_OK, "%s: parse: expected OK, got '%s'", name, r->err)) return false;
        params = ctx.params;
    }
    r->call = (nn_call){.params = params,
                        .n_in = n_in,
                        .n_out = n_out,
                        .in = r->in,
                        .out = r->out,
                        .threads = cpu_threads,
                        .winograd = cpu_winograd,
                        .epilogue = ep,
                        .err = r->err,
                        .err_size = sizeof r->err};
    nn_status st = d->infer(&r->call);
    if (st == NN_DYNAMIC && d->bound) st = d->bound(&r->call); /* run shrinks the outputs, as in the engine */
    if (!CHECK(st == NN_OK, "%s: infer: expected OK, got %s: %s", name, nn_strerror(st), r->err)) return false;
    for (int k = 0; k < n_out; k++)
        r->out[k].data = calloc((size_t)nn_tensor_elements(&r->out[k]) + 1, nn_dtype_size(r->out[k].dtype));
    size_t prep_size = cpu_prepare && d->prepare && d->prepared_size ? d->prepared_size(&r->call) : 0;
    void *prep = prep_size ? aligned_alloc(64, (prep_size + 63) / 64 * 64) : NULL;
    if (prep) {
        memset(prep, 0, prep_size);
        st = d->prepare(&r->call, prep);
        if (!CHECK(st == NN_OK, "%s: prepare: expected OK, got %s: %s", name, nn_strerror(st), r->err)) {
            free(prep);
            return false;
        }
        CHECK(!d->prepared_fits || d->prepared_fits(&r->call, prep, prep_size), "%s: prepared block does not fit",
              name);
        r->call.prepared = prep;
    }
    size_t ws = d->workspace ? d->workspace(&r->call) : 0;
    r->call.workspace = ws ? malloc(ws) : NULL;
    r->call.workspace_size = ws;
    /* as in the engine, which frees the constants prepare made its own
     * form of: the run must read that form, not them (the checks after it
     * still see them) */
    void *hidden[MAX_IO] = {0};
    for (int k = 0; prep && k < n_in && k < MAX_IO; k++)
        if (d->prepared_inputs & (1u << k)) {
            hidden[k] = r->in[k].data;
            r->in[k].data = NULL;
        }
    st = d->run(&r->call);
    for (int k = 0; k < n_in && k < MAX_IO; k++)
        if (hidden[k]) r->in[k].data = hidden[k];
    free(r->call.workspace);
    free(prep);
    r->call.prepared = NULL;
    r->call.workspace = NULL;
    if (!CHECK(st == NN_OK, "%s: run: expected OK, got %s: %s", name, nn_strerror(st), r->err)) return false;
    return true;
}

static inline void release(op_run *r) {
    for (int k = 0; k < r->call.n_in; k++)
        free(r->in[k].data);
    for (int k = 0; k < r->call.n_out; k++)
        free(r->out[k].data);
    nn_arena_free(&r->arena);
}

#endif
