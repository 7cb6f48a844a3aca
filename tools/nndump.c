/* nndump: inspect what the optimizer does to a model.
 *
 *   nndump MODEL.onnx [--batch N] [--stage all|parsed|PASS|final] [--format text|dot|json]
 *                     [--passes LIST] [--disable-pass NAME] [--no-opt]
 *
 * A stage is the graph after parsing (shapes inferred), after each pass that
 * ran, and the final plan with its memory layout. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/registry.h"
#include "../passes/pass.h"
#include "model.h"

typedef enum { FMT_TEXT, FMT_DOT, FMT_JSON } format;

/* Each stage is rendered when it happens (the graph changes afterwards). */
typedef struct stage {
    char name[64];
    int nodes_before, nodes_after, rewrites;
    char *body; /* the stage's nodes in the chosen format */
} stage;

typedef struct dump {
    format fmt;
    const char *want; /* stage filter */
    stage *stages;
    int n_stages, cap;
    int last_nodes;
} dump;

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void type_str(const nn_value *v, char *buf, size_t size) {
    int len = snprintf(buf, size, "%s[", nn_dtype_name(v->t.dtype));
    for (int d = 0; v->shape_known && d < v->t.ndim && len < (int)size; d++)
        len += snprintf(buf + len, size - (size_t)len, "%s%lld", d ? "," : "", (long long)v->t.dims[d]);
    if (len < (int)size) snprintf(buf + len, size - (size_t)len, "%s]", v->shape_known ? "" : "?");
}

static void render_text(FILE *f, const nn_graph *g) {
    char type[128];
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        fprintf(f, "  %-4d %-18s %s", i, nn_op_get(n->op)->name, n->name);
        if (n->fused) fprintf(f, "  [fused %s]", n->fused);
        if (n->elided) fprintf(f, "  [elided: aliases memory]");
        fprintf(f, "\n        in :");
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] < 0) {
                fprintf(f, " -");
                continue;
            }
            const nn_value *v = &g->values[n->in[k]];
            type_str(v, type, sizeof type);
            fprintf(f, " %s:%s%s", v->name, type, v->is_const ? "(const)" : "");
        }
        fprintf(f, "\n        out:");
        for (int k = 0; k < n->n_out; k++) {
            if (n->out[k] < 0) continue;
            type_str(&g->values[n->out[k]], type, sizeof type);
            fprintf(f, " %s:%s", g->values[n->out[k]].name, type);
        }
        fprintf(f, "\n");
    }
}

static void render_json(FILE *f, const nn_graph *g) {
    char type[128];
    fprintf(f, "[");
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
        json_str(f, n->name);
        fprintf(f, ", \"op\": ");
        json_str(f, nn_op_get(n->op)->name);
        fprintf(f, ", \"fused\": ");
        if (n->fused)
            json_str(f, n->fused);
        else
            fprintf(f, "null");
        fprintf(f, ", \"elided\": %s, \"inputs\": [", n->elided ? "true" : "false");
        for (int k = 0, first = 1; k < n->n_in; k++)
            if (n->in[k] >= 0) {
                fprintf(f, "%s", first ? "" : ", ");
                json_str(f, g->values[n->in[k]].name);
                first = 0;
            }
        fprintf(f, "], \"outputs\": [");
        for (int k = 0, first = 1; k < n->n_out; k++)
            if (n->out[k] >= 0) {
                fprintf(f, "%s", first ? "" : ", ");
                json_str(f, g->values[n->out[k]].name);
                first = 0;
            }
        fprintf(f, "], \"output_types\": [");
        for (int k = 0, first = 1; k < n->n_out; k++)
            if (n->out[k] >= 0) {
                type_str(&g->values[n->out[k]], type, sizeof type);
                fprintf(f, "%s", first ? "" : ", ");
                json_str(f, type);
                first = 0;
            }
        fprintf(f, "]}");
    }
    fprintf(f, "]");
}

static void render_dot(FILE *f, const nn_graph *g, const char *stage_name) {
    char type[128];
    fprintf(f, "digraph \"%s\" {\n  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n",
            stage_name);
    for (int i = 0; i < g->n_inputs; i++)
        fprintf(f, "  v%d [shape=ellipse, label=\"%s\"];\n", g->inputs[i], g->values[g->inputs[i]].name);
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        fprintf(f, "  n%d [label=\"%s", i, nn_op_get(n->op)->name);
        if (n->fused) fprintf(f, "\\n+ %s", n->fused);
        fprintf(f, "\"%s];\n",
                n->fused ? ", style=filled, fillcolor=\"#d8e8ff\"" : (n->elided ? ", style=dashed" : ""));
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            if (v < 0 || g->values[v].is_const) continue;
            int p = g->values[v].producer;
            type_str(&g->values[v], type, sizeof type);
            if (p >= 0)
                fprintf(f, "  n%d -> n%d [label=\"%s\", fontsize=8];\n", p, i, type);
            else
                fprintf(f, "  v%d -> n%d;\n", v, i);
        }
    }
    for (int i = 0; i < g->n_outputs; i++) {
        int v = g->outputs[i], p = g->values[v].producer;
        fprintf(f, "  o%d [shape=ellipse, label=\"%s\"];\n", i, g->values[v].name);
        if (p >= 0) fprintf(f, "  n%d -> o%d;\n", p, i);
    }
    fprintf(f, "}\n");
}

static void record(dump *d, const nn_model *m, const char *name, int rewrites) {
    if (d->n_stages == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 16;
        stage *s = realloc(d->stages, sizeof *s * (size_t)d->cap);
        if (!s) return;
        d->stages = s;
    }
    stage *s = &d->stages[d->n_stages++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->nodes_before = d->n_stages == 1 ? m->g.n_nodes : d->last_nodes;
    s->nodes_after = d->last_nodes = m->g.n_nodes;
    s->rewrites = rewrites;
    bool wanted = !strcmp(d->want, "all") || !strcmp(d->want, name);
    if (!wanted) return;
    size_t size;
    FILE *f = open_memstream(&s->body, &size);
    if (!f) return;
    if (d->fmt == FMT_TEXT)
        render_text(f, &m->g);
    else if (d->fmt == FMT_JSON)
        render_json(f, &m->g);
    else
        render_dot(f, &m->g, name);
    fclose(f);
}

static void on_stage(void *ctx, const nn_model *m, const char *pass, int rewrites) {
    dump *d = ctx;
    /* a later round of the pipeline is only worth a stage when it changed something */
    bool seen = false;
    for (int i = 0; i < d->n_stages; i++)
        seen |= !strcmp(d->stages[i].name, pass);
    if (seen && rewrites == 0) return;
    record(d, m, pass, rewrites);
}

static void print_memory_text(const nn_model *m) {
    const nn_graph *g = &m->g;
    printf("memory plan (offset, size, first..last node):\n");
    for (int v = 0; v < g->n_values; v++) {
        if (m->plan.offset[v] < 0) continue;
        int64_t bytes = nn_tensor_elements(&g->values[v].t) * (int64_t)nn_dtype_size(g->values[v].t.dtype);
        printf("  %-56s %12lld %12lld  %d..%d\n", g->values[v].name, (long long)m->plan.offset[v], (long long)bytes,
               m->plan.first_use[v], m->plan.last_use[v]);
    }
    printf("arena %zu bytes (%.2f MB), naive %zu bytes (%.2f MB), lower bound %zu bytes (%.2f MB); "
           "arena/lower bound %.3f; workspace %zu bytes\n",
           m->plan.arena_bytes, m->plan.arena_bytes / 1048576.0, m->plan.naive_bytes, m->plan.naive_bytes / 1048576.0,
           m->plan.lower_bound_bytes, m->plan.lower_bound_bytes / 1048576.0,
           m->plan.lower_bound_bytes ? (double)m->plan.arena_bytes / (double)m->plan.lower_bound_bytes : 0.0,
           m->plan.workspace_bytes);
}

static void print_memory_json(const nn_model *m) {
    const nn_graph *g = &m->g;
    printf(",\n  \"memory\": {\"dynamic\": %s, \"arena_bytes\": %zu, \"naive_bytes\": %zu, \"lower_bound_bytes\": %zu, "
           "\"workspace_bytes\": %zu, \"buffers\": [",
           m->dynamic ? "true" : "false", m->plan.arena_bytes, m->plan.naive_bytes, m->plan.lower_bound_bytes,
           m->plan.workspace_bytes);
    for (int v = 0, first = 1; !m->dynamic && v < g->n_values; v++) {
        if (m->plan.offset[v] < 0) continue;
        printf("%s\n    {\"value\": ", first ? "" : ",");
        json_str(stdout, g->values[v].name);
        printf(", \"root\": ");
        json_str(stdout, g->values[nn_value_root(g, v, NULL)].name);
        printf(", \"offset\": %lld, \"size\": %lld, \"first_use\": %d, \"last_use\": %d}", (long long)m->plan.offset[v],
               (long long)(nn_tensor_elements(&g->values[v].t) * (int64_t)nn_dtype_size(g->values[v].t.dtype)),
               m->plan.first_use[v], m->plan.last_use[v]);
        first = 0;
    }
    printf("]}");
}

/* per pass: how often it fired and how the node count moved */
static void print_pass_summary(const dump *d, const nn_model *m, bool json) {
    if (json)
        printf(",\n  \"cache\": \"%s\",\n  \"passes\": [", m->from_cache ? "hit" : "miss");
    else if (m->from_cache)
        printf("passes: not run (the plan came from the cache: %s; --no-cache runs them)\n", m->cache_path);
    else
        printf("passes (nodes before -> after, rewrites):\n");
    for (int i = 0, first = 1; i < d->n_stages; i++) {
        const stage *s = &d->stages[i];
        if (!strcmp(s->name, "parsed") || !strcmp(s->name, "final")) continue;
        if (json) {
            printf("%s\n    {\"name\": ", first ? "" : ",");
            json_str(stdout, s->name);
            printf(", \"nodes_before\": %d, \"nodes_after\": %d, \"rewrites\": %d}", s->nodes_before, s->nodes_after,
                   s->rewrites);
        } else {
            printf("  %-18s %5d -> %-5d %d\n", s->name, s->nodes_before, s->nodes_after, s->rewrites);
        }
        first = 0;
    }
    if (json) printf("]");
}

static void usage(FILE *f) {
    fprintf(f, "usage: nndump MODEL.onnx [--batch N] [--micro-batch N] [--stage all|parsed|PASS|final]\n"
               "                         [--format text|dot|json] [--passes LIST] [--disable-pass NAME] [--no-opt]\n"
               "                         [--cache-dir DIR] [--no-cache]\n"
               "The final stage may come from the plan cache (as nnrun's would); other stages need the\n"
               "passes to run, so they never read it.\n"
               "passes, in pipeline order:\n");
    for (int i = 0; nn_default_pipeline[i]; i++)
        fprintf(f, "  %-18s %s\n", nn_default_pipeline[i]->name, nn_default_pipeline[i]->summary);
}

int main(int argc, char **argv) {
    nn_options opt = nn_options_default();
    dump d = {.fmt = FMT_TEXT, .want = "final"};
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--batch") && v) {
            opt.batch = atoi(v);
            i++;
        } else if (!strcmp(a, "--micro-batch") && v) {
            opt.micro_batch = atoi(v);
            i++;
        } else if (!strcmp(a, "--stage") && v) {
            d.want = v;
            i++;
        } else if (!strcmp(a, "--format") && v) {
            if (!strcmp(v, "text"))
                d.fmt = FMT_TEXT;
            else if (!strcmp(v, "dot"))
                d.fmt = FMT_DOT;
            else if (!strcmp(v, "json"))
                d.fmt = FMT_JSON;
            else {
                fprintf(stderr, "nndump: unknown format '%s' (text, dot or json)\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--passes") && v) {
            opt.passes = v;
            i++;
        } else if (!strcmp(a, "--disable-pass") && v) {
            opt.disable_passes = v;
            i++;
        } else if (!strcmp(a, "--no-opt")) {
            opt.optimize = 0;
        } else if (!strcmp(a, "--no-cache")) {
            opt.cache = 0;
        } else if (!strcmp(a, "--cache-dir") && v) {
            opt.cache_dir = v;
            i++;
        } else if (a[0] == '-' || path) {
            fprintf(stderr, "nndump: unexpected argument '%s' (see --help)\n", a);
            return 2;
        } else {
            path = a;
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    if (opt.batch < 1 || opt.micro_batch < 0) {
        fprintf(stderr, "nndump: --batch and --micro-batch need an integer >= 1\n");
        return 2;
    }
    if (strcmp(d.want, "final")) opt.cache = 0; /* the earlier stages happen only when the passes run */
    nn_model *m;
    if (nn_load_hooked(path, &opt, on_stage, &d, &m) != NN_OK) {
        fprintf(stderr, "nndump: %s\n", nn_last_error());
        return 1;
    }
    record(&d, m, "final", 0);
    bool known = false;
    for (int i = 0; i < d.n_stages; i++)
        known |= !strcmp(d.stages[i].name, d.want);
    if (strcmp(d.want, "all") && !known) {
        fprintf(stderr, "nndump: no stage '%s' (parsed, final, or a pass that ran: see --help)\n", d.want);
        nn_free(m);
        return 2;
    }
    if (d.fmt == FMT_JSON) {
        printf("{\"model\": ");
        json_str(stdout, path);
        printf(", \"batch\": %d, \"plan_batch\": %d, \"opset\": %d, \"nodes_parsed\": %d,\n  \"stages\": [", m->batch,
               m->plan_batch, m->g.opset, m->g.nodes_parsed);
        for (int i = 0, first = 1; i < d.n_stages; i++) {
            if (!d.stages[i].body) continue;
            printf("%s\n  {\"name\": ", first ? "" : ",");
            json_str(stdout, d.stages[i].name);
            printf(", \"nodes_before\": %d, \"nodes_after\": %d, \"rewrites\": %d, \"nodes\": %s}",
                   d.stages[i].nodes_before, d.stages[i].nodes_after, d.stages[i].rewrites, d.stages[i].body);
            first = 0;
        }
        printf("]");
        print_pass_summary(&d, m, true);
        print_memory_json(m);
        printf("}\n");
    } else if (d.fmt == FMT_DOT) {
        for (int i = 0; i < d.n_stages; i++)
            if (d.stages[i].body) fputs(d.stages[i].body, stdout);
    } else {
        printf("%s: %d nodes parsed, opset %d, batch %d", path, m->g.nodes_parsed, m->g.opset, m->batch);
        if (m->plan_batch < m->batch)
            printf(" (planned for micro-batches of %d: shapes below are theirs)", m->plan_batch);
        printf("%s\n", m->dynamic ? " (shapes depend on run-time values: planned per run)" : "");
        for (int i = 0; i < d.n_stages; i++)
            if (d.stages[i].body)
                printf("stage %s: %d nodes\n%s", d.stages[i].name, d.stages[i].nodes_after, d.stages[i].body);
        print_pass_summary(&d, m, false);
        if (!m->dynamic) print_memory_text(m);
    }
    for (int i = 0; i < d.n_stages; i++)
        free(d.stages[i].body);
    free(d.stages);
    nn_free(m);
    return 0;
}
