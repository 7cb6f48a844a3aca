/* Resize's cubic mode and tf_crop_and_resize against values worked out by
 * hand from the ONNX formulas, for what the conformance suite leaves out:
 * extrapolation_value (on the last axis and on an outer one),
 * tf_crop_and_resize under nearest and cubic, exclude_outside at the edge;
 * linear on larger N-D shapes against a separable reference;
 * and the refusals (antialias, cubic where the op has no such mode). */
#include "op_harness.h"

static const nn_tensor absent = {.dtype = NN_DTYPE_UNDEFINED};

/* Resize 13 of x (dims given) to `sizes`, or by `scales` when sizes is NULL. */
static void resize_case(const char *what, const nn_attr *attrs, int n_attrs, int ndim, const int64_t *dims,
                        const float *x, const float *roi, const float *scales, const int64_t *sizes, const float *want,
                        int n_want) {
    check_set_case("%s", what);
    nn_tensor in[4];
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= dims[d];
    in[0] = (nn_tensor){.dtype = NN_DTYPE_FLOAT, .ndim = ndim};
    memcpy(in[0].dims, dims, sizeof(int64_t) * (size_t)ndim);
    in[0].data = malloc(sizeof(float) * (size_t)n);
    memcpy(in[0].data, x, sizeof(float) * (size_t)n);
    in[1] = roi ? float_values(2 * ndim, roi) : absent;
    in[2] = scales ? float_values(ndim, scales) : absent;
    in[3] = sizes ? int64_tensor(ndim, sizes) : absent;
    op_run r;
    if (cpu_run(&r, "Resize", 13, attrs, n_attrs, NULL, in, sizes ? 4 : 3, 1, NULL) &&
        CHECK_EQ_INT("output elements", n_want, nn_tensor_elements(&r.out[0])))
        CHECK_CLOSE("output", (const float *)r.out[0].data, want, n_want, 1e-5, 1e-5);
    release(&r);
    check_set_case("%s", "");
}

/* x = [0, 1, 4, 9], roi [-0.5, 1.5] to 5 values: sources -1.5, 0, 1.5, 3, 4.5;
 * the first and last lie outside and read extrapolation_value. */
static void test_crop_1d(void) {
    static const int64_t dims[] = {4}, sizes[] = {5};
    static const float x[] = {0, 1, 4, 9}, roi[] = {-0.5f, 1.5f};
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    /* nearest rounds 1.5 down; cubic at 1.5 with a = -0.75 weighs 0, 1, 4, 9
     * by -0.09375, 0.59375, 0.59375, -0.09375 */
    static const float want[3][5] = {{-7, 0, 1, 9, -7}, {-7, 0, 2.5f, 9, -7}, {-7, 0, 2.125f, 9, -7}};
    for (int m = 0; m < 3; m++) {
        nn_attr a[] = {attr_string("mode", modes[m]),
                       attr_string("coordinate_transformation_mode", "tf_crop_and_resize"),
                       attr_float("extrapolation_value", -7.0f)};
        char what[64];
        snprintf(what, sizeof what, "tf_crop_and_resize 1-D %s", modes[m]);
        resize_case(what, a, 3, 1, dims, x, roi, NULL, sizes, want[m], 5);
    }
}

/* An outer axis outside the roi fills whole rows: axis 0 sources -1, 0, 1. */
static void test_crop_outer_axis(void) {
    static const int64_t dims[] = {2, 2}, sizes[] = {3, 2};
    static const float x[] = {1, 2, 3, 4}, roi[] = {-1, 0, 1, 1};
    static const float want[] = {5, 5, 1, 2, 3, 4};
    nn_attr a[] = {attr_string("mode", "linear"), attr_string("coordinate_transformation_mode", "tf_crop_and_resize"),
                   attr_float("extrapolation_value", 5.0f)};
    resize_case("tf_crop_and_resize outer axis", a, 3, 2, dims, x, roi, NULL, sizes, want, 6);
}

/* Asymmetric, scale 2 on [0, 1, 4, 9]: output 1 reads source 0.5, whose
 * taps -1, 0, 1, 2 weigh -0.09375, 0.59375, 0.59375, -0.09375.  Without
 * exclude_outside tap -1 clamps to x[0]; with it, that weight drops and the
 * others are divided by their sum 1.09375. */
static void test_cubic_exclude_outside(void) {
    static const int64_t dims[] = {4};
    static const float x[] = {0, 1, 4, 9}, scales[] = {2};
    for (int excl = 0; excl < 2; excl++) {
        nn_attr a[] = {attr_string("mode", "cubic"), attr_string("coordinate_transformation_mode", "asymmetric"),
                       attr_int("exclude_outside", excl)};
        float v1 = excl ? (0.59375f * 1 - 0.09375f * 4) / 1.09375f : 0.59375f * 1 - 0.09375f * 4;
        float want[8] = {0, v1, 1, 0, 4, 0, 9, 0};
        want[3] = -0.09375f * 0 + 0.59375f * 1 + 0.59375f * 4 - 0.09375f * 9;
        /* sources 2.5 and 3.5 have taps past the end: clamped to x[3], or dropped */
        want[5] = excl ? (-0.09375f * 1 + 0.59375f * 4 + 0.59375f * 9) / 1.09375f
                       : -0.09375f * 1 + 0.59375f * 4 + 0.59375f * 9 - 0.09375f * 9;
        want[7] =
            excl ? (-0.09375f * 4 + 0.59375f * 9) / 0.5f : -0.09375f * 4 + 0.59375f * 9 + 0.59375f * 9 - 0.09375f * 9;
        resize_case(excl ? "cubic exclude_outside" : "cubic edge clamped", a, 3, 1, dims, x, NULL, scales, NULL, want,
                    8);
    }
}

/* Linear taps along one axis from the ONNX formulas, in double: source
 * coordinate, floor, the two neighbours clamped to the edge. */
static void ref_taps(const char *coord, int64_t in, int64_t out, int64_t o, int64_t *i0, int64_t *i1, double *r) {
    double scale = (double)out / (double)in, x = (double)o, xo;
    if (!strcmp(coord, "align_corners"))
        xo = out > 1 ? x * (double)(in - 1) / (double)(out - 1) : 0.0;
    else if (!strcmp(coord, "asymmetric"))
        xo = x / scale;
    else if (!strcmp(coord, "pytorch_half_pixel"))
        xo = out > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
    else
        xo = (x + 0.5) / scale - 0.5;
    double f = floor(xo);
    *r = xo - f;
    *i0 = (int64_t)f < 0 ? 0 : (int64_t)f > in - 1 ? in - 1 : (int64_t)f;
    *i1 = (int64_t)f + 1 < 0 ? 0 : (int64_t)f + 1 > in - 1 ? in - 1 : (int64_t)f + 1;
}

/* Linear resizes of N-D tensors against a separable reference: the last
 * two axes scaled (the path that keeps interpolated source rows, run with
 * rows reused across outputs and across planes, on 1 and 2 threads), and
 * an outer axis scaled too (the general path), up and down. */
static void test_linear(void) {
    static const struct {
        int ndim;
        int64_t in[4], out[4];
    } shapes[] = {
        {4, {2, 3, 5, 7}, {2, 3, 40, 56}}, /* 8x up, as segmentation heads */
        {4, {1, 2, 12, 16}, {1, 2, 96, 128}}, /* big enough to run on two threads */
        {4, {1, 4, 6, 9}, {1, 4, 3, 4}},   /* down */
        {4, {1, 2, 1, 5}, {1, 2, 7, 11}},  /* one source row */
        {4, {1, 3, 4, 1}, {1, 3, 9, 1}},   /* one column */
        {3, {3, 5, 6}, {3, 17, 13}},       /* 3-D, odd scales */
        {2, {4, 4}, {9, 20}},              /* 2-D */
        {4, {1, 3, 4, 5}, {1, 5, 8, 10}},  /* an outer axis scaled: the general path */
    };
    static const char *const coords[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
        for (size_t m = 0; m < sizeof coords / sizeof *coords; m++)
            for (int threads = 1; threads <= 2; threads++) {
                int nd = shapes[k].ndim;
                const int64_t *in = shapes[k].in, *out = shapes[k].out;
                int64_t n_in = 1, n_out = 1;
                for (int d = 0; d < nd; d++) {
                    n_in *= in[d];
                    n_out *= out[d];
                }
                float *x = malloc(sizeof(float) * (size_t)n_in), *want = malloc(sizeof(float) * (size_t)n_out);
                for (int64_t i = 0; i < n_in; i++)
                    x[i] = uniform(-2.0f, 2.0f);
                for (int64_t e = 0; e < n_out; e++) { /* every corner of the 2^nd taps */
                    int64_t i0[4], i1[4], rem = e;
                    double r[4], sum = 0.0;
                    for (int d = nd - 1; d >= 0; d--) {
                        ref_taps(coords[m], in[d], out[d], rem % out[d], &i0[d], &i1[d], &r[d]);
                        rem /= out[d];
                    }
                    for (int corner = 0; corner < 1 << nd; corner++) {
                        int64_t at = 0;
                        double wt = 1.0;
                        for (int d = 0; d < nd; d++) {
                            bool hi = corner >> d & 1;
                            at = at * in[d] + (hi ? i1[d] : i0[d]);
                            wt *= hi ? r[d] : 1.0 - r[d];
                        }
                        sum += wt * x[at];
                    }
                    want[e] = (float)sum;
                }
                nn_attr a[] = {attr_string("mode", "linear"), attr_string("coordinate_transformation_mode", coords[m])};
                char what[96];
                snprintf(what, sizeof what, "linear %s %d-D case %zu, %d thread%s", coords[m], nd, k, threads,
                         threads > 1 ? "s" : "");
                cpu_threads = threads;
                resize_case(what, a, 2, nd, in, x, NULL, NULL, out, want, (int)n_out);
                cpu_threads = 1;
                free(x);
                free(want);
            }
}

/* What parse and check refuse, with a message naming the attribute. */
static void test_refusals(void) {
    static const struct {
        const char *op;
        int opset;
        nn_attr attr;
        nn_status want;
        const char *names;
    } cases[] = {
        {"Resize", 13, {.name = "antialias", .type = NN_ATTR_INT, .i = 1}, NN_ERR_UNSUPPORTED, "antialias"},
        {"Resize", 10, {.name = "mode", .type = NN_ATTR_STRING, .s = "cubic"}, NN_ERR_INVALID, "cubic"},
        {"Upsample", 9, {.name = "mode", .type = NN_ATTR_STRING, .s = "cubic"}, NN_ERR_INVALID, "cubic"},
        {"Resize", 13, {.name = "exclude_outside", .type = NN_ATTR_INT, .i = 2}, NN_ERR_INVALID, "exclude_outside"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        nn_arena arena = {0};
        char err[256] = "";
        nn_parse_ctx ctx = {.attrs = &cases[k].attr,
                            .n_attrs = 1,
                            .opset = cases[k].opset,
                            .n_inputs = 4,
                            .n_outputs = 1,
                            .arena = &arena,
                            .err = err,
                            .err_size = sizeof err};
        const nn_op_desc *d = nn_op_get(nn_op_lookup(cases[k].op));
        nn_status st = d->parse(&ctx);
        CHECK(st == cases[k].want && strstr(err, cases[k].names), "%s %d %s: expected %s naming '%s', got %s: '%s'",
              cases[k].op, cases[k].opset, cases[k].attr.name, nn_strerror(cases[k].want), cases[k].names,
              nn_strerror(st), err);
        nn_arena_free(&arena);
    }
}

int main(void) {
    test_crop_1d();
    test_crop_outer_axis();
    test_cubic_exclude_outside();
    test_linear();
    test_refusals();
    return check_summary();
}
