/* nndump: inspect what the optimizer does to a model.
 *
 *   nndump MODEL.onnx [--batch N] [--stage all|parsed|PASS|final] [--format text|dot|json]
 *                     [--output-dir DIR] [--passes LIST] [--disable-pass NAME] [--no-opt]
 *
 * A stage is the graph after parsing (shapes inferred), after each pass that
 * ran, and the final plan with its memory layout. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
    const char *want;       /* stage filter */
    const char *output_dir; /* dot: one file per stage there */
    bool clusters;          /* dot, several stages on stdout: one graph, a cluster per stage */
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

static void describe(const nn_model *m, const nn_node *n, char *buf, size_t size);

static void render_text(FILE *f, const nn_model *m) {
    const nn_graph *g = &m->g;
    char type[128], how[160];
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        fprintf(f, "  %-4d %-18s %s", i, nn_op_get(n->op)->name, n->name);
        describe(m, n, how, sizeof how);
        if (how[0]) fprintf(f, "  [%s]", how);
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

static void render_json(FILE *f, const nn_model *m) {
    const nn_graph *g = &m->g;
    char type[128], how[160];
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
        describe(m, n, how, sizeof how);
        fprintf(f, ", \"runs_as\": ");
        json_str(f, how);
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

/* What the op says about how node i runs (Conv: kernel, stride, group,
 * algorithm), from the node's call as the executor would build it. */
static void describe(const nn_model *m, const nn_node *n, char *buf, size_t size) {
    const nn_op_desc *d = nn_op_get(n->op);
    buf[0] = 0;
    if (!d->describe) return;
    const nn_graph *g = &m->g;
    nn_tensor *values = calloc((size_t)g->n_values + 1, sizeof *values);
    int max_io = n->n_in > n->n_out ? n->n_in : n->n_out;
    nn_tensor *in = calloc((size_t)max_io + 1, sizeof *in), *out = calloc((size_t)max_io + 1, sizeof *out);
    if (values && in && out) {
        char err[256];
        for (int v = 0; v < g->n_values; v++)
            values[v] = g->values[v].t;
        nn_node_gather(n, values, in, out);
        nn_call call = nn_node_call(m, n, in, out, err, sizeof err);
        d->describe(&call, buf, size);
    }
    free(values);
    free(in);
    free(out);
}

/* A graph for dot: a digraph of its own, or (clusters) a subgraph of the
 * combined one, its ids prefixed so that stages do not share nodes. */
static void render_dot(FILE *f, const nn_model *m, const char *stage_name, int index, bool cluster) {
    const nn_graph *g = &m->g;
    char type[128], how[160], p[16];
    snprintf(p, sizeof p, "s%d_", index);
    if (cluster)
        fprintf(f, "  subgraph cluster_%d {\n  label=\"stage %s: %d nodes\";\n", index, stage_name, g->n_nodes);
    else
        fprintf(f, "digraph \"%s\" {\n  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n",
                stage_name);
    for (int i = 0; i < g->n_inputs; i++)
        fprintf(f, "  %sv%d [shape=ellipse, label=\"%s\"];\n", p, g->inputs[i], g->values[g->inputs[i]].name);
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        describe(m, n, how, sizeof how);
        fprintf(f, "  %sn%d [label=\"%s", p, i, nn_op_get(n->op)->name);
        if (how[0]) fprintf(f, "\\n%s", how);
        if (n->fused) fprintf(f, "\\n+ %s", n->fused);
        fprintf(f, "\"%s];\n",
                n->fused ? ", style=filled, fillcolor=\"#d8e8ff\"" : (n->elided ? ", style=dashed" : ""));
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            if (v < 0 || g->values[v].is_const) continue;
            int prod = g->values[v].producer;
            type_str(&g->values[v], type, sizeof type);
            if (prod >= 0)
                fprintf(f, "  %sn%d -> %sn%d [label=\"%s\", fontsize=8];\n", p, prod, p, i, type);
            else
                fprintf(f, "  %sv%d -> %sn%d;\n", p, v, p, i);
        }
    }
    for (int i = 0; i < g->n_outputs; i++) {
        int v = g->outputs[i], prod = g->values[v].producer;
        fprintf(f, "  %so%d [shape=ellipse, label=\"%s\"];\n", p, i, g->values[v].name);
        if (prod >= 0) fprintf(f, "  %sn%d -> %so%d;\n", p, prod, p, i);
    }
    fprintf(f, "%s}\n", cluster ? "  " : "");
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
        render_text(f, m);
    else if (d->fmt == FMT_JSON)
        render_json(f, m);
    else
        render_dot(f, m, name, d->n_stages - 1, d->clusters);
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
               "                         [--format text|dot|json] [--output-dir DIR] [--passes LIST]\n"
               "                         [--disable-pass NAME] [--no-opt] [--cache-dir DIR] [--no-cache]\n"
               "--format dot with several stages prints one graph with a cluster per stage; --output-dir DIR\n"
               "writes one graph per stage instead, DIR/NN-STAGE.dot (render with: dot -Tsvg FILE -o FILE.svg).\n"
               "The file's node count is before import; stage 'parsed' has its Constant nodes already\n"
               "evaluated into constants, so it counts fewer.\n"
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
        } else if (!strcmp(a, "--output-dir") && v) {
            d.output_dir = v;
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
    if (d.output_dir && d.fmt != FMT_DOT) {
        fprintf(stderr, "nndump: --output-dir writes dot files: give --format dot\n");
        return 2;
    }
    if (d.output_dir && mkdir(d.output_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "nndump: --output-dir '%s': cannot create the folder: %s\n", d.output_dir, strerror(errno));
        return 1;
    }
    d.clusters = d.fmt == FMT_DOT && !d.output_dir && !strcmp(d.want, "all");
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
    } else if (d.fmt == FMT_DOT && d.output_dir) {
        int rc = 0;
        for (int i = 0, k = 0; i < d.n_stages && !rc; i++) {
            if (!d.stages[i].body) continue;
            char file[4096];
            snprintf(file, sizeof file, "%s/%02d-%s.dot", d.output_dir, k++, d.stages[i].name);
            FILE *f = fopen(file, "w");
            if (!f || fputs(d.stages[i].body, f) < 0 || fclose(f) != 0) {
                fprintf(stderr, "nndump: cannot write %s: %s\n", file, strerror(errno));
                rc = 1;
            } else {
                printf("%s\n", file);
            }
        }
        if (rc) {
            for (int i = 0; i < d.n_stages; i++)
                free(d.stages[i].body);
            free(d.stages);
            nn_free(m);
            return rc;
        }
    } else if (d.fmt == FMT_DOT) {
        if (d.clusters)
            printf("digraph \"%s\" {\n  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n", path);
        for (int i = 0; i < d.n_stages; i++)
            if (d.stages[i].body) fputs(d.stages[i].body, stdout);
        if (d.clusters) printf("}\n");
    } else {
        printf("%s: %d nodes in the file, opset %d, batch %d", path, m->g.nodes_parsed, m->g.opset, m->batch);
        if (m->plan_batch < m->batch)
            printf(" (planned for micro-batches of %d: shapes below are theirs)", m->plan_batch);
        printf("%s\n", m->dynamic ? " (shapes depend on run-time values: planned per run)" : "");
        for (int i = 0; i < d.n_stages; i++) {
            if (!d.stages[i].body) continue;
            printf("stage %s: %d nodes", d.stages[i].name, d.stages[i].nodes_after);
            if (!strcmp(d.stages[i].name, "parsed") && d.stages[i].nodes_after < m->g.nodes_parsed)
                printf(" (the file's %d less %d Constant nodes, evaluated into constants at import)", m->g.nodes_parsed,
                       m->g.nodes_parsed - d.stages[i].nodes_after);
            printf("\n%s", d.stages[i].body);
        }
        print_pass_summary(&d, m, false);
        if (!m->dynamic) print_memory_text(m);
    }
    for (int i = 0; i < d.n_stages; i++)
        free(d.stages[i].body);
    free(d.stages);
    nn_free(m);
    return 0;
}
