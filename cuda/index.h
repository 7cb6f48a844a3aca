/* The per-element work of the CUDA kernels as plain functions that compile
 * for the device (nvcc: __host__ __device__) and for the host (C or C++).
 * A kernel in cuda/ is a grid-stride loop around one of them, so the
 * host test (tests/test_cuda_host.c) runs exactly what each GPU thread runs,
 * over a small grid, and compares with the CPU ops.
 *
 * Tensors are dense and row-major.  Float values are stored as fp32 or, with
 * the fp16 option, as IEEE half; `half` says which, and every load and store
 * goes through nn_cu_load / nn_cu_store, so one body serves both. */
#ifndef NN_CUDA_INDEX_H
#define NN_CUDA_INDEX_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "../ops/act.h"
#include "../ops/fused_elementwise.h"
#include "../ops/geom.h"
#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define NN_HD static inline __host__ __device__
#else
#define NN_HD static inline
#endif

/* threads that share one segment in the reduction kernels: a warp */
#define NN_CU_LANES 32

/* ---- fp16 storage */

/* IEEE half bits to float (exact). */
NN_HD float nn_cu_f16_to_f32(uint16_t h) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(h));
#else
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f)
        bits = sign | 0x7f800000u | (man << 13);
    else if (exp)
        bits = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man)
        bits = sign;
    else { /* subnormal m * 2^-24: normalize the mantissa */
        uint32_t e = 0;
        while (!(man & 0x400u)) {
            man <<= 1;
            e++;
        }
        bits = sign | ((113 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    union {
        uint32_t u;
        float f;
    } v = {bits};
    return v.f;
#endif
}

/* float to IEEE half bits, rounding to nearest even; overflow gives inf. */
NN_HD uint16_t nn_cu_f32_to_f16(float f) {
#ifdef __CUDA_ARCH__
    return __half_as_ushort(__float2half_rn(f));
#else
    union {
        float f;
        uint32_t u;
    } v = {f};
    uint32_t sign = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu, h, rem, halfway;
    if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u)); /* inf, nan */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* 65520 and up round to inf */
    if (a < 0x38800000u) {                                   /* below 2^-14: a subnormal half, m * 2^-24 */
        int shift = 126 - (int)(a >> 23);
        if (shift > 24) return (uint16_t)sign;
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        h = mant >> shift;
        rem = mant & ((1u << shift) - 1);
        halfway = 1u << (shift - 1);
    } else {
        uint32_t r = a - 0x38000000u; /* exponent bias 127 -> 15 */
        h = r >> 13;
        rem = r & 0x1fffu;
        halfway = 0x1000u;
    }
    if (rem > halfway || (rem == halfway && (h & 1u))) h++; /* a carry moves into the exponent, as it should */
    return (uint16_t)(sign | h);
#endif
}

NN_HD float nn_cu_load(const void *p, int64_t i, bool half) {
    return half ? nn_cu_f16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

NN_HD void nn_cu_store(void *p, int64_t i, float v, bool half) {
    if (half)
        ((uint16_t *)p)[i] = nn_cu_f32_to_f16(v);
    else
        ((float *)p)[i] = v;
}

/* ---- index arithmetic */

/* Offset of element i of a row-major walk over dims[0..n) in a tensor with
 * these element strides (0 repeats, as in broadcasting). */
NN_HD int64_t nn_cu_offset(int64_t i, int n, const int64_t *dims, const int64_t *strides) {
    int64_t off = 0;
    for (int d = n - 1; d >= 0; d--) {
        off += (i % dims[d]) * strides[d];
        i /= dims[d];
    }
    return off;
}

/* Indices k in [0, count) with 0 <= k*stride + off < limit form [*lo, *hi)
 * (the window arithmetic of ops/window.c). */
NN_HD void nn_cu_valid_range(int64_t off, int64_t stride, int64_t limit, int64_t count, int64_t *lo, int64_t *hi) {
    int64_t a = off >= 0 ? 0 : (-off + stride - 1) / stride;
    int64_t b = limit - off <= 0 ? 0 : (limit - 1 - off) / stride + 1;
    if (b > count) b = count;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* ---- elementwise programs (ops/fused_elementwise.h): unary and binary
 * ops, FusedElementwise, and the epilogues (bias, residual, activation)
 * of convolutions and GEMMs all run through one kernel. */

NN_HD float nn_cu_ew_unary(int op, float x) {
    switch (op) {
#define NN_CU_UNARY_CASE(name, expr)                                                                                   \
    case NN_EW_##name: return (expr);
        NN_EW_UNARY_OPS(NN_CU_UNARY_CASE)
#undef NN_CU_UNARY_CASE
    default: return x;
    }
}

NN_HD float nn_cu_ew_binary(int op, float x, float y) {
    switch (op) {
#define NN_CU_BINARY_CASE(name, expr)                                                                                  \
    case NN_EW_##name: return (expr);
        NN_EW_BINARY_OPS(NN_CU_BINARY_CASE)
#undef NN_CU_BINARY_CASE
    default: return x;
    }
}

/* The output and its operands, collapsed to the fewest dims over which every
 * operand's strides stay linear (cuda/layout.h builds it). */
typedef struct nn_cu_ew {
    int ndim;
    int64_t dims[NN_MAX_DIMS];
    int64_t total;
    int n_in; /* operand 0 is where the running value starts */
    int64_t strides[NN_EW_MAX_INPUTS][NN_MAX_DIMS];
    int n_steps;
    nn_ew_step steps[NN_EW_MAX_STEPS];
} nn_cu_ew;

/* The program on one element, v[k] being operand k's value there. */
NN_HD float nn_cu_ew_eval(const nn_cu_ew *e, const float *v) {
    float x = v[0];
    for (int s = 0; s < e->n_steps; s++) {
        const nn_ew_step *st = &e->steps[s];
        if (st->op == NN_EW_Act)
            x = nn_act_apply(st->act, st->alpha, st->beta, x);
        else if (st->op == NN_EW_MulAdd)
            x = nn_act_apply(st->act, st->alpha, st->beta, x * v[st->operand] + v[st->operand2]);
        else if (st->op >= NN_EW_Add)
            x = st->swap ? nn_cu_ew_binary(st->op, v[st->operand], x) : nn_cu_ew_binary(st->op, x, v[st->operand]);
        else
            x = nn_cu_ew_unary(st->op, x);
    }
    return x;
}

/* Output element i (the output is dense over e->dims). */
NN_HD void nn_cu_ew_element(const nn_cu_ew *e, const void *const *in, void *out, bool half, int64_t i) {
    int64_t coord[NN_MAX_DIMS];
    int64_t r = i;
    for (int d = e->ndim - 1; d >= 0; d--) {
        coord[d] = r % e->dims[d];
        r /= e->dims[d];
    }
    float v[NN_EW_MAX_INPUTS];
    for (int k = 0; k < e->n_in; k++) {
        int64_t off = 0;
        for (int d = 0; d < e->ndim; d++)
            off += coord[d] * e->strides[k][d];
        v[k] = nn_cu_load(in[k], off, half);
    }
    nn_cu_store(out, i, nn_cu_ew_eval(e, v), half);
}

/* ---- MaxPool / AveragePool over 1 to NSP_MAX spatial dims: one thread per
 * output, the whole window (the CPU kernel is separable instead; the
 * maximum, and the mean's divisor as a product of per-axis counts, agree). */
typedef struct nn_cu_pool {
    int nsp;
    bool max;
    bool include_pad; /* AveragePool count_include_pad */
    int64_t total;    /* outputs: planes x out_size */
    int64_t in_size, out_size;
    int64_t in[NSP_MAX], out[NSP_MAX], kernel[NSP_MAX], stride[NSP_MAX], dilation[NSP_MAX];
    int64_t pad[NSP_MAX], pad_end[NSP_MAX];
} nn_cu_pool;

NN_HD void nn_cu_pool_element(const nn_cu_pool *p, const void *x, void *y, bool half, int64_t o) {
    int64_t plane = o / p->out_size, r = o % p->out_size;
    int64_t start[NSP_MAX], lo[NSP_MAX], hi[NSP_MAX], k[NSP_MAX];
    double divisor = 1.0;
    bool empty = false;
    for (int d = p->nsp - 1; d >= 0; d--) {
        start[d] = (r % p->out[d]) * p->stride[d] - p->pad[d];
        r /= p->out[d];
        nn_cu_valid_range(start[d], p->dilation[d], p->in[d], p->kernel[d], &lo[d], &hi[d]);
        empty |= lo[d] == hi[d];
        int64_t count = hi[d] - lo[d];
        if (p->include_pad) { /* taps inside input and pads, not past the end pad */
            int64_t a, b;
            nn_cu_valid_range(start[d] + p->pad[d], p->dilation[d], p->in[d] + p->pad[d] + p->pad_end[d], p->kernel[d],
                              &a, &b);
            count = b - a;
        }
        divisor *= (double)count;
        k[d] = lo[d];
    }
    float acc = p->max ? -INFINITY : 0.0f;
    if (!empty) {
        const int64_t base = plane * p->in_size;
        for (;;) {
            int64_t off = 0;
            for (int d = 0; d < p->nsp; d++)
                off = off * p->in[d] + start[d] + k[d] * p->dilation[d];
            float v = nn_cu_load(x, base + off, half);
            acc = p->max ? (v > acc ? v : acc) : acc + v;
            int d = p->nsp - 1; /* odometer over the valid taps */
            for (; d >= 0; d--) {
                if (++k[d] < hi[d]) break;
                k[d] = lo[d];
            }
            if (d < 0) break;
        }
        if (!p->max) acc = (float)((double)acc / divisor);
    }
    nn_cu_store(y, o, acc, half);
}

/* ---- segments: reductions, global pooling and softmax give each output
 * (segment) to the NN_CU_LANES threads of one warp; lane l takes the
 * segment's elements l, l + lanes, ..., and the lanes' partial results are
 * combined in a butterfly (lane ^ 16, ^ 8, ... ^ 1). */

typedef enum nn_cu_reduce_kind {
    NN_CU_SUM,
    NN_CU_MEAN,
    NN_CU_MAX,
    NN_CU_MIN,
    NN_CU_PROD,
    NN_CU_L2,
} nn_cu_reduce_kind;

typedef struct nn_cu_reduce {
    int kind;
    int64_t segments; /* outputs */
    int64_t count;    /* elements per segment */
    /* kept dims (output order) and reduced dims, with input strides */
    int nk, nr;
    int64_t k_size[NN_MAX_DIMS], k_stride[NN_MAX_DIMS];
    int64_t r_size[NN_MAX_DIMS], r_stride[NN_MAX_DIMS];
} nn_cu_reduce;

/* Folding one element or one partial result into an accumulator; max and
 * min keep the first NaN they meet, as ops/reduce.c does. */
NN_HD double nn_cu_reduce_init(int kind) {
    return kind == NN_CU_PROD ? 1.0 : kind == NN_CU_MAX ? -INFINITY : kind == NN_CU_MIN ? INFINITY : 0.0;
}
NN_HD double nn_cu_reduce_accum(int kind, double a, double x) {
    switch (kind) {
    case NN_CU_L2: return a + x * x;
    case NN_CU_PROD: return a * x;
    case NN_CU_MAX: return x > a || x != x ? x : a;
    case NN_CU_MIN: return x < a || x != x ? x : a;
    default: return a + x;
    }
}
NN_HD double nn_cu_reduce_merge(int kind, double a, double b) {
    if (kind == NN_CU_L2) return a + b;
    if (kind == NN_CU_MAX || kind == NN_CU_MIN) return a != a ? a : nn_cu_reduce_accum(kind, a, b);
    return nn_cu_reduce_accum(kind, a, b);
}
NN_HD float nn_cu_reduce_final(int kind, double a, int64_t count) {
    if (kind == NN_CU_MEAN) return (float)(a / (double)(count > 0 ? count : 1));
    if (kind == NN_CU_L2) return (float)sqrt(a);
    return (float)a;
}

/* Lane `lane`'s partial result for segment `seg`. */
NN_HD double nn_cu_reduce_partial(const nn_cu_reduce *r, const void *x, bool half, int64_t seg, int lane) {
    int64_t base = nn_cu_offset(seg, r->nk, r->k_size, r->k_stride);
    double acc = nn_cu_reduce_init(r->kind);
    for (int64_t e = lane; e < r->count; e += NN_CU_LANES)
        acc = nn_cu_reduce_accum(r->kind, acc,
                                 nn_cu_load(x, base + nn_cu_offset(e, r->nr, r->r_size, r->r_stride), half));
    return acc;
}

/* Softmax and LogSoftmax over the [outer, n, inner] view: segment s is
 * column (s % inner) of block (s / inner); its element k sits k * inner on. */
typedef struct nn_cu_softmax {
    int64_t outer, n, inner, segments;
    bool log;
} nn_cu_softmax;

NN_HD int64_t nn_cu_softmax_base(const nn_cu_softmax *s, int64_t seg) {
    return seg / s->inner * s->n * s->inner + seg % s->inner;
}
NN_HD float nn_cu_softmax_partial_max(const nn_cu_softmax *s, const void *x, bool half, int64_t seg, int lane) {
    int64_t base = nn_cu_softmax_base(s, seg);
    float m = -INFINITY;
    for (int64_t k = lane; k < s->n; k += NN_CU_LANES) {
        float v = nn_cu_load(x, base + k * s->inner, half);
        m = v > m ? v : m;
    }
    return m;
}
NN_HD float nn_cu_softmax_partial_sum(const nn_cu_softmax *s, const void *x, bool half, int64_t seg, int lane,
                                      float max) {
    int64_t base = nn_cu_softmax_base(s, seg);
    float sum = 0.0f;
    for (int64_t k = lane; k < s->n; k += NN_CU_LANES)
        sum += expf(nn_cu_load(x, base + k * s->inner, half) - max);
    return sum;
}
/* combining two lanes' partial maxima (and sums: +) in the butterfly */
NN_HD float nn_cu_max(float a, float b) { return b > a ? b : a; }
/* With the segment's maximum and sum of exponentials, write the lane's outputs. */
NN_HD void nn_cu_softmax_write(const nn_cu_softmax *s, const void *x, void *y, bool half, int64_t seg, int lane,
                               float max, float sum) {
    int64_t base = nn_cu_softmax_base(s, seg);
    float shift = max + logf(sum), inv = 1.0f / sum;
    for (int64_t k = lane; k < s->n; k += NN_CU_LANES) {
        int64_t at = base + k * s->inner;
        float v = nn_cu_load(x, at, half);
        nn_cu_store(y, at, s->log ? v - shift : expf(v - max) * inv, half);
    }
}

/* ---- data movement: elements are opaque units of `esize` bytes */

NN_HD void nn_cu_copy_element(const void *src, int64_t from, void *dst, int64_t to, int esize) {
    switch (esize) {
    case 1: ((uint8_t *)dst)[to] = ((const uint8_t *)src)[from]; break;
    case 2: ((uint16_t *)dst)[to] = ((const uint16_t *)src)[from]; break;
    case 4: ((uint32_t *)dst)[to] = ((const uint32_t *)src)[from]; break;
    default: ((uint64_t *)dst)[to] = ((const uint64_t *)src)[from]; break;
    }
}

/* Transpose: output element i reads the input at the permuted strides. */
typedef struct nn_cu_transpose {
    int ndim, esize;
    int64_t total;
    int64_t dims[NN_MAX_DIMS];    /* output dims */
    int64_t strides[NN_MAX_DIMS]; /* input element stride of each output dim */
} nn_cu_transpose;

NN_HD void nn_cu_transpose_element(const nn_cu_transpose *t, const void *x, void *y, int64_t i) {
    nn_cu_copy_element(x, nn_cu_offset(i, t->ndim, t->dims, t->strides), y, i, t->esize);
}

/* Resize: taps per output coordinate of every axis (ops/resize.c computes
 * them; nn_resize_taps), axis d's at taps[first[d]].  An output value
 * blends the corners of the taps of its coordinates. */
typedef struct nn_cu_resize {
    int ndim;
    bool linear; /* the last axis blends two taps (else it reads i0) */
    int64_t total;
    int64_t dims[NN_MAX_DIMS]; /* output dims */
    int64_t first[NN_MAX_DIMS];
} nn_cu_resize;

NN_HD void nn_cu_resize_element(const nn_cu_resize *r, const nn_resize_tap *taps, const void *x, void *y, bool half,
                                int64_t i) {
    int last = r->ndim - 1;
    int64_t rem = i / r->dims[last];
    const nn_resize_tap *tw = &taps[r->first[last] + i % r->dims[last]];
    /* corners over the axes before the last: 2^(axes with two taps) of them */
    int64_t off[1 << (NN_MAX_DIMS - 1)];
    float wt[1 << (NN_MAX_DIMS - 1)];
    int nc = 1;
    off[0] = 0;
    wt[0] = 1.0f;
    for (int d = last - 1; d >= 0; d--) {
        const nn_resize_tap *t = &taps[r->first[d] + rem % r->dims[d]];
        rem /= r->dims[d];
        if (t->w1 != 0.0f) {
            for (int c = 0; c < nc; c++) {
                off[c + nc] = off[c] + t->i1;
                wt[c + nc] = wt[c] * t->w1;
            }
            for (int c = 0; c < nc; c++) {
                off[c] += t->i0;
                wt[c] *= t->w0;
            }
            nc *= 2;
        } else {
            for (int c = 0; c < nc; c++)
                off[c] += t->i0;
        }
    }
    float v;
    if (!r->linear) {
        v = nn_cu_load(x, off[0] + tw->i0, half);
    } else {
        v = 0.0f;
        for (int c = 0; c < nc; c++)
            v +=
                wt[c] * (tw->w0 * nn_cu_load(x, off[c] + tw->i0, half) + tw->w1 * nn_cu_load(x, off[c] + tw->i1, half));
    }
    nn_cu_store(y, i, v, half);
}

/* fp32 <-> fp16 at the model's edges and around CPU-run nodes */
NN_HD void nn_cu_convert_element(const void *src, void *dst, bool to_half, int64_t i) {
    if (to_half)
        ((uint16_t *)dst)[i] = nn_cu_f32_to_f16(((const float *)src)[i]);
    else
        ((float *)dst)[i] = nn_cu_f16_to_f32(((const uint16_t *)src)[i]);
}

#endif
