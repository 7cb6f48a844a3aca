/* fuse_attention (passes/fuse_attention.c) and its FusedAttention op
 * (ops/attention.c): attention graphs in the forms torch exports (heads
 * split by Transposes, Swin's qkv unbound by Gathers, masks added in a
 * reshaped view, a no-op Dropout) must become one node whose outputs match
 * the unoptimized graph's; near misses must be left alone.  Odd sizes, so
 * that no dimension is a multiple of a vector width. */
#include "../ops/attention.h"
#include "pass_harness.h"

enum { M = 13, N = 11, H = 3, D = 7, DV = 5 };

typedef struct attn_variant {
    bool q_div;           /* Q / sqrt(D) before the product (torch's MultiheadAttention) */
    int scale_kind;       /* 0 none, 1 Mul by a scalar after the product, 2 Mul by a [N] vector */
    int mask;             /* 0 none, 1 graph input [B,1,1,N], 2 constant [1,H,M,N], 3 that and a window mask added
                           * through Reshapes (Swin), 4 all three (one more than the op takes) */
    bool mask_after_mul;  /* the scale Mul comes after the mask Add: (s + m) * c */
    int64_t softmax_axis; /* -1 normally */
    bool out_transpose;   /* merge the heads back: [B,M,H,DV] */
    bool dropout;         /* an inference Dropout after the Softmax */
    bool probs_output;    /* the Softmax output is also a graph output */
    bool k_shared;        /* K of batch 1 (a constant), broadcast over the batch */
} attn_variant;

static void transpose(builder *b, const char *name, const char *in, const char *out, int n, const int64_t *perm) {
    attr_ints(b, node(b, "Transpose", name, in, NULL, out), "perm", n, perm);
}

/* q [B,M,H,D], k [B,N,H,D], v [B,N,H,DV] -> [B,H,...] by Transposes, then attention. */
static const char *attn_model(builder *b, const attn_variant *v) {
    builder_init(b);
    graph_input(b, "q", 4, (int64_t[]){-1, M, H, D});
    if (v->k_shared) {
        float kw[N * H * D];
        float_init(b, "kt", 4, (int64_t[]){1, H, D, N}, N * H * D, fill(kw, N * H * D, -1, 1, 5));
    } else {
        graph_input(b, "k", 4, (int64_t[]){-1, N, H, D});
    }
    graph_input(b, "v", 4, (int64_t[]){-1, N, H, DV});
    if (v->mask == 1 || v->mask == 4) graph_input(b, "mask", 4, (int64_t[]){-1, 1, 1, N});
    if (v->out_transpose)
        graph_output(b, "y", 4, (int64_t[]){-1, M, H, DV});
    else
        graph_output(b, "y", 4, (int64_t[]){-1, H, M, DV});
    if (v->probs_output) graph_output(b, "p", 4, (int64_t[]){-1, H, M, N});
    transpose(b, "tq", "q", "qh", 4, (int64_t[]){0, 2, 1, 3});
    if (!v->k_shared) transpose(b, "tk", "k", "kt", 4, (int64_t[]){0, 2, 3, 1});
    transpose(b, "tv", "v", "vh", 4, (int64_t[]){0, 2, 1, 3});
    const char *q = "qh";
    if (v->q_div) {
        float c = sqrtf((float)D);
        float_init(b, "sqrt_d", 0, NULL, 1, &c);
        node(b, "Div", "qdiv", "qh", "sqrt_d", "qs");
        q = "qs";
    }
    node(b, "MatMul", "qk", q, "kt", "s0");
    const char *s = "s0";
    float sc = 0.7f, vec[N];
    if (v->scale_kind == 1) float_init(b, "scale", 0, NULL, 1, &sc);
    if (v->scale_kind == 2) float_init(b, "scale", 1, (int64_t[]){N}, N, fill(vec, N, 0.5f, 1.0f, 9));
    if (v->scale_kind && !v->mask_after_mul) node(b, "Mul", "mul", s, "scale", "s1"), s = "s1";
    if (v->mask == 1) node(b, "Add", "addmask", s, "mask", "s2"), s = "s2";
    if (v->mask >= 2) {
        float bias[H * M * N];
        fill(bias, H * M * N, -1, 1, 11);
        bias[3] = -1e9f; /* a masked-out score */
        float_init(b, "bias", 4, (int64_t[]){1, H, M, N}, H * M * N, bias);
        node(b, "Add", "addbias", "bias", s, "s2"), s = "s2"; /* the mask on the left */
    }
    if (v->mask >= 3) { /* Swin's shifted windows: the second mask added to [1, windows, H, M, N] */
        int64_t up[5] = {1, -1, H, M, N}, down[4] = {-1, H, M, N};
        int64_init(b, "up", 1, (int64_t[]){5}, 5, up);
        int64_init(b, "down", 1, (int64_t[]){4}, 4, down);
        float wm[BATCH * M * N];
        float_init(b, "wmask", 5, (int64_t[]){1, BATCH, 1, M, N}, BATCH * M * N, fill(wm, BATCH * M * N, -3, 0, 13));
        node(b, "Reshape", "r_up", s, "up", "s3");
        node(b, "Add", "addwin", "s3", "wmask", "s4");
        node(b, "Reshape", "r_down", "s4", "down", "s5");
        s = "s5";
    }
    if (v->mask == 4) node(b, "Add", "addmask", s, "mask", "s6"), s = "s6";
    if (v->scale_kind && v->mask_after_mul) node(b, "Mul", "mul", s, "scale", "s7"), s = "s7";
    attr_int(b, node(b, "Softmax", "softmax", s, NULL, v->probs_output ? "p" : "pr"), "axis", v->softmax_axis);
    const char *p = v->probs_output ? "p" : "pr";
    if (v->dropout) {
        float ratio = 0.1f;
        float_init(b, "ratio", 0, NULL, 1, &ratio);
        node(b, "Dropout", "drop", p, "ratio", "pd");
        p = "pd";
    }
    node(b, "MatMul", "pv", p, "vh", v->out_transpose ? "o" : "y");
    if (v->out_transpose) transpose(b, "to", "o", "y", 4, (int64_t[]){0, 2, 1, 3});
    return save(b, "attention.onnx");
}

static void attn_case(const char *what, const attn_variant *v, bool fused, const char *want_ops) {
    check_set_case("fuse_attention: %s", what);
    builder b;
    const char *path = attn_model(&b, v);
    nn_model *m = load(path, NULL);
    if (m) {
        CHECK(count_op(m, NN_OP_FusedAttention) == (fused ? 1 : 0), "FusedAttention nodes: expected %d, got [%s]",
              fused ? 1 : 0, ops_string(m));
        if (want_ops) CHECK_OPS(m, want_ops);
        CHECK_SAME_OUTPUTS(path, m);
        if (fused) expect_outputs_close(path, m, "fuse_attention", 1e-5, __LINE__);
    }
    nn_free(m);
    if (fused) { /* switched off, the graph keeps its MatMuls */
        m = load_opts(path, 1, NULL, "fuse_attention");
        if (m) CHECK(count_op(m, NN_OP_FusedAttention) == 0, "disabled: expected no FusedAttention");
        nn_free(m);
    }
    builder_free(&b);
}

static void test_rewrites(void) {
    attn_case("MultiheadAttention form: Q/sqrt(d), scale, padding mask, heads merged",
              &(attn_variant){.q_div = true, .scale_kind = 1, .mask = 1, .softmax_axis = -1, .out_transpose = true},
              true, "FusedAttention");
    attn_case("ViT form: no mask, no scale after the product",
              &(attn_variant){.q_div = true, .softmax_axis = -1, .out_transpose = true}, true, "FusedAttention");
    attn_case("no transposes after: output [B,H,M,DV]", &(attn_variant){.scale_kind = 1, .softmax_axis = 3}, true,
              "FusedAttention");
    attn_case("Swin form: bias, shifted-window mask through Reshapes, Dropout",
              &(attn_variant){.q_div = true, .mask = 3, .softmax_axis = -1, .out_transpose = true, .dropout = true},
              true, "FusedAttention");
    attn_case("constant bias on the left of the Add", &(attn_variant){.scale_kind = 1, .mask = 2, .softmax_axis = -1},
              true, "FusedAttention");
}

static void test_near_misses(void) {
    attn_case("three masks", &(attn_variant){.q_div = true, .mask = 4, .softmax_axis = -1, .out_transpose = true},
              false, NULL);
    attn_case("softmax over the query axis",
              &(attn_variant){.scale_kind = 1, .mask = 1, .softmax_axis = -2, .out_transpose = true}, false, NULL);
    attn_case("per-column scale vector",
              &(attn_variant){.scale_kind = 2, .mask = 1, .softmax_axis = -1, .out_transpose = true}, false, NULL);
    attn_case("scale after the mask",
              &(attn_variant){.scale_kind = 1, .mask = 1, .mask_after_mul = true, .softmax_axis = -1}, false, NULL);
    attn_case("probabilities also returned", &(attn_variant){.scale_kind = 1, .softmax_axis = -1, .probs_output = true},
              false, NULL);
    attn_case("K broadcast over the batch", &(attn_variant){.scale_kind = 1, .softmax_axis = -1, .k_shared = true},
              false, NULL);
}

/* Swin's qkv: one [B, T, 3, H, D] tensor, Transposed to [3, B, H, T, D] and
 * unbound by Gathers; T = 150 rows, so the op runs two row blocks. */
static void test_gather_unbind(void) {
    check_set_case("fuse_attention: qkv unbound by Gathers, two row blocks");
    enum { T = 150, HD = 2, DD = 6 };
    builder b;
    builder_init(&b);
    graph_input(&b, "qkv", 5, (int64_t[]){-1, T, 3, HD, DD});
    graph_output(&b, "y", 4, (int64_t[]){-1, T, HD, DD});
    transpose(&b, "t", "qkv", "x", 5, (int64_t[]){2, 0, 3, 1, 4});
    const char *names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        const char *idx = builder_str(&b, "i%d", i);
        int64_init(&b, idx, 0, NULL, 1, (int64_t[]){i});
        node(&b, "Gather", builder_str(&b, "g%d", i), "x", idx, names[i]);
    }
    float sc = 0.4f;
    float_init(&b, "scale", 0, NULL, 1, &sc);
    node(&b, "Mul", "qs", "q", "scale", "q2");
    transpose(&b, "tk", "k", "kt", 4, (int64_t[]){0, 1, 3, 2});
    node(&b, "MatMul", "qk", "q2", "kt", "s");
    attr_int(&b, node(&b, "Softmax", "softmax", "s", NULL, "p"), "axis", -1);
    node(&b, "MatMul", "pv", "p", "v", "o");
    transpose(&b, "to", "o", "y", 4, (int64_t[]){0, 2, 1, 3});
    const char *path = save(&b, "attention_gather.onnx");
    nn_model *m = load(path, NULL);
    if (m) {
        CHECK_OPS(m, "FusedAttention");
        nn_node *f = find_op(m, NN_OP_FusedAttention);
        if (f) {
            const nn_attention_params *p = f->params;
            CHECK(p->scale == 0.4f && p->m == T && p->n == T && p->d == DD, "params: scale %g m %lld d %lld",
                  (double)p->scale, (long long)p->m, (long long)p->d);
            CHECK(!strcmp(input_name(m, f, 0), "qkv") && !strcmp(input_name(m, f, 2), "qkv"),
                  "inputs: expected qkv read through strides, got %s", input_name(m, f, 0));
        }
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

/* torch's MultiheadAttention: one projection [B, T, 3*H*D] cut by Slices,
 * Reshaped to heads and Transposed; with unit steps the op reads the
 * projection itself, with step 2 on Q it reads the Slice's output. */
static void slice_case(int64_t q_step) {
    check_set_case("fuse_attention: q, k, v Sliced from one projection, Q step %lld", (long long)q_step);
    enum { T = 9, HS = 2, DS = 5, C = HS * DS };
    builder b;
    builder_init(&b);
    graph_input(&b, "x", 3, (int64_t[]){-1, T, 3 * C * 2});
    graph_output(&b, "y", 4, (int64_t[]){-1, HS, T, DS});
    int64_init(&b, "ax", 1, D1, 1, (int64_t[]){2});
    int64_init(&b, "heads", 1, (int64_t[]){4}, 4, (int64_t[]){0, T, HS, DS});
    const char *names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        int64_t step = i == 0 ? q_step : 1, lo = i == 0 && step == 2 ? 0 : C * (i + 1), hi = lo + C * step;
        const char *st = builder_str(&b, "st%d", i), *en = builder_str(&b, "en%d", i), *sp = builder_str(&b, "sp%d", i);
        int64_init(&b, st, 1, D1, 1, &lo);
        int64_init(&b, en, 1, D1, 1, &hi);
        int64_init(&b, sp, 1, D1, 1, &step);
        const char *ins[5] = {"x", st, en, "ax", sp};
        const char *sl = builder_str(&b, "%s_sl", names[i]), *rs = builder_str(&b, "%s_rs", names[i]);
        node_io(&b, "Slice", builder_str(&b, "slice%d", i), 5, ins, 1, &sl);
        node(&b, "Reshape", builder_str(&b, "reshape%d", i), sl, "heads", rs);
        transpose(&b, builder_str(&b, "t%d", i), rs, builder_str(&b, "%s_h", names[i]), 4,
                  i == 1 ? (int64_t[]){0, 2, 3, 1} : (int64_t[]){0, 2, 1, 3});
    }
    node(&b, "MatMul", "qk", "q_h", "k_h", "s");
    attr_int(&b, node(&b, "Softmax", "softmax", "s", NULL, "p"), "axis", -1);
    node(&b, "MatMul", "pv", "p", "v_h", "y");
    const char *path = save(&b, "attention_slice.onnx");
    nn_model *m = load(path, NULL);
    if (m) {
        nn_node *f = find_op(m, NN_OP_FusedAttention);
        if (CHECK(f != NULL, "FusedAttention: expected one, got [%s]", ops_string(m))) {
            const char *want_q = q_step == 1 ? "x" : "q_sl";
            CHECK(!strcmp(input_name(m, f, 0), want_q) && !strcmp(input_name(m, f, 1), "x") &&
                      !strcmp(input_name(m, f, 2), "x"),
                  "inputs: expected %s, x, x, got %s, %s, %s", want_q, input_name(m, f, 0), input_name(m, f, 1),
                  input_name(m, f, 2));
        }
        CHECK_SAME_OUTPUTS(path, m);
    }
    nn_free(m);
    builder_free(&b);
}

/* check refuses params a corrupt plan cache could hold. */
static void test_check(void) {
    check_set_case("FusedAttention check");
    const nn_op_desc *d = nn_op_get(NN_OP_FusedAttention);
    char err[200];
    nn_attention_params good = {
        .scale = 1, .rank = 3, .batch = {2}, .m = 4, .n = 5, .d = 6, .dv = 7, .out_rank = 3, .out_dims = {2, 4, 7}};
    for (int i = 0; i < 3; i++)
        good.q.stride[i] = good.k.stride[i] = good.v.stride[i] = good.o.stride[i] = 1;
    CHECK(d->check(&good, err, sizeof err) == NN_OK, "good params: expected OK, got %s", err);
    nn_attention_params bad = good;
    bad.rank = NN_MAX_DIMS + 1;
    CHECK(d->check(&bad, err, sizeof err) != NN_OK, "rank above NN_MAX_DIMS: expected refused");
    bad = good;
    bad.n_masks = 3;
    CHECK(d->check(&bad, err, sizeof err) != NN_OK, "3 masks: expected refused");
    bad = good;
    bad.k.stride[1] = -1;
    CHECK(d->check(&bad, err, sizeof err) != NN_OK, "negative stride: expected refused");
    bad = good;
    bad.m = 0;
    CHECK(d->check(&bad, err, sizeof err) != NN_OK, "m 0: expected refused");
    bad = good;
    bad.scale = NAN;
    CHECK(d->check(&bad, err, sizeof err) != NN_OK, "NaN scale: expected refused");
}

int main(void) {
    if (!mkdtemp(nn_test_dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_rewrites();
    test_near_misses();
    test_gather_unbind();
    slice_case(1);
    slice_case(2);
    test_check();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", nn_test_dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", nn_test_dir);
    return check_summary();
}
