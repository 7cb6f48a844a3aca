/* Resize's cubic mode and tf_crop_and_resize against values worked out by
 * hand from the ONNX formulas, for what the conformance suite leaves out:
 * extrapolation_value (on the last axis and on an outer one),
 * tf_crop_and_resize under nearest and cubic, exclude_outside at the edge;
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
    test_refusals();
    return check_summary();
}
