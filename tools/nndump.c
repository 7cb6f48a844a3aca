/* nndump: show the graph the engine runs — every node with its inputs and
 * outputs (shapes, dtypes) — and the memory plan.
 * usage: nndump MODEL.onnx [--batch N] [--no-opt] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/registry.h"
#include "model.h"

static void print_value(const nn_model *m, int v) {
    if (v < 0) {
        printf(" -");
        return;
    }
    const nn_value *val = &m->g.values[v];
    printf(" %s:%s[", val->name, nn_dtype_name(val->t.dtype));
    for (int d = 0; val->shape_known && d < val->t.ndim; d++) printf("%s%lld", d ? "," : "", (long long)val->t.dims[d]);
    printf("]%s", val->is_const ? "(const)" : "");
}

int main(int argc, char **argv) {
    nn_options opt = nn_options_default();
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc) opt.batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-opt")) opt.optimize = 0;
        else if (!strcmp(argv[i], "--help")) {
            printf("usage: nndump MODEL.onnx [--batch N] [--no-opt]\n");
            return 0;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "nndump: unknown option '%s'\n", argv[i]);
            return 2;
        } else path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "usage: nndump MODEL.onnx [--batch N] [--no-opt]\n");
        return 2;
    }
    nn_model *m;
    if (nn_load(path, &opt, &m) != NN_OK) {
        fprintf(stderr, "nndump: %s\n", nn_last_error());
        return 1;
    }
    const nn_graph *g = &m->g;
    printf("# %s: %d nodes parsed, %d to run, opset %d, batch %d%s\n", path, g->nodes_parsed, g->n_nodes, g->opset,
           m->batch, m->dynamic ? ", shapes inferred at run time" : "");
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        printf("%-4d %-24s %-20s in:", i, n->name, nn_op_get(n->op)->name);
        for (int k = 0; k < n->n_in; k++) print_value(m, n->in[k]);
        printf("  out:");
        for (int k = 0; k < n->n_out; k++) print_value(m, n->out[k]);
        printf("\n");
    }
    if (!m->dynamic) {
        printf("# memory plan\n");
        for (int v = 0; v < g->n_values; v++)
            if (m->plan.offset[v] >= 0)
                printf("buffer %-32s offset %10lld size %10lld live %d..%d\n", g->values[v].name,
                       (long long)m->plan.offset[v],
                       (long long)(nn_tensor_elements(&g->values[v].t) * (int64_t)nn_dtype_size(g->values[v].t.dtype)),
                       m->plan.first_use[v], m->plan.last_use[v]);
        printf("arena %zu bytes, naive %zu bytes, lower bound %zu bytes, workspace %zu bytes\n", m->plan.arena_bytes,
               m->plan.naive_bytes, m->plan.lower_bound_bytes, m->plan.workspace_bytes);
    }
    nn_free(m);
    return 0;
}
