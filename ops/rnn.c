/* The recurrent ops LSTM, GRU and RNN (opsets 7-17), fp32.
 *
 * One body serves all three: per direction, the input projection
 * X * W^T + bias of every time step is one GEMM (ops/gemm.h), then each step
 * adds H * R^T (a GEMM of batch rows) and applies the gates elementwise.
 *
 * sequence_lens: batch entry b runs steps 0 .. len[b]-1 (a reverse direction
 * runs its first len[b] time steps backwards, so step s reads time
 * len[b]-1-s); Y is zero past len[b], and Y_h / Y_c hold the state after its
 * last step.  A length of 0 takes no step: Y_h / Y_c are the initial state.
 *
 * Layout 0: X [seq, batch, input], Y [seq, dirs, batch, hidden],
 *           initial_h / Y_h [dirs, batch, hidden];
 * layout 1: X [batch, seq, input], Y [batch, seq, dirs, hidden],
 *           initial_h / Y_h [batch, dirs, hidden]. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "gemm.h"
#include "op.h"
#include "par.h"

typedef enum rnn_kind { RNN_LSTM, RNN_GRU, RNN_SIMPLE } rnn_kind;

/* The activations the spec lists, as named in the `activations` attribute. */
typedef enum rnn_act {
    RNN_ACT_RELU,
    RNN_ACT_TANH,
    RNN_ACT_SIGMOID,
    RNN_ACT_AFFINE,
    RNN_ACT_LEAKY_RELU,
    RNN_ACT_THRESHOLDED_RELU,
    RNN_ACT_SCALED_TANH,
    RNN_ACT_HARD_SIGMOID,
    RNN_ACT_ELU,
    RNN_ACT_SOFTSIGN,
    RNN_ACT_SOFTPLUS,
    RNN_ACT_COUNT
} rnn_act;

/* name, how many of activation_alpha / activation_beta it takes, and their
 * defaults (those of the ONNX op of the same name) */
static const struct {
    const char *name;
    int uses; /* 0: none, 1: alpha, 2: alpha and beta */
    float alpha, beta;
} act_info[RNN_ACT_COUNT] = {
    [RNN_ACT_RELU] = {"Relu", 0, 0.0f, 0.0f},
    [RNN_ACT_TANH] = {"Tanh", 0, 0.0f, 0.0f},
    [RNN_ACT_SIGMOID] = {"Sigmoid", 0, 0.0f, 0.0f},
    [RNN_ACT_AFFINE] = {"Affine", 2, 1.0f, 0.0f},
    [RNN_ACT_LEAKY_RELU] = {"LeakyRelu", 1, 0.01f, 0.0f},
    [RNN_ACT_THRESHOLDED_RELU] = {"ThresholdedRelu", 1, 1.0f, 0.0f},
    [RNN_ACT_SCALED_TANH] = {"ScaledTanh", 2, 1.0f, 1.0f},
    [RNN_ACT_HARD_SIGMOID] = {"HardSigmoid", 2, 0.2f, 0.5f},
    [RNN_ACT_ELU] = {"Elu", 1, 1.0f, 0.0f},
    [RNN_ACT_SOFTSIGN] = {"Softsign", 0, 0.0f, 0.0f},
    [RNN_ACT_SOFTPLUS] = {"Softplus", 0, 0.0f, 0.0f},
};

#define RNN_MAX_ACTS 6 /* 3 per direction (LSTM), 2 directions */

typedef struct rnn_params {
    int32_t kind;    /* rnn_kind */
    int32_t dirs;    /* 1 or 2 */
    int32_t reverse; /* with dirs == 1: the one direction runs backwards */
    int32_t layout;  /* 0 or 1 */
    int64_t hidden;  /* 0: taken from R's shape */
    int32_t has_clip;
    float clip;                  /* > 0 */
    int32_t input_forget;        /* LSTM */
    int32_t linear_before_reset; /* GRU */
    int32_t acts[RNN_MAX_ACTS];  /* per direction: acts_per_dir of them */
    float alpha[RNN_MAX_ACTS], beta[RNN_MAX_ACTS];
} rnn_params;

static int gates_of(int kind) { return kind == RNN_LSTM ? 4 : kind == RNN_GRU ? 3 : 1; }
static int acts_per_dir(int kind) { return kind == RNN_LSTM ? 3 : kind == RNN_GRU ? 2 : 1; }
static const char *kind_name(int kind) { return kind == RNN_LSTM ? "LSTM" : kind == RNN_GRU ? "GRU" : "RNN"; }

static inline float act_apply(int act, float a, float b, float x) {
    switch (act) {
    case RNN_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case RNN_ACT_TANH: return tanhf(x);
    case RNN_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case RNN_ACT_AFFINE: return a * x + b;
    case RNN_ACT_LEAKY_RELU: return x >= 0.0f ? x : a * x;
    case RNN_ACT_THRESHOLDED_RELU: return x > a ? x : 0.0f;
    case RNN_ACT_SCALED_TANH: return a * tanhf(b * x);
    case RNN_ACT_HARD_SIGMOID: {
        float y = a * x + b;
        return y < 0.0f ? 0.0f : y > 1.0f ? 1.0f : y;
    }
    case RNN_ACT_ELU: return x >= 0.0f ? x : a * (expf(x) - 1.0f);
    case RNN_ACT_SOFTSIGN: return x / (1.0f + fabsf(x));
    default: return x > 20.0f ? x : log1pf(expf(x)); /* Softplus; exp(x) would overflow past ~88 */
    }
}

static nn_status parse_rnn(nn_parse_ctx *ctx, rnn_kind kind) {
    rnn_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    p->kind = kind;
    if (ctx->opset < 7)
        return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "%s before opset 7 (output_sequence) is not supported",
                              kind_name(kind));
    const char *dir;
    int64_t hidden, layout, input_forget, lbr;
    nn_status st = nn_attr_string(ctx, "direction", "forward", &dir);
    if (st == NN_OK) st = nn_attr_int(ctx, "hidden_size", 0, &hidden);
    if (st == NN_OK) st = nn_attr_int(ctx, "layout", 0, &layout);
    if (st == NN_OK) st = nn_attr_int(ctx, "input_forget", 0, &input_forget);
    if (st == NN_OK) st = nn_attr_int(ctx, "linear_before_reset", 0, &lbr);
    if (st != NN_OK) return st;
    if (!strcmp(dir, "forward") || !strcmp(dir, "reverse")) {
        p->dirs = 1;
        p->reverse = dir[0] == 'r';
    } else if (!strcmp(dir, "bidirectional")) {
        p->dirs = 2;
    } else {
        return nn_parse_error(ctx, NN_ERR_INVALID, "direction '%s' is not forward, reverse or bidirectional", dir);
    }
    if (hidden < 0 || hidden > INT32_MAX)
        return nn_parse_error(ctx, NN_ERR_INVALID, "hidden_size %lld out of range", (long long)hidden);
    if (layout != 0 && layout != 1)
        return nn_parse_error(ctx, NN_ERR_INVALID, "layout %lld is not 0 or 1", (long long)layout);
    if (input_forget != 0 && input_forget != 1)
        return nn_parse_error(ctx, NN_ERR_INVALID, "input_forget %lld is not 0 or 1", (long long)input_forget);
    p->hidden = hidden;
    p->layout = (int32_t)layout;
    p->input_forget = kind == RNN_LSTM && input_forget;
    p->linear_before_reset = kind == RNN_GRU && lbr != 0;
    const nn_attr *clip = nn_attr_find(ctx, "clip");
    if (clip) {
        if (clip->type != NN_ATTR_FLOAT) return nn_parse_error(ctx, NN_ERR_INVALID, "attribute 'clip' must be a float");
        if (!(clip->f > 0.0f)) return nn_parse_error(ctx, NN_ERR_INVALID, "clip %g must be positive", (double)clip->f);
        p->has_clip = 1;
        p->clip = clip->f;
    }

    /* activations: the defaults, or the attribute's names (one set per
     * direction; a single set given to a bidirectional op serves both) */
    int per = acts_per_dir(kind), total = per * p->dirs;
    static const int defaults[3] = {RNN_ACT_SIGMOID, RNN_ACT_TANH, RNN_ACT_TANH};
    for (int k = 0; k < total; k++) {
        int a = kind == RNN_SIMPLE ? RNN_ACT_TANH : defaults[k % per];
        p->acts[k] = a;
        p->alpha[k] = act_info[a].alpha;
        p->beta[k] = act_info[a].beta;
    }
    const nn_attr *names = nn_attr_find(ctx, "activations");
    float alphas[RNN_MAX_ACTS], betas[RNN_MAX_ACTS];
    int n_alpha = -1, n_beta = -1;
    st = nn_attr_floats(ctx, "activation_alpha", alphas, RNN_MAX_ACTS, &n_alpha);
    if (st == NN_OK) st = nn_attr_floats(ctx, "activation_beta", betas, RNN_MAX_ACTS, &n_beta);
    if (st != NN_OK) return st;
    if (!names) {
        if (n_alpha > 0 || n_beta > 0)
            return nn_parse_error(ctx, NN_ERR_INVALID, "activation_alpha/beta given without activations");
        return NN_OK;
    }
    if (names->type != NN_ATTR_STRINGS || !names->strings)
        return nn_parse_error(ctx, NN_ERR_INVALID, "attribute 'activations' must be a list of strings");
    if (names->n != total && names->n != per)
        return nn_parse_error(ctx, NN_ERR_INVALID, "activations has %d names, expected %d", names->n, total);
    /* alpha and beta are consumed in order by the activations that take them */
    int ia = 0, ib = 0;
    for (int k = 0; k < names->n; k++) {
        int a = 0;
        while (a < RNN_ACT_COUNT && strcasecmp(names->strings[k], act_info[a].name) != 0)
            a++;
        if (a == RNN_ACT_COUNT)
            return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "activation '%s' is not supported", names->strings[k]);
        p->acts[k] = a;
        p->alpha[k] = act_info[a].alpha;
        p->beta[k] = act_info[a].beta;
        if (act_info[a].uses >= 1 && ia < n_alpha) p->alpha[k] = alphas[ia++];
        if (act_info[a].uses >= 2 && ib < n_beta) p->beta[k] = betas[ib++];
    }
    if (ia < n_alpha || ib < n_beta)
        return nn_parse_error(ctx, NN_ERR_INVALID,
                              "activation_alpha/beta have %d/%d values, the activations take %d/%d",
                              n_alpha < 0 ? 0 : n_alpha, n_beta < 0 ? 0 : n_beta, ia, ib);
    for (int k = names->n; k < total; k++) {
        p->acts[k] = p->acts[k - per];
        p->alpha[k] = p->alpha[k - per];
        p->beta[k] = p->beta[k - per];
    }
    return NN_OK;
}

static nn_status parse_lstm(nn_parse_ctx *ctx) { return parse_rnn(ctx, RNN_LSTM); }
static nn_status parse_gru(nn_parse_ctx *ctx) { return parse_rnn(ctx, RNN_GRU); }
static nn_status parse_simple(nn_parse_ctx *ctx) { return parse_rnn(ctx, RNN_SIMPLE); }

static nn_status check_rnn(const void *params, char *err, size_t err_size) {
    const rnn_params *p = params;
    const char *bad = NULL;
    if (p->kind < RNN_LSTM || p->kind > RNN_SIMPLE)
        bad = "kind";
    else if (p->dirs != 1 && p->dirs != 2)
        bad = "direction";
    else if (p->reverse != 0 && p->reverse != 1)
        bad = "direction";
    else if (p->layout != 0 && p->layout != 1)
        bad = "layout";
    else if (p->hidden < 0 || p->hidden > INT32_MAX)
        bad = "hidden_size";
    else if (p->has_clip != 0 && p->has_clip != 1)
        bad = "clip";
    else if (p->has_clip && !(p->clip > 0.0f))
        bad = "clip";
    else if (p->input_forget != 0 && p->input_forget != 1)
        bad = "input_forget";
    else if (p->linear_before_reset != 0 && p->linear_before_reset != 1)
        bad = "linear_before_reset";
    for (int k = 0; !bad && k < RNN_MAX_ACTS; k++)
        if (p->acts[k] < 0 || p->acts[k] >= RNN_ACT_COUNT) bad = "activations";
    if (!bad) return NN_OK;
    snprintf(err, err_size, "recurrent op params: attribute '%s' out of range", bad);
    return NN_ERR_INVALID;
}

/* ---- shapes */

typedef struct rnn_geom {
    int64_t seq, batch, input, hidden, gates, dirs;
} rnn_geom;

enum { IN_X, IN_W, IN_R, IN_B, IN_LENS, IN_H0, IN_C0, IN_P };

static bool dims_are(const nn_tensor *t, int ndim, int64_t d0, int64_t d1, int64_t d2) {
    const int64_t want[3] = {d0, d1, d2};
    if (t->ndim != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (t->dims[d] != want[d]) return false;
    return true;
}

static nn_status rnn_resolve(const nn_call *c, rnn_geom *g) {
    const rnn_params *p = c->params;
    for (int i = 0; i < c->n_in; i++)
        if (nn_present(c, i) && i != IN_LENS && c->in[i].dtype != NN_DTYPE_FLOAT)
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "input %d: dtype %s not supported (float only)", i,
                                 nn_dtype_name(c->in[i].dtype));
    const nn_tensor *x = &c->in[IN_X], *w = &c->in[IN_W], *r = &c->in[IN_R];
    if (x->ndim != 3 || w->ndim != 3 || r->ndim != 3)
        return nn_call_error(c, NN_ERR_SHAPE, "X, W and R must have rank 3 (ranks %d, %d, %d)", x->ndim, w->ndim,
                             r->ndim);
    g->seq = x->dims[p->layout ? 1 : 0];
    g->batch = x->dims[p->layout ? 0 : 1];
    g->input = x->dims[2];
    g->gates = gates_of(p->kind);
    g->dirs = p->dirs;
    g->hidden = p->hidden ? p->hidden : r->dims[2];
    int64_t gh = g->gates * g->hidden;
    if (g->hidden <= 0 || !dims_are(w, 3, g->dirs, gh, g->input) || !dims_are(r, 3, g->dirs, gh, g->hidden))
        return nn_call_error(c, NN_ERR_SHAPE,
                             "W [%lld, %lld, %lld] and R [%lld, %lld, %lld] must be [%lld, %lld, %lld] and "
                             "[%lld, %lld, %lld] (directions, %d x hidden_size %lld, input or hidden)",
                             (long long)w->dims[0], (long long)w->dims[1], (long long)w->dims[2], (long long)r->dims[0],
                             (long long)r->dims[1], (long long)r->dims[2], (long long)g->dirs, (long long)gh,
                             (long long)g->input, (long long)g->dirs, (long long)gh, (long long)g->hidden,
                             (int)g->gates, (long long)g->hidden);
    if (nn_present(c, IN_B) && !dims_are(&c->in[IN_B], 2, g->dirs, 2 * gh, 0))
        return nn_call_error(c, NN_ERR_SHAPE, "B must be [%lld, %lld]", (long long)g->dirs, (long long)(2 * gh));
    if (nn_present(c, IN_LENS)) {
        const nn_tensor *l = &c->in[IN_LENS];
        if ((l->dtype != NN_DTYPE_INT32 && l->dtype != NN_DTYPE_INT64) || !dims_are(l, 1, g->batch, 0, 0))
            return nn_call_error(c, NN_ERR_SHAPE, "sequence_lens must be int32 of shape [%lld]", (long long)g->batch);
    }
    int64_t s0 = p->layout ? g->batch : g->dirs, s1 = p->layout ? g->dirs : g->batch;
    for (int i = IN_H0; i <= IN_C0; i++)
        if (nn_present(c, i) && !dims_are(&c->in[i], 3, s0, s1, g->hidden))
            return nn_call_error(c, NN_ERR_SHAPE, "%s must be [%lld, %lld, %lld] (layout %d)",
                                 i == IN_H0 ? "initial_h" : "initial_c", (long long)s0, (long long)s1,
                                 (long long)g->hidden, (int)p->layout);
    if (p->kind == RNN_LSTM && nn_present(c, IN_P) && !dims_are(&c->in[IN_P], 2, g->dirs, 3 * g->hidden, 0))
        return nn_call_error(c, NN_ERR_SHAPE, "P must be [%lld, %lld]", (long long)g->dirs, (long long)(3 * g->hidden));
    if (p->kind != RNN_LSTM && c->n_in > IN_C0)
        return nn_call_error(c, NN_ERR_INVALID, "%s takes at most 6 inputs", kind_name(p->kind));
    return NN_OK;
}

static nn_status infer_rnn(nn_call *c) {
    const rnn_params *p = c->params;
    rnn_geom g;
    nn_status st = rnn_resolve(c, &g);
    if (st != NN_OK) return st;
    if (p->kind != RNN_LSTM && c->n_out > 2)
        return nn_call_error(c, NN_ERR_INVALID, "%s has at most 2 outputs", kind_name(p->kind));
    int64_t y[4] = {g.seq, g.dirs, g.batch, g.hidden}, y1[4] = {g.batch, g.seq, g.dirs, g.hidden};
    int64_t h[3] = {g.dirs, g.batch, g.hidden}, h1[3] = {g.batch, g.dirs, g.hidden};
    if (c->n_out > 0) nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, 4, p->layout ? y1 : y);
    for (int k = 1; k < c->n_out; k++)
        nn_tensor_set_shape(&c->out[k], NN_DTYPE_FLOAT, 3, p->layout ? h1 : h);
    return NN_OK;
}

/* ---- the products and the workspace */

/* Element `off` of a float input; NULL while its data is not known (sizing
 * the workspace at plan time). */
static const float *input_at(const nn_call *c, int i, int64_t off) {
    return c->in[i].data ? (const float *)c->in[i].data + off : NULL;
}

/* H * R[d]^T for columns [col0, col0 + n) of the gates, from `a` (H or r (.) H). */
static nn_gemm step_gemm(const nn_call *c, const rnn_geom *g, int d, const float *a, float *hr, int64_t col0, int64_t n,
                         const nn_gemm_packed *packed) {
    int64_t gh = g->gates * g->hidden;
    return (nn_gemm){.m = g->batch,
                     .n = n,
                     .k = g->hidden,
                     .a = a,
                     .lda = g->hidden,
                     .b = input_at(c, IN_R, (d * gh + col0) * g->hidden),
                     .ldb = g->hidden,
                     .trans_b = true,
                     .b_packed = packed,
                     .c = hr ? hr + col0 : NULL,
                     .ldc = gh,
                     .alpha = 1.0f};
}

/* X * W[d]^T (+ bias) for every time step: rows in X's own order. */
static nn_gemm input_gemm(const nn_call *c, const rnn_geom *g, int d, float *xp, const float *bias) {
    int64_t gh = g->gates * g->hidden;
    return (nn_gemm){.m = g->seq * g->batch,
                     .n = gh,
                     .k = g->input,
                     .a = c->in[IN_X].data,
                     .lda = g->input,
                     .b = input_at(c, IN_W, d * gh * g->input),
                     .ldb = g->input,
                     .trans_b = true,
                     .c = xp,
                     .ldc = gh,
                     .alpha = 1.0f,
                     .bias_kind = bias ? NN_GEMM_BIAS_COL : NN_GEMM_BIAS_NONE,
                     .bias = bias};
}

/* GRU without linear_before_reset: the h gate's product needs r first, so
 * R's z and r rows and its h rows are two products. */
static bool split_h(const rnn_params *p) { return p->kind == RNN_GRU && !p->linear_before_reset; }

/* Workspace, in floats from a 64-byte aligned base, each part 16-float aligned:
 *   xp    [seq * batch, gates * hidden]  one direction's X * W^T + bias
 *   bias  [gates * hidden]
 *   h, c  [batch, hidden]                the running state
 *   hr    [batch, gates * hidden]        one step's gates
 *   tmp   [batch, hidden]                GRU: r (.) H; LSTM: h(C)
 *   r0, r1                               R[d] packed once per direction for
 *                                        the step products (r1: GRU's h rows)
 *   then the GEMM's own scratch (bytes). */
typedef struct rnn_ws {
    size_t xp, bias, h, c, hr, tmp, r0, r1, gemm; /* offsets in floats */
    size_t gemm_bytes, total_bytes;
} rnn_ws;

static size_t align16(size_t n) { return (n + 15) / 16 * 16; }

static rnn_ws ws_layout(const nn_call *c, const rnn_geom *g) {
    const rnn_params *p = c->params;
    int64_t H = g->hidden, gh = g->gates * H;
    size_t bh = (size_t)(g->batch * H);
    rnn_ws w = {0};
    w.bias = w.xp + align16((size_t)(g->seq * g->batch * gh));
    w.h = w.bias + align16((size_t)gh);
    w.c = w.h + align16(bh);
    w.hr = w.c + align16(bh);
    w.tmp = w.hr + align16((size_t)(g->batch * gh));
    w.r0 = w.tmp + align16(bh);
    nn_gemm s0 = step_gemm(c, g, 0, NULL, NULL, 0, split_h(p) ? 2 * H : gh, NULL);
    nn_gemm s1 = step_gemm(c, g, 0, NULL, NULL, 2 * H, H, NULL);
    w.r1 = w.r0 + align16(nn_gemm_pack_b_floats(&s0));
    w.gemm = w.r1 + (split_h(p) ? align16(nn_gemm_pack_b_floats(&s1)) : 0);
    float dummy = 0.0f;
    nn_gemm in = input_gemm(c, g, 0, &dummy, &dummy);
    size_t wa = nn_gemm_workspace(&in, c->threads), wb = nn_gemm_workspace(&s0, c->threads);
    w.gemm_bytes = wa > wb ? wa : wb;
    w.total_bytes = 64 + sizeof(float) * w.gemm + w.gemm_bytes;
    return w;
}

static size_t workspace_rnn(const nn_call *c) {
    rnn_geom g;
    if (rnn_resolve(c, &g) != NN_OK) return 0;
    return ws_layout(c, &g).total_bytes;
}

/* ---- the recurrence */

/* Activation k of direction d over n values, clipped first when asked (the
 * spec clips gate inputs, not the cell state h() reads).  Those the GEMM
 * kernel has in vector form go through it. */
static void act_vec(const rnn_params *p, int d, int k, float *y, int64_t n, bool clip) {
    static const nn_act vector_form[RNN_ACT_COUNT] = {
        [RNN_ACT_RELU] = NN_ACT_RELU,
        [RNN_ACT_TANH] = NN_ACT_TANH,
        [RNN_ACT_SIGMOID] = NN_ACT_SIGMOID,
        [RNN_ACT_LEAKY_RELU] = NN_ACT_LEAKY_RELU,
        [RNN_ACT_HARD_SIGMOID] = NN_ACT_HARD_SIGMOID,
    };
    int slot = d * acts_per_dir(p->kind) + k, act = p->acts[slot];
    float a = p->alpha[slot], b = p->beta[slot];
    if (clip && p->has_clip)
        for (int64_t j = 0; j < n; j++)
            y[j] = y[j] < -p->clip ? -p->clip : y[j] > p->clip ? p->clip : y[j];
    if (vector_form[act] != NN_ACT_NONE) {
        nn_gemm_act(y, n, vector_form[act], a, b);
        return;
    }
    for (int64_t j = 0; j < n; j++)
        y[j] = act_apply(act, a, b, y[j]);
}

/* One step of one batch entry.  On entry gt holds its row of H * R^T (GRU
 * without linear_before_reset: r already applied and the h gate's product
 * taken from r (.) H), xr its X_t * W^T + biases; tmp is H floats of
 * scratch.  Updates h and, for LSTM, the cell state cs. */
static void gates_row(const rnn_params *p, int d, int64_t H, const float *xr, float *gt, float *h, float *cs,
                      const float *peep, const float *rbh, float *tmp) {
    if (p->kind == RNN_SIMPLE) {
        for (int64_t j = 0; j < H; j++)
            h[j] = gt[j] + xr[j];
        act_vec(p, d, 0, h, H, true);
    } else if (p->kind == RNN_GRU) {
        /* gates z, r, h */
        int64_t zr = split_h(p) ? H : 2 * H; /* r is done when split */
        for (int64_t j = 0; j < zr; j++)
            gt[j] += xr[j];
        act_vec(p, d, 0, gt, zr, true);
        const float *z = gt, *r = gt + H;
        float *cand = gt + 2 * H;
        if (p->linear_before_reset)
            for (int64_t j = 0; j < H; j++)
                cand[j] = xr[2 * H + j] + r[j] * (cand[j] + (rbh ? rbh[j] : 0.0f));
        else
            for (int64_t j = 0; j < H; j++)
                cand[j] += xr[2 * H + j];
        act_vec(p, d, 1, cand, H, true);
        for (int64_t j = 0; j < H; j++)
            h[j] = (1.0f - z[j]) * cand[j] + z[j] * h[j];
    } else {
        /* gates i, o, f, c; peepholes i, o, f (o's on the new cell state) */
        float *i = gt, *o = gt + H, *f = gt + 2 * H, *cand = gt + 3 * H;
        for (int64_t j = 0; j < H; j++)
            i[j] += xr[j] + (peep ? peep[j] * cs[j] : 0.0f);
        act_vec(p, d, 0, i, H, true);
        if (p->input_forget) {
            for (int64_t j = 0; j < H; j++)
                f[j] = 1.0f - i[j];
        } else {
            for (int64_t j = 0; j < H; j++)
                f[j] += xr[2 * H + j] + (peep ? peep[2 * H + j] * cs[j] : 0.0f);
            act_vec(p, d, 0, f, H, true);
        }
        for (int64_t j = 0; j < H; j++)
            cand[j] += xr[3 * H + j];
        act_vec(p, d, 1, cand, H, true);
        for (int64_t j = 0; j < H; j++) {
            cs[j] = f[j] * cs[j] + i[j] * cand[j];
            o[j] += xr[H + j] + (peep ? peep[H + j] * cs[j] : 0.0f);
            tmp[j] = cs[j];
        }
        act_vec(p, d, 0, o, H, true);
        act_vec(p, d, 2, tmp, H, false);
        for (int64_t j = 0; j < H; j++)
            h[j] = o[j] * tmp[j];
    }
}

/* Batch entry b's sequence length (seq_length when no sequence_lens is given). */
static int64_t seq_len(const nn_call *c, int64_t b, int64_t seq) {
    return nn_present(c, IN_LENS) ? nn_tensor_get_int(&c->in[IN_LENS], b) : seq;
}

/* Gate values per step below which one thread does a step's gates alone. */
#define RNN_PARALLEL_GATES 16384

/* One step's gates and outputs, for batch entries [lo, hi). */
typedef struct gates_job {
    const nn_call *c;
    const rnn_params *p;
    const rnn_geom *g;
    const float *xp, *peep, *rbh;
    float *hr, *h, *cst, *tmp, *y;
    int64_t s; /* the step */
    int d;
    bool reverse;
} gates_job;

static void gates_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const gates_job *j = ctx;
    const nn_call *c = j->c;
    const rnn_params *p = j->p;
    const rnn_geom g = *j->g;
    int64_t S = g.seq, Bn = g.batch, H = g.hidden, gh = g.gates * H, s = j->s;
    int d = j->d;
    bool reverse = j->reverse;
    const float *xp = j->xp, *peep = j->peep, *rbh = j->rbh;
    float *hr = j->hr, *h = j->h, *cst = j->cst, *tmp = j->tmp, *y = j->y;
    for (int64_t b = lo; b < hi; b++) {
        int64_t len = seq_len(c, b, S);
        if (s >= len) continue; /* done: h holds its final state */
        int64_t t = reverse ? len - 1 - s : s;
        const float *xr = xp + (p->layout ? b * S + t : t * Bn + b) * gh;
        gates_row(p, d, H, xr, hr + b * gh, h + b * H, cst + b * H, peep, rbh, tmp + b * H);
        if (y)
            memcpy(y + (p->layout ? (b * S + t) * g.dirs + d : (t * g.dirs + d) * Bn + b) * H, h + b * H,
                   sizeof(float) * (size_t)H);
    }
}

static nn_status run_rnn(nn_call *c) {
    const rnn_params *p = c->params;
    rnn_geom g;
    nn_status st = rnn_resolve(c, &g);
    if (st != NN_OK) return st;
    int64_t S = g.seq, Bn = g.batch, H = g.hidden, gh = g.gates * H;
    rnn_ws wl = ws_layout(c, &g);
    if (c->workspace_size < wl.total_bytes) return nn_call_error(c, NN_ERR_INTERNAL, "workspace too small");
    float *ws = (float *)(((uintptr_t)c->workspace + 63) & ~(uintptr_t)63);
    float *xp = ws + wl.xp, *bias = ws + wl.bias, *h = ws + wl.h, *cst = ws + wl.c, *hr = ws + wl.hr,
          *tmp = ws + wl.tmp;
    void *gscratch = ws + wl.gemm;
    /* lengths: checked before anything is written */
    for (int64_t b = 0; b < Bn; b++) {
        int64_t len = seq_len(c, b, S);
        if (len < 0 || len > S)
            return nn_call_error(c, NN_ERR_INVALID, "sequence_lens[%lld] = %lld is outside [0, %lld]", (long long)b,
                                 (long long)len, (long long)S);
    }
    float *y = c->n_out > 0 ? c->out[0].data : NULL, *yh = c->n_out > 1 ? c->out[1].data : NULL,
          *yc = c->n_out > 2 ? c->out[2].data : NULL;
    if (y) memset(y, 0, sizeof(float) * (size_t)(S * g.dirs * Bn * H));
    const float *bsrc = nn_present(c, IN_B) ? c->in[IN_B].data : NULL;
    const float *h0 = nn_present(c, IN_H0) ? c->in[IN_H0].data : NULL;
    const float *c0 = p->kind == RNN_LSTM && nn_present(c, IN_C0) ? c->in[IN_C0].data : NULL;
    const float *pp = p->kind == RNN_LSTM && nn_present(c, IN_P) ? c->in[IN_P].data : NULL;
    bool split = split_h(p);
    for (int d = 0; d < g.dirs; d++) {
        bool reverse = d == 1 || p->reverse;
        /* the biases that add straight to the projection: Wb + Rb, except
         * GRU's Rbh under linear_before_reset, which r scales */
        const float *rbh = NULL;
        if (bsrc) {
            const float *wb = bsrc + d * 2 * gh, *rb = wb + gh;
            for (int64_t j = 0; j < gh; j++)
                bias[j] = wb[j] + rb[j];
            if (p->linear_before_reset) {
                rbh = rb + 2 * H;
                for (int64_t j = 0; j < H; j++)
                    bias[2 * H + j] = wb[2 * H + j];
            }
        }
        nn_gemm gi = input_gemm(c, &g, d, xp, bsrc ? bias : NULL);
        if (!nn_gemm_run(&gi, gscratch, wl.gemm_bytes, c->threads))
            return nn_call_error(c, NN_ERR_INTERNAL, "input projection: GEMM workspace too small");
        /* R[d] packed once for all the steps */
        nn_gemm_packed r0, r1;
        nn_gemm s0 = step_gemm(c, &g, d, h, hr, 0, split ? 2 * H : gh, NULL);
        nn_gemm s1 = step_gemm(c, &g, d, tmp, hr, 2 * H, H, NULL);
        nn_gemm_pack_b(&s0, ws + wl.r0, &r0);
        s0.b_packed = &r0;
        if (split) {
            nn_gemm_pack_b(&s1, ws + wl.r1, &r1);
            s1.b_packed = &r1;
        }
        /* the state: [batch, hidden] rows of this direction */
        for (int64_t b = 0; b < Bn; b++) {
            int64_t src = (p->layout ? b * g.dirs + d : d * Bn + b) * H;
            for (int64_t j = 0; j < H; j++) {
                h[b * H + j] = h0 ? h0[src + j] : 0.0f;
                cst[b * H + j] = c0 ? c0[src + j] : 0.0f;
            }
        }
        const float *peep = pp ? pp + d * 3 * H : NULL;
        gates_job gj = {.c = c,
                        .p = p,
                        .g = &g,
                        .xp = xp,
                        .peep = peep,
                        .rbh = rbh,
                        .hr = hr,
                        .h = h,
                        .cst = cst,
                        .tmp = tmp,
                        .y = y,
                        .d = d,
                        .reverse = reverse};
        for (int64_t s = 0; s < S; s++) {
            if (!nn_gemm_run(&s0, gscratch, wl.gemm_bytes, c->threads))
                return nn_call_error(c, NN_ERR_INTERNAL, "recurrence: GEMM workspace too small");
            if (split) {
                /* r = f(Xr + Hr) in place, then (r (.) H) * Rh^T */
                for (int64_t b = 0; b < Bn; b++) {
                    int64_t len = seq_len(c, b, S);
                    if (s >= len) continue;
                    int64_t t = reverse ? len - 1 - s : s;
                    const float *xr = xp + (p->layout ? b * S + t : t * Bn + b) * gh;
                    float *r = hr + b * gh + H;
                    for (int64_t j = 0; j < H; j++)
                        r[j] += xr[H + j];
                    act_vec(p, d, 0, r, H, true);
                    for (int64_t j = 0; j < H; j++)
                        tmp[b * H + j] = r[j] * h[b * H + j];
                }
                if (!nn_gemm_run(&s1, gscratch, wl.gemm_bytes, c->threads))
                    return nn_call_error(c, NN_ERR_INTERNAL, "recurrence: GEMM workspace too small");
            }
            gj.s = s;
            nn_par_for_range(c->threads > 1 && Bn * gh >= RNN_PARALLEL_GATES ? c->threads : 1, Bn, 1, gates_range, &gj);
        }
        for (int64_t b = 0; b < Bn; b++) {
            int64_t dst = (p->layout ? b * g.dirs + d : d * Bn + b) * H;
            if (yh) memcpy(yh + dst, h + b * H, sizeof(float) * (size_t)H);
            if (yc) memcpy(yc + dst, cst + b * H, sizeof(float) * (size_t)H);
        }
    }
    return NN_OK;
}

#define RNN_DESC(Name, parse_fn, max_in, max_out)                                                                      \
    const nn_op_desc nn_op_##Name = {.name = #Name,                                                                    \
                                     .min_inputs = 3,                                                                  \
                                     .max_inputs = max_in,                                                             \
                                     .min_outputs = 0,                                                                 \
                                     .max_outputs = max_out,                                                           \
                                     .flags = NN_OPF_SPANS_DIM0,                                                       \
                                     .parse = parse_fn,                                                                \
                                     .check = check_rnn,                                                               \
                                     .infer = infer_rnn,                                                               \
                                     .workspace = workspace_rnn,                                                       \
                                     .run = run_rnn}

RNN_DESC(LSTM, parse_lstm, 8, 3);
RNN_DESC(GRU, parse_gru, 6, 2);
RNN_DESC(RNN, parse_simple, 6, 2);
