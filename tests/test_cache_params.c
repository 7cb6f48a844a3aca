/* Params and fused fields read back from the plan cache are untrusted: a
 * crafted file with a valid (re-sealed) checksum must be a miss with a
 * warning, never a crash, and the rebuilt plan must give the right outputs.
 * Also: every op with parse has check (the op contract, ops/op.h).
 *
 * The plan of a small model (Conv with groups + residual Add + Relu, fused
 * into the Conv's epilogue) is edited field by field, found by walking its
 * meta section with the cache's own record tables. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../engine/cache_int.h"
#include "nn.h"
#include "onnx_builder.h"
#include "registry.h"
#include "window.h"

static int failures, checks;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        checks++;                                                                                                      \
        if (!(cond)) {                                                                                                 \
            failures++;                                                                                                \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
        }                                                                                                              \
    } while (0)

static void test_every_parse_has_check(void) {
    for (int op = 0; op < NN_OP_COUNT; op++) {
        const nn_op_desc *d = nn_op_get(op);
        CHECK(!d->parse == !d->check, "op %s: parse %s but check %s", d->name, d->parse ? "set" : "unset",
              d->check ? "set" : "unset");
    }
}

/* Mod and BitShift keep the two-input ops' broadcast flags first in their
 * params (binary_infer reads them): a flag byte other than 0 or 1, undefined
 * behaviour to load as a bool, must fail every such op's check (the cache
 * fuzzer found Mod's missing). */
static void test_broadcast_flags_checked(void) {
    static const char *const ops[] = {"Add", "Pow", "PRelu", "Mod", "BitShift"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        int op = nn_op_lookup(ops[i]);
        CHECK(op >= 0, "op %s is not registered", ops[i]);
        if (op < 0) continue;
        const nn_op_desc *d = nn_op_get(op);
        unsigned char p[NN_PARAMS_MAX] = {0};
        char err[160] = "";
        CHECK(d->check(p, err, sizeof err) == NN_OK, "%s: zeroed params refused: %s", ops[i], err);
        for (int k = 0; k < 2; k++) {
            memset(p, 0, sizeof p);
            p[k] = 38;
            CHECK(d->check(p, err, sizeof err) != NN_OK, "%s: broadcast flag %d of 38 passed its check", ops[i], k);
        }
    }
}

/* ---- the model and its plan */

enum { C = 6, HW = 5 };

static const char *build_model(void) {
    builder b;
    builder_init(&b);
    const int64_t x_dims[] = {1, C, HW, HW}, w_dims[] = {C, C / 2, 3, 3}, b_dims[] = {C};
    float w[C * C / 2 * 9], bias[C];
    for (int i = 0; i < C * C / 2 * 9; i++)
        w[i] = sinf((float)i) * 0.3f;
    for (int i = 0; i < C; i++)
        bias[i] = 0.1f * (float)i - 0.2f;
    graph_input(&b, "X", 4, x_dims);
    graph_output(&b, "Y", 4, x_dims);
    float_init(&b, "W", 4, w_dims, C * C / 2 * 9, w);
    float_init(&b, "B", 1, b_dims, C, bias);
    const char *conv_in[] = {"X", "W", "B"}, *conv_out[] = {"c"};
    Onnx__NodeProto *conv = node_io(&b, "Conv", "conv", 3, conv_in, 1, conv_out);
    attr_int(&b, conv, "group", 2);
    attr_ints(&b, conv, "kernel_shape", 2, (const int64_t[]){3, 3});
    attr_ints(&b, conv, "pads", 4, (const int64_t[]){1, 1, 1, 1});
    node(&b, "Add", "add", "c", "X", "s");
    node(&b, "Relu", "relu", "s", NULL, "Y");
    const char *path = save(&b, "conv_add_relu.onnx");
    builder_free(&b);
    return path;
}

static char cache_dir[300];

static nn_options options(void) {
    nn_options o = nn_options_default();
    o.threads = 1;
    o.cache_dir = cache_dir;
    return o;
}

/* Load and run on a fixed input; the cache state and warning through the out params. */
static bool load_run(const char *model, float *y, nn_cache_state *state, char *warning, size_t warning_size) {
    nn_options o = options();
    nn_model *m = NULL;
    if (nn_load(model, &o, &m) != NN_OK) return false;
    nn_model_stats s;
    nn_model_get_stats(m, &s);
    *state = s.cache;
    snprintf(warning, warning_size, "%s", s.cache_warning ? s.cache_warning : "");
    float x[C * HW * HW];
    for (int i = 0; i < C * HW * HW; i++)
        x[i] = cosf((float)i * 0.7f);
    nn_tensor in = {.dtype = NN_DTYPE_FLOAT, .ndim = 4, .dims = {1, C, HW, HW}, .data = x}, out = {0};
    bool ok = nn_predict(m, &in, 1, &out, 1) == NN_OK && nn_tensor_elements(&out) == C * HW * HW;
    if (ok) memcpy(y, out.data, sizeof(float) * C * HW * HW);
    nn_tensor_release(&out);
    nn_free(m);
    return ok;
}

/* Where the fields to edit lie in the file: found by walking the meta
 * section with the records' own tables. */
typedef struct places {
    size_t conv_params, conv_params_size, conv_tail; /* file offsets */
    size_t y_record;
    size_t moved_offset; /* the plan offset of a buffer at 64 bytes or more into the arena; 0 if none */
} places;

typedef struct cursor {
    const unsigned char *p;
    size_t at;
} cursor;

static uint64_t next(cursor *c, int bytes) {
    uint64_t v = cache_get_le(c->p + c->at, bytes);
    c->at += (size_t)bytes;
    return v;
}

static void next_str(cursor *c, char *out, size_t cap) {
    uint32_t len = (uint32_t)next(c, 4);
    out[0] = 0;
    if (len == UINT32_MAX) return;
    snprintf(out, cap, "%.*s", (int)len, (const char *)c->p + c->at);
    c->at += len;
}

static void next_data(cursor *c) {
    if (next(c, 8) != UINT64_MAX) c->at += 8;
}

static bool find_places(const unsigned char *file, places *pl) {
    cache_header h;
    cache_decode(&cache_header_desc, file, &h);
    cursor c = {file, (size_t)h.meta_offset};
    graph_record g;
    cache_decode(&cache_graph_desc, file + c.at, &g);
    c.at += cache_record_bytes(&cache_graph_desc);
    char name[128], op[64];
    bool found_y = false, found_conv = false;
    bool root[64] = {false};
    for (uint32_t v = 0; v < g.n_values; v++) {
        next_str(&c, name, sizeof name);
        if (!strcmp(name, "Y")) {
            pl->y_record = c.at;
            found_y = true;
        }
        value_record vr;
        cache_decode(&cache_value_desc, file + c.at, &vr);
        if (v < 64) root[v] = vr.alias < 0;
        c.at += cache_record_bytes(&cache_value_desc);
        next_data(&c);
    }
    for (uint32_t i = 0; i < g.n_nodes; i++) {
        next_str(&c, name, sizeof name);
        next_str(&c, op, sizeof op);
        node_head head;
        cache_decode(&cache_node_head_desc, file + c.at, &head);
        c.at += cache_record_bytes(&cache_node_head_desc) + 4 * (size_t)(head.n_in + head.n_out);
        uint32_t psize = (uint32_t)next(&c, 4);
        bool conv = !strcmp(op, "Conv");
        if (conv) {
            pl->conv_params = c.at;
            pl->conv_params_size = psize;
        }
        if (psize != UINT32_MAX) c.at += psize;
        next_data(&c);
        if (conv) pl->conv_tail = c.at;
        found_conv |= conv;
        c.at += cache_record_bytes(&cache_node_tail_desc);
        next_str(&c, name, sizeof name);
    }
    /* the graph's input and output ids, then the memory plan */
    c.at += 4 * (size_t)(g.n_inputs + g.n_outputs) + cache_record_bytes(&cache_plan_desc);
    pl->moved_offset = 0;
    for (uint32_t v = 0; v < g.n_values && v < 64; v++)
        if (root[v] && (int64_t)cache_get_le(file + c.at + 8 * v, 8) >= 64) pl->moved_offset = c.at + 8 * v;
    return found_y && found_conv && pl->moved_offset;
}

/* Write `file` with its checksum recomputed, as anyone who can write the cache folder can. */
static void reseal_to(unsigned char *file, size_t size, const char *path) {
    cache_header h;
    cache_decode(&cache_header_desc, file, &h);
    cache_checksum(&h, file, 1, h.checksum);
    cache_encode(&cache_header_desc, &h, file);
    write_bytes(path, file, size);
}

/* Field offsets inside the encoded node_tail record (cache_format.c's table). */
enum { TAIL_HAS_EPILOGUE = 0, TAIL_RESIDUAL = 1, TAIL_ACT = 5 };
/* conv_params (ops/conv.c) starts with nn_window_attrs, then int64 group */
#define CONV_GROUP    sizeof(nn_window_attrs)
#define CONV_N_KERNEL offsetof(nn_window_attrs, n_kernel)

typedef struct edit {
    const char *name;
    const char *want; /* in the warning */
    void (*apply)(unsigned char *file, const places *pl);
} edit;

static void group_zero(unsigned char *f, const places *pl) { memset(f + pl->conv_params + CONV_GROUP, 0, 8); }
static void group_huge(unsigned char *f, const places *pl) {
    int64_t g = (int64_t)1 << 40;
    memcpy(f + pl->conv_params + CONV_GROUP, &g, 8);
}
static void group_negative(unsigned char *f, const places *pl) {
    int64_t g = -2;
    memcpy(f + pl->conv_params + CONV_GROUP, &g, 8);
}
static void kernel_count(unsigned char *f, const places *pl) {
    int n = 99;
    memcpy(f + pl->conv_params + CONV_N_KERNEL, &n, sizeof n);
}
static void output_dims(unsigned char *f, const places *pl) { cache_put_le(f + pl->y_record + 8 + 8, C + 1, 8); }
static void act_count(unsigned char *f, const places *pl) {
    cache_put_le(f + pl->conv_tail + TAIL_ACT, NN_ACT_COUNT, 4);
}
static void act_negative(unsigned char *f, const places *pl) {
    cache_put_le(f + pl->conv_tail + TAIL_ACT, (uint32_t)-1, 4);
}
/* 60 bytes back: inside the arena, on a float's boundary, off the planner's 64 */
static void misaligned(unsigned char *f, const places *pl) {
    cache_put_le(f + pl->moved_offset, cache_get_le(f + pl->moved_offset, 8) - 60, 8);
}
static void residual_99(unsigned char *f, const places *pl) { cache_put_le(f + pl->conv_tail + TAIL_RESIDUAL, 99, 4); }
/* input 1 is W, smaller than the output: the kernel would read past it */
static void residual_w(unsigned char *f, const places *pl) { cache_put_le(f + pl->conv_tail + TAIL_RESIDUAL, 1, 4); }
/* The Conv's params cut out of the stream and their size set to "none":
 * the reader gives it zeros, group 0 among them. */
static void params_none(unsigned char *f, const places *pl) {
    cache_header h;
    cache_decode(&cache_header_desc, f, &h);
    size_t end = (size_t)(h.meta_offset + h.meta_bytes), from = pl->conv_params + pl->conv_params_size;
    memmove(f + pl->conv_params, f + from, end - from);
    memset(f + end - pl->conv_params_size, 0, pl->conv_params_size);
    cache_put_le(f + pl->conv_params - 4, UINT32_MAX, 4);
    h.meta_bytes -= pl->conv_params_size;
    cache_encode(&cache_header_desc, &h, f);
}

static void test_crafted_plans(const char *model) {
    float ref[C * HW * HW], y[C * HW * HW];
    nn_cache_state state;
    char warning[400];
    CHECK(load_run(model, ref, &state, warning, sizeof warning) && state == NN_CACHE_MISS,
          "first load: a miss that runs (state %d, %s)", (int)state, nn_last_error());
    CHECK(load_run(model, y, &state, warning, sizeof warning) && state == NN_CACHE_HIT && !memcmp(y, ref, sizeof y),
          "second load: a hit with the same outputs (state %d)", (int)state);
    char cmd[400], plan[400] = "";
    snprintf(cmd, sizeof cmd, "ls %s/*.nnplan", cache_dir);
    FILE *ls = popen(cmd, "r");
    if (!ls || !fgets(plan, sizeof plan, ls)) {
        CHECK(false, "no plan file in %s", cache_dir);
        if (ls) pclose(ls);
        return;
    }
    pclose(ls);
    plan[strcspn(plan, "\n")] = 0;
    FILE *f = fopen(plan, "rb");
    fseek(f, 0, SEEK_END);
    size_t size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *good = malloc(size), *bad = malloc(size);
    CHECK(fread(good, 1, size, f) == size, "reading %s", plan);
    fclose(f);
    places pl;
    CHECK(find_places(good, &pl), "the plan has a Conv node, a value Y and a buffer 64 bytes or more in");
    CHECK(pl.conv_params_size != UINT32_MAX && pl.conv_params_size > CONV_GROUP,
          "the Conv's params (%zu bytes) hold a group", pl.conv_params_size);
    CHECK(good[pl.conv_tail + TAIL_HAS_EPILOGUE] == 1, "the Add and Relu fused into the Conv's epilogue");
    CHECK(cache_record_bytes(&cache_header_desc) == HEADER_BYTES, "header record is %zu bytes, expected %d",
          cache_record_bytes(&cache_header_desc), HEADER_BYTES);

    /* control: re-sealed unchanged, it is still a hit */
    memcpy(bad, good, size);
    reseal_to(bad, size, plan);
    CHECK(load_run(model, y, &state, warning, sizeof warning) && state == NN_CACHE_HIT, "re-sealed as it was: a hit");

    const edit edits[] = {
        {"Conv group 0", "group must be >= 1", group_zero},
        {"Conv group 2^40", "group must be >= 1", group_huge},
        {"Conv group -2", "group must be >= 1", group_negative},
        {"kernel_shape count 99", "kernel_shape has 99 values", kernel_count},
        {"output dims that do not follow", "rebuilt the plan", output_dims},
        {"epilogue act NN_ACT_COUNT", "unknown activation", act_count},
        {"epilogue act -1", "unknown activation", act_negative},
        {"epilogue residual 99", "invalid epilogue", residual_99},
        {"epilogue residual W", "residual is not shaped like its output", residual_w},
        {"a buffer off its 64-byte boundary", "misaligned", misaligned},
        {"Conv params none", "group must be >= 1", params_none},
    };
    for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
        memcpy(bad, good, size);
        edits[i].apply(bad, &pl);
        reseal_to(bad, size, plan);
        memset(y, 0, sizeof y);
        bool ran = load_run(model, y, &state, warning, sizeof warning);
        CHECK(ran && state == NN_CACHE_MISS, "%s: expected a miss that runs, got state %d (ran %d)", edits[i].name,
              (int)state, ran);
        CHECK(strstr(warning, edits[i].want) != NULL, "%s: expected a warning with '%s', got '%s'", edits[i].name,
              edits[i].want, warning);
        CHECK(!memcmp(y, ref, sizeof y), "%s: the rebuilt plan's outputs differ from the first load's", edits[i].name);
    }
    free(good);
    free(bad);
}

int main(void) {
    if (!mkdtemp(nn_test_dir)) return perror("mkdtemp"), 2;
    snprintf(cache_dir, sizeof cache_dir, "%s/cache", nn_test_dir);
    test_every_parse_has_check();
    test_broadcast_flags_checked();
    test_crafted_plans(build_model());
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", nn_test_dir);
    if (system(cmd) != 0) printf("could not remove %s\n", nn_test_dir);
    printf("test_cache_params: %d checks\n%d passed, %d failed\n", checks, checks - failures, failures);
    return failures != 0;
}
