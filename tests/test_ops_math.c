/* Edge cases of the math ops that ONNX's conformance data leaves out (or
 * only has in dtypes the engine lacks): integer Mod signs and zero
 * divisors, every CumSum mode in FLOAT and INT32 and a long axis,
 * LogSumExp on values whose exp overflows, Hardmax before and after opset
 * 13, Einsum's diagonals, ellipsis and implicit output against plain
 * loops, Det, BitShift, IsInf, Round, Shrink on integers, the wider
 * dtypes (UINT64 Mod near 2^64, DOUBLE sums past float's precision) and the
 * params checks. */
#include "../ops/half.h"
#include "op_harness.h"

/* ---- helpers */

static nn_tensor i32_values(int ndim, const int64_t *dims, const int32_t *v) {
    nn_tensor t = {.dtype = NN_DTYPE_INT32, .ndim = ndim};
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)ndim);
    int64_t n = nn_tensor_elements(&t);
    t.data = calloc((size_t)n + 1, sizeof(int32_t));
    memcpy(t.data, v, sizeof(int32_t) * (size_t)n);
    return t;
}

static nn_tensor f32_shaped(int ndim, const int64_t *dims, const float *v) {
    nn_tensor t = {.dtype = NN_DTYPE_FLOAT, .ndim = ndim};
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)ndim);
    int64_t n = nn_tensor_elements(&t);
    t.data = calloc((size_t)n + 1, sizeof(float));
    if (v) memcpy(t.data, v, sizeof(float) * (size_t)n);
    return t;
}

static nn_tensor scalar_i64(int64_t v) {
    nn_tensor t = {.dtype = NN_DTYPE_INT64, .ndim = 0};
    t.data = malloc(sizeof(int64_t));
    *(int64_t *)t.data = v;
    return t;
}

static void expect_i32(const char *what, const op_run *r, const int32_t *want, int n) {
    const int32_t *got = r->out[0].data;
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            CHECK(false, "%s: element %d is %d, expected %d", what, i, got[i], want[i]);
            return;
        }
    CHECK(true, "%s", what);
}

static void expect_u8(const char *what, const op_run *r, const uint8_t *want, int n) {
    const uint8_t *got = r->out[0].data;
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            CHECK(false, "%s: element %d is %u, expected %u", what, i, got[i], want[i]);
            return;
        }
    CHECK(true, "%s", what);
}

static void expect_shape(const char *what, const op_run *r, int ndim, const int64_t *dims) {
    bool same = r->out[0].ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = r->out[0].dims[d] == dims[d];
    CHECK(same, "%s: output rank %d (dim 0: %lld), expected rank %d", what, r->out[0].ndim,
          (long long)r->out[0].dims[0], ndim);
}

/* The op must refuse (parse, check or infer fails) with a message; frees the inputs. */
static void expect_refused(const char *what, const char *name, int opset, const nn_attr *attrs, int n_attrs,
                           nn_tensor *in, int n_in) {
    const nn_op_desc *d = nn_op_get(nn_op_lookup(name));
    nn_arena arena = {0};
    char err[256] = "";
    nn_status st = NN_OK;
    const void *params = NULL;
    if (d->parse) {
        nn_parse_ctx ctx = {.attrs = attrs,
                            .n_attrs = n_attrs,
                            .opset = opset,
                            .n_inputs = n_in,
                            .n_outputs = 1,
                            .arena = &arena,
                            .err = err,
                            .err_size = sizeof err};
        st = d->parse(&ctx);
        params = ctx.params;
        if (st == NN_OK && d->check) st = d->check(params, err, sizeof err);
    }
    if (st == NN_OK) {
        nn_tensor out[1] = {{0}};
        nn_call call = {.params = params,
                        .n_in = n_in,
                        .n_out = 1,
                        .in = in,
                        .out = out,
                        .threads = 1,
                        .err = err,
                        .err_size = sizeof err};
        st = d->infer(&call);
        if (st == NN_OK) { /* some refusals need the values (CumSum's axis): run it on a scratch output */
            out[0].data = calloc((size_t)nn_tensor_elements(&out[0]) + 1, nn_dtype_size(out[0].dtype));
            st = d->run(&call);
            free(out[0].data);
        }
    }
    CHECK(st != NN_OK && err[0], "%s: %s was not refused (status %d)", what, name, (int)st);
    for (int i = 0; i < n_in; i++)
        free(in[i].data);
    nn_arena_free(&arena);
}

/* ---- Mod */

static void test_mod(void) {
    const int64_t d6[] = {6};
    const int32_t a[] = {7, -7, 7, -7, 5, INT32_MIN}, b[] = {3, 3, -3, -3, 0, -1};
    /* fmod=0: the divisor's sign (Python's %); by 0 and by -1: 0 */
    const int32_t want_floor[] = {1, 2, -2, -1, 0, 0}, want_trunc[] = {1, -1, 1, -1, 0, 0};
    for (int fmod = 0; fmod < 2; fmod++) {
        nn_attr at = attr_int("fmod", fmod);
        nn_tensor in[2] = {i32_values(1, d6, a), i32_values(1, d6, b)};
        op_run r;
        if (cpu_run(&r, "Mod", 13, &at, 1, NULL, in, 2, 1, NULL))
            expect_i32(fmod ? "Mod int32 fmod=1" : "Mod int32 fmod=0", &r, fmod ? want_trunc : want_floor, 6);
        release(&r);
    }
    /* float, fmod=1: C's fmod; a zero divisor gives NaN */
    {
        const float fa[] = {5.5f, -5.5f, 5.5f, 1.0f}, fb[] = {2.0f, 2.0f, -2.0f, 0.0f};
        const float want[] = {1.5f, -1.5f, 1.5f, NAN};
        nn_attr at = attr_int("fmod", 1);
        nn_tensor in[2] = {float_values(4, fa), float_values(4, fb)};
        op_run r;
        if (cpu_run(&r, "Mod", 13, &at, 1, NULL, in, 2, 1, NULL))
            CHECK_CLOSE("Mod float fmod=1", r.out[0].data, want, 4, 0, 0);
        release(&r);
    }
    {
        const float v[] = {1.0f};
        nn_tensor in[2] = {float_values(1, v), float_values(1, v)};
        expect_refused("Mod float fmod=0", "Mod", 13, NULL, 0, in, 2);
        nn_attr bad = attr_int("fmod", 2);
        nn_tensor in2[2] = {float_values(1, v), float_values(1, v)};
        expect_refused("Mod fmod=2", "Mod", 13, &bad, 1, in2, 2);
    }
}

/* ---- CumSum */

static void test_cumsum(void) {
    const int64_t d23[] = {2, 3};
    const int32_t x[] = {1, 2, 3, 4, 5, 6};
    /* [mode][axis]: exclusive + 2 * reverse */
    const int32_t want[4][2][6] = {
        {{1, 2, 3, 5, 7, 9}, {1, 3, 6, 4, 9, 15}},
        {{0, 0, 0, 1, 2, 3}, {0, 1, 3, 0, 4, 9}},
        {{5, 7, 9, 4, 5, 6}, {6, 5, 3, 15, 11, 6}},
        {{4, 5, 6, 0, 0, 0}, {5, 3, 0, 11, 6, 0}},
    };
    for (int mode = 0; mode < 4; mode++)
        for (int axis = 0; axis < 2; axis++) {
            nn_attr at[2] = {attr_int("exclusive", mode & 1), attr_int("reverse", mode >> 1)};
            char what[80];
            snprintf(what, sizeof what, "CumSum int32 exclusive=%d reverse=%d axis=%d", mode & 1, mode >> 1, axis);
            nn_tensor in[2] = {i32_values(2, d23, x), scalar_i64(axis - 2)}; /* negative axes */
            op_run r;
            if (cpu_run(&r, "CumSum", 14, at, 2, NULL, in, 2, 1, NULL)) expect_i32(what, &r, want[mode][axis], 6);
            release(&r);
            float xf[6], wf[6];
            for (int i = 0; i < 6; i++)
                xf[i] = (float)x[i] * 0.5f, wf[i] = (float)want[mode][axis][i] * 0.5f;
            nn_tensor inf[2] = {f32_shaped(2, d23, xf), scalar_i64(axis)};
            strcat(what, " float");
            if (cpu_run(&r, "CumSum", 14, at, 2, NULL, inf, 2, 1, NULL)) CHECK_CLOSE(what, r.out[0].data, wf, 6, 0, 0);
            release(&r);
        }
    /* a long axis: 2^22 ones (sums stay exact in float), reversed and exclusive */
    {
        const int64_t n = (int64_t)1 << 22, dn[] = {n};
        nn_tensor in[2] = {f32_shaped(1, dn, NULL), scalar_i64(0)};
        float *v = in[0].data;
        for (int64_t i = 0; i < n; i++)
            v[i] = 1.0f;
        nn_attr at[2] = {attr_int("exclusive", 1), attr_int("reverse", 1)};
        op_run r;
        cpu_threads = 2;
        if (cpu_run(&r, "CumSum", 14, at, 2, NULL, in, 2, 1, NULL)) {
            const float *y = r.out[0].data;
            CHECK(y[0] == (float)(n - 1) && y[n - 1] == 0.0f && y[n / 2] == (float)(n / 2 - 1),
                  "CumSum long axis: y[0] %.1f (want %lld), y[n/2] %.1f, y[n-1] %.1f", y[0], (long long)(n - 1),
                  y[n / 2], y[n - 1]);
        }
        cpu_threads = 1;
        release(&r);
    }
    {
        nn_tensor in[2] = {i32_values(2, d23, x), scalar_i64(2)};
        expect_refused("CumSum axis 2 of rank 2", "CumSum", 14, NULL, 0, in, 2);
    }
}

/* ---- reductions the conformance data only has in DOUBLE */

static void test_reduce(void) {
    const int64_t d22[] = {2, 2}, axes1[] = {1};
    const float x[] = {1000.0f, 1000.0f, -INFINITY, -INFINITY};
    const float want[] = {1000.0f + logf(2.0f), -INFINITY};
    nn_attr at[2] = {attr_ints("axes", 1, axes1), attr_int("keepdims", 0)};
    nn_tensor in[1] = {f32_shaped(2, d22, x)};
    op_run r;
    if (cpu_run(&r, "ReduceLogSumExp", 13, at, 2, NULL, in, 1, 1, NULL))
        CHECK_CLOSE("ReduceLogSumExp of overflowing and -inf rows", r.out[0].data, want, 2, 1e-4, 1e-6);
    release(&r);
    const float y[] = {-1.0f, 2.0f, -3.0f, 4.0f};
    const float l1[] = {3.0f, 7.0f}, sq[] = {5.0f, 25.0f}, ls[] = {0.0f, 0.0f};
    const struct {
        const char *op;
        const float *want;
    } cases[] = {{"ReduceL1", l1}, {"ReduceSumSquare", sq}};
    for (int i = 0; i < 2; i++) {
        nn_tensor t[1] = {f32_shaped(2, d22, y)};
        if (cpu_run(&r, cases[i].op, 13, at, 2, NULL, t, 1, 1, NULL))
            CHECK_CLOSE(cases[i].op, r.out[0].data, cases[i].want, 2, 0, 0);
        release(&r);
    }
    const float ones[] = {0.5f, 0.5f, 0.25f, 0.75f};
    nn_tensor t[1] = {f32_shaped(2, d22, ones)};
    if (cpu_run(&r, "ReduceLogSum", 13, at, 2, NULL, t, 1, 1, NULL))
        CHECK_CLOSE("ReduceLogSum", r.out[0].data, ls, 2, 1e-6, 0);
    release(&r);
    const int32_t iv[] = {1, 2, 3, 4};
    nn_tensor ti[1] = {i32_values(2, d22, iv)};
    expect_refused("ReduceLogSumExp on INT32", "ReduceLogSumExp", 13, at, 2, ti, 1);
}

/* ---- Hardmax: opset 11 flattens from axis, 13 takes one axis */

static void test_hardmax(void) {
    const int64_t d[] = {1, 2, 2};
    const float x[] = {1, 4, 3, 2};
    const float want11[] = {0, 1, 0, 0}, want13[] = {0, 1, 1, 0};
    nn_attr at = attr_int("axis", 1);
    nn_tensor in[1] = {f32_shaped(3, d, x)};
    op_run r;
    if (cpu_run(&r, "Hardmax", 11, &at, 1, NULL, in, 1, 1, NULL))
        CHECK_CLOSE("Hardmax opset 11 axis 1", r.out[0].data, want11, 4, 0, 0);
    release(&r);
    at = attr_int("axis", 2);
    nn_tensor in2[1] = {f32_shaped(3, d, x)};
    if (cpu_run(&r, "Hardmax", 13, &at, 1, NULL, in2, 1, 1, NULL))
        CHECK_CLOSE("Hardmax opset 13 axis 2", r.out[0].data, want13, 4, 0, 0);
    release(&r);
    /* ties: the first; a NaN wins as in numpy's argmax */
    const float t[] = {2, 2, 1, 1, NAN, 5};
    const float want_t[] = {1, 0, 0, 0, 1, 0};
    const int64_t d23[] = {2, 3};
    nn_tensor in3[1] = {f32_shaped(2, d23, t)};
    if (cpu_run(&r, "Hardmax", 13, NULL, 0, NULL, in3, 1, 1, NULL))
        CHECK_CLOSE("Hardmax ties and NaN", r.out[0].data, want_t, 6, 0, 0);
    release(&r);
}

/* ---- Einsum against plain loops */

static nn_tensor rand_shaped(int ndim, const int64_t *dims) {
    nn_tensor t = f32_shaped(ndim, dims, NULL);
    float *v = t.data;
    for (int64_t i = 0; i < nn_tensor_elements(&t); i++)
        v[i] = uniform(-1.0f, 1.0f);
    return t;
}

/* Runs Einsum(eq) on copies of the inputs and compares with want (out_ndim dims). */
static void einsum_case(const char *eq, const nn_tensor *in, int n_in, const float *want, int out_ndim,
                        const int64_t *out_dims) {
    nn_tensor copy[4];
    for (int k = 0; k < n_in; k++)
        copy[k] = f32_shaped(in[k].ndim, in[k].dims, in[k].data);
    nn_attr at = attr_string("equation", eq);
    op_run r;
    char what[96];
    snprintf(what, sizeof what, "Einsum '%s'", eq);
    if (cpu_run(&r, "Einsum", 12, &at, 1, NULL, copy, n_in, 1, NULL)) {
        expect_shape(what, &r, out_ndim, out_dims);
        CHECK_CLOSE(what, r.out[0].data, want, nn_shape_elements(out_dims, out_ndim), 1e-5, 1e-5);
    }
    release(&r);
}

static void test_einsum(void) {
    const int64_t dA[] = {3, 4}, dB[] = {4, 5}, dC[] = {5, 2}, dS[] = {4, 4}, dT[] = {2, 3, 3}, dP[] = {3, 2, 4},
                  dQ[] = {1, 4, 3}, dv[] = {4}, dw[] = {5};
    nn_tensor A = rand_shaped(2, dA), B = rand_shaped(2, dB), C = rand_shaped(2, dC), S = rand_shaped(2, dS),
              T = rand_shaped(3, dT), P = rand_shaped(3, dP), Q = rand_shaped(3, dQ), v = rand_shaped(1, dv),
              w = rand_shaped(1, dw);
    const float *a = A.data, *b = B.data, *c = C.data, *s = S.data, *t = T.data, *p = P.data, *q = Q.data, *vv = v.data,
                *ww = w.data;
    float ab[15] = {0}, abc[6] = {0}, trace = 0, diag[4], tdiag[6], pq[18] = {0}, at[12], total = 0, outer[20], dot = 0;
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 5; k++)
            for (int j = 0; j < 4; j++)
                ab[i * 5 + k] += a[i * 4 + j] * b[j * 5 + k];
    for (int i = 0; i < 3; i++)
        for (int l = 0; l < 2; l++)
            for (int k = 0; k < 5; k++)
                abc[i * 2 + l] += ab[i * 5 + k] * c[k * 2 + l];
    for (int i = 0; i < 4; i++)
        trace += s[i * 5], diag[i] = s[i * 5], dot += vv[i] * vv[i];
    for (int n = 0; n < 2; n++)
        for (int i = 0; i < 3; i++)
            tdiag[n * 3 + i] = t[n * 9 + i * 4];
    for (int n = 0; n < 3; n++)
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 3; k++)
                for (int j = 0; j < 4; j++)
                    pq[(n * 2 + i) * 3 + k] += p[(n * 2 + i) * 4 + j] * q[j * 3 + k];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            at[j * 3 + i] = a[i * 4 + j], total += a[i * 4 + j];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++)
            outer[i * 5 + j] = vv[i] * ww[j];

    const int64_t d35[] = {3, 5}, d32[] = {3, 2}, d4[] = {4}, d23[] = {2, 3}, d323[] = {3, 2, 3}, d43[] = {4, 3},
                  d45[] = {4, 5};
    nn_tensor ab_in[2] = {A, B}, abc_in[3] = {A, B, C}, pq_in[2] = {P, Q}, vw_in[2] = {v, w}, vv_in[2] = {v, v};
    einsum_case("ij,jk->ik", ab_in, 2, ab, 2, d35);
    einsum_case("ij,jk", ab_in, 2, ab, 2, d35); /* implicit: i, k in order */
    einsum_case("ij, jk -> ik", ab_in, 2, ab, 2, d35);
    einsum_case("ij,jk,kl->il", abc_in, 3, abc, 2, d32);
    einsum_case("ii", &S, 1, &trace, 0, d4); /* implicit: a repeated label is summed */
    einsum_case("ii->i", &S, 1, diag, 1, d4);
    einsum_case("...ii->...i", &T, 1, tdiag, 2, d23);
    einsum_case("...ij,...jk->...ik", pq_in, 2, pq, 3, d323); /* batch 3 against batch 1 */
    einsum_case("ij->ji", &A, 1, at, 2, d43);
    einsum_case("ji", &A, 1, at, 2, d43); /* implicit output sorts: ij, the transpose */
    einsum_case("ij->", &A, 1, &total, 0, d4);
    einsum_case("i,j->ij", vw_in, 2, outer, 2, d45);
    einsum_case("i,i", vv_in, 2, &dot, 0, d4);

    /* summing both inputs whole: the GEMM copies would be 300 x 300, far
     * above the data, so the generic loop runs it */
    {
        const int64_t d300[] = {300};
        nn_tensor big[2] = {rand_shaped(1, d300), rand_shaped(1, d300)};
        double sa = 0, sb = 0;
        for (int i = 0; i < 300; i++)
            sa += ((float *)big[0].data)[i], sb += ((float *)big[1].data)[i];
        float prod = (float)(sa * sb);
        einsum_case("i,j->", big, 2, &prod, 0, d4);
        free(big[0].data);
        free(big[1].data);
    }

    const char *bad[] = {"ij->ii", "i.j->ij", "ij->ix", "ijk->i", "ij,jk->ik"};
    const int n_bad_in[] = {1, 1, 1, 1, 2};
    for (int i = 0; i < 5; i++) {
        nn_attr eq = attr_string("equation", bad[i]);
        nn_tensor in[2] = {f32_shaped(2, dA, a), f32_shaped(2, dA, a)}; /* jk: 4 against 3 */
        char what[64];
        snprintf(what, sizeof what, "Einsum '%s'", bad[i]);
        if (n_bad_in[i] == 1) free(in[1].data);
        expect_refused(what, "Einsum", 12, &eq, 1, in, n_bad_in[i]);
    }
    nn_tensor all[] = {A, B, C, S, T, P, Q, v, w};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i].data);
}

/* ---- Det, BitShift, IsInf, Round, Shrink */

static void test_misc(void) {
    op_run r;
    {
        const int64_t d[] = {3, 3, 3};
        const float m[] = {2, 0, 0, 0, 3, 0, 0, 0, 4,  /* 24 */
                           0, 1, 0, 1, 0, 0, 0, 0, 1,  /* a row swap: -1 */
                           1, 2, 3, 2, 4, 6, 0, 1, 1}; /* singular */
        const float want[] = {24, -1, 0};
        nn_tensor in[1] = {f32_shaped(3, d, m)};
        if (cpu_run(&r, "Det", 11, NULL, 0, NULL, in, 1, 1, NULL))
            CHECK_CLOSE("Det", r.out[0].data, want, 3, 1e-6, 1e-6);
        release(&r);
    }
    for (int right = 0; right < 2; right++) {
        nn_tensor in[2] = {tensor(NN_DTYPE_UINT8, 1, 4), tensor(NN_DTYPE_UINT8, 1, 4)};
        const uint8_t x[] = {0x81, 3, 255, 16}, sh[] = {1, 2, 8, 7};
        const uint8_t want[2][4] = {{0x02, 12, 0, 0}, {0x40, 0, 0, 0}};
        memcpy(in[0].data, x, 4);
        memcpy(in[1].data, sh, 4);
        nn_attr at = attr_string("direction", right ? "RIGHT" : "LEFT");
        if (cpu_run(&r, "BitShift", 11, &at, 1, NULL, in, 2, 1, NULL))
            expect_u8(right ? "BitShift RIGHT" : "BitShift LEFT", &r, want[right], 4);
        release(&r);
    }
    {
        nn_attr at = attr_string("direction", "UP");
        nn_tensor in[2] = {tensor(NN_DTYPE_UINT8, 1, 1), tensor(NN_DTYPE_UINT8, 1, 1)};
        expect_refused("BitShift direction UP", "BitShift", 11, &at, 1, in, 2);
        nn_tensor in32[2] = {tensor(NN_DTYPE_INT32, 1, 1), tensor(NN_DTYPE_INT32, 1, 1)};
        nn_attr left = attr_string("direction", "LEFT");
        expect_refused("BitShift on INT32", "BitShift", 11, &left, 1, in32, 2);
    }
    for (int mode = 0; mode < 3; mode++) { /* both, negative only, positive only */
        const float x[] = {INFINITY, -INFINITY, NAN, 1.0f};
        const uint8_t want[3][4] = {{1, 1, 0, 0}, {0, 1, 0, 0}, {1, 0, 0, 0}};
        nn_attr at[2] = {attr_int("detect_negative", mode != 2), attr_int("detect_positive", mode != 1)};
        nn_tensor in[1] = {float_values(4, x)};
        if (cpu_run(&r, "IsInf", 10, at, 2, NULL, in, 1, 1, NULL)) expect_u8("IsInf", &r, want[mode], 4);
        release(&r);
    }
    {
        const float x[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f, -2.6f};
        const float want[] = {0.0f, 2.0f, 2.0f, -0.0f, -2.0f, 2.0f, -3.0f};
        nn_tensor in[1] = {float_values(7, x)};
        if (cpu_run(&r, "Round", 11, NULL, 0, NULL, in, 1, 1, NULL)) {
            CHECK_CLOSE("Round half to even", r.out[0].data, want, 7, 0, 0);
            CHECK(signbit(((float *)r.out[0].data)[3]), "Round(-0.5) is +0, expected -0");
        }
        release(&r);
    }
    {
        const int64_t d5[] = {5};
        const int32_t x[] = {-3, -1, 0, 1, 3}, want[] = {-1, 0, 0, 0, 1};
        nn_attr at[2] = {attr_float("lambd", 1.5f), attr_float("bias", 2.0f)};
        nn_tensor in[1] = {i32_values(1, d5, x)};
        if (cpu_run(&r, "Shrink", 9, at, 2, NULL, in, 1, 1, NULL)) expect_i32("Shrink int32", &r, want, 5);
        release(&r);
    }
    {
        /* results outside UINT8 saturate rather than wrap (or hit C's undefined conversion) */
        const uint8_t x[] = {0, 250, 3}, want[] = {0, 255, 13}; /* 0: x < -lambd first, 0 - 10 */
        nn_attr at[2] = {attr_float("lambd", -1.0f), attr_float("bias", -10.0f)};
        nn_tensor in[1] = {tensor(NN_DTYPE_UINT8, 1, 3)};
        memcpy(in[0].data, x, 3);
        if (cpu_run(&r, "Shrink", 9, at, 2, NULL, in, 1, 1, NULL)) expect_u8("Shrink uint8 saturates", &r, want, 3);
        release(&r);
    }
    {
        nn_attr zero = attr_float("alpha", 0.0f);
        nn_tensor in[1] = {tensor(NN_DTYPE_FLOAT, 1, 1)};
        expect_refused("Celu alpha 0", "Celu", 12, &zero, 1, in, 1);
        nn_attr nan = attr_float("alpha", NAN);
        nn_tensor in2[1] = {tensor(NN_DTYPE_FLOAT, 1, 1)};
        expect_refused("ThresholdedRelu alpha NaN", "ThresholdedRelu", 10, &nan, 1, in2, 1);
    }
}

/* ---- the dtypes added to the IR later: exact in their own type, where
 * float or int64 arithmetic would give another answer */

static nn_tensor values_of(nn_dtype dt, int n, const void *v) {
    nn_tensor t = tensor(dt, 1, n);
    memcpy(t.data, v, nn_dtype_size(dt) * (size_t)n);
    return t;
}

/* Integers of any width up to 64 bits, read as unsigned of size esz. */
static void expect_uint(const char *what, const op_run *r, const uint64_t *want, int n) {
    size_t esz = nn_dtype_size(r->out[0].dtype);
    for (int i = 0; i < n; i++) {
        uint64_t got = 0;
        memcpy(&got, (const char *)r->out[0].data + (size_t)i * esz, esz); /* little-endian */
        uint64_t w = esz == 8 ? want[i] : want[i] & ((UINT64_C(1) << (8 * esz)) - 1);
        if (got != w) {
            CHECK(false, "%s: element %d is %llu, expected %llu", what, i, (unsigned long long)got,
                  (unsigned long long)w);
            return;
        }
    }
    CHECK(true, "%s", what);
}

static void expect_f64(const char *what, const op_run *r, const double *want, int n, double tol) {
    const double *got = r->out[0].data;
    for (int i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= tol)) {
            CHECK(false, "%s: element %d is %.17g, expected %.17g", what, i, got[i], want[i]);
            return;
        }
    CHECK(true, "%s", what);
}

static void test_wide_dtypes(void) {
    op_run r;
    /* UINT64 Mod past 2^63 (through int64 these would be negative), both fmod modes */
    for (int fmod = 0; fmod < 2; fmod++) {
        const uint64_t x[] = {UINT64_MAX, (UINT64_C(1) << 63) + 5, UINT64_MAX, 10};
        const uint64_t y[] = {10, UINT64_C(1) << 63, UINT64_C(1) << 32, 0};
        const uint64_t want[] = {5, 5, 0xffffffffu, 0};
        nn_attr at = attr_int("fmod", fmod);
        nn_tensor in[2] = {values_of(NN_DTYPE_UINT64, 4, x), values_of(NN_DTYPE_UINT64, 4, y)};
        if (cpu_run(&r, "Mod", 13, &at, 1, NULL, in, 2, 1, NULL))
            expect_uint(fmod ? "Mod uint64 fmod=1" : "Mod uint64 fmod=0", &r, want, 4);
        release(&r);
    }
    {
        const int16_t x[] = {-7, 7, INT16_MIN, 5}, y[] = {3, -3, 7, 0};
        const uint64_t want[] = {2, (uint16_t)-2, 6, 0}; /* fmod=0: the divisor's sign */
        nn_attr at = attr_int("fmod", 0);
        nn_tensor in[2] = {values_of(NN_DTYPE_INT16, 4, x), values_of(NN_DTYPE_INT16, 4, y)};
        if (cpu_run(&r, "Mod", 13, &at, 1, NULL, in, 2, 1, NULL)) expect_uint("Mod int16 fmod=0", &r, want, 4);
        release(&r);
    }
    {
        /* 2^53 - 1 is exact in double only */
        const double x[] = {9007199254740991.0, -5.5}, y[] = {10.0, 2.0}, want[] = {1.0, -1.5};
        nn_attr at = attr_int("fmod", 1);
        nn_tensor in[2] = {values_of(NN_DTYPE_DOUBLE, 2, x), values_of(NN_DTYPE_DOUBLE, 2, y)};
        if (cpu_run(&r, "Mod", 13, &at, 1, NULL, in, 2, 1, NULL)) expect_f64("Mod double fmod=1", &r, want, 2, 0);
        release(&r);
    }
    {
        /* 1000.5 fmod 3 = 1.5, -5.5 fmod 2 = -1.5, 65504 fmod 0.1 (0x2e66 = 0.0999755859375) */
        const uint16_t x[] = {0x63d1, 0xc580, 0x7bff}, y[] = {0x4200, 0x4000, 0x2e66};
        float w2 = fmodf(65504.0f, 0.0999755859375f);
        const uint64_t want[] = {0x3e00, 0xbe00, nn_half_from_float(w2)};
        nn_attr at = attr_int("fmod", 1);
        nn_tensor in[2] = {values_of(NN_DTYPE_FLOAT16, 3, x), values_of(NN_DTYPE_FLOAT16, 3, y)};
        if (cpu_run(&r, "Mod", 13, &at, 1, NULL, in, 2, 1, NULL)) expect_uint("Mod float16 fmod=1", &r, want, 3);
        release(&r);
        CHECK(nn_half_to_float(nn_half_from_float(w2)) == w2, "Mod float16: %.9g is not a half", w2);
        nn_tensor in0[2] = {values_of(NN_DTYPE_FLOAT16, 1, x), values_of(NN_DTYPE_FLOAT16, 1, y)};
        expect_refused("Mod float16 fmod=0", "Mod", 13, NULL, 0, in0, 2);
    }
    /* BitShift at each unsigned width: bits shifted out drop, a shift by the width gives 0 */
    {
        const uint64_t x64[] = {1, UINT64_MAX, 5}, s64[] = {63, 60, 64};
        const uint64_t want[2][3] = {{UINT64_C(1) << 63, UINT64_MAX << 60, 0}, {0, 15, 0}};
        const uint16_t x16[] = {0x8001, 0xffff, 7}, s16[] = {1, 12, 16};
        const uint64_t want16[2][3] = {{0x0002, 0xf000, 0}, {0x4000, 0xf, 0}};
        for (int right = 0; right < 2; right++) {
            nn_attr at = attr_string("direction", right ? "RIGHT" : "LEFT");
            nn_tensor in[2] = {values_of(NN_DTYPE_UINT64, 3, x64), values_of(NN_DTYPE_UINT64, 3, s64)};
            if (cpu_run(&r, "BitShift", 11, &at, 1, NULL, in, 2, 1, NULL))
                expect_uint(right ? "BitShift uint64 RIGHT" : "BitShift uint64 LEFT", &r, want[right], 3);
            release(&r);
            nn_tensor in16[2] = {values_of(NN_DTYPE_UINT16, 3, x16), values_of(NN_DTYPE_UINT16, 3, s16)};
            if (cpu_run(&r, "BitShift", 11, &at, 1, NULL, in16, 2, 1, NULL))
                expect_uint(right ? "BitShift uint16 RIGHT" : "BitShift uint16 LEFT", &r, want16[right], 3);
            release(&r);
        }
        nn_attr left = attr_string("direction", "LEFT");
        nn_tensor in[2] = {tensor(NN_DTYPE_INT16, 1, 1), tensor(NN_DTYPE_INT16, 1, 1)};
        expect_refused("BitShift on INT16", "BitShift", 11, &left, 1, in, 2);
    }
    /* CumSum: 2^52 + 1 and + 2 exist in double, not in float; UINT64 wraps in its own width */
    {
        const double x[] = {4503599627370496.0, 1.0, 1.0, 0.1};
        const double want[] = {4503599627370496.0, 4503599627370497.0, 4503599627370498.0, 4503599627370498.1};
        nn_tensor in[2] = {values_of(NN_DTYPE_DOUBLE, 4, x), scalar_i64(0)};
        if (cpu_run(&r, "CumSum", 14, NULL, 0, NULL, in, 2, 1, NULL)) expect_f64("CumSum double", &r, want, 4, 0);
        release(&r);
        const uint64_t u[] = {UINT64_MAX - 1, 1, 1}, wu[] = {UINT64_MAX - 1, UINT64_MAX, 0};
        nn_tensor inu[2] = {values_of(NN_DTYPE_UINT64, 3, u), scalar_i64(0)};
        if (cpu_run(&r, "CumSum", 14, NULL, 0, NULL, inu, 2, 1, NULL)) expect_uint("CumSum uint64", &r, wu, 3);
        release(&r);
        nn_tensor in16[2] = {tensor(NN_DTYPE_INT16, 1, 2), scalar_i64(0)};
        expect_refused("CumSum on INT16", "CumSum", 14, NULL, 0, in16, 2);
    }
    /* ReduceLogSumExp in double: exp(710) overflows double, the shift keeps it finite */
    {
        const int64_t axes1[] = {1};
        const double x[] = {710.0, 710.0, 1.0, 1.0 + 1e-12};
        const double want[] = {710.0 + log(2.0), 1.0 + 5e-13 + log(2.0)};
        nn_attr at[2] = {attr_ints("axes", 1, axes1), attr_int("keepdims", 0)};
        nn_tensor in[1] = {values_of(NN_DTYPE_DOUBLE, 4, x)};
        in[0].ndim = 2, in[0].dims[0] = 2, in[0].dims[1] = 2;
        if (cpu_run(&r, "ReduceLogSumExp", 13, at, 2, NULL, in, 1, 1, NULL))
            expect_f64("ReduceLogSumExp double", &r, want, 2, 1e-13);
        release(&r);
        /* the other kinds share the DOUBLE row: 1 + 2^-40 tells apart values float would tie */
        const double v[] = {1.0, 1.0 + 0x1p-40, 4503599627370496.0, 1.0}, ws[] = {2.0 + 0x1p-40, 4503599627370497.0};
        nn_tensor sv[1] = {values_of(NN_DTYPE_DOUBLE, 4, v)};
        sv[0].ndim = 2, sv[0].dims[0] = 2, sv[0].dims[1] = 2;
        if (cpu_run(&r, "ReduceSum", 11, at, 2, NULL, sv, 1, 1, NULL)) expect_f64("ReduceSum double", &r, ws, 2, 0);
        release(&r);
        const uint64_t want_arg[] = {1};
        nn_attr am[2] = {attr_int("axis", 0), attr_int("keepdims", 0)};
        nn_tensor av[1] = {values_of(NN_DTYPE_DOUBLE, 2, v)};
        if (cpu_run(&r, "ArgMax", 13, am, 2, NULL, av, 1, 1, NULL)) expect_uint("ArgMax double", &r, want_arg, 1);
        release(&r);
        nn_tensor h[1] = {tensor(NN_DTYPE_FLOAT16, 2, 2, 2)};
        expect_refused("ReduceLogSumExp on FLOAT16", "ReduceLogSumExp", 13, at, 2, h, 1);
    }
    /* Einsum in double, by the GEMM path (two inputs) and the direct one (one):
     * (1 + 2^-40) - 1 is 0 in float */
    {
        const double a[] = {1.0 + 0x1p-40, 1.0}, b[] = {1.0, -1.0}, want[] = {0x1p-40};
        nn_attr eq = attr_string("equation", "ij,jk->ik");
        nn_tensor in[2] = {values_of(NN_DTYPE_DOUBLE, 2, a), values_of(NN_DTYPE_DOUBLE, 2, b)};
        in[0].ndim = 2, in[0].dims[0] = 1, in[0].dims[1] = 2;
        in[1].ndim = 2, in[1].dims[0] = 2, in[1].dims[1] = 1;
        if (cpu_run(&r, "Einsum", 12, &eq, 1, NULL, in, 2, 1, NULL)) expect_f64("Einsum double ij,jk", &r, want, 1, 0);
        release(&r);
        const double d[] = {1.0 + 0x1p-40, -1.0, 5.0, 7.0}, wd[] = {8.0 + 0x1p-40};
        nn_attr tr = attr_string("equation", "ii->");
        nn_tensor one[1] = {values_of(NN_DTYPE_DOUBLE, 4, d)};
        one[0].ndim = 2, one[0].dims[0] = 2, one[0].dims[1] = 2;
        if (cpu_run(&r, "Einsum", 12, &tr, 1, NULL, one, 1, 1, NULL)) expect_f64("Einsum double trace", &r, wd, 1, 0);
        release(&r);
        nn_tensor mixed[2] = {tensor(NN_DTYPE_DOUBLE, 1, 2), tensor(NN_DTYPE_FLOAT, 1, 2)};
        nn_attr dot = attr_string("equation", "i,i->");
        expect_refused("Einsum DOUBLE with FLOAT", "Einsum", 12, &dot, 1, mixed, 2);
    }
}

/* ---- params read back from a plan cache: checks reject out-of-range bytes */

static void test_checks(void) {
    char err[128];
    int64_t bad_pair[2] = {2, 0}; /* CumSum exclusive = 2, IsInf negative = 2 */
    const char *names[] = {"CumSum", "IsInf"};
    for (int i = 0; i < 2; i++) {
        const nn_op_desc *d = nn_op_get(nn_op_lookup(names[i]));
        err[0] = 0;
        CHECK(d->check(bad_pair, err, sizeof err) == NN_ERR_INVALID && err[0], "%s check accepted 2", names[i]);
    }
    char eq[256];
    memset(eq, 'a', sizeof eq); /* no terminator */
    const nn_op_desc *e = nn_op_get(nn_op_lookup("Einsum"));
    CHECK(e->check(eq, err, sizeof err) == NN_ERR_INVALID, "Einsum check accepted an unterminated equation");
    strcpy(eq, "ij->j");
    CHECK(e->check(eq, err, sizeof err) == NN_OK, "Einsum check refused 'ij->j': %s", err);
    int32_t reduce[2] = {99, 0}; /* a reduction kind out of range */
    const nn_op_desc *rd = nn_op_get(nn_op_lookup("ReduceL1"));
    unsigned char params[512] = {0};
    memcpy(params, reduce, sizeof reduce);
    CHECK(rd->check(params, err, sizeof err) == NN_ERR_INVALID, "ReduceL1 check accepted kind 99");
}

int main(void) {
    test_mod();
    test_cumsum();
    test_reduce();
    test_hardmax();
    test_einsum();
    test_misc();
    test_wide_dtypes();
    test_checks();
    return check_summary();
}
