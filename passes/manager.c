/* The pass manager: the default pipeline, selection by name, the verifier
 * between passes, and a hook for tools that show every stage. */
#include <stdio.h>
#include <string.h>

#include "../engine/error.h"
#include "pass.h"

/* The default order.  QDQ convs become QLinearConvs before anything, since
 * folding would dequantize their constant weights to float.  Folding next, so every later pass sees static
 * shapes and constant weights; no-op removal before the fusions so that an
 * Identity between a Conv and its BatchNormalization does not hide the
 * pair (a Pad by zeros then joins the Conv or AveragePool reading it);
 * decompositions (LayerNorm, GELU) and attention (MatMul, scale, mask,
 * Softmax, MatMul) are recognized before the elementwise fusions take their pieces; bias Adds join their MatMul/Gemm before residual Adds are looked
 * for; the residual Add is absorbed before the activation, so Conv+Add+Relu
 * becomes one node; chains of elementwise ops are fused after that, from
 * what the epilogues could not take (an activation in a Conv's epilogue
 * costs no pass of its own); a per-channel chain (BatchNormalization+Relu)
 * left ahead of a 1x1 Conv then moves into the Conv's input packing.
 * A float chain between a DequantizeLinear and a QuantizeLinear then
 * becomes a table on the bytes (fused first, so it is one node to run on
 * the 256 bytes), and the int8 convs and what lies between them move to
 * channels-last last, once the nodes they are made of are final.
 * These repeat until a round rewrites nothing.  The memory passes run
 * after that, once, when no node will be rewritten: Concat inputs move into
 * the Concat's buffer before views alias Reshapes, so a view sees where its
 * input finally lives. */
// clang-format off
const nn_pass *const nn_default_pipeline[] = {
    &nn_pass_fuse_qdq,
    &nn_pass_fold_constants,
    &nn_pass_eliminate_noops,
    &nn_pass_fuse_pad,
    &nn_pass_fold_batchnorm,
    &nn_pass_fuse_layernorm,
    &nn_pass_fuse_gelu,
    &nn_pass_fuse_attention,
    &nn_pass_fuse_bias,
    &nn_pass_fuse_residual,
    &nn_pass_fuse_activation,
    &nn_pass_fuse_elementwise,
    &nn_pass_fuse_prologue,
    &nn_pass_fuse_lut,
    &nn_pass_layout_nhwc,
    &nn_pass_eliminate_concat,
    &nn_pass_views,
    NULL,
};
// clang-format on

enum { MAX_ROUNDS = 8, MAX_SELECTED = 32 };

static const nn_pass *find_pass(const char *name, size_t len) {
    for (int i = 0; nn_default_pipeline[i]; i++)
        if (strlen(nn_default_pipeline[i]->name) == len && !strncmp(nn_default_pipeline[i]->name, name, len))
            return nn_default_pipeline[i];
    return NULL;
}

/* Parse a comma-separated list of pass names into out[]. */
static nn_status parse_list(const char *list, const char *what, const nn_pass **out, int *n) {
    *n = 0;
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len) {
            const nn_pass *pass = find_pass(p, len);
            if (!pass) {
                char names[256] = "";
                for (int i = 0; nn_default_pipeline[i]; i++)
                    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                             nn_default_pipeline[i]->name);
                return nn_set_error(NN_ERR_ARG, "%s: unknown pass '%.*s' (passes: %s)", what, (int)len, p, names);
            }
            if (*n == MAX_SELECTED) return nn_set_error(NN_ERR_ARG, "%s: too many passes", what);
            out[(*n)++] = pass;
        }
        p = end ? end + 1 : p + len;
    }
    return NN_OK;
}

/* One pass over the selected passes of one kind (memory or rewriting) that
 * are not disabled; *changed counts their rewrites. */
static nn_status run_stage(nn_model *m, const nn_pass *const *selected, int n_selected, const nn_pass *const *disabled,
                           int n_disabled, bool memory, bool verify, nn_pass_hook hook, void *hook_ctx, int *changed) {
    *changed = 0;
    for (int i = 0; i < n_selected; i++) {
        bool off = selected[i]->memory != memory;
        for (int j = 0; j < n_disabled; j++)
            off |= disabled[j] == selected[i];
        if (off) continue;
        int rewrites = 0;
        nn_status st = selected[i]->run(m, &rewrites);
        if (st != NN_OK) return st;
        if (verify && (st = nn_verify_graph(m, selected[i]->name)) != NN_OK) return st;
        if (hook) hook(hook_ctx, m, selected[i]->name, rewrites);
        *changed += rewrites;
    }
    return NN_OK;
}

nn_status nn_optimize(nn_model *m, nn_pass_hook hook, void *hook_ctx) {
    const nn_pass *selected[MAX_SELECTED], *disabled[MAX_SELECTED];
    int n_selected = 0, n_disabled = 0;
    nn_status st;
    if (m->opt.passes) {
        if ((st = parse_list(m->opt.passes, "passes", selected, &n_selected)) != NN_OK) return st;
    } else {
        for (int i = 0; nn_default_pipeline[i]; i++)
            selected[n_selected++] = nn_default_pipeline[i];
    }
    if ((st = parse_list(m->opt.disable_passes, "disable-pass", disabled, &n_disabled)) != NN_OK) return st;
#ifdef NN_DEBUG
    bool verify = true;
#else
    bool verify = m->opt.verify != 0;
#endif
    if (verify && (st = nn_verify_graph(m, "parsing")) != NN_OK) return st;
    /* the rewriting passes to a fixed point, then the memory passes once */
    for (int round = 0, changed = 1; round < MAX_ROUNDS && changed; round++)
        if ((st = run_stage(m, selected, n_selected, disabled, n_disabled, false, verify, hook, hook_ctx, &changed)) !=
            NN_OK)
            return st;
    int placed;
    return run_stage(m, selected, n_selected, disabled, n_disabled, true, verify, hook, hook_ctx, &placed);
}
