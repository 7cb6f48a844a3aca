/* IEEE-754 binary16 ("half", ONNX FLOAT16) <-> float and double, written from
 * the format's definition: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa
 * bits; exponent 0 holds zero and the subnormals (m * 2^-24), exponent 31
 * infinity (m = 0) and NaN. */
#ifndef NN_HALF_H
#define NN_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Exact: every half is a float. */
static inline float nn_half_to_float(uint16_t h) {
    int e = h >> 10 & 0x1f, m = h & 0x3ff;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 0x400), e - 25);
    return h & 0x8000 ? -v : v;
}

/* Rounded to nearest, ties to even, once (a float converts through here
 * exactly, so float -> half also rounds once).  Beyond the largest half,
 * 65504, values from 65520 on round to infinity; NaN stays a quiet NaN. */
static inline uint16_t nn_half_from_double(double x) {
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    if (a != a) return sign | 0x7e00;
    if (a >= 65520.0) return sign | 0x7c00;
    if (a < 0x1p-14) /* subnormal: a multiple of 2^-24; 1024 * 2^-24 carries into the smallest normal */
        return sign | (uint16_t)nearbyint(a * 0x1p24);
    int e;
    frexp(a, &e); /* a = f * 2^e, f in [0.5, 1): the half's exponent is e - 1 */
    /* 11 significant bits, the leading one included; m = 2048 carries into the exponent */
    uint32_t m = (uint32_t)nearbyint(ldexp(a, 11 - e));
    return sign | (uint16_t)(((uint32_t)(e - 1 + 15) << 10) + m - 0x400);
}

static inline uint16_t nn_half_from_float(float x) { return nn_half_from_double((double)x); }

/* bfloat16 (ONNX BFLOAT16): a float's upper 16 bits, so widening is exact. */
static inline float nn_bf16_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Rounded to nearest, ties to even (as ONNX's Cast specifies); beyond the
 * largest bfloat16 values round to infinity; NaN stays a quiet NaN. */
static inline uint16_t nn_bf16_from_float(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (x != x) return (uint16_t)(u >> 16 | 0x40);
    u += 0x7fff + (u >> 16 & 1);
    return (uint16_t)(u >> 16);
}

/* From double, rounding once: to float by truncation with a sticky low bit
 * ("round to odd", exact for the 8 bits bfloat16 keeps), then to nearest even. */
static inline uint16_t nn_bf16_from_double(double x) {
    float f = (float)x;
    if (x == x && isfinite(f) && (double)f != x) {
        if (fabs((double)f) > fabs(x)) f = nextafterf(f, 0.0f);
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        u |= 1;
        memcpy(&f, &u, sizeof f);
    }
    return nn_bf16_from_float(f);
}

#endif
