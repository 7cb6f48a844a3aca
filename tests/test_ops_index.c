/* Index ops (ops/index.c, ops/scatter.c, ops/detect.c): the edge cases
 * ONNX's conformance data leaves out.  Indices out of range are refused
 * with a message (never read or written), empty results have the right
 * shape, ties go to the lower index, outputs whose size is only known once
 * the op ran (NonMaxSuppression, Unique) shrink to it, and every op's
 * check hook refuses params parse could not have made. */
#include "op_harness.h"

enum { MAX_OUT = 4 };

/* One op run with up to four outputs; st is where it stopped (parse,
 * infer or run) and err says why. */
typedef struct run4 {
    nn_arena arena;
    nn_tensor in[MAX_IO], out[MAX_OUT];
    int n_in, n_out;
    nn_status st;
    char err[256];
} run4;

static void run_op(run4 *r, const char *name, int opset, const nn_attr *attrs, int n_attrs, const nn_tensor *in,
                   int n_in, int n_out) {
    memset(r, 0, sizeof *r);
    memcpy(r->in, in, sizeof(nn_tensor) * (size_t)n_in);
    r->n_in = n_in;
    r->n_out = n_out;
    const nn_op_desc *d = nn_op_get(nn_op_lookup(name));
    if (!d) {
        r->st = NN_ERR_UNSUPPORTED;
        snprintf(r->err, sizeof r->err, "no op %s", name);
        return;
    }
    nn_parse_ctx ctx = {.attrs = attrs,
                        .n_attrs = n_attrs,
                        .opset = opset,
                        .n_inputs = n_in,
                        .n_outputs = n_out,
                        .arena = &r->arena,
                        .err = r->err,
                        .err_size = sizeof r->err};
    if (d->parse && (r->st = d->parse(&ctx)) != NN_OK) return;
    if (d->parse && (r->st = d->check(ctx.params, r->err, sizeof r->err)) != NN_OK) return;
    nn_call call = {.params = ctx.params,
                    .n_in = n_in,
                    .n_out = n_out,
                    .in = r->in,
                    .out = r->out,
                    .threads = 2,
                    .err = r->err,
                    .err_size = sizeof r->err};
    r->st = d->infer(&call);
    if (r->st == NN_DYNAMIC && d->bound) r->st = d->bound(&call);
    if (r->st != NN_OK) return;
    for (int k = 0; k < n_out; k++)
        r->out[k].data = calloc((size_t)nn_tensor_elements(&r->out[k]) + 1, nn_dtype_size(r->out[k].dtype));
    size_t ws = d->workspace ? d->workspace(&call) : 0;
    call.workspace = ws ? malloc(ws) : NULL;
    call.workspace_size = ws;
    r->st = d->run(&call);
    free(call.workspace);
}

static void run_free(run4 *r) {
    for (int k = 0; k < r->n_in; k++)
        free(r->in[k].data);
    for (int k = 0; k < r->n_out; k++)
        free(r->out[k].data);
    nn_arena_free(&r->arena);
}

static bool has(const char *s, const char *part) { return strstr(s, part) != NULL; }

/* the run succeeded */
#define EXPECT_OK(r, what) CHECK((r)->st == NN_OK, "%s: failed (%d): %s", what, (int)(r)->st, (r)->err)
/* the run was refused with a message naming `part` */
#define EXPECT_REFUSED(r, what, part)                                                                                  \
    CHECK((r)->st != NN_OK && (r)->st != NN_DYNAMIC && has((r)->err, part), "%s: status %d, message '%s' (want '%s')", \
          what, (int)(r)->st, (r)->err, part)

static void expect_shape(const char *what, const nn_tensor *t, int ndim, const int64_t *dims) {
    bool same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = t->dims[d] == dims[d];
    CHECK(same, "%s: shape of rank %d [%lld, %lld, ...], expected rank %d [%lld, %lld, ...]", what, t->ndim,
          (long long)(t->ndim > 0 ? t->dims[0] : -1), (long long)(t->ndim > 1 ? t->dims[1] : -1), ndim,
          (long long)(ndim > 0 ? dims[0] : -1), (long long)(ndim > 1 ? dims[1] : -1));
}

static void expect_ints(const char *what, const nn_tensor *t, int n, const int64_t *want) {
    CHECK(nn_tensor_elements(t) == n, "%s: %lld values, expected %d", what, (long long)nn_tensor_elements(t), n);
    for (int i = 0; i < n && i < nn_tensor_elements(t); i++)
        CHECK(nn_tensor_get_int(t, i) == want[i], "%s: element %d is %lld, expected %lld", what, i,
              (long long)nn_tensor_get_int(t, i), (long long)want[i]);
}

static nn_tensor ints2d(int rows, int cols, const int64_t *v) {
    nn_tensor t = tensor(NN_DTYPE_INT64, 2, rows, cols);
    memcpy(t.data, v, sizeof(int64_t) * (size_t)(rows * cols));
    return t;
}

static nn_tensor floats2d(int rows, int cols, const float *v) {
    nn_tensor t = tensor(NN_DTYPE_FLOAT, 2, rows, cols);
    memcpy(t.data, v, sizeof(float) * (size_t)(rows * cols));
    return t;
}

static void test_nonzero(void) {
    run4 r;
    nn_tensor zeros = tensor(NN_DTYPE_FLOAT, 2, 2, 3);
    run_op(&r, "NonZero", 13, NULL, 0, &zeros, 1, 1);
    EXPECT_OK(&r, "NonZero of zeros");
    expect_shape("NonZero of zeros", &r.out[0], 2, (int64_t[]){2, 0});
    run_free(&r);

    /* -0.0 is zero, NaN is not */
    nn_tensor x = floats2d(2, 3, (float[]){0.0f, 1.0f, -0.0f, NAN, 0.0f, 2.0f});
    run_op(&r, "NonZero", 13, NULL, 0, &x, 1, 1);
    EXPECT_OK(&r, "NonZero");
    expect_shape("NonZero", &r.out[0], 2, (int64_t[]){2, 3});
    expect_ints("NonZero coordinates", &r.out[0], 6, (int64_t[]){0, 1, 1, 1, 0, 2});
    run_free(&r);

    nn_tensor scalar = tensor(NN_DTYPE_INT64, 0);
    *(int64_t *)scalar.data = 5;
    run_op(&r, "NonZero", 13, NULL, 0, &scalar, 1, 1);
    EXPECT_OK(&r, "NonZero of a scalar");
    expect_shape("NonZero of a scalar", &r.out[0], 2, (int64_t[]){1, 1});
    run_free(&r);
}

static void test_topk(void) {
    run4 r;
    /* K larger than the axis */
    nn_tensor in[2] = {float_values(3, (float[]){1, 2, 3}), int64_tensor(1, (int64_t[]){4})};
    run_op(&r, "TopK", 11, NULL, 0, in, 2, 2);
    EXPECT_REFUSED(&r, "TopK K > axis", "K = 4 out of range");
    run_free(&r);

    nn_tensor neg[2] = {float_values(3, (float[]){1, 2, 3}), int64_tensor(1, (int64_t[]){-1})};
    run_op(&r, "TopK", 11, NULL, 0, neg, 2, 2);
    EXPECT_REFUSED(&r, "TopK K < 0", "out of range");
    run_free(&r);

    /* ties: the lower index first, largest and smallest */
    nn_tensor ties[2] = {float_values(6, (float[]){1, 3, 2, 3, 1, 3}), int64_tensor(1, (int64_t[]){4})};
    run_op(&r, "TopK", 11, NULL, 0, ties, 2, 2);
    EXPECT_OK(&r, "TopK ties");
    expect_ints("TopK ties: indices", &r.out[1], 4, (int64_t[]){1, 3, 5, 2});
    run_free(&r);
    nn_tensor ties2[2] = {float_values(6, (float[]){1, 3, 2, 3, 1, 3}), int64_tensor(1, (int64_t[]){3})};
    nn_attr smallest = attr_int("largest", 0);
    run_op(&r, "TopK", 11, &smallest, 1, ties2, 2, 2);
    EXPECT_OK(&r, "TopK smallest ties");
    expect_ints("TopK smallest ties: indices", &r.out[1], 3, (int64_t[]){0, 4, 2});
    CHECK(((float *)r.out[0].data)[2] == 2.0f, "TopK smallest ties: third value %g, expected 2",
          ((float *)r.out[0].data)[2]);
    run_free(&r);

    /* along axis 0 of a 2-D input (the slices are strided), int64 values
     * that differ only beyond double's 53 bits */
    const int64_t big = (int64_t)1 << 60;
    nn_tensor col[2] = {ints2d(3, 2, (int64_t[]){big, 7, big + 1, 9, big - 1, 8}), int64_tensor(1, (int64_t[]){2})};
    nn_attr axis0 = attr_int("axis", 0);
    run_op(&r, "TopK", 11, &axis0, 1, col, 2, 2);
    EXPECT_OK(&r, "TopK axis 0");
    expect_shape("TopK axis 0", &r.out[0], 2, (int64_t[]){2, 2});
    expect_ints("TopK axis 0: values", &r.out[0], 4, (int64_t[]){big + 1, 9, big, 8});
    expect_ints("TopK axis 0: indices", &r.out[1], 4, (int64_t[]){1, 1, 0, 2});
    run_free(&r);

    /* opset 1: k is an attribute */
    nn_tensor v1 = float_values(4, (float[]){4, 1, 3, 2});
    nn_attr k2 = attr_int("k", 2);
    run_op(&r, "TopK", 1, &k2, 1, &v1, 1, 2);
    EXPECT_OK(&r, "TopK opset 1");
    expect_ints("TopK opset 1: indices", &r.out[1], 2, (int64_t[]){0, 2});
    run_free(&r);
}

static void test_gather_scatter(void) {
    run4 r;
    nn_tensor g[2] = {floats2d(2, 2, (float[]){1, 2, 3, 4}), ints2d(1, 2, (int64_t[]){1, 2})};
    run_op(&r, "GatherND", 13, NULL, 0, g, 2, 1);
    EXPECT_REFUSED(&r, "GatherND index 2 of 2", "index 2 (tuple 0, coordinate 1) out of range");
    run_free(&r);

    nn_tensor gn[2] = {floats2d(2, 2, (float[]){1, 2, 3, 4}), ints2d(1, 2, (int64_t[]){-1, -2})};
    run_op(&r, "GatherND", 13, NULL, 0, gn, 2, 1);
    EXPECT_OK(&r, "GatherND negative");
    CHECK(((float *)r.out[0].data)[0] == 3.0f, "GatherND [-1, -2]: %g, expected 3", ((float *)r.out[0].data)[0]);
    run_free(&r);

    nn_tensor s[3] = {float_values(4, (float[]){1, 2, 3, 4}), ints2d(2, 1, (int64_t[]){0, -5}),
                      float_values(2, (float[]){9, 9})};
    run_op(&r, "ScatterND", 13, NULL, 0, s, 3, 1);
    EXPECT_REFUSED(&r, "ScatterND index -5 of 4", "index -5");
    run_free(&r);

    nn_tensor se[3] = {float_values(3, (float[]){1, 2, 3}), int64_tensor(2, (int64_t[]){-1, 3}),
                       float_values(2, (float[]){7, 8})};
    run_op(&r, "ScatterElements", 13, NULL, 0, se, 3, 1);
    EXPECT_REFUSED(&r, "ScatterElements index 3 of 3", "index 3 at element 1 out of range");
    run_free(&r);

    /* duplicates reduce in order; negative indices count from the end */
    nn_tensor sm[3] = {float_values(3, (float[]){1, 2, 3}), int64_tensor(3, (int64_t[]){-1, 2, 0}),
                       float_values(3, (float[]){5, 0.5f, 7})};
    nn_attr mx = attr_string("reduction", "max");
    run_op(&r, "ScatterElements", 18, &mx, 1, sm, 3, 1);
    EXPECT_OK(&r, "ScatterElements max");
    CHECK_CLOSE("ScatterElements max", r.out[0].data, ((float[]){7, 2, 5}), 3, 0, 0);
    run_free(&r);

    nn_tensor sm16[3] = {float_values(1, (float[]){1}), int64_tensor(1, (int64_t[]){0}), float_values(1, (float[]){2})};
    run_op(&r, "ScatterElements", 16, &mx, 1, sm16, 3, 1);
    EXPECT_REFUSED(&r, "ScatterElements max at opset 16", "needs opset 18");
    run_free(&r);

    nn_tensor ge[2] = {floats2d(2, 2, (float[]){1, 2, 3, 4}), ints2d(1, 2, (int64_t[]){0, 2})};
    run_op(&r, "GatherElements", 13, NULL, 0, ge, 2, 1);
    EXPECT_REFUSED(&r, "GatherElements index 2 of 2", "index 2 at element 1");
    run_free(&r);

    /* indices wider than data on another axis would address outside it */
    nn_tensor gw[2] = {floats2d(2, 2, (float[]){1, 2, 3, 4}), ints2d(1, 3, (int64_t[]){0, 0, 0})};
    run_op(&r, "GatherElements", 13, NULL, 0, gw, 2, 1);
    EXPECT_REFUSED(&r, "GatherElements wide indices", "larger than data");
    run_free(&r);

    nn_tensor mu[2] = {tensor(NN_DTYPE_FLOAT, 4, 1, 1, 1, 1), tensor(NN_DTYPE_INT64, 4, 1, 1, 1, 1)};
    *(int64_t *)mu[1].data = 4;
    nn_attr ks = attr_ints("kernel_shape", 2, (int64_t[]){2, 2});
    run_op(&r, "MaxUnpool", 11, &ks, 1, mu, 2, 1);
    EXPECT_REFUSED(&r, "MaxUnpool index 4 of 4", "index 4 at element 0 out of range");
    run_free(&r);
}

static void test_detect(void) {
    run4 r;
    /* two identical boxes and a far one, one class: the lower-indexed twin
     * survives, output shrunk from the bound of 3 rows to 2 */
    nn_tensor in[5] = {tensor(NN_DTYPE_FLOAT, 3, 1, 3, 4), tensor(NN_DTYPE_FLOAT, 3, 1, 1, 3),
                       int64_tensor(1, (int64_t[]){10}), float_values(1, (float[]){0.5f}),
                       float_values(1, (float[]){0.0f})};
    memcpy(in[0].data, (float[]){0, 0, 1, 1, 1, 1, 0, 0, 5, 5, 6, 6}, sizeof(float) * 12);
    memcpy(in[1].data, (float[]){0.9f, 0.9f, 0.8f}, sizeof(float) * 3);
    run_op(&r, "NonMaxSuppression", 11, NULL, 0, in, 5, 1);
    EXPECT_OK(&r, "NonMaxSuppression");
    expect_shape("NonMaxSuppression", &r.out[0], 2, (int64_t[]){2, 3});
    expect_ints("NonMaxSuppression rows", &r.out[0], 6, (int64_t[]){0, 0, 0, 0, 0, 2});
    run_free(&r);

    nn_tensor none[3] = {tensor(NN_DTYPE_FLOAT, 3, 1, 2, 4), tensor(NN_DTYPE_FLOAT, 3, 1, 1, 2),
                         int64_tensor(1, (int64_t[]){0})};
    run_op(&r, "NonMaxSuppression", 11, NULL, 0, none, 3, 1);
    EXPECT_OK(&r, "NonMaxSuppression max 0");
    expect_shape("NonMaxSuppression max 0", &r.out[0], 2, (int64_t[]){0, 3});
    run_free(&r);

    nn_tensor bad[4] = {tensor(NN_DTYPE_FLOAT, 3, 1, 2, 4), tensor(NN_DTYPE_FLOAT, 3, 1, 1, 2),
                        int64_tensor(1, (int64_t[]){1}), float_values(1, (float[]){1.5f})};
    run_op(&r, "NonMaxSuppression", 11, NULL, 0, bad, 4, 1);
    EXPECT_REFUSED(&r, "NonMaxSuppression iou 1.5", "iou_threshold");
    run_free(&r);

    nn_tensor roi[3] = {tensor(NN_DTYPE_FLOAT, 4, 1, 1, 4, 4), floats2d(1, 4, (float[]){0, 0, 2, 2}),
                        int64_tensor(1, (int64_t[]){1})};
    run_op(&r, "RoiAlign", 16, NULL, 0, roi, 3, 1);
    EXPECT_REFUSED(&r, "RoiAlign batch index 1 of 1", "batch index 1 of roi 0 out of range");
    run_free(&r);
}

/* Greedy NMS as the spec words it, every candidate against every kept
 * box: the reference for the op's windowed search.  Corners (y1, x1, y2,
 * x2) in any order; writes the kept box indices in order, returns their
 * count. */
static int nms_reference(const float *boxes, const float *scores, int n, int max, float iou, float score_min,
                         int64_t *out) {
    int order[512], kept = 0, cnt = 0;
    for (int i = 0; i < n; i++)
        if (scores[i] > score_min) order[cnt++] = i;
    for (int i = 1; i < cnt; i++) /* insertion sort: descending score, lower index first */
        for (int j = i; j > 0 && scores[order[j]] > scores[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int i = 0; i < cnt && kept < max; i++) {
        const float *a = boxes + 4 * order[i];
        float ay0 = fminf(a[0], a[2]), ax0 = fminf(a[1], a[3]), ay1 = fmaxf(a[0], a[2]), ax1 = fmaxf(a[1], a[3]);
        float aa = (ay1 - ay0) * (ax1 - ax0);
        bool drop = false;
        for (int k = 0; k < kept && !drop; k++) {
            const float *b = boxes + 4 * out[k];
            float by0 = fminf(b[0], b[2]), bx0 = fminf(b[1], b[3]), by1 = fmaxf(b[0], b[2]), bx1 = fmaxf(b[1], b[3]);
            float ba = (by1 - by0) * (bx1 - bx0);
            float ih = fminf(ay1, by1) - fmaxf(ay0, by0), iw = fminf(ax1, bx1) - fmaxf(ax0, bx0);
            float inter = ih * iw, uni = aa + ba - inter;
            drop = ih > 0 && iw > 0 && aa > 0 && ba > 0 && uni > 0 && inter / uni > iou;
        }
        if (!drop) out[kept++] = order[i];
    }
    return kept;
}

/* The op against the reference on random boxes: mostly small ones, some
 * tall or wide, flipped corners, zero area, NaN and infinite coordinates,
 * scores with ties. */
static void test_nms_random(void) {
    enum { N = 400 };
    const float ious[] = {0.0f, 0.3f, 0.7f};
    for (int trial = 0; trial < 12; trial++) {
        nn_tensor in[5] = {tensor(NN_DTYPE_FLOAT, 3, 1, N, 4), tensor(NN_DTYPE_FLOAT, 3, 1, 1, N),
                           int64_tensor(1, (int64_t[]){trial % 4 == 3 ? 25 : 1000}), float_values(1, &ious[trial % 3]),
                           float_values(1, (float[]){0.2f})};
        float *b = in[0].data, *sc = in[1].data;
        for (int i = 0; i < N; i++) {
            float y = uniform(0, 100), x = uniform(0, 100), h = uniform(0, 12), w = uniform(0, 12);
            if (trial % 2 && i % 37 == 0) h = uniform(40, 90); /* tall boxes widen the window */
            if (i % 41 == 0) w = uniform(40, 90);
            if (i % 53 == 0) h = 0;
            b[4 * i] = y, b[4 * i + 1] = x, b[4 * i + 2] = y + h, b[4 * i + 3] = x + w;
            if (i % 7 == 0) b[4 * i] = y + h, b[4 * i + 2] = y; /* flipped */
            sc[i] = (float)(int)uniform(0, 20) / 20;            /* ties */
        }
        if (trial >= 6) b[4 * 5] = NAN;
        if (trial >= 9) b[4 * 11 + 2] = INFINITY;
        int64_t want[N];
        int n_want = nms_reference(b, sc, N, (int)*(int64_t *)in[2].data, ious[trial % 3], 0.2f, want);
        run4 r;
        run_op(&r, "NonMaxSuppression", 11, NULL, 0, in, 5, 1);
        EXPECT_OK(&r, "NonMaxSuppression random");
        CHECK(r.out[0].ndim == 2 && r.out[0].dims[0] == n_want, "NMS trial %d: %lld kept, the reference %d", trial,
              (long long)r.out[0].dims[0], n_want);
        const int64_t *got = r.out[0].data;
        int bad = -1;
        for (int i = 0; i < n_want && i < r.out[0].dims[0] && bad < 0; i++)
            if (got[3 * i + 2] != want[i]) bad = i;
        CHECK(bad < 0, "NMS trial %d: row %d keeps box %lld, the reference %lld", trial, bad,
              (long long)(bad >= 0 ? got[3 * bad + 2] : 0), (long long)(bad >= 0 ? want[bad] : 0));
        run_free(&r);
    }
}

static void test_unique_and_more(void) {
    run4 r;
    /* not sorted: order of first appearance; every output */
    nn_tensor u = float_values(6, (float[]){2, 1, 2, 3, 1, 2});
    nn_attr unsorted = attr_int("sorted", 0);
    run_op(&r, "Unique", 11, &unsorted, 1, &u, 1, 4);
    EXPECT_OK(&r, "Unique");
    expect_shape("Unique Y", &r.out[0], 1, (int64_t[]){3});
    CHECK_CLOSE("Unique Y", r.out[0].data, ((float[]){2, 1, 3}), 3, 0, 0);
    expect_ints("Unique indices", &r.out[1], 3, (int64_t[]){0, 1, 3});
    expect_ints("Unique inverse", &r.out[2], 6, (int64_t[]){0, 1, 0, 2, 1, 0});
    expect_ints("Unique counts", &r.out[3], 3, (int64_t[]){3, 2, 1});
    run_free(&r);

    /* OneHot: an index outside [-depth, depth) leaves its row off */
    nn_tensor oh[3] = {int64_tensor(3, (int64_t[]){-1, 3, 1}), int64_tensor(1, (int64_t[]){3}),
                       float_values(2, (float[]){0, 1})};
    run_op(&r, "OneHot", 11, NULL, 0, oh, 3, 1);
    EXPECT_OK(&r, "OneHot");
    CHECK_CLOSE("OneHot", r.out[0].data, ((float[]){0, 0, 1, 0, 0, 0, 0, 1, 0}), 9, 0, 0);
    run_free(&r);

    nn_tensor rs[2] = {floats2d(2, 2, (float[]){1, 2, 3, 4}), int64_tensor(2, (int64_t[]){2, 3})};
    run_op(&r, "ReverseSequence", 10, NULL, 0, rs, 2, 1);
    EXPECT_REFUSED(&r, "ReverseSequence length 3 of 2", "sequence_lens[1] = 3 out of range");
    run_free(&r);

    /* Trilu with k beyond the matrix: all kept / all zero */
    nn_tensor tr[2] = {floats2d(2, 3, (float[]){1, 2, 3, 4, 5, 6}), int64_tensor(1, (int64_t[]){-9})};
    run_op(&r, "Trilu", 14, NULL, 0, tr, 2, 1);
    EXPECT_OK(&r, "Trilu upper k=-9");
    CHECK_CLOSE("Trilu upper k=-9", r.out[0].data, ((float[]){1, 2, 3, 4, 5, 6}), 6, 0, 0);
    run_free(&r);
}

/* check hooks refuse what parse could never have produced */
static void test_checks(void) {
    const char *ops[] = {"ScatterElements", "GatherND", "TopK",    "Trilu",           "NonMaxSuppression", "RoiAlign",
                         "Unique",          "OneHot",   "EyeLike", "ReverseSequence", "Compress",          "MaxUnpool"};
    unsigned char junk[512];
    memset(junk, 0x7f, sizeof junk);
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        const nn_op_desc *d = nn_op_get(nn_op_lookup(ops[i]));
        CHECK(d && d->parse && d->check, "%s has no parse or check", ops[i]);
        if (!d || !d->check) continue;
        char err[128] = "";
        nn_status st = d->check(junk, err, sizeof err);
        CHECK(st == NN_ERR_INVALID && err[0], "%s: check accepted params of 0x7f bytes (status %d)", ops[i], (int)st);
    }
}

/* Transpose of bytes and floats against an index-by-index reference: the
 * byte path transposes whole 32 x 32 tiles in 16 x 16 blocks (ops/copy.c),
 * so the shapes mix whole tiles, partial ones and rows shorter than 16,
 * on 1 and 2 threads. */
static void test_transpose(void) {
    static const struct {
        int ndim;
        int64_t dims[4], perm[4];
        nn_dtype dt;
    } cases[] = {
        {4, {1, 96, 112, 112}, {0, 2, 3, 1}, NN_DTYPE_UINT8}, {4, {2, 37, 50, 3}, {0, 2, 3, 1}, NN_DTYPE_UINT8},
        {4, {1, 70, 33, 64}, {0, 3, 1, 2}, NN_DTYPE_INT8},    {2, {64, 96}, {1, 0}, NN_DTYPE_UINT8},
        {3, {3, 33, 65}, {0, 2, 1}, NN_DTYPE_UINT8},          {4, {2, 40, 17, 48}, {0, 2, 3, 1}, NN_DTYPE_FLOAT},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int th = 1; th <= 2; th++) {
            cpu_threads = th;
            int r = cases[ci].ndim;
            check_set_case("Transpose %s rank %d case %zu, %d thread(s)", nn_dtype_name(cases[ci].dt), r, ci, th);
            nn_tensor x = {.dtype = cases[ci].dt, .ndim = r};
            memcpy(x.dims, cases[ci].dims, sizeof(int64_t) * (size_t)r);
            int64_t n = nn_tensor_elements(&x);
            size_t esz = nn_dtype_size(x.dtype);
            x.data = malloc((size_t)n * esz);
            for (int64_t i = 0; i < n * (int64_t)esz; i++)
                ((uint8_t *)x.data)[i] = (uint8_t)(i * 131 + i / 7);
            uint8_t *xs = malloc((size_t)n * esz);
            memcpy(xs, x.data, (size_t)n * esz);
            nn_attr attr = attr_ints("perm", r, cases[ci].perm);
            op_run run;
            if (cpu_run(&run, "Transpose", 13, &attr, 1, NULL, &x, 1, 1, NULL)) {
                int64_t stride[4], idx[4] = {0}, bad = -1;
                stride[r - 1] = 1;
                for (int k = r - 2; k >= 0; k--)
                    stride[k] = stride[k + 1] * cases[ci].dims[k + 1];
                const uint8_t *y = run.out[0].data;
                for (int64_t o = 0; o < n && bad < 0; o++) {
                    int64_t rem = o, off = 0;
                    for (int k = r - 1; k >= 0; k--) { /* output index k runs over input axis perm[k] */
                        idx[k] = rem % run.out[0].dims[k];
                        rem /= run.out[0].dims[k];
                        off += idx[k] * stride[cases[ci].perm[k]];
                    }
                    if (memcmp(y + o * (int64_t)esz, xs + off * (int64_t)esz, esz)) bad = o;
                }
                CHECK(bad < 0, "expected every element at its permuted place, output element %lld differs",
                      (long long)bad);
            }
            release(&run);
            free(xs);
        }
    cpu_threads = 1;
}

int main(void) {
    test_transpose();
    test_nonzero();
    test_topk();
    test_gather_scatter();
    test_detect();
    test_nms_random();
    test_unique_and_more();
    test_checks();
    return check_summary();
}
