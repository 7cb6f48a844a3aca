/* Linear quantization between float and 8-bit integers: QuantizeLinear,
 * DequantizeLinear (opsets 10-17: per tensor; from 13 also per axis) and
 * DynamicQuantizeLinear (uint8).
 *
 *     quantize:   y = saturate(round(x / scale) + zero_point)
 *     dequantize: y = (x - zero_point) * scale
 *
 * round is half to even (rintf in the default rounding mode), saturate
 * clamps to the output dtype, as in the spec; x / scale is a float
 * division, not a multiply by 1/scale, as ONNX Runtime's kernel computes
 * it, so the two agree bit for bit.  The integer ops (QLinearConv and the
 * rest) are in ops/qlinear.c and share nn_quantize_value. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "act_x86.h"
#include "op.h"
#include "par.h"
#include "quant.h"

typedef nn_qdq_params qdq_params;

static nn_status parse_qdq(nn_parse_ctx *ctx) {
    qdq_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    p->per_axis_ok = ctx->opset >= 13;
    return nn_attr_int(ctx, "axis", 1, &p->axis);
}

static nn_status check_qdq(const void *params, char *err, size_t err_size) {
    const qdq_params *p = params;
    if (!nn_check_axis(p->axis)) return nn_check_error(err, err_size, "axis %lld is out of range", (long long)p->axis);
    if (p->per_axis_ok != 0 && p->per_axis_ok != 1)
        return nn_check_error(err, err_size, "per_axis_ok must be 0 or 1, got %d", (int)p->per_axis_ok);
    return NN_OK;
}

nn_status nn_quant_layout(nn_call *c, int data, int scale, int zero, int64_t axis, bool per_axis_ok, nn_quant_view *v) {
    const nn_tensor *x = &c->in[data], *s = &c->in[scale];
    v->outer = 1;
    v->len = 1;
    v->inner = nn_tensor_elements(x);
    int64_t ns = nn_tensor_elements(s);
    if (s->dtype != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "scale (input %d) must be float, got %s", scale,
                             nn_dtype_name(s->dtype));
    if (s->ndim > 1 || ns < 1)
        return nn_call_error(c, NN_ERR_SHAPE, "scale (input %d) must be a scalar or 1-D, got rank %d with %lld values",
                             scale, s->ndim, (long long)ns);
    if (s->ndim == 1 && (ns > 1 || per_axis_ok)) {
        int64_t ax;
        if (!per_axis_ok)
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "a per-axis scale needs opset 13 or later");
        if (!nn_axis_normalize(axis, x->ndim, &ax))
            return nn_call_error(c, NN_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)axis, x->ndim);
        if (x->dims[ax] != ns)
            return nn_call_error(c, NN_ERR_SHAPE, "scale has %lld values, axis %lld has %lld", (long long)ns,
                                 (long long)ax, (long long)x->dims[ax]);
        v->outer = nn_shape_elements(x->dims, (int)ax);
        v->len = ns;
        v->inner = nn_shape_elements(x->dims + ax + 1, x->ndim - (int)ax - 1);
    }
    if (nn_present(c, zero)) {
        const nn_tensor *z = &c->in[zero];
        if (z->ndim != s->ndim || nn_tensor_elements(z) != ns)
            return nn_call_error(c, NN_ERR_SHAPE, "zero point (input %d) must have the shape of the scale", zero);
    }
    return NN_OK;
}

int32_t nn_quant_zero(const nn_call *c, int zero, int64_t i) {
    if (!nn_present(c, zero)) return 0;
    const nn_tensor *z = &c->in[zero];
    switch (z->dtype) {
    case NN_DTYPE_INT8: return ((const int8_t *)z->data)[i];
    case NN_DTYPE_UINT8: return ((const uint8_t *)z->data)[i];
    default: return ((const int32_t *)z->data)[i];
    }
}

/* ---- QuantizeLinear */

static nn_status infer_quantize(nn_call *c) {
    const qdq_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    if (x->dtype != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "x has dtype %s (float only)", nn_dtype_name(x->dtype));
    nn_dtype out = NN_DTYPE_UINT8;
    if (nn_present(c, 2)) {
        out = c->in[2].dtype;
        if (out != NN_DTYPE_UINT8 && out != NN_DTYPE_INT8)
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "y_zero_point has dtype %s (uint8 or int8 only)",
                                 nn_dtype_name(out));
    }
    nn_quant_view v;
    nn_status st = nn_quant_layout(c, 0, 1, 2, p->axis, p->per_axis_ok, &v);
    if (st != NN_OK) return st;
    nn_tensor_set_shape(&c->out[0], out, x->ndim, x->dims);
    return NN_OK;
}

/* A run of QuantizeLinear, its operands as arguments so that the loop
 * vectorizes (inside an OpenMP region, the byte stores might alias the
 * region's shared variables). */
static void quantize_chunk(const float *restrict x, uint8_t *restrict y, int64_t n, float sc, int32_t zp, int32_t lo,
                           int32_t hi) {
    for (int64_t i = 0; i < n; i++)
        y[i] = (uint8_t)nn_quantize_value(x[i], sc, zp, lo, hi);
}

typedef struct quantize_job {
    const nn_call *c;
    const float *x, *s;
    uint8_t *y;
    int64_t n, inner, len;
    float sc;
    int32_t zp, lo, hi;
} quantize_job;

/* Per tensor: chunks [lo, hi) of 4096 values. */
static void quantize_flat_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const quantize_job *j = ctx;
    for (int64_t t = lo; t < hi; t++)
        quantize_chunk(j->x + t * 4096, j->y + t * 4096, j->n - t * 4096 < 4096 ? j->n - t * 4096 : 4096, j->sc, j->zp,
                       j->lo, j->hi);
}

/* Per axis: rows [lo, hi) of inner values, each with its scale. */
static void quantize_rows_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const quantize_job *j = ctx;
    for (int64_t r = lo; r < hi; r++) {
        int64_t a = r % j->len;
        float sc = j->s[a];
        int32_t zp = nn_quant_zero(j->c, 2, a);
        quantize_chunk(j->x + r * j->inner, j->y + r * j->inner, j->inner, sc, zp, j->lo, j->hi);
    }
}

static nn_status run_quantize(nn_call *c) {
    const qdq_params *p = c->params;
    nn_quant_view v;
    nn_status st = nn_quant_layout(c, 0, 1, 2, p->axis, p->per_axis_ok, &v);
    if (st != NN_OK) return st;
    const float *x = c->in[0].data, *s = c->in[1].data;
    bool sgn = c->out[0].dtype == NN_DTYPE_INT8;
    int32_t lo = sgn ? -128 : 0, hi = sgn ? 127 : 255;
    uint8_t *y = c->out[0].data;
    quantize_job j = {.c = c, .x = x, .s = s, .y = y, .inner = v.inner, .len = v.len, .lo = lo, .hi = hi};
    if (v.len == 1) { /* per tensor: one flat loop, so that all threads share it */
        int64_t n = v.outer * v.inner, chunks = (n + 4095) / 4096;
        j.n = n;
        j.sc = s[0];
        j.zp = nn_quant_zero(c, 2, 0);
        nn_par_for_range(n > NN_PAR_MIN ? c->threads : 1, chunks, 1, quantize_flat_range, &j);
        return NN_OK;
    }
    int64_t rows = v.outer * v.len;
    nn_par_for_range(rows * v.inner > NN_PAR_MIN ? c->threads : 1, rows, 1, quantize_rows_range, &j);
    return NN_OK;
}

const nn_op_desc nn_op_QuantizeLinear = {.name = "QuantizeLinear",
                                         .min_inputs = 2,
                                         .max_inputs = 3,
                                         .min_outputs = 1,
                                         .max_outputs = 1,
                                         .parse = parse_qdq,
                                         .check = check_qdq,
                                         .infer = infer_quantize,
                                         .run = run_quantize};

/* ---- DequantizeLinear */

static nn_status infer_dequantize(nn_call *c) {
    const qdq_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    if (x->dtype != NN_DTYPE_UINT8 && x->dtype != NN_DTYPE_INT8 && x->dtype != NN_DTYPE_INT32)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "x has dtype %s (uint8, int8 or int32 only)",
                             nn_dtype_name(x->dtype));
    if (nn_present(c, 2) && c->in[2].dtype != x->dtype)
        return nn_call_error(c, NN_ERR_INVALID, "x_zero_point has dtype %s, x %s", nn_dtype_name(c->in[2].dtype),
                             nn_dtype_name(x->dtype));
    nn_quant_view v;
    nn_status st = nn_quant_layout(c, 0, 1, 2, p->axis, p->per_axis_ok, &v);
    if (st != NN_OK) return st;
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, x->ndim, x->dims);
    return NN_OK;
}

typedef struct dequantize_job {
    const nn_call *c;
    const nn_tensor *x;
    const float *s;
    float *y;
    int64_t len, inner, total;
} dequantize_job;

static void dequantize_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const dequantize_job *j = ctx;
    const nn_tensor *x = j->x;
    float *y = j->y;
    for (int64_t r = lo; r < hi; r++) {
        int64_t a = r % j->len;
        float sc = j->s[a];
        int32_t zp = nn_quant_zero(j->c, 2, a);
        int64_t i0 = r * j->inner, i1 = i0 + j->inner < j->total ? i0 + j->inner : j->total;
        switch (x->dtype) {
        case NN_DTYPE_UINT8:
            for (int64_t i = i0; i < i1; i++)
                y[i] = (float)(((const uint8_t *)x->data)[i] - zp) * sc;
            break;
        case NN_DTYPE_INT8:
            for (int64_t i = i0; i < i1; i++)
                y[i] = (float)(((const int8_t *)x->data)[i] - zp) * sc;
            break;
        default:
            for (int64_t i = i0; i < i1; i++)
                y[i] = (float)((const int32_t *)x->data)[i] * sc;
            break;
        }
    }
}

static nn_status run_dequantize(nn_call *c) {
    const qdq_params *p = c->params;
    nn_quant_view v;
    nn_status st = nn_quant_layout(c, 0, 1, 2, p->axis, p->per_axis_ok, &v);
    if (st != NN_OK) return st;
    const nn_tensor *x = &c->in[0];
    const float *s = c->in[1].data;
    float *y = c->out[0].data;
    int64_t rows = v.outer * v.len, inner = v.inner;
    if (v.len == 1) { /* per tensor: rows of 4096, so that all threads share the work */
        inner = 4096;
        rows = (v.outer * v.inner + inner - 1) / inner;
    }
    int64_t total = v.outer * v.len * v.inner;
    if (x->dtype == NN_DTYPE_INT32 && nn_present(c, 2))
        for (int64_t a = 0; a < v.len; a++)
            if (nn_quant_zero(c, 2, a) != 0)
                return nn_call_error(c, NN_ERR_INVALID, "an int32 x needs a zero x_zero_point");
    dequantize_job j = {.c = c, .x = x, .s = s, .y = y, .len = v.len, .inner = inner, .total = total};
    nn_par_for_range(total > NN_PAR_MIN ? c->threads : 1, rows, 1, dequantize_range, &j);
    return NN_OK;
}

const nn_op_desc nn_op_DequantizeLinear = {.name = "DequantizeLinear",
                                           .min_inputs = 2,
                                           .max_inputs = 3,
                                           .min_outputs = 1,
                                           .max_outputs = 1,
                                           .parse = parse_qdq,
                                           .check = check_qdq,
                                           .infer = infer_dequantize,
                                           .run = run_dequantize};

/* ---- DynamicQuantizeLinear: uint8 with a scale and zero point that make
 *      [min(x, 0), max(x, 0)] span [0, 255] */

static nn_status infer_dynquant(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    if (x->dtype != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "x has dtype %s (float only)", nn_dtype_name(x->dtype));
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_UINT8, x->ndim, x->dims);
    if (c->n_out > 1) nn_tensor_set_shape(&c->out[1], NN_DTYPE_FLOAT, 0, NULL);
    if (c->n_out > 2) nn_tensor_set_shape(&c->out[2], NN_DTYPE_UINT8, 0, NULL);
    return NN_OK;
}

typedef struct dynquant_job {
    const float *x;
    uint8_t *y;
    float scale;
    int32_t zp;
} dynquant_job;

static void dynquant_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const dynquant_job *j = ctx;
    const float *x = j->x;
    uint8_t *y = j->y;
    float scale = j->scale;
    int32_t zp = j->zp;
    for (int64_t i = lo; i < hi; i++)
        y[i] = (uint8_t)nn_quantize_value(x[i], scale, zp, 0, 255);
}

static nn_status run_dynquant(nn_call *c) {
    const float *x = c->in[0].data;
    int64_t n = nn_tensor_elements(&c->in[0]);
    float lo = 0.0f, hi = 0.0f; /* the range always holds 0 */
    for (int64_t i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    /* as ONNX Runtime: an all-zero input gets scale 1, not a division by 0 */
    float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    float z = 0.0f - lo / scale;
    z = !(z >= 0.0f) ? 0.0f : z > 255.0f ? 255.0f : z; /* NaN (an infinite x) too */
    int32_t zp = (int32_t)rintf(z);
    uint8_t *y = c->out[0].data;
    dynquant_job j = {.x = x, .y = y, .scale = scale, .zp = zp};
    nn_par_for_range(n > NN_PAR_MIN ? c->threads : 1, n, 4096, dynquant_range, &j);
    if (c->n_out > 1 && c->out[1].data) *(float *)c->out[1].data = scale;
    if (c->n_out > 2 && c->out[2].data) *(uint8_t *)c->out[2].data = (uint8_t)zp;
    return NN_OK;
}

const nn_op_desc nn_op_DynamicQuantizeLinear = {.name = "DynamicQuantizeLinear",
                                                .min_inputs = 1,
                                                .max_inputs = 1,
                                                .min_outputs = 1,
                                                .max_outputs = 3,
                                                .infer = infer_dynquant,
                                                .run = run_dynquant};

/* ---- QLinearAdd: the quantized residual Add (fuse_qdq makes it from
 *      DequantizeLinear(a), DequantizeLinear(b) -> Add -> QuantizeLinear).
 *      Inputs as ONNX Runtime's com.microsoft op: A, A_scale, A_zero_point,
 *      B, B_scale, B_zero_point, C_scale, C_zero_point, all per tensor, A
 *      and B of one shape.  It computes what the three nodes compute in
 *      float, operation for operation,
 *          y = saturate(round_half_even((float(a - za) * sa + float(b - zb) * sb) / sc) + zc),
 *      so the rewrite changes no output bit; it only skips writing and
 *      reading the float tensors (and ONNX Runtime's fixed-point variant
 *      is not copied). */

static nn_status qadd_check(nn_call *c) {
    const nn_tensor *a = &c->in[0], *b = &c->in[3];
    for (int i = 0; i < 8; i++) {
        bool zero = i == 2 || i == 5 || i == 7, data = i == 0 || i == 3;
        const nn_tensor *t = &c->in[i];
        if (!nn_present(c, i)) return nn_call_error(c, NN_ERR_INVALID, "input %d is missing", i);
        if (data) {
            if (t->dtype != NN_DTYPE_UINT8 && t->dtype != NN_DTYPE_INT8)
                return nn_call_error(c, NN_ERR_UNSUPPORTED, "input %d has dtype %s (uint8 or int8 only)", i,
                                     nn_dtype_name(t->dtype));
            continue;
        }
        if (nn_tensor_elements(t) != 1 || t->ndim > 1)
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "input %d must be one value (per tensor)", i);
        if (!zero && t->dtype != NN_DTYPE_FLOAT)
            return nn_call_error(c, NN_ERR_INVALID, "scale (input %d) must be float, got %s", i,
                                 nn_dtype_name(t->dtype));
        nn_dtype want = i == 2 ? a->dtype : i == 5 ? b->dtype : t->dtype;
        if (zero && (t->dtype != want || (t->dtype != NN_DTYPE_UINT8 && t->dtype != NN_DTYPE_INT8)))
            return nn_call_error(c, NN_ERR_INVALID, "zero point (input %d) has dtype %s, want its data's (8-bit)", i,
                                 nn_dtype_name(t->dtype));
    }
    if (a->ndim != b->ndim || memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim))
        return nn_call_error(c, NN_ERR_SHAPE, "A and B must have the same shape");
    return NN_OK;
}

static nn_status infer_qadd(nn_call *c) {
    nn_status st = qadd_check(c);
    if (st != NN_OK) return st;
    nn_tensor_set_shape(&c->out[0], c->in[7].dtype, c->in[0].ndim, c->in[0].dims);
    return NN_OK;
}

/* One chunk of QLinearAdd, with its operands as arguments (not the shared
 * variables of an OpenMP region, which the byte stores might alias), so
 * that the loop vectorizes; compiled once per ISA for the four signedness
 * pairs (as baseline x86-64 code it ran 4 lanes wide: 9% of QDQ
 * ResNet-50's time on one thread). */
typedef void (*qadd_fn)(const uint8_t *a, const uint8_t *b, uint8_t *y, int64_t n, float sa, int32_t za, float sb,
                        int32_t zb, float sc, int32_t zc, int32_t lo, int32_t hi);
#define QADD_CHUNK(NAME, ATTR, TA, TB)                                                                                 \
    ATTR static void NAME(const uint8_t *a8, const uint8_t *b8, uint8_t *restrict y, int64_t n, float sa, int32_t za,  \
                          float sb, int32_t zb, float sc, int32_t zc, int32_t lo, int32_t hi) {                        \
        const TA *restrict a = (const TA *)a8;                                                                         \
        const TB *restrict b = (const TB *)b8;                                                                         \
        for (int64_t i = 0; i < n; i++) {                                                                              \
            float fa = (float)((int32_t)a[i] - za) * sa, fb = (float)((int32_t)b[i] - zb) * sb;                        \
            y[i] = (uint8_t)nn_quantize_value(fa + fb, sc, zc, lo, hi);                                                \
        }                                                                                                              \
    }
#define QADD_FOR(SUFFIX, ATTR)                                                                                         \
    QADD_CHUNK(qadd_uu_##SUFFIX, ATTR, uint8_t, uint8_t)                                                               \
    QADD_CHUNK(qadd_ss_##SUFFIX, ATTR, int8_t, int8_t)                                                                 \
    QADD_CHUNK(qadd_su_##SUFFIX, ATTR, int8_t, uint8_t)                                                                \
    QADD_CHUNK(qadd_us_##SUFFIX, ATTR, uint8_t, int8_t)                                                                \
    static const qadd_fn qadd_##SUFFIX[4] = {qadd_uu_##SUFFIX, qadd_us_##SUFFIX, qadd_su_##SUFFIX, qadd_ss_##SUFFIX};
#if NN_HAVE_X86
QADD_FOR(avx512, T512)
QADD_FOR(avx2, T256)
#endif
QADD_FOR(scalar, )

/* The chunk function for operands of these signednesses, on this ISA. */
static qadd_fn qadd_for(bool sa8, bool sb8) {
    int k = (sa8 ? 2 : 0) + (sb8 ? 1 : 0);
#if NN_HAVE_X86
    if (nn_isa_active() == NN_ISA_AVX512) return qadd_avx512[k];
    if (nn_isa_active() == NN_ISA_AVX2) return qadd_avx2[k];
#endif
    return qadd_scalar[k];
}

typedef struct qadd_job {
    const uint8_t *pa, *pb;
    uint8_t *y;
    int64_t n;
    float sa, sb, sc;
    int32_t za, zb, zc, lo, hi;
    qadd_fn chunk;
} qadd_job;

static void qadd_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const qadd_job *j = ctx;
    for (int64_t t = lo; t < hi; t++) {
        int64_t i0 = t * 4096, len = i0 + 4096 < j->n ? 4096 : j->n - i0;
        j->chunk(j->pa + i0, j->pb + i0, j->y + i0, len, j->sa, j->za, j->sb, j->zb, j->sc, j->zc, j->lo, j->hi);
    }
}

static nn_status run_qadd(nn_call *c) {
    nn_status st = qadd_check(c);
    if (st != NN_OK) return st;
    const uint8_t *pa = c->in[0].data, *pb = c->in[3].data;
    float sa = *(const float *)c->in[1].data, sb = *(const float *)c->in[4].data, sc = *(const float *)c->in[6].data;
    int32_t za = nn_quant_zero(c, 2, 0), zb = nn_quant_zero(c, 5, 0), zc = nn_quant_zero(c, 7, 0);
    bool sa8 = c->in[0].dtype == NN_DTYPE_INT8, sb8 = c->in[3].dtype == NN_DTYPE_INT8;
    bool sgn = c->out[0].dtype == NN_DTYPE_INT8;
    int32_t lo = sgn ? -128 : 0, hi = sgn ? 127 : 255;
    uint8_t *y = c->out[0].data;
    int64_t n = nn_tensor_elements(&c->in[0]), chunks = (n + 4095) / 4096;
    qadd_job j = {.pa = pa,
                  .pb = pb,
                  .y = y,
                  .n = n,
                  .sa = sa,
                  .sb = sb,
                  .sc = sc,
                  .za = za,
                  .zb = zb,
                  .zc = zc,
                  .lo = lo,
                  .hi = hi,
                  .chunk = qadd_for(sa8, sb8)};
    nn_par_for_range(n > NN_PAR_MIN ? c->threads : 1, chunks, 1, qadd_range, &j);
    return NN_OK;
}

const nn_op_desc nn_op_QLinearAdd = {.name = "QLinearAdd",
                                     .flags = NN_OPF_INTERNAL,
                                     .min_inputs = 8,
                                     .max_inputs = 8,
                                     .min_outputs = 1,
                                     .max_outputs = 1,
                                     .infer = infer_qadd,
                                     .run = run_qadd};

/* ---- QLookup: y = table[x] on bytes (passes/fuse_lut.c makes it from a
 *      per-tensor DequantizeLinear, elementwise float nodes of that one
 *      input, and a per-tensor QuantizeLinear: every output byte is then a
 *      function of its input byte alone, which the pass tabulates by
 *      running those very nodes on all 256 bytes).  Inputs: x (uint8 or
 *      int8), table (256 bytes, uint8 or int8: the output's dtype), indexed
 *      by x's byte as unsigned. */

static nn_status infer_qlookup(nn_call *c) {
    const nn_tensor *x = &c->in[0], *t = &c->in[1];
    if (x->dtype != NN_DTYPE_UINT8 && x->dtype != NN_DTYPE_INT8)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "x has dtype %s (uint8 or int8 only)", nn_dtype_name(x->dtype));
    if ((t->dtype != NN_DTYPE_UINT8 && t->dtype != NN_DTYPE_INT8) || t->ndim != 1 || t->dims[0] != 256)
        return nn_call_error(c, NN_ERR_INVALID, "the table must be 256 bytes (uint8 or int8), got %s of %lld",
                             nn_dtype_name(t->dtype), (long long)nn_tensor_elements(t));
    nn_tensor_set_shape(&c->out[0], t->dtype, x->ndim, x->dims);
    return NN_OK;
}

typedef struct qlookup_job {
    const uint8_t *x, *table;
    uint8_t *y; /* may be x (the planner runs elementwise ops in place) */
    int64_t n;
    bool vbmi;
} qlookup_job;

#if NN_HAVE_X86
/* 64 lookups an iteration: VPERMI2B picks from the table's two 128-byte
 * halves by the index's low 7 bits, its top bit chooses the half. */
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void qlookup_vbmi(const uint8_t *x, const uint8_t *table,
                                                                               uint8_t *y, int64_t n) {
    __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
    __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
    for (int64_t i = 0; i < n; i += 64) {
        __mmask64 m = n - i >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (n - i)) - 1);
        __m512i idx = _mm512_maskz_loadu_epi8(m, x + i);
        __m512i lo = _mm512_permutex2var_epi8(t0, idx, t1), hi = _mm512_permutex2var_epi8(t2, idx, t3);
        _mm512_mask_storeu_epi8(y + i, m, _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lo, hi));
    }
}
#endif

static void qlookup_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const qlookup_job *j = ctx;
    for (int64_t t = lo; t < hi; t++) {
        int64_t i0 = t * 4096, end = i0 + 4096 < j->n ? i0 + 4096 : j->n;
#if NN_HAVE_X86
        if (j->vbmi) {
            qlookup_vbmi(j->x + i0, j->table, j->y + i0, end - i0);
            continue;
        }
#endif
        /* a byte at a time; four independent lookups a step (one a step ran
         * at half the speed in one build of the same code as in another) */
        const uint8_t *x = j->x, *table = j->table;
        uint8_t *y = j->y;
        int64_t i = i0;
        for (; i + 4 <= end; i += 4) {
            uint8_t a = table[x[i]], b = table[x[i + 1]], c = table[x[i + 2]], d = table[x[i + 3]];
            y[i] = a;
            y[i + 1] = b;
            y[i + 2] = c;
            y[i + 3] = d;
        }
        for (; i < end; i++)
            y[i] = table[x[i]];
    }
}

static nn_status run_qlookup(nn_call *c) {
    nn_status st = infer_qlookup(c);
    if (st != NN_OK) return st;
    int64_t n = nn_tensor_elements(&c->in[0]);
    qlookup_job j = {.x = c->in[0].data,
                     .table = c->in[1].data,
                     .y = c->out[0].data,
                     .n = n,
                     .vbmi = nn_isa_ext_at(nn_isa_active(), NN_ISA_EXT_AVX512_VBMI)};
    nn_par_for_range(n > 4 * NN_PAR_MIN ? c->threads : 1, (n + 4095) / 4096, 1, qlookup_range, &j);
    return NN_OK;
}

const nn_op_desc nn_op_QLookup = {.name = "QLookup",
                                  .flags = NN_OPF_INTERNAL | NN_OPF_ELEMENTWISE,
                                  .min_inputs = 2,
                                  .max_inputs = 2,
                                  .min_outputs = 1,
                                  .max_outputs = 1,
                                  .infer = infer_qlookup,
                                  .run = run_qlookup};
