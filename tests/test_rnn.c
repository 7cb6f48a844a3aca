/* LSTM, GRU and RNN against a double-precision reference written from the
 * ONNX equations: directions, sequence_lens (zeros, partial and full),
 * initial states, peepholes, input_forget, clip, layout 1, GRU's
 * linear_before_reset, explicit activations with alpha/beta, one and two
 * threads; and the errors (a length out of range, an unknown activation). */
#include "op_harness.h"

enum { LSTM, GRU, RNN };
enum { MAXS = 6, MAXB = 4, MAXI = 5, MAXH = 4 };

typedef struct rnn_case {
    const char *what;
    int kind, dirs, reverse, layout;
    int S, B, I, H;
    bool has_b, has_h0, has_c0, has_p;
    const int *lens; /* NULL: no sequence_lens */
    float clip;      /* 0: none */
    int input_forget, lbr;
    /* the activations attribute (n_acts 0: absent) ... */
    int n_acts;
    const char *acts[6];
    int n_alpha, n_beta;
    float alpha[6], beta[6];
    /* ... and what the reference applies, per direction and slot */
    const char *ref_act[6];
    double ref_alpha[6], ref_beta[6];
} rnn_case;

static int gates(int kind) { return kind == LSTM ? 4 : kind == GRU ? 3 : 1; }
static int per_dir(int kind) { return kind == LSTM ? 3 : kind == GRU ? 2 : 1; }

static double act(const char *name, double a, double b, double x) {
    if (!strcmp(name, "Sigmoid")) return 1.0 / (1.0 + exp(-x));
    if (!strcmp(name, "Tanh")) return tanh(x);
    if (!strcmp(name, "Relu")) return x > 0 ? x : 0;
    if (!strcmp(name, "LeakyRelu")) return x >= 0 ? x : a * x;
    if (!strcmp(name, "ScaledTanh")) return a * tanh(b * x);
    if (!strcmp(name, "HardSigmoid")) return fmin(fmax(a * x + b, 0.0), 1.0);
    if (!strcmp(name, "Affine")) return a * x + b;
    if (!strcmp(name, "Softsign")) return x / (1 + fabs(x));
    if (!strcmp(name, "Softplus")) return log(1 + exp(x));
    if (!strcmp(name, "Elu")) return x >= 0 ? x : a * (exp(x) - 1);
    if (!strcmp(name, "ThresholdedRelu")) return x > a ? x : 0;
    printf("FAIL: reference has no activation %s\n", name);
    exit(1);
}

typedef struct ref_io {
    const float *x, *w, *r, *b, *h0, *c0, *p;
    double y[MAXS * 2 * MAXB * MAXH], yh[2 * MAXB * MAXH], yc[2 * MAXB * MAXH];
} ref_io;

/* dot(row of M [rows, n], v) */
static double dot(const float *m, int row, int n, const double *v) {
    double s = 0;
    for (int k = 0; k < n; k++)
        s += (double)m[row * n + k] * v[k];
    return s;
}

static void reference(const rnn_case *c, ref_io *io) {
    int S = c->S, B = c->B, I = c->I, H = c->H, G = gates(c->kind), D = c->dirs;
    memset(io->y, 0, sizeof io->y);
    for (int d = 0; d < D; d++) {
        const float *w = io->w + d * G * H * I, *r = io->r + d * G * H * H;
        const float *wb = c->has_b ? io->b + d * 2 * G * H : NULL, *rb = wb ? wb + G * H : NULL;
        const char *const *an = c->ref_act + d * per_dir(c->kind);
        const double *aa = c->ref_alpha + d * per_dir(c->kind), *ab = c->ref_beta + d * per_dir(c->kind);
#define A(k, v) act(an[k], aa[k], ab[k], c->clip > 0 ? fmin(fmax((v), -c->clip), c->clip) : (v))
        for (int b = 0; b < B; b++) {
            int len = c->lens ? c->lens[b] : S;
            int hs = c->layout ? (b * D + d) * H : (d * B + b) * H;
            double h[MAXH], cs[MAXH], xv[MAXI], hn[MAXH], rh[MAXH];
            for (int j = 0; j < H; j++) {
                h[j] = c->has_h0 ? io->h0[hs + j] : 0;
                cs[j] = c->has_c0 ? io->c0[hs + j] : 0;
            }
            for (int s = 0; s < len; s++) {
                int t = (d == 1 || c->reverse) ? len - 1 - s : s;
                for (int k = 0; k < I; k++)
                    xv[k] = io->x[(c->layout ? b * S + t : t * B + b) * I + k];
#define PRE(g, j)    (dot(w, (g)*H + (j), I, xv) + (wb ? wb[(g)*H + (j)] : 0))
#define REC(g, j, v) (dot(r, (g)*H + (j), H, (v)) + (rb ? rb[(g)*H + (j)] : 0))
                if (c->kind == RNN) {
                    for (int j = 0; j < H; j++)
                        hn[j] = A(0, PRE(0, j) + REC(0, j, h));
                } else if (c->kind == GRU) {
                    for (int j = 0; j < H; j++)
                        rh[j] = A(0, PRE(1, j) + REC(1, j, h)) * h[j];
                    for (int j = 0; j < H; j++) {
                        double z = A(0, PRE(0, j) + REC(0, j, h)), rr = A(0, PRE(1, j) + REC(1, j, h));
                        double hh = c->lbr ? A(1, PRE(2, j) + rr * REC(2, j, h)) : A(1, PRE(2, j) + REC(2, j, rh));
                        hn[j] = (1 - z) * hh + z * h[j];
                    }
                } else {
                    const float *p = c->has_p ? io->p + d * 3 * H : NULL;
                    for (int j = 0; j < H; j++) {
                        double i = A(0, PRE(0, j) + REC(0, j, h) + (p ? p[j] * cs[j] : 0));
                        double f =
                            c->input_forget ? 1 - i : A(0, PRE(2, j) + REC(2, j, h) + (p ? p[2 * H + j] * cs[j] : 0));
                        double g = A(1, PRE(3, j) + REC(3, j, h));
                        double cn = f * cs[j] + i * g;
                        double o = A(0, PRE(1, j) + REC(1, j, h) + (p ? p[H + j] * cn : 0));
                        hn[j] = o * act(an[2], aa[2], ab[2], cn);
                        cs[j] = cn;
                    }
                }
                memcpy(h, hn, sizeof(double) * (size_t)H);
                for (int j = 0; j < H; j++)
                    io->y[(c->layout ? (b * S + t) * D + d : (t * D + d) * B + b) * H + j] = h[j];
            }
            for (int j = 0; j < H; j++) {
                io->yh[hs + j] = h[j];
                io->yc[hs + j] = cs[j];
            }
        }
#undef A
#undef PRE
#undef REC
    }
}

static nn_tensor absent(void) { return (nn_tensor){.dtype = NN_DTYPE_UNDEFINED}; }

/* Parse, infer and run one case through the op table (three outputs, which
 * op_harness's cpu_run does not have); 0 on success, else the failing stage
 * with its message in err. */
static int run_op(const char *op, const nn_attr *attrs, int n_attrs, nn_tensor *in, int n_in, nn_tensor *out, int n_out,
                  char *err, size_t err_size) {
    const nn_op_desc *d = nn_op_get(nn_op_lookup(op));
    if (!d) return snprintf(err, err_size, "no op %s", op), 1;
    nn_arena arena;
    memset(&arena, 0, sizeof arena);
    nn_parse_ctx ctx = {.attrs = attrs,
                        .n_attrs = n_attrs,
                        .opset = 14,
                        .n_inputs = n_in,
                        .n_outputs = n_out,
                        .arena = &arena,
                        .err = err,
                        .err_size = err_size};
    int stage = 0;
    if (d->parse(&ctx) != NN_OK) {
        stage = 1;
        goto done;
    }
    if (d->check(ctx.params, err, err_size) != NN_OK) {
        stage = 2;
        goto done;
    }
    nn_call call = {.params = ctx.params,
                    .n_in = n_in,
                    .n_out = n_out,
                    .in = in,
                    .out = out,
                    .threads = cpu_threads,
                    .err = err,
                    .err_size = err_size};
    if (d->infer(&call) != NN_OK) {
        stage = 3;
        goto done;
    }
    for (int k = 0; k < n_out; k++)
        out[k].data = calloc((size_t)nn_tensor_elements(&out[k]) + 1, sizeof(float));
    call.workspace_size = d->workspace(&call);
    call.workspace = malloc(call.workspace_size);
    if (d->run(&call) != NN_OK) stage = 4;
    free(call.workspace);
done:
    nn_arena_free(&arena);
    return stage;
}

static void run_case(const rnn_case *c) {
    int S = c->S, B = c->B, I = c->I, H = c->H, G = gates(c->kind), D = c->dirs;
    nn_tensor in[8];
    int n_in = 3;
    in[0] = c->layout ? rand_tensor(-1, 1, 3, B, S, I) : rand_tensor(-1, 1, 3, S, B, I);
    in[1] = rand_tensor(-0.8f, 0.8f, 3, D, G * H, I);
    in[2] = rand_tensor(-0.8f, 0.8f, 3, D, G * H, H);
    in[3] = c->has_b ? rand_tensor(-0.5f, 0.5f, 2, D, 2 * G * H) : absent();
    in[4] = absent();
    if (c->lens) {
        in[4] = tensor(NN_DTYPE_INT32, 1, B);
        memcpy(in[4].data, c->lens, sizeof(int32_t) * (size_t)B);
    }
    in[5] = !c->has_h0 ? absent() : c->layout ? rand_tensor(-1, 1, 3, B, D, H) : rand_tensor(-1, 1, 3, D, B, H);
    in[6] = !c->has_c0 ? absent() : c->layout ? rand_tensor(-1, 1, 3, B, D, H) : rand_tensor(-1, 1, 3, D, B, H);
    in[7] = c->has_p ? rand_tensor(-0.5f, 0.5f, 2, D, 3 * H) : absent();
    for (int k = 3; k < 8; k++)
        if (in[k].dtype != NN_DTYPE_UNDEFINED) n_in = k + 1;

    ref_io io = {.x = in[0].data,
                 .w = in[1].data,
                 .r = in[2].data,
                 .b = in[3].data,
                 .h0 = in[5].data,
                 .c0 = in[6].data,
                 .p = in[7].data};
    reference(c, &io);

    const char *dir = D == 2 ? "bidirectional" : c->reverse ? "reverse" : "forward";
    nn_attr attrs[10];
    int na = 0;
    attrs[na++] = attr_string("direction", dir);
    attrs[na++] = attr_int("hidden_size", H);
    attrs[na++] = attr_int("layout", c->layout);
    if (c->clip > 0) attrs[na++] = attr_float("clip", c->clip);
    if (c->kind == LSTM) attrs[na++] = attr_int("input_forget", c->input_forget);
    if (c->kind == GRU) attrs[na++] = attr_int("linear_before_reset", c->lbr);
    if (c->n_acts)
        attrs[na++] = (nn_attr){.name = "activations", .type = NN_ATTR_STRINGS, .n = c->n_acts, .strings = c->acts};
    if (c->n_alpha)
        attrs[na++] =
            (nn_attr){.name = "activation_alpha", .type = NN_ATTR_FLOATS, .n = c->n_alpha, .floats = c->alpha};
    if (c->n_beta)
        attrs[na++] = (nn_attr){.name = "activation_beta", .type = NN_ATTR_FLOATS, .n = c->n_beta, .floats = c->beta};

    const char *op = c->kind == LSTM ? "LSTM" : c->kind == GRU ? "GRU" : "RNN";
    int n_out = c->kind == LSTM ? 3 : 2;
    nn_tensor out[3];
    memset(out, 0, sizeof out);
    char err[256] = "";
    int stage = run_op(op, attrs, na, in, n_in, out, n_out, err, sizeof err);
    CHECK(stage == 0, "%s (threads %d): stage %d failed: %s", c->what, cpu_threads, stage, err);
    if (stage == 0) {
        int64_t ny = (int64_t)S * D * B * H, nh = (int64_t)D * B * H;
        float yw[MAXS * 2 * MAXB * MAXH], hw[2 * MAXB * MAXH], cw[2 * MAXB * MAXH];
        for (int64_t i = 0; i < ny; i++)
            yw[i] = (float)io.y[i];
        for (int64_t i = 0; i < nh; i++) {
            hw[i] = (float)io.yh[i];
            cw[i] = (float)io.yc[i];
        }
        char what[160];
        int64_t y_dims0 = c->layout ? B : S;
        CHECK(out[0].ndim == 4 && out[0].dims[0] == y_dims0 && out[0].dims[3] == H, "%s: Y has rank %d, dims[0] %lld",
              c->what, out[0].ndim, (long long)out[0].dims[0]);
        snprintf(what, sizeof what, "%s (threads %d): Y", c->what, cpu_threads);
        CHECK_CLOSE(what, out[0].data, yw, ny, 1e-5, 1e-4);
        snprintf(what, sizeof what, "%s (threads %d): Y_h", c->what, cpu_threads);
        CHECK_CLOSE(what, out[1].data, hw, nh, 1e-5, 1e-4);
        if (c->kind == LSTM) {
            snprintf(what, sizeof what, "%s (threads %d): Y_c", c->what, cpu_threads);
            CHECK_CLOSE(what, out[2].data, cw, nh, 1e-5, 1e-4);
        }
    }
    for (int k = 0; k < 8; k++)
        free(in[k].data);
    for (int k = 0; k < n_out; k++)
        free(out[k].data);
}

#define LSTM_DEFAULT                                                                                                   \
    { "Sigmoid", "Tanh", "Tanh", "Sigmoid", "Tanh", "Tanh" }
#define GRU_DEFAULT                                                                                                    \
    { "Sigmoid", "Tanh", "Sigmoid", "Tanh" }

static const int lens_mixed[4] = {4, 0, 2, 5}, lens_full[3] = {5, 5, 5}, lens_zero[3] = {0, 3, 0};

static const rnn_case cases[] = {
    {.what = "LSTM forward, lengths 4 0 2 5, states, peepholes",
     .kind = LSTM,
     .dirs = 1,
     .S = 5,
     .B = 4,
     .I = 3,
     .H = 4,
     .has_b = true,
     .has_h0 = true,
     .has_c0 = true,
     .has_p = true,
     .lens = lens_mixed,
     .ref_act = LSTM_DEFAULT},
    {.what = "LSTM reverse, layout 1, clip 0.4, lengths 4 0 2 5",
     .kind = LSTM,
     .dirs = 1,
     .reverse = 1,
     .layout = 1,
     .S = 5,
     .B = 4,
     .I = 5,
     .H = 3,
     .has_b = true,
     .has_h0 = true,
     .has_c0 = true,
     .lens = lens_mixed,
     .clip = 0.4f,
     .ref_act = LSTM_DEFAULT},
    {.what = "LSTM bidirectional, layout 1, input_forget, no bias or states, full lengths",
     .kind = LSTM,
     .dirs = 2,
     .layout = 1,
     .S = 5,
     .B = 3,
     .I = 2,
     .H = 4,
     .has_p = true,
     .lens = lens_full,
     .input_forget = 1,
     .ref_act = LSTM_DEFAULT},
    {.what = "LSTM bidirectional, HardSigmoid/ScaledTanh/Affine with alpha and beta",
     .kind = LSTM,
     .dirs = 2,
     .S = 4,
     .B = 2,
     .I = 3,
     .H = 3,
     .has_b = true,
     .has_h0 = true,
     .n_acts = 6,
     .acts = {"HardSigmoid", "ScaledTanh", "Affine", "Sigmoid", "Softsign", "Tanh"},
     .n_alpha = 3,
     .alpha = {0.3f, 0.9f, 0.5f},
     .n_beta = 3,
     .beta = {0.45f, 1.2f, 0.1f},
     .ref_act = {"HardSigmoid", "ScaledTanh", "Affine", "Sigmoid", "Softsign", "Tanh"},
     .ref_alpha = {0.3, 0.9, 0.5, 0, 0, 0},
     .ref_beta = {0.45, 1.2, 0.1, 0, 0, 0}},
    {.what = "LSTM bidirectional, batch 1 (a matrix-vector step), peepholes",
     .kind = LSTM,
     .dirs = 2,
     .S = 6,
     .B = 1,
     .I = 4,
     .H = 4,
     .has_b = true,
     .has_h0 = true,
     .has_c0 = true,
     .has_p = true,
     .ref_act = LSTM_DEFAULT},
    {.what = "GRU bidirectional, batch 1, clip 0.3",
     .kind = GRU,
     .dirs = 2,
     .S = 3,
     .B = 1,
     .I = 2,
     .H = 3,
     .has_b = true,
     .clip = 0.3f,
     .ref_act = GRU_DEFAULT},
    {.what = "GRU bidirectional, lengths 0 3 0 of 4, states",
     .kind = GRU,
     .dirs = 2,
     .S = 4,
     .B = 3,
     .I = 3,
     .H = 4,
     .has_b = true,
     .has_h0 = true,
     .lens = lens_zero,
     .ref_act = GRU_DEFAULT},
    {.what = "GRU reverse, linear_before_reset, layout 1, clip 0.5",
     .kind = GRU,
     .dirs = 1,
     .reverse = 1,
     .layout = 1,
     .S = 5,
     .B = 3,
     .I = 4,
     .H = 3,
     .has_b = true,
     .has_h0 = true,
     .lens = lens_full,
     .clip = 0.5f,
     .lbr = 1,
     .ref_act = GRU_DEFAULT},
    {.what = "GRU forward, linear_before_reset, lengths 4 0 2 5",
     .kind = GRU,
     .dirs = 1,
     .S = 5,
     .B = 4,
     .I = 2,
     .H = 4,
     .has_b = true,
     .lens = lens_mixed,
     .lbr = 1,
     .ref_act = GRU_DEFAULT},
    {.what = "RNN forward, defaults",
     .kind = RNN,
     .dirs = 1,
     .S = 4,
     .B = 2,
     .I = 3,
     .H = 4,
     .has_b = true,
     .ref_act = {"Tanh", "Tanh"}},
    {.what = "RNN bidirectional, LeakyRelu/Elu alphas, layout 1, lengths 0 3 0",
     .kind = RNN,
     .dirs = 2,
     .layout = 1,
     .S = 3,
     .B = 3,
     .I = 2,
     .H = 3,
     .has_b = true,
     .has_h0 = true,
     .lens = lens_zero,
     .n_acts = 2,
     .acts = {"LeakyRelu", "Elu"},
     .n_alpha = 2,
     .alpha = {0.2f, 0.7f},
     .ref_act = {"LeakyRelu", "Elu"},
     .ref_alpha = {0.2, 0.7}},
    {.what = "RNN bidirectional, one Softplus for both, clip 1",
     .kind = RNN,
     .dirs = 2,
     .S = 4,
     .B = 2,
     .I = 2,
     .H = 2,
     .has_b = true,
     .clip = 1.0f,
     .n_acts = 1,
     .acts = {"Softplus"},
     .ref_act = {"Softplus", "Softplus"}},
};

/* A length past seq_length fails the run with a message naming it. */
static void test_bad_length(void) {
    static const int bad[2] = {2, 7};
    nn_tensor in[5] = {rand_tensor(-1, 1, 3, 3, 2, 2), rand_tensor(-1, 1, 3, 1, 2, 2), rand_tensor(-1, 1, 3, 1, 2, 2),
                       absent(), tensor(NN_DTYPE_INT32, 1, 2)};
    memcpy(in[4].data, bad, sizeof bad);
    nn_attr attrs[1] = {attr_int("hidden_size", 2)};
    nn_tensor out[2];
    memset(out, 0, sizeof out);
    char err[256] = "";
    int stage = run_op("RNN", attrs, 1, in, 5, out, 2, err, sizeof err);
    CHECK(stage == 4 && strstr(err, "sequence_lens[1] = 7"), "length 7 of 3: stage %d, message '%s'", stage, err);
    for (int k = 0; k < 5; k++)
        free(in[k].data);
    for (int k = 0; k < 2; k++)
        free(out[k].data);
}

/* An activation the spec does not list is refused at parse, by name. */
static void test_bad_activation(void) {
    static const char *const names[1] = {"Gelu"};
    nn_tensor in[3] = {rand_tensor(-1, 1, 3, 3, 2, 2), rand_tensor(-1, 1, 3, 1, 2, 2), rand_tensor(-1, 1, 3, 1, 2, 2)};
    nn_attr attrs[2] = {attr_int("hidden_size", 2),
                        {.name = "activations", .type = NN_ATTR_STRINGS, .n = 1, .strings = names}};
    nn_tensor out[2];
    memset(out, 0, sizeof out);
    char err[256] = "";
    int stage = run_op("RNN", attrs, 2, in, 3, out, 2, err, sizeof err);
    CHECK(stage == 1 && strstr(err, "Gelu"), "activation Gelu: stage %d, message '%s'", stage, err);
    for (int k = 0; k < 3; k++)
        free(in[k].data);
}

int main(void) {
    for (cpu_threads = 1; cpu_threads <= 2; cpu_threads++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            run_case(&cases[i]);
    test_bad_length();
    test_bad_activation();
    return check_summary();
}
