/* Graph optimizer passes.
 *
 * Each pass lives in its own file and exports one nn_pass.  The manager
 * (passes/manager.c) runs the default pipeline in its documented order:
 * the rewriting passes repeated until a whole round rewrites nothing, then
 * the memory passes once; any pass can be left out by name.  After each
 * pass the verifier checks the IR (always in debug builds, with
 * nn_options.verify otherwise). */
#ifndef NN_PASS_H
#define NN_PASS_H

#include "../engine/error.h"
#include "../engine/model.h"

typedef struct nn_pass {
    const char *name;
    const char *summary; /* one line, for --help and nndump */
    /* rewrite m's graph, counting rewrites in *rewrites; errors are
     * returned as a status with nn_set_error's message */
    nn_status (*run)(nn_model *m, int *rewrites);
    /* places values in memory (aliases them) instead of rewriting nodes:
     * runs once, after the rewriting passes are done, so no later rewrite
     * has to respect or undo an alias */
    bool memory;
} nn_pass;

/* Run the optimizer as m->opt selects (passes, disable_passes, verify). */
nn_status nn_optimize(nn_model *m, nn_pass_hook hook, void *hook_ctx);
/* The default pipeline, in order; NULL-terminated. */
extern const nn_pass *const nn_default_pipeline[];

/* ---- helpers shared by the passes (passes/rewrite.c) */
/* uses[v] = how many node inputs read value v (graph outputs count once more). */
int *nn_value_uses(const nn_graph *g);
/* The one node reading v, or -1 when v has several readers, none, or is a graph output. */
int nn_sole_consumer(const nn_graph *g, const int *uses, int v);
/* A node's output may be absorbed into its consumer: exactly one reader and
 * not returned to the caller. */
bool nn_fusable(const nn_graph *g, const int *uses, int v);
/* A constant value holding a copy of t (data copied into the weights arena). */
int nn_graph_add_const(nn_graph *g, const char *name, const nn_tensor *t);
/* Let every reader of `from` read `to` instead. */
void nn_graph_replace_uses(nn_graph *g, int from, int to);
/* Remove nodes marked dead (op = -1) and renumber producers. */
void nn_graph_compact(nn_graph *g);
/* A new node at position `at` (later nodes move up one); returns `at` or -1. */
int nn_graph_insert_node(nn_graph *g, int at, const char *name, int op, int n_in, int n_out);
/* Append an input to a node (for an epilogue's residual); returns its index or -1. */
int nn_node_append_input(nn_graph *g, nn_node *n, int value, int at_least_index);
/* `host` takes over the single output of `absorbed`, which is marked dead
 * (op = -1), and notes `what` among what it fused. */
void nn_node_absorb(nn_graph *g, nn_node *host, nn_node *absorbed, const char *what);
/* Give a node a copy of `params` (size bytes, plain data) in the graph's
 * metadata; NULL params clears them.  False when out of memory. */
bool nn_node_set_params(nn_graph *g, nn_node *n, const void *params, size_t size);
/* An elementwise node whose inputs broadcast against its output as numpy's
 * do (the binary arithmetic ops, Clip, FusedElementwise, the unary ops):
 * what passes may move to another layout or evaluate on other elements. */
bool nn_float_elementwise(const nn_node *n);
/* Record what a node absorbed: "A" then "A+B" ... */
void nn_node_note_fused(nn_graph *g, nn_node *n, const char *what);

extern const nn_pass nn_pass_fold_constants, nn_pass_eliminate_noops, nn_pass_fold_batchnorm, nn_pass_fuse_layernorm, nn_pass_fuse_gelu, nn_pass_fuse_attention, nn_pass_fuse_bias,
    nn_pass_fuse_residual, nn_pass_fuse_activation, nn_pass_fuse_elementwise, nn_pass_fuse_prologue,
    nn_pass_eliminate_concat, nn_pass_views, nn_pass_fuse_qdq, nn_pass_fuse_pad, nn_pass_layout_nhwc, nn_pass_fuse_lut;

#endif
