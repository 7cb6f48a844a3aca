/* The dtypes beyond float: binary16 conversion (round to nearest even, once;
 * infinities, NaN, subnormals), Cast between dtypes (saturation, bool), and
 * the guard that keeps new dtypes away from ops that never declared them. */
#include <float.h>
#include <stdint.h>

#include "../ops/half.h"
#include "op_harness.h"

/* The half nearest to x, ties to the even one, found by bisection over the
 * ordered non-negative halves: an independent reference for
 * nn_half_from_double on finite x below 65504. */
static uint16_t nearest_half(double x) {
    double a = fabs(x);
    uint32_t lo = 0, hi = 0x7bff; /* value(lo) <= a < value(hi), or a is above the largest */
    if (a >= nn_half_to_float(0x7bff)) lo = hi = 0x7bff;
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (nn_half_to_float((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - nn_half_to_float((uint16_t)lo), dh = nn_half_to_float((uint16_t)hi) - a;
    uint32_t best = dl < dh || (dl == dh && !(lo & 1)) ? lo : hi;
    return (uint16_t)(best | (signbit(x) ? 0x8000u : 0));
}

static void test_half_cases(void) {
    static const struct {
        double x;
        uint16_t want;
    } cases[] = {
        {0.0, 0x0000},
        {-0.0, 0x8000},
        {1.0, 0x3c00},
        {-2.0, 0xc000},
        {65504.0, 0x7bff},  /* the largest half */
        {65519.99, 0x7bff}, /* below the midpoint to 2^16 */
        {65520.0, 0x7c00},  /* the midpoint: ties to even, which is infinity */
        {1e10, 0x7c00},
        {-INFINITY, 0xfc00},
        {0x1p-24, 0x0001},                 /* the smallest subnormal */
        {0x1p-25, 0x0000},                 /* half of it: ties to even (0) */
        {0x1.8p-24, 0x0002},               /* 1.5 of it: ties to even (2) */
        {0x1p-14 - 0x1p-25, 0x0400},       /* between the largest subnormal and 2^-14: to even */
        {0x1p-14, 0x0400},                 /* the smallest normal */
        {1.0 + 0x1p-11, 0x3c00},           /* a tie, to even */
        {1.0 + 3 * 0x1p-11, 0x3c02},       /* a tie, to even (up) */
        {1.0 + 0x1p-11 + 0x1p-40, 0x3c01}, /* just above a tie: rounding through float first would give 0x3c00 */
        {2047.5, 0x67ff + 1},              /* 2048 after rounding */
        {0.1, 0x2e66},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t got = nn_half_from_double(cases[i].x);
        CHECK(got == cases[i].want, "half of %.17g: got 0x%04x, expected 0x%04x", cases[i].x, got, cases[i].want);
    }
    uint16_t nan = nn_half_from_double(NAN);
    CHECK((nan & 0x7c00) == 0x7c00 && (nan & 0x3ff), "half of NaN: got 0x%04x, not a NaN", nan);
    CHECK(isnan(nn_half_to_float(0x7e00)) && isnan(nn_half_to_float(0xfc01)), "NaN halves read as numbers");
    CHECK(nn_half_to_float(0x7c00) == INFINITY && nn_half_to_float(0xfc00) == -INFINITY, "infinite halves");
    CHECK(nn_half_to_float(0x0001) == 0x1p-24f && nn_half_to_float(0x83ff) == -0x3ffp-24f, "subnormal halves");
}

/* every half converts to float and back unchanged */
static void test_half_round_trip(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = nn_half_to_float((uint16_t)h);
        uint16_t back = nn_half_from_float(f);
        bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (is_nan ? !isnan(f) || !((back & 0x7c00) == 0x7c00 && (back & 0x3ff)) : back != h) {
            if (bad++ < 5) printf("FAIL half 0x%04x -> %.9g -> 0x%04x\n", h, (double)f, back);
        }
    }
    CHECK(bad == 0, "%d halves do not survive half -> float -> half", bad);
}

/* random floats of every magnitude, and the exact midpoints between halves,
 * against the brute-force nearest */
static void test_half_rounding(void) {
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        double x;
        if (i % 3 == 0) { /* the midpoint between half h and h + 1 */
            uint16_t h = (uint16_t)(uniform(0, 1) * 0x7bff);
            x = ((double)nn_half_to_float(h) + nn_half_to_float((uint16_t)(h + 1))) / 2;
        } else {
            x = ldexp(uniform(-1, 1), (int)uniform(-26, 16.99f));
            if (fabs(x) > 65504) continue;
        }
        uint16_t got = nn_half_from_double(x), want = nearest_half(x);
        if (got != want && bad++ < 5) printf("FAIL half of %.17g: got 0x%04x, nearest 0x%04x\n", x, got, want);
    }
    CHECK(bad == 0, "%d of 100000 values rounded to another half than the nearest (ties to even)", bad);
}

/* Cast `in` (one element per value) to dtype `to`; out holds the result bytes */
static bool cast(nn_tensor in, int64_t to, op_run *r) {
    nn_attr a = attr_int("to", to);
    return cpu_run(r, "Cast", 13, &a, 1, NULL, &in, 1, 1, NULL);
}

static nn_tensor values(nn_dtype dt, int n, const void *v) {
    nn_tensor t = tensor(dt, 1, n);
    memcpy(t.data, v, (size_t)n * nn_dtype_size(dt));
    return t;
}

static void test_cast(void) {
    op_run r;
    const float f[] = {NAN, 1e10f, -1e10f, -3.7f, 3.7f};
    if (cast(values(NN_DTYPE_FLOAT, 5, f), NN_DTYPE_INT32, &r)) {
        const int32_t want[] = {0, INT32_MAX, INT32_MIN, -3, 3};
        for (int i = 0; i < 5; i++)
            CHECK(((int32_t *)r.out[0].data)[i] == want[i], "Cast FLOAT %g to INT32: got %d, expected %d", (double)f[i],
                  ((int32_t *)r.out[0].data)[i], want[i]);
    }
    release(&r);
    const double d[] = {1e20, -1.0, 18446744073709549568.0, 12345.9};
    if (cast(values(NN_DTYPE_DOUBLE, 4, d), NN_DTYPE_UINT64, &r)) {
        const uint64_t want[] = {UINT64_MAX, 0, 18446744073709549568ull, 12345};
        for (int i = 0; i < 4; i++)
            CHECK(((uint64_t *)r.out[0].data)[i] == want[i], "Cast DOUBLE %.17g to UINT64: got %llu, expected %llu",
                  d[i], (unsigned long long)((uint64_t *)r.out[0].data)[i], (unsigned long long)want[i]);
    }
    release(&r);
    const uint16_t h[] = {0x8000, 0x0000, 0x7e00, 0x0001, 0x3c00};
    if (cast(values(NN_DTYPE_FLOAT16, 5, h), NN_DTYPE_BOOL, &r)) {
        const uint8_t want[] = {0, 0, 1, 1, 1};
        for (int i = 0; i < 5; i++)
            CHECK(((uint8_t *)r.out[0].data)[i] == want[i], "Cast FLOAT16 0x%04x to BOOL: got %d, expected %d", h[i],
                  ((uint8_t *)r.out[0].data)[i], want[i]);
    }
    release(&r);
    const double dh[] = {1.0 + 0x1p-11 + 0x1p-40, 70000.0, -0x1p-25};
    if (cast(values(NN_DTYPE_DOUBLE, 3, dh), NN_DTYPE_FLOAT16, &r)) {
        const uint16_t want[] = {0x3c01, 0x7c00, 0x8000};
        for (int i = 0; i < 3; i++)
            CHECK(((uint16_t *)r.out[0].data)[i] == want[i],
                  "Cast DOUBLE %.17g to FLOAT16: got 0x%04x, expected 0x%04x", dh[i], ((uint16_t *)r.out[0].data)[i],
                  want[i]);
    }
    release(&r);
    const int64_t i64[] = {-1, 65536 + 7};
    if (cast(values(NN_DTYPE_INT64, 2, i64), NN_DTYPE_UINT16, &r)) {
        const uint16_t want[] = {0xffff, 7}; /* integers wrap */
        for (int i = 0; i < 2; i++)
            CHECK(((uint16_t *)r.out[0].data)[i] == want[i], "Cast INT64 %lld to UINT16: got %u, expected %u",
                  (long long)i64[i], ((uint16_t *)r.out[0].data)[i], want[i]);
    }
    release(&r);
    /* CastLike takes the dtype of its second input */
    nn_tensor in[2] = {values(NN_DTYPE_FLOAT, 1, (const float[]){2.5f}), tensor(NN_DTYPE_DOUBLE, 1, 1)};
    if (cpu_run(&r, "CastLike", 15, NULL, 0, NULL, in, 2, 1, NULL))
        CHECK(r.out[0].dtype == NN_DTYPE_DOUBLE && ((double *)r.out[0].data)[0] == 2.5,
              "CastLike FLOAT 2.5 like DOUBLE: got dtype %s, value %g", nn_dtype_name(r.out[0].dtype),
              ((double *)r.out[0].data)[0]);
    release(&r);
}

/* BFLOAT16 (a float's upper 16 bits): Cast and CastLike round to nearest,
 * ties to even; the expected bit patterns are worked out by hand from the
 * format (1.0 is 0x3f80, one step there is 2^-7). */
static void test_bf16(void) {
    op_run r;
    const uint32_t fbits[] = {0x3f808000, 0x3f818000, 0x3f808001, 0x3f80ffff, 0x7f7fffff, 0x7fc00000, 0x80000000,
                              0x00000001};
    const uint16_t fwant[] = {0x3f80, 0x3f82, 0x3f81, 0x3f81, 0x7f80, 0x7fc0, 0x8000, 0x0000};
    if (cast(values(NN_DTYPE_FLOAT, 8, fbits), NN_DTYPE_BFLOAT16, &r))
        for (int i = 0; i < 8; i++)
            CHECK(((uint16_t *)r.out[0].data)[i] == fwant[i], "Cast FLOAT 0x%08x to BFLOAT16: got 0x%04x, expected 0x%04x",
                  fbits[i], ((uint16_t *)r.out[0].data)[i], fwant[i]);
    release(&r);
    /* 1 + 2^-8 + 2^-30 is just above a tie: through float it would become the tie and round down */
    const double d[] = {1.0 + 0x1p-8 + 0x1p-30, -1.0 - 0x1p-8};
    if (cast(values(NN_DTYPE_DOUBLE, 2, d), NN_DTYPE_BFLOAT16, &r)) {
        const uint16_t want[] = {0x3f81, 0xbf80};
        for (int i = 0; i < 2; i++)
            CHECK(((uint16_t *)r.out[0].data)[i] == want[i], "Cast DOUBLE %.17g to BFLOAT16: got 0x%04x, expected 0x%04x",
                  d[i], ((uint16_t *)r.out[0].data)[i], want[i]);
    }
    release(&r);
    const int64_t i64[] = {257, 259};
    if (cast(values(NN_DTYPE_INT64, 2, i64), NN_DTYPE_BFLOAT16, &r)) {
        const uint16_t want[] = {0x4380, 0x4382}; /* 256 and 260: ties to even */
        for (int i = 0; i < 2; i++)
            CHECK(((uint16_t *)r.out[0].data)[i] == want[i], "Cast INT64 %lld to BFLOAT16: got 0x%04x, expected 0x%04x",
                  (long long)i64[i], ((uint16_t *)r.out[0].data)[i], want[i]);
    }
    release(&r);
    const uint16_t b[] = {0x3f81, 0xc2f7, 0x7f80};
    if (cast(values(NN_DTYPE_BFLOAT16, 3, b), NN_DTYPE_FLOAT, &r)) {
        const float want[] = {1.0078125f, -123.5f, INFINITY};
        for (int i = 0; i < 3; i++)
            CHECK(((float *)r.out[0].data)[i] == want[i], "Cast BFLOAT16 0x%04x to FLOAT: got %g, expected %g", b[i],
                  (double)((float *)r.out[0].data)[i], (double)want[i]);
    }
    release(&r);
    nn_tensor in[2] = {values(NN_DTYPE_FLOAT, 1, (const float[]){3.0f}), tensor(NN_DTYPE_BFLOAT16, 1, 1)};
    if (cpu_run(&r, "CastLike", 15, NULL, 0, NULL, in, 2, 1, NULL))
        CHECK(r.out[0].dtype == NN_DTYPE_BFLOAT16 && ((uint16_t *)r.out[0].data)[0] == 0x4040,
              "CastLike FLOAT 3 like BFLOAT16: got dtype %s, bits 0x%04x", nn_dtype_name(r.out[0].dtype),
              ((uint16_t *)r.out[0].data)[0]);
    release(&r);
}

/* An op that never declared the new dtypes is refused them before its infer. */
static void test_guard(void) {
    static const nn_dtype fresh[] = {NN_DTYPE_FLOAT16, NN_DTYPE_DOUBLE, NN_DTYPE_INT16,   NN_DTYPE_UINT16,
                                     NN_DTYPE_UINT32,  NN_DTYPE_UINT64, NN_DTYPE_BFLOAT16};
    const char *ops[] = {"Relu", "Conv", "Mean", "Reshape"};
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++)
        for (size_t i = 0; i < sizeof fresh / sizeof *fresh; i++) {
            nn_tensor in[2] = {{.dtype = fresh[i], .ndim = 1, .dims = {4}},
                               {.dtype = NN_DTYPE_INT64, .ndim = 1, .dims = {1}}};
            char err[256] = "";
            nn_call c = {.n_in = 2, .in = in, .err = err, .err_size = sizeof err};
            nn_status st = nn_op_check_dtypes(nn_op_get(nn_op_lookup(ops[o])), &c);
            CHECK(st == NN_ERR_UNSUPPORTED && strstr(err, nn_dtype_name(fresh[i])) && strstr(err, ops[o]),
                  "%s with a %s input: status %d, message '%s'", ops[o], nn_dtype_name(fresh[i]), (int)st, err);
        }
    nn_tensor in = {.dtype = NN_DTYPE_DOUBLE, .ndim = 1, .dims = {4}};
    char err[256] = "";
    nn_call c = {.n_in = 1, .in = &in, .err = err, .err_size = sizeof err};
    CHECK(nn_op_check_dtypes(nn_op_get(nn_op_lookup("Cast")), &c) == NN_OK, "Cast refused a DOUBLE input: %s", err);
    static const struct {
        nn_dtype t;
        size_t size;
        const char *name;
    } sizes[] = {{NN_DTYPE_FLOAT16, 2, "FLOAT16"}, {NN_DTYPE_DOUBLE, 8, "DOUBLE"}, {NN_DTYPE_INT16, 2, "INT16"},
                 {NN_DTYPE_UINT16, 2, "UINT16"},   {NN_DTYPE_UINT32, 4, "UINT32"}, {NN_DTYPE_UINT64, 8, "UINT64"},
                 {NN_DTYPE_BFLOAT16, 2, "BFLOAT16"}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        CHECK(nn_dtype_size(sizes[i].t) == sizes[i].size && !strcmp(nn_dtype_name(sizes[i].t), sizes[i].name),
              "dtype %d: size %zu, name %s; expected %zu, %s", (int)sizes[i].t, nn_dtype_size(sizes[i].t),
              nn_dtype_name(sizes[i].t), sizes[i].size, sizes[i].name);
}

int main(void) {
    test_half_cases();
    test_half_round_trip();
    test_half_rounding();
    test_cast();
    test_bf16();
    test_guard();
    return check_summary();
}
