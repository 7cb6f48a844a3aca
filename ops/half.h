/* IEEE-754 binary16 ("half", ONNX FLOAT16) <-> float and double, written from
 * the format's definition: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa
 * bits; exponent 0 holds zero and the subnormals (m * 2^-24), exponent 31
 * infinity (m = 0) and NaN. */
#ifndef NN_HALF_H
#define NN_HALF_H

#include <math.h>
#include <stdint.h>

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

#endif
