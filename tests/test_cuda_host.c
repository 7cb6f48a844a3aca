/* The CUDA kernels' work on the host: every kernel in cuda/ is a grid-stride
 * loop around a function of cuda/index.h, planned by cuda/layout.h, and
 * both compile as C.  Each case here builds the descriptors the backend
 * builds for a node, runs the element functions over the whole grid (the
 * reduction warps as 32 lanes and their butterfly), and compares with the
 * CPU op run through the op table (parse, infer, run), in fp32 and fp16.
 * The library calls (cuDNN, cuBLASLt) are stood in for by references that
 * follow their documented semantics, fed with the descriptors the backend
 * gives them.  Odd sizes, pads, strides, dilations, groups, broadcasting. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cuda/layout.h"
#include "../engine/arena.h"
#include "../ops/epilogue.h"
#include "op_harness.h"

/* fp16 copies of float tensors, and back */
static uint16_t *to_half(const nn_tensor *t) {
    int64_t n = nn_tensor_elements(t);
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++)
        h[i] = nn_cu_f32_to_f16(((const float *)t->data)[i]);
    return h;
}

static float *from_half(const uint16_t *h, int64_t n) {
    float *f = malloc(sizeof(float) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++)
        f[i] = nn_cu_f16_to_f32(h[i]);
    return f;
}

/* ---- fp16, window ranges, activations */

static void test_half(void) {
    const struct {
        float f;
        uint16_t h;
    } known[] = {{0.0f, 0x0000},          {-0.0f, 0x8000},         {1.0f, 0x3c00},          {-2.0f, 0xc000},
                 {65504.0f, 0x7bff},      {65519.0f, 0x7bff},      {65520.0f, 0x7c00},      {1e9f, 0x7c00},
                 {5.9604645e-8f, 0x0001}, {2.9802322e-8f, 0x0000}, {6.1035156e-5f, 0x0400}, {1.0009766f, 0x3c01},
                 {1.00048828f, 0x3c00},   {1.00146484f, 0x3c02},   {INFINITY, 0x7c00},      {-INFINITY, 0xfc00}};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        CHECK(nn_cu_f32_to_f16(known[i].f) == known[i].h, "f32_to_f16(%.9g) = 0x%04x, want 0x%04x", (double)known[i].f,
              nn_cu_f32_to_f16(known[i].f), known[i].h);
    CHECK((nn_cu_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (nn_cu_f32_to_f16(NAN) & 0x3ff), "NaN stays NaN");
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) { /* every half survives the round trip */
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;
        bad += nn_cu_f32_to_f16(nn_cu_f16_to_f32((uint16_t)h)) != h;
    }
    CHECK(bad == 0, "%d halves change in a round trip through float", bad);
    CHECK(nn_cu_f16_to_f32(0x0001) == ldexpf(1.0f, -24), "smallest subnormal");
    CHECK(nn_cu_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24), "largest subnormal");
}

static void test_valid_range(void) {
    int bad = 0;
    for (int64_t off = -7; off <= 7; off++)
        for (int64_t stride = 1; stride <= 3; stride++)
            for (int64_t limit = 0; limit <= 9; limit++)
                for (int64_t count = 0; count <= 6; count++) {
                    int64_t a, b, c, d;
                    nn_cu_valid_range(off, stride, limit, count, &a, &b);
                    nn_valid_range(off, stride, limit, count, &c, &d);
                    bad += a != c || b != d;
                }
    CHECK(bad == 0, "nn_cu_valid_range differs from nn_valid_range in %d cases", bad);
}

/* ---- elementwise: the node's program over the grid vs the CPU op */

static void check_ew(const char *label, op_run *r, int op, int opset) {
    nn_cu_ew e;
    const char *why = "";
    bool ok = nn_cu_ew_for_node(&e, op, &r->call, opset, &why);
    CHECK(ok, "%s: no program (%s)", label, why);
    if (!ok) return;
    int64_t n = e.total;
    CHECK(n == nn_tensor_elements(&r->out[0]), "%s: the program covers %lld elements, the output has %lld", label,
          (long long)n, (long long)nn_tensor_elements(&r->out[0]));
    const void *in[NN_EW_MAX_INPUTS];
    uint16_t *halves[NN_EW_MAX_INPUTS] = {0};
    for (int k = 0; k < e.n_in; k++)
        in[k] = r->in[k].data;
    float *y = malloc(sizeof(float) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++)
        nn_cu_ew_element(&e, in, y, false, i);
    CHECK_CLOSE(label, y, r->out[0].data, n, 1e-6, 2e-6);
    /* fp16 storage: the same arithmetic on the operands rounded to half,
     * the result rounded once (the kernel converts at load and store) */
    float *rounded[NN_EW_MAX_INPUTS];
    for (int k = 0; k < e.n_in; k++) {
        halves[k] = to_half(&r->in[k]);
        in[k] = rounded[k] = from_half(halves[k], nn_tensor_elements(&r->in[k]));
    }
    for (int64_t i = 0; i < n; i++)
        nn_cu_ew_element(&e, in, y, false, i);
    for (int k = 0; k < e.n_in; k++)
        in[k] = halves[k];
    uint16_t *yh = malloc(sizeof(uint16_t) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++)
        nn_cu_ew_element(&e, in, yh, true, i);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++)
        differ += yh[i] != nn_cu_f32_to_f16(y[i]) && !(isnan(y[i]) && isnan(nn_cu_f16_to_f32(yh[i])));
    CHECK(differ == 0, "%s (fp16): %lld elements differ from the fp32 arithmetic on half operands", label,
          (long long)differ);
    for (int k = 0; k < e.n_in; k++) {
        free(halves[k]);
        free(rounded[k]);
    }
    free(y);
    free(yh);
}

static void test_unary(void) {
#define UNARY_CASE(name, expr)                                                                                         \
    {                                                                                                                  \
        op_run r;                                                                                                      \
        bool positive = !strcmp(#name, "Log") || !strcmp(#name, "Sqrt") || !strcmp(#name, "Reciprocal");               \
        nn_tensor x = rand_tensor(positive ? 0.1f : -3.0f, 3.0f, 3, 3, 5, 7);                                          \
        if (cpu_run(&r, #name, 13, NULL, 0, NULL, &x, 1, 1, NULL)) check_ew(#name, &r, NN_OP_##name, 13);              \
        release(&r);                                                                                                   \
    }
    NN_EW_UNARY_OPS(UNARY_CASE)
#undef UNARY_CASE
    /* activations describe themselves (as_activation) */
    const char *acts[] = {"Relu", "Sigmoid", "HardSwish", "Tanh"};
    for (size_t i = 0; i < sizeof acts / sizeof *acts; i++) {
        op_run r;
        nn_tensor x = rand_tensor(-6.0f, 6.0f, 2, 9, 13);
        if (cpu_run(&r, acts[i], 13, NULL, 0, NULL, &x, 1, 1, NULL)) check_ew(acts[i], &r, nn_op_lookup(acts[i]), 13);
        release(&r);
    }
    op_run r;
    nn_attr leaky = attr_float("alpha", 0.3f);
    nn_tensor x = rand_tensor(-4.0f, 4.0f, 3, 2, 3, 5);
    if (cpu_run(&r, "LeakyRelu", 13, &leaky, 1, NULL, &x, 1, 1, NULL)) check_ew("LeakyRelu", &r, NN_OP_LeakyRelu, 13);
    release(&r);
    nn_attr hard[] = {attr_float("alpha", 0.25f), attr_float("beta", 0.4f)};
    x = rand_tensor(-4.0f, 4.0f, 1, 31);
    if (cpu_run(&r, "HardSigmoid", 13, hard, 2, NULL, &x, 1, 1, NULL))
        check_ew("HardSigmoid", &r, NN_OP_HardSigmoid, 13);
    release(&r);
    const float lo = -0.5f, hi = 1.5f;
    nn_tensor clip[3] = {rand_tensor(-3.0f, 3.0f, 2, 4, 6), float_values(1, &lo), float_values(1, &hi)};
    clip[1].ndim = clip[2].ndim = 0; /* scalar bounds */
    if (cpu_run(&r, "Clip", 13, NULL, 0, NULL, clip, 3, 1, NULL)) check_ew("Clip", &r, NN_OP_Clip, 13);
    release(&r);
}

static void test_binary(void) {
    struct {
        const char *op;
        nn_tensor a, b;
    } cases[] = {
        {"Add", rand_tensor(-2, 2, 4, 2, 3, 4, 5), rand_tensor(-2, 2, 3, 3, 1, 5)},
        {"Sub", rand_tensor(-2, 2, 3, 1, 3, 1), rand_tensor(-2, 2, 3, 4, 3, 7)},
        {"Mul", rand_tensor(-2, 2, 3, 2, 1, 4), rand_tensor(-2, 2, 3, 1, 5, 1)},
        {"Div", rand_tensor(-2, 2, 0), rand_tensor(0.5f, 2, 2, 3, 4)},
        {"Pow", rand_tensor(0.1f, 2, 2, 2, 3), rand_tensor(-2, 2, 1, 3)},
        {"PRelu", rand_tensor(-2, 2, 4, 2, 3, 4, 4), rand_tensor(0, 1, 3, 3, 1, 1)},
        {"Max", rand_tensor(-2, 2, 2, 5, 1), rand_tensor(-2, 2, 1, 6)},
        {"Min", rand_tensor(-2, 2, 3, 1, 1, 7), rand_tensor(-2, 2, 2, 3, 1)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        op_run r;
        nn_tensor in[2] = {cases[i].a, cases[i].b};
        if (cpu_run(&r, cases[i].op, 13, NULL, 0, NULL, in, 2, 1, NULL))
            check_ew(cases[i].op, &r, nn_op_lookup(cases[i].op), 13);
        release(&r);
    }
    /* variadic: folded left to right */
    op_run r;
    nn_tensor three[3] = {rand_tensor(-2, 2, 2, 2, 3), rand_tensor(-2, 2, 1, 3), rand_tensor(-2, 2, 2, 1, 1)};
    if (cpu_run(&r, "Sum", 13, NULL, 0, NULL, three, 3, 1, NULL)) check_ew("Sum of 3", &r, NN_OP_Sum, 13);
    release(&r);
    nn_tensor four[4] = {rand_tensor(-2, 2, 1, 5), rand_tensor(-2, 2, 2, 3, 5), rand_tensor(-2, 2, 0),
                         rand_tensor(-2, 2, 2, 3, 1)};
    if (cpu_run(&r, "Max", 13, NULL, 0, NULL, four, 4, 1, NULL)) check_ew("Max of 4", &r, NN_OP_Max, 13);
    release(&r);
    /* with a fused residual and activation: y = act(a + b + residual) */
    nn_epilogue ep = {.residual = 2, .act = NN_ACT_CLIP, .alpha = -1.0f, .beta = 1.0f};
    nn_tensor fused[3] = {rand_tensor(-2, 2, 3, 2, 3, 5), rand_tensor(-2, 2, 1, 5), rand_tensor(-2, 2, 3, 2, 3, 5)};
    if (cpu_run(&r, "Add", 13, NULL, 0, NULL, fused, 3, 1, &ep)) check_ew("Add+residual+Clip", &r, NN_OP_Add, 13);
    release(&r);
}

static void test_fused_elementwise(void) {
    nn_ew_program p = {.n_steps = 5};
    p.steps[0] = (nn_ew_step){.op = NN_EW_MulAdd, .operand = 1, .operand2 = 2, .act = NN_ACT_CLIP, .beta = 6.0f};
    p.steps[1] = (nn_ew_step){.op = NN_EW_Sub, .operand = 3, .swap = true};
    p.steps[2] = (nn_ew_step){.op = NN_EW_Softsign};
    p.steps[3] = (nn_ew_step){.op = NN_EW_Mul, .operand = 4};
    p.steps[4] = (nn_ew_step){.op = NN_EW_Act, .act = NN_ACT_SILU};
    /* output [2,4,5,5]: per-channel factor and addend, a same-shape operand, a trailing vector */
    nn_tensor in[5] = {rand_tensor(-3, 3, 4, 2, 4, 5, 5), rand_tensor(0.5f, 1.5f, 3, 4, 1, 1),
                       rand_tensor(-1, 1, 3, 4, 1, 1), rand_tensor(-1, 1, 4, 2, 4, 5, 5), rand_tensor(-2, 2, 1, 5)};
    op_run r;
    if (cpu_run(&r, "FusedElementwise", 13, NULL, 0, &p, in, 5, 1, NULL))
        check_ew("FusedElementwise", &r, NN_OP_FusedElementwise, 13);
    release(&r);
}

/* ---- pooling */

static void check_pool(const char *label, const char *op, const nn_attr *attrs, int n_attrs, nn_tensor x) {
    op_run r;
    if (!cpu_run(&r, op, 13, attrs, n_attrs, NULL, &x, 1, 1, NULL)) {
        release(&r);
        return;
    }
    nn_pool_geom g;
    nn_status st = nn_pool_resolve(&r.call, &g);
    CHECK(st == NN_OK, "%s: resolve", label);
    const nn_pool_params *pp = r.call.params;
    bool max = !strcmp(op, "MaxPool");
    nn_cu_pool p;
    nn_cu_pool_make(&p, &g, max, !max && pp->count_include_pad);
    int64_t n = p.total;
    CHECK(n == nn_tensor_elements(&r.out[0]), "%s: %lld outputs", label, (long long)n);
    float *y = malloc(sizeof(float) * (size_t)(n + 1));
    for (int64_t o = 0; o < n; o++)
        nn_cu_pool_element(&p, x.data, y, false, o);
    CHECK_CLOSE(label, y, r.out[0].data, n, 1e-6, 1e-5);
    free(y);
    release(&r);
}

static void test_pool(void) {
    static const int64_t k3[] = {3, 3}, s2[] = {2, 2}, p1[] = {1, 1, 1, 1}, asym[] = {0, 1, 2, 1}, d2[] = {2, 1};
    static const int64_t k2[] = {2, 3}, s21[] = {2, 1}, k1d[] = {4}, s1d[] = {3}, p1d[] = {2, 1};
    static const int64_t k3d[] = {2, 3, 2}, p3d[] = {1, 0, 1, 0, 1, 1};
    nn_attr a1[] = {attr_ints("kernel_shape", 2, k3), attr_ints("strides", 2, s2), attr_ints("pads", 4, p1)};
    check_pool("MaxPool 3x3/2 pad 1", "MaxPool", a1, 3, rand_tensor(-2, 2, 4, 2, 3, 9, 8));
    nn_attr a2[] = {attr_ints("kernel_shape", 2, k3), attr_ints("strides", 2, s2), attr_int("ceil_mode", 1),
                    attr_ints("dilations", 2, d2)};
    check_pool("MaxPool ceil, dilated", "MaxPool", a2, 4, rand_tensor(-2, 2, 4, 1, 2, 11, 10));
    nn_attr a3[] = {attr_ints("kernel_shape", 2, k2), attr_ints("strides", 2, s21), attr_ints("pads", 4, asym)};
    check_pool("AveragePool asymmetric pads", "AveragePool", a3, 3, rand_tensor(-2, 2, 4, 2, 3, 7, 6));
    nn_attr a4[] = {attr_ints("kernel_shape", 2, k2), attr_ints("strides", 2, s21), attr_ints("pads", 4, asym),
                    attr_int("count_include_pad", 1)};
    check_pool("AveragePool count_include_pad", "AveragePool", a4, 4, rand_tensor(-2, 2, 4, 2, 3, 7, 6));
    nn_attr a5[] = {attr_ints("kernel_shape", 2, k3), attr_ints("strides", 2, s2), attr_int("ceil_mode", 1),
                    attr_int("count_include_pad", 1), attr_ints("pads", 4, p1)};
    check_pool("AveragePool ceil with pads", "AveragePool", a5, 5, rand_tensor(-2, 2, 4, 1, 2, 8, 9));
    nn_attr a6[] = {attr_ints("kernel_shape", 1, k1d), attr_ints("strides", 1, s1d), attr_ints("pads", 2, p1d)};
    check_pool("MaxPool 1-D", "MaxPool", a6, 3, rand_tensor(-2, 2, 3, 2, 3, 17));
    check_pool("AveragePool 1-D", "AveragePool", a6, 3, rand_tensor(-2, 2, 3, 2, 3, 17));
    nn_attr a7[] = {attr_ints("kernel_shape", 3, k3d), attr_ints("pads", 6, p3d)};
    check_pool("AveragePool 3-D", "AveragePool", a7, 2, rand_tensor(-2, 2, 5, 1, 2, 5, 6, 4));
    nn_attr a8[] = {attr_ints("kernel_shape", 2, k3), attr_ints("strides", 2, s2),
                    attr_string("auto_pad", "SAME_UPPER")};
    check_pool("MaxPool SAME_UPPER", "MaxPool", a8, 3, rand_tensor(-2, 2, 4, 1, 3, 8, 7));
}

/* ---- segments: 32 lanes and their butterfly, as the warp runs them */

static double reduce_segment(const nn_cu_reduce *r, const void *x, bool half, int64_t seg) {
    double lane[NN_CU_LANES], next[NN_CU_LANES];
    for (int l = 0; l < NN_CU_LANES; l++)
        lane[l] = nn_cu_reduce_partial(r, x, half, seg, l);
    for (int off = NN_CU_LANES / 2; off > 0; off /= 2) {
        for (int l = 0; l < NN_CU_LANES; l++)
            next[l] = nn_cu_reduce_merge(r->kind, lane[l], lane[l ^ off]);
        memcpy(lane, next, sizeof lane);
    }
    return lane[0];
}

static void check_reduce(const char *label, const char *op, int opset, const nn_attr *attrs, int n_attrs, nn_tensor *in,
                         int n_in) {
    op_run r;
    if (!cpu_run(&r, op, opset, attrs, n_attrs, NULL, in, n_in, 1, NULL)) {
        release(&r);
        return;
    }
    int id = nn_op_lookup(op);
    bool reduced[NN_MAX_DIMS] = {false}, noop = false;
    if (id == NN_OP_GlobalAveragePool || id == NN_OP_GlobalMaxPool) {
        for (int d = 2; d < r.in[0].ndim; d++)
            reduced[d] = true;
    } else {
        CHECK(nn_reduce_mask(&r.call, reduced, &noop) == NN_OK && !noop, "%s: mask", label);
    }
    nn_cu_reduce red;
    nn_cu_reduce_make(&red, &r.in[0], reduced, nn_cu_reduce_kind_of(id));
    int64_t n = red.segments;
    CHECK(n == nn_tensor_elements(&r.out[0]), "%s: %lld segments for %lld outputs", label, (long long)n,
          (long long)nn_tensor_elements(&r.out[0]));
    float *y = malloc(sizeof(float) * (size_t)(n + 1));
    for (int64_t s = 0; s < n; s++)
        nn_cu_store(y, s, nn_cu_reduce_final(red.kind, reduce_segment(&red, r.in[0].data, false, s), red.count), false);
    CHECK_CLOSE(label, y, r.out[0].data, n, 1e-6, 1e-5);
    free(y);
    release(&r);
}

static void test_reduce(void) {
    static const int64_t ax13[] = {1, 3}, ax_neg[] = {-2}, ax0[] = {0};
    nn_attr mean[] = {attr_ints("axes", 2, ax13), attr_int("keepdims", 0)};
    nn_tensor x = rand_tensor(-2, 2, 4, 2, 3, 4, 5);
    check_reduce("ReduceMean axes 1,3", "ReduceMean", 13, mean, 2, &x, 1);
    nn_attr neg[] = {attr_ints("axes", 1, ax_neg)};
    x = rand_tensor(-2, 2, 3, 3, 70, 3); /* 70 elements per segment: every lane takes two or three */
    check_reduce("ReduceMax axis -2", "ReduceMax", 13, neg, 1, &x, 1);
    x = rand_tensor(-2, 2, 3, 3, 70, 3);
    check_reduce("ReduceMin axis -2", "ReduceMin", 13, neg, 1, &x, 1);
    x = rand_tensor(-2, 2, 3, 4, 3, 5);
    check_reduce("ReduceL2 all", "ReduceL2", 13, NULL, 0, &x, 1);
    nn_attr first[] = {attr_ints("axes", 1, ax0)};
    x = rand_tensor(0.5f, 1.5f, 3, 5, 2, 3);
    check_reduce("ReduceProd axis 0", "ReduceProd", 13, first, 1, &x, 1);
    static const int64_t axes_in[] = {0, 2};
    nn_tensor sum_in[2] = {rand_tensor(-2, 2, 3, 6, 5, 40), int64_tensor(2, axes_in)};
    check_reduce("ReduceSum axes as input", "ReduceSum", 13, NULL, 0, sum_in, 2);
    x = rand_tensor(-2, 2, 4, 2, 3, 5, 7);
    check_reduce("GlobalAveragePool", "GlobalAveragePool", 13, NULL, 0, &x, 1);
    x = rand_tensor(-2, 2, 4, 2, 3, 9, 11);
    check_reduce("GlobalMaxPool", "GlobalMaxPool", 13, NULL, 0, &x, 1);
}

static void check_softmax(const char *label, const char *op, int opset, const nn_attr *attrs, int n_attrs,
                          nn_tensor x) {
    op_run r;
    if (!cpu_run(&r, op, opset, attrs, n_attrs, NULL, &x, 1, 1, NULL)) {
        release(&r);
        return;
    }
    int64_t outer, len, inner;
    CHECK(nn_softmax_view(&r.call, &outer, &len, &inner) == NN_OK, "%s: view", label);
    nn_cu_softmax sm;
    nn_cu_softmax_make(&sm, outer, len, inner, !strcmp(op, "LogSoftmax"));
    int64_t n = nn_tensor_elements(&x);
    float *y = calloc((size_t)n + 1, sizeof(float));
    for (int64_t s = 0; s < sm.segments; s++) {
        float m[NN_CU_LANES], sum[NN_CU_LANES], next[NN_CU_LANES];
        for (int l = 0; l < NN_CU_LANES; l++)
            m[l] = nn_cu_softmax_partial_max(&sm, x.data, false, s, l);
        for (int off = NN_CU_LANES / 2; off > 0; off /= 2) {
            for (int l = 0; l < NN_CU_LANES; l++)
                next[l] = nn_cu_max(m[l], m[l ^ off]);
            memcpy(m, next, sizeof m);
        }
        for (int l = 0; l < NN_CU_LANES; l++)
            sum[l] = nn_cu_softmax_partial_sum(&sm, x.data, false, s, l, m[l]);
        for (int off = NN_CU_LANES / 2; off > 0; off /= 2) {
            for (int l = 0; l < NN_CU_LANES; l++)
                next[l] = sum[l] + sum[l ^ off];
            memcpy(sum, next, sizeof sum);
        }
        for (int l = 0; l < NN_CU_LANES; l++)
            nn_cu_softmax_write(&sm, x.data, y, false, s, l, m[l], sum[l]);
    }
    CHECK_CLOSE(label, y, r.out[0].data, n, 1e-6, 1e-5);
    free(y);
    release(&r);
}

static void test_softmax(void) {
    nn_attr last = attr_int("axis", -1), one = attr_int("axis", 1);
    check_softmax("Softmax last axis", "Softmax", 13, &last, 1, rand_tensor(-5, 5, 2, 3, 40));
    check_softmax("Softmax axis 1 of 3", "Softmax", 13, &one, 1, rand_tensor(-5, 5, 3, 2, 37, 3));
    check_softmax("Softmax opset 11 (flattened)", "Softmax", 11, &one, 1, rand_tensor(-5, 5, 3, 2, 3, 4));
    check_softmax("LogSoftmax axis 1", "LogSoftmax", 13, &one, 1, rand_tensor(-5, 5, 3, 2, 33, 5));
}

/* ---- data movement */

static void test_transpose(void) {
    static const int64_t perm[] = {0, 2, 3, 1};
    nn_attr a = attr_ints("perm", 4, perm);
    for (int dt = 0; dt < 2; dt++) {
        op_run r;
        nn_tensor x = dt ? tensor(NN_DTYPE_INT64, 4, 2, 3, 4, 5) : rand_tensor(-2, 2, 4, 2, 3, 4, 5);
        if (dt)
            for (int64_t i = 0; i < nn_tensor_elements(&x); i++)
                ((int64_t *)x.data)[i] = i * 7919 - 100;
        if (cpu_run(&r, "Transpose", 13, &a, 1, NULL, &x, 1, 1, NULL)) {
            int64_t p[NN_MAX_DIMS];
            CHECK(nn_transpose_perm(&r.call, p) == NN_OK, "perm");
            nn_cu_transpose t;
            nn_cu_transpose_make(&t, &r.in[0], p);
            size_t bytes = (size_t)t.total * (size_t)t.esize;
            char *y = malloc(bytes);
            for (int64_t i = 0; i < t.total; i++)
                nn_cu_transpose_element(&t, x.data, y, i);
            CHECK(!memcmp(y, r.out[0].data, bytes), "Transpose %s differs", dt ? "INT64" : "FLOAT");
            free(y);
        }
        release(&r);
    }
    op_run r; /* no perm: the axes reversed */
    nn_tensor x = rand_tensor(-2, 2, 3, 3, 4, 5);
    if (cpu_run(&r, "Transpose", 13, NULL, 0, NULL, &x, 1, 1, NULL)) {
        int64_t p[NN_MAX_DIMS];
        nn_transpose_perm(&r.call, p);
        nn_cu_transpose t;
        nn_cu_transpose_make(&t, &r.in[0], p);
        float *y = malloc(sizeof(float) * (size_t)t.total);
        for (int64_t i = 0; i < t.total; i++)
            nn_cu_transpose_element(&t, x.data, y, i);
        CHECK_CLOSE("Transpose reversed", y, r.out[0].data, t.total, 0, 0);
        free(y);
    }
    release(&r);
}

static void test_concat(void) {
    for (int c = 0; c < 3; c++) {
        int axis = c == 0 ? 1 : c == 1 ? 0 : -1;
        nn_tensor in[3];
        if (c == 0) {
            in[0] = rand_tensor(-2, 2, 3, 2, 3, 4);
            in[1] = rand_tensor(-2, 2, 3, 2, 1, 4);
            in[2] = rand_tensor(-2, 2, 3, 2, 5, 4);
        } else if (c == 1) {
            in[0] = rand_tensor(-2, 2, 2, 1, 5);
            in[1] = rand_tensor(-2, 2, 2, 3, 5);
            in[2] = rand_tensor(-2, 2, 2, 2, 5);
        } else {
            for (int k = 0; k < 3; k++) {
                in[k] = tensor(NN_DTYPE_INT64, 2, 3, k + 1);
                for (int64_t i = 0; i < nn_tensor_elements(&in[k]); i++)
                    ((int64_t *)in[k].data)[i] = 100 * k + i;
            }
        }
        nn_attr a = attr_int("axis", axis);
        op_run r;
        if (cpu_run(&r, "Concat", 13, &a, 1, NULL, in, 3, 1, NULL)) {
            const nn_tensor *y = &r.out[0];
            int64_t ax;
            nn_axis_normalize(axis, y->ndim, &ax);
            int64_t esize = (int64_t)nn_dtype_size(y->dtype), bytes = nn_tensor_elements(y) * esize, before = 0;
            char *got = calloc(1, (size_t)bytes);
            for (int k = 0; k < 3; k++) { /* cudaMemcpy2DAsync, on the host */
                nn_cu_slice s;
                nn_cu_concat_slice(y, ax, before, r.in[k].dims[ax], esize, &s);
                before += r.in[k].dims[ax];
                for (int64_t row = 0; row < s.rows; row++)
                    memcpy(got + s.dst_offset + row * s.dst_pitch, (const char *)r.in[k].data + row * s.src_pitch,
                           (size_t)s.width);
            }
            CHECK(!memcmp(got, y->data, (size_t)bytes), "Concat case %d differs", c);
            free(got);
        }
        release(&r);
    }
}

static void check_resize(const char *label, const char *op, int opset, const nn_attr *attrs, int n_attrs, nn_tensor *in,
                         int n_in) {
    op_run r;
    if (!cpu_run(&r, op, opset, attrs, n_attrs, NULL, in, n_in, 1, NULL)) {
        release(&r);
        return;
    }
    const nn_tensor *y = &r.out[0];
    int64_t n_taps = 0;
    for (int d = 0; d < y->ndim; d++)
        n_taps += y->dims[d];
    nn_resize_tap *taps = calloc((size_t)n_taps + 1, sizeof *taps);
    bool linear;
    CHECK(nn_resize_taps(&r.call, taps, &linear) == NN_OK, "%s: taps", label);
    nn_cu_resize rs;
    nn_cu_resize_make(&rs, y, linear);
    float *got = malloc(sizeof(float) * (size_t)(rs.total + 1));
    for (int64_t i = 0; i < rs.total; i++)
        nn_cu_resize_element(&rs, taps, r.in[0].data, got, false, i);
    CHECK_CLOSE(label, got, y->data, rs.total, 1e-6, 1e-5);
    free(got);
    free(taps);
    release(&r);
}

static void test_resize(void) {
    const float up2[] = {1, 1, 2, 2}, odd[] = {1, 1, 1.5f, 0.6f};
    nn_tensor in10[2] = {rand_tensor(-2, 2, 4, 2, 3, 5, 4), float_values(4, up2)};
    check_resize("Resize 10 nearest x2", "Resize", 10, NULL, 0, in10, 2);
    nn_attr lin[] = {attr_string("mode", "linear")};
    static const int64_t sizes[] = {2, 3, 7, 9};
    nn_tensor in13[4] = {rand_tensor(-2, 2, 4, 2, 3, 5, 4), {0}, {0}, int64_tensor(4, sizes)};
    check_resize("Resize 13 linear half_pixel to sizes", "Resize", 13, lin, 1, in13, 4);
    nn_attr corners[] = {attr_string("mode", "linear"), attr_string("coordinate_transformation_mode", "align_corners")};
    nn_tensor in_c[3] = {rand_tensor(-2, 2, 4, 1, 2, 6, 5), {0}, float_values(4, odd)};
    check_resize("Resize 13 linear align_corners", "Resize", 13, corners, 2, in_c, 3);
    nn_attr near[] = {attr_string("coordinate_transformation_mode", "asymmetric"),
                      attr_string("nearest_mode", "round_prefer_ceil")};
    nn_tensor in_n[3] = {rand_tensor(-2, 2, 4, 1, 2, 6, 5), {0}, float_values(4, odd)};
    check_resize("Resize 13 nearest round_prefer_ceil", "Resize", 13, near, 2, in_n, 3);
    nn_tensor in_u[2] = {rand_tensor(-2, 2, 3, 2, 3, 4), float_values(3, up2 + 1)};
    check_resize("Upsample 9 nearest", "Upsample", 9, NULL, 0, in_u, 2);
}

/* ---- convolution: cuDNN's semantics with the descriptor the backend gives
 * it (symmetric pads, cross-correlation, groups), then the epilogue the
 * backend applies: cuDNN's fused ReLU path or the elementwise pass. */

static void cudnn_reference(const nn_cu_conv *cv, const float *x, const float *w, const float *bias, float *y) {
    int sp = cv->nd - 2, cg = cv->w[1], mg = cv->y[1] / cv->group;
    int64_t xs = 1, ys = 1, ks = 1;
    for (int d = 0; d < sp; d++) {
        xs *= cv->x[2 + d];
        ys *= cv->y[2 + d];
        ks *= cv->w[2 + d];
    }
    for (int n = 0; n < cv->y[0]; n++)
        for (int m = 0; m < cv->y[1]; m++)
            for (int64_t o = 0; o < ys; o++) {
                int64_t pos[3];
                for (int d = sp - 1, r = (int)o; d >= 0; d--) {
                    pos[d] = r % cv->y[2 + d];
                    r /= cv->y[2 + d];
                }
                double acc = bias ? bias[m] : 0.0;
                for (int c = 0; c < cg; c++)
                    for (int64_t t = 0; t < ks; t++) {
                        int64_t at = 0, r = t;
                        bool inside = true;
                        int64_t tap[3];
                        for (int d = sp - 1; d >= 0; d--) {
                            tap[d] = r % cv->w[2 + d];
                            r /= cv->w[2 + d];
                        }
                        for (int d = 0; d < sp; d++) {
                            int64_t i = pos[d] * cv->stride[d] - cv->pad[d] + tap[d] * cv->dilation[d];
                            inside &= i >= 0 && i < cv->x[2 + d];
                            at = at * cv->x[2 + d] + i;
                        }
                        if (!inside) continue;
                        int ic = m / mg * cg + c;
                        acc += (double)x[((int64_t)n * cv->x[1] + ic) * xs + at] * w[((int64_t)m * cg + c) * ks + t];
                    }
                y[((int64_t)n * cv->y[1] + m) * ys + o] = (float)acc;
            }
}

static void check_conv(const char *label, const nn_attr *attrs, int n_attrs, nn_tensor *in, int n_in,
                       const nn_epilogue *ep, bool expressible) {
    op_run r;
    if (!cpu_run(&r, "Conv", 13, attrs, n_attrs, NULL, in, n_in, 1, ep)) {
        release(&r);
        return;
    }
    nn_conv_geom g;
    CHECK(nn_conv_resolve(&r.call, false, &g) == NN_OK, "%s: resolve", label);
    nn_cu_conv cv;
    const char *why = "";
    bool ok = nn_cu_conv_make(&cv, &g, &why);
    CHECK(ok == expressible, "%s: cuDNN %s it (%s)", label, ok ? "takes" : "refuses", why);
    if (ok) {
        const nn_tensor *yt = &r.out[0];
        int64_t n = nn_tensor_elements(yt), cuddn_n = 1;
        for (int d = 0; d < cv.nd; d++)
            cuddn_n *= cv.y[d];
        CHECK(n == cuddn_n, "%s: cuDNN's output has %lld elements, the CPU's %lld", label, (long long)cuddn_n,
              (long long)n);
        float *y = malloc(sizeof(float) * (size_t)(n + 1));
        const float *bias = n_in > 2 ? r.in[2].data : NULL;
        int residual = ep && ep->residual >= 0 ? ep->residual : -1;
        if (ep && ep->act == NN_ACT_RELU) { /* cudnnConvolutionBiasActivationForward */
            cudnn_reference(&cv, r.in[0].data, r.in[1].data, bias, y);
            for (int64_t i = 0; i < n; i++) {
                float v = y[i] + (residual >= 0 ? ((const float *)r.in[residual].data)[i] : 0.0f);
                y[i] = v > 0.0f ? v : 0.0f;
            }
        } else { /* cudnnConvolutionForward, then the pass (cuda/conv.cu builds it the same way) */
            cudnn_reference(&cv, r.in[0].data, r.in[1].data, NULL, y);
            nn_tensor shapes[3] = {*yt};
            const void *ops[3] = {y};
            int count = 1, bias_op = -1, res_op = -1;
            if (bias) {
                shapes[count] = (nn_tensor){.ndim = g.nsp + 1, .dims = {g.out_ch, 1, 1, 1}};
                ops[count] = bias;
                bias_op = count++;
            }
            if (residual >= 0) {
                shapes[count] = r.in[residual];
                ops[count] = r.in[residual].data;
                res_op = count++;
            }
            nn_cu_ew post;
            nn_cu_ew_layout(&post, yt->ndim, yt->dims, count, shapes);
            nn_cu_ew_push_epilogue(&post, bias_op, res_op, ep ? ep->act : NN_ACT_NONE, ep ? ep->alpha : 0.0f,
                                   ep ? ep->beta : 0.0f);
            for (int64_t i = 0; i < n; i++)
                nn_cu_ew_element(&post, ops, y, false, i);
        }
        CHECK_CLOSE(label, y, yt->data, n, 1e-5, 1e-4);
        free(y);
    }
    release(&r);
}

static void test_conv(void) {
    static const int64_t s21[] = {2, 1}, p1[] = {1, 1, 1, 1}, d12[] = {1, 2}, s2[] = {2, 2}, s1d[] = {2},
                         p1d[] = {2, 2}, p3d[] = {1, 1, 1, 1, 1, 1}, asym_ok[] = {1, 1, 2, 2},
                         asym_bad[] = {0, 0, 1, 1};
    nn_epilogue relu_res = {.residual = 3, .act = NN_ACT_RELU}, silu_res = {.residual = 3, .act = NN_ACT_SILU},
                relu = {.residual = -1, .act = NN_ACT_RELU}, clip = {.residual = -1, .act = NN_ACT_CLIP, .beta = 6.0f};
    nn_attr grouped[] = {attr_ints("strides", 2, s21), attr_ints("pads", 4, p1), attr_ints("dilations", 2, d12),
                         attr_int("group", 2)};
    nn_tensor in[4] = {rand_tensor(-1, 1, 4, 2, 4, 9, 8), rand_tensor(-1, 1, 4, 6, 2, 3, 3), rand_tensor(-1, 1, 1, 6),
                       rand_tensor(-1, 1, 4, 2, 6, 5, 6)};
    check_conv("grouped, strided, dilated, bias + residual + ReLU", grouped, 4, in, 4, &relu_res, true);
    nn_tensor in2[4] = {rand_tensor(-1, 1, 4, 2, 4, 9, 8), rand_tensor(-1, 1, 4, 6, 2, 3, 3), rand_tensor(-1, 1, 1, 6),
                        rand_tensor(-1, 1, 4, 2, 6, 5, 6)};
    check_conv("grouped, bias + residual + SiLU", grouped, 4, in2, 4, &silu_res, true);
    nn_attr dw[] = {attr_ints("strides", 2, s2), attr_ints("pads", 4, p1), attr_int("group", 6)};
    nn_tensor in3[2] = {rand_tensor(-1, 1, 4, 1, 6, 7, 7), rand_tensor(-1, 1, 4, 6, 1, 3, 3)};
    check_conv("depthwise, no bias, ReLU (zero bias)", dw, 3, in3, 2, &relu, true);
    nn_attr one_d[] = {attr_ints("strides", 1, s1d), attr_ints("pads", 2, p1d)};
    nn_tensor in4[3] = {rand_tensor(-1, 1, 3, 2, 3, 11), rand_tensor(-1, 1, 3, 4, 3, 5), rand_tensor(-1, 1, 1, 4)};
    check_conv("1-D as 2-D, bias + Clip", one_d, 2, in4, 3, &clip, true);
    nn_attr three_d[] = {attr_ints("pads", 6, p3d)};
    nn_tensor in5[3] = {rand_tensor(-1, 1, 5, 1, 2, 5, 6, 4), rand_tensor(-1, 1, 5, 3, 2, 3, 3, 3),
                        rand_tensor(-1, 1, 1, 3)};
    check_conv("3-D, bias only", three_d, 1, in5, 3, NULL, true);
    nn_attr asym[] = {attr_ints("strides", 2, s2), attr_ints("pads", 4, asym_ok)};
    nn_tensor in6[2] = {rand_tensor(-1, 1, 4, 1, 2, 7, 7), rand_tensor(-1, 1, 4, 3, 2, 3, 3)};
    check_conv("asymmetric pads whose end pad is never read", asym, 2, in6, 2, NULL, true);
    nn_attr bad[] = {attr_ints("pads", 4, asym_bad)};
    nn_tensor in7[2] = {rand_tensor(-1, 1, 4, 1, 2, 5, 5), rand_tensor(-1, 1, 4, 3, 2, 3, 3)};
    check_conv("asymmetric pads cuDNN cannot express", bad, 1, in7, 2, NULL, false);
    nn_attr same[] = {attr_ints("strides", 2, s2), attr_string("auto_pad", "SAME_UPPER")};
    nn_tensor in8[2] = {rand_tensor(-1, 1, 4, 1, 2, 8, 8), rand_tensor(-1, 1, 4, 3, 2, 3, 3)};
    check_conv("SAME_UPPER with an odd total pad", same, 2, in8, 2, NULL, false);
    nn_attr same1[] = {attr_string("auto_pad", "SAME_LOWER")};
    nn_tensor in9[2] = {rand_tensor(-1, 1, 4, 1, 2, 8, 7), rand_tensor(-1, 1, 4, 3, 2, 3, 3)};
    check_conv("SAME_LOWER, stride 1", same1, 1, in9, 2, NULL, true);
}

/* ---- matrix products: cuBLASLt's column-major D = epi(alpha op(A) op(B) +
 * beta C + bias) with the layouts the backend gives it, then the pass. */

static void lt_reference(const nn_cu_matmul *mm, int64_t batch, const float *a, const float *b, const float *c,
                         float beta, const float *bias, bool relu, float alpha, float *d) {
    for (int64_t e = 0; e < batch; e++) {
        const float *ae = a + e * mm->stride_a, *be = b + e * mm->stride_b, *ce = c ? c + e * mm->stride_d : NULL;
        float *de = d + e * mm->stride_d;
        for (int64_t j = 0; j < mm->m; j++) /* D is n x m, ld n */
            for (int64_t i = 0; i < mm->n; i++) {
                double acc = 0.0;
                for (int64_t k = 0; k < mm->k; k++) {
                    float av = mm->trans_a ? ae[k + i * mm->lda] : ae[i + k * mm->lda];
                    float bv = mm->trans_b ? be[j + k * mm->ldb] : be[k + j * mm->ldb];
                    acc += (double)av * bv;
                }
                double v = alpha * acc + (ce ? beta * ce[i + j * mm->n] : 0.0) + (bias ? bias[i] : 0.0);
                de[i + j * mm->n] = (float)(relu && v < 0.0 ? 0.0 : v);
            }
    }
}

static void check_product(const char *label, op_run *r, bool gemm) {
    const nn_tensor *a = &r->in[0], *b = &r->in[1], *y = &r->out[0];
    nn_cu_matmul mm;
    nn_cu_batch bt = {.entries = 1};
    int batching = NN_CU_BATCH_STRIDED, c_input = -1;
    float alpha = 1.0f, beta = 0.0f;
    const nn_tensor *cm = NULL;
    if (gemm) {
        const nn_gemm_params *p = r->call.params;
        nn_cu_matmul_make(&mm, a->dims[p->trans_a ? 1 : 0], b->dims[p->trans_b ? 0 : 1], a->dims[p->trans_a ? 0 : 1],
                          p->trans_a != 0, p->trans_b != 0);
        alpha = p->alpha;
        if (nn_present(&r->call, 2) && p->beta != 0.0f) {
            cm = &r->in[2];
            beta = p->beta;
            c_input = 2;
        }
    } else {
        batching = nn_cu_matmul_batched(&mm, &bt, a, b);
    }
    nn_cu_gemm_epilogue epi;
    const char *why = "";
    bool ok = nn_cu_gemm_epilogue_make(&epi, y, c_input, cm, beta, true, r->call.epilogue, &why);
    CHECK(ok, "%s: epilogue split (%s)", label, why);
    if (!ok) return;
    int64_t n = nn_tensor_elements(y);
    float *d = calloc((size_t)n + 1, sizeof(float));
    const float *cptr = epi.c_input >= 0 ? r->in[epi.c_input].data : NULL;
    const float *bias = epi.bias_input >= 0 ? r->in[epi.bias_input].data : NULL;
    int64_t entries = batching == NN_CU_BATCH_EACH ? bt.entries : 1;
    for (int64_t e = 0; e < entries; e++) {
        int64_t a_off = 0, b_off = 0, y_off = e * mm.m * mm.n;
        if (batching == NN_CU_BATCH_EACH) nn_cu_matmul_entry(&bt, e, &a_off, &b_off);
        lt_reference(&mm, batching == NN_CU_BATCH_STRIDED ? mm.batch : 1, (const float *)b->data + b_off,
                     (const float *)a->data + a_off, cptr ? cptr + y_off : NULL, epi.beta, bias, epi.relu, alpha,
                     d + y_off);
    }
    if (epi.ew.n_steps) {
        const void *ops[NN_EW_MAX_INPUTS] = {d};
        for (int k = 1; k < epi.n_ew_inputs; k++)
            ops[k] = r->in[epi.ew_inputs[k]].data;
        for (int64_t i = 0; i < n; i++)
            nn_cu_ew_element(&epi.ew, ops, d, false, i);
    }
    CHECK_CLOSE(label, d, y->data, n, 1e-5, 1e-4);
    free(d);
}

static void test_gemm(void) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int c_kind = 0; c_kind < 5; c_kind++) {
                /* C: none, full [M,N] (cuBLASLt's C, beta 2), [N] (its bias), [M,1] and [1] (the pass) */
                const int M = 5, K = 7, N = 6;
                nn_tensor in[4] = {{0}};
                int n_in = 2;
                in[0] = ta ? rand_tensor(-1, 1, 2, K, M) : rand_tensor(-1, 1, 2, M, K);
                in[1] = tb ? rand_tensor(-1, 1, 2, N, K) : rand_tensor(-1, 1, 2, K, N);
                if (c_kind == 1) in[2] = rand_tensor(-1, 1, 2, M, N);
                if (c_kind == 2) in[2] = rand_tensor(-1, 1, 1, N);
                if (c_kind == 3) in[2] = rand_tensor(-1, 1, 2, M, 1);
                if (c_kind == 4) in[2] = rand_tensor(-1, 1, 1, 1);
                if (c_kind) n_in = 3;
                nn_attr attrs[] = {attr_int("transA", ta), attr_int("transB", tb), attr_float("alpha", 0.5f),
                                   attr_float("beta", c_kind == 1 ? 2.0f : 1.0f)};
                /* every other case with a fused residual and ReLU; the optimizer
                 * puts the residual after the op's inputs (index 3, C or not) */
                nn_epilogue ep = {.residual = 3, .act = NN_ACT_RELU};
                bool fused = (ta + tb + c_kind) % 2;
                if (fused) {
                    in[3] = rand_tensor(-1, 1, 2, M, N);
                    n_in = 4;
                }
                op_run r;
                char label[120];
                snprintf(label, sizeof label, "Gemm transA %d transB %d C kind %d%s", ta, tb, c_kind,
                         fused ? " + residual + ReLU" : "");
                if (cpu_run(&r, "Gemm", 13, attrs, 4, NULL, in, n_in, 1, fused ? &ep : NULL))
                    check_product(label, &r, true);
                release(&r);
            }
    struct {
        const char *label;
        nn_tensor a, b;
        int want;
    } mm[] = {
        {"MatMul B shared (tall)", rand_tensor(-1, 1, 4, 2, 3, 4, 5), rand_tensor(-1, 1, 2, 5, 6), NN_CU_BATCH_TALL},
        {"MatMul batched", rand_tensor(-1, 1, 4, 2, 3, 4, 5), rand_tensor(-1, 1, 4, 2, 3, 5, 6), NN_CU_BATCH_STRIDED},
        {"MatMul A shared", rand_tensor(-1, 1, 2, 4, 5), rand_tensor(-1, 1, 3, 3, 5, 2), NN_CU_BATCH_STRIDED},
        {"MatMul broadcast both", rand_tensor(-1, 1, 4, 3, 1, 4, 5), rand_tensor(-1, 1, 4, 1, 2, 5, 6),
         NN_CU_BATCH_EACH},
        {"MatMul 1-D A", rand_tensor(-1, 1, 1, 5), rand_tensor(-1, 1, 3, 2, 5, 3), NN_CU_BATCH_STRIDED},
        {"MatMul 1-D B", rand_tensor(-1, 1, 3, 2, 4, 5), rand_tensor(-1, 1, 1, 5), NN_CU_BATCH_TALL},
    };
    for (size_t i = 0; i < sizeof mm / sizeof *mm; i++) {
        nn_tensor in[2] = {mm[i].a, mm[i].b};
        op_run r;
        if (cpu_run(&r, "MatMul", 13, NULL, 0, NULL, in, 2, 1, NULL)) {
            nn_cu_matmul g;
            nn_cu_batch bt;
            CHECK(nn_cu_matmul_batched(&g, &bt, &r.in[0], &r.in[1]) == mm[i].want, "%s: batch layout", mm[i].label);
            check_product(mm[i].label, &r, false);
        }
        release(&r);
    }
    /* with a residual and an activation cuBLASLt cannot fuse */
    nn_epilogue ep = {.residual = 2, .act = NN_ACT_SIGMOID};
    nn_tensor in[3] = {rand_tensor(-1, 1, 3, 2, 4, 5), rand_tensor(-1, 1, 2, 5, 3), rand_tensor(-1, 1, 3, 2, 4, 3)};
    op_run r;
    if (cpu_run(&r, "MatMul", 13, NULL, 0, NULL, in, 3, 1, &ep))
        check_product("MatMul + residual + Sigmoid", &r, false);
    release(&r);
}

int main(void) {
    test_half();
    test_valid_range();
    test_unary();
    test_binary();
    test_fused_elementwise();
    test_pool();
    test_reduce();
    test_softmax();
    test_transpose();
    test_concat();
    test_resize();
    test_conv();
    test_gemm();
    return check_summary();
}
