/* nnrun's reports: text for people, one JSON object for programs (the same
 * facts; docs/nnrun.md defines them), and the --profile tables. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nnrun.h"

static const char *const cache_names[] = {"off", "miss", "hit"};
static const double MIB = 1048576.0;

/* GFLOP/s of a node; 0 when its op has no count or it took no time */
static double gflops(const nn_node_profile *p) { return p->flops > 0 && p->ms > 0 ? p->flops / p->ms / 1e6 : 0; }

static void print_profile_text(const nn_model *m) {
    nn_profile_print(m, stdout);
    int n = nn_profile_node_count(m);
    printf("%-44s %-18s %-22s %10s %7s %9s\n", "node", "operator", "output", "ms per run", "share", "GFLOP/s");
    for (int i = 0; i < n; i++) {
        nn_node_profile p;
        char shape[128], op[64];
        if (nn_profile_node(m, i, &p) != NN_OK) continue;
        shape_str(&p.output, shape, sizeof shape);
        snprintf(op, sizeof op, "%s%s", p.op, p.fused ? "+" : "");
        printf("%-44s %-18s %-22s %10.3f %6.1f%% ", p.name, op, shape, p.ms, 100 * p.share);
        if (p.flops > 0)
            printf("%9.2f\n", gflops(&p));
        else
            printf("%9s\n", "-");
    }
    if (n > 0) printf("(op+: other ops fused into the node; GFLOP/s for Conv, Gemm and MatMul, 2 per multiply-add; integer operations for their quantized forms)\n");
}

static void print_profile_json(const nn_model *m) {
    int n = nn_profile_node_count(m);
    /* per operator type: the sum of its nodes */
    typedef struct {
        const char *op;
        int nodes;
        double ms, share;
    } op_row;
    op_row *ops = calloc((size_t)(n > 0 ? n : 1), sizeof *ops);
    int n_ops = 0;
    printf(", \"profile\": {\"nodes\": [");
    for (int i = 0; i < n; i++) {
        nn_node_profile p;
        if (nn_profile_node(m, i, &p) != NN_OK) continue;
        printf("%s{\"name\": ", i ? ", " : "");
        json_str(p.name);
        printf(", \"op\": ");
        json_str(p.op);
        printf(", \"fused\": ");
        if (p.fused)
            json_str(p.fused);
        else
            printf("null");
        printf(", \"output\": {\"dtype\": ");
        json_str(nn_dtype_name(p.output.dtype));
        printf(", \"shape\": [");
        for (int d = 0; d < p.output.ndim; d++)
            printf("%s%lld", d ? ", " : "", (long long)p.output.dims[d]);
        printf("]}, \"ms\": %.6f, \"share\": %.6f", p.ms, p.share);
        if (p.flops > 0) printf(", \"flops\": %.0f, \"gflops_per_s\": %.3f", p.flops, gflops(&p));
        printf("}");
        int k = 0;
        while (k < n_ops && strcmp(ops[k].op, p.op))
            k++;
        if (ops && k == n_ops) ops[n_ops++] = (op_row){p.op, 0, 0, 0};
        if (ops) ops[k].nodes++, ops[k].ms += p.ms, ops[k].share += p.share;
    }
    printf("], \"ops\": [");
    for (int k = 0; k < n_ops; k++) {
        printf("%s{\"op\": ", k ? ", " : "");
        json_str(ops[k].op);
        printf(", \"nodes\": %d, \"ms\": %.6f, \"share\": %.6f}", ops[k].nodes, ops[k].ms, ops[k].share);
    }
    printf("]}");
    free(ops);
}

void print_text(const args *a, const held *h, const measured *r) {
    const nn_model_stats *s = &r->stats;
    printf("model       %s\n", a->model);
    for (int i = 0; i < h->n_in; i++) {
        const char *name;
        char buf[256];
        nn_input_info(h->m, i, &name, NULL);
        shape_str(&h->in[i], buf, sizeof buf);
        printf("input       %s %s\n", name, buf);
    }
    for (int k = 0; k < h->n_out; k++) {
        const char *name;
        char buf[256];
        nn_output_info(h->m, k, &name, NULL);
        shape_str(&h->out[k], buf, sizeof buf);
        printf("output      %s %s\n", name, buf);
    }
    printf("nodes       %d in the file, %d executed (constants folded and ops fused at load)\n", s->nodes_parsed,
           s->nodes);
    printf("parameters  %lld\n", (long long)s->parameters);
    printf("device      %s, %d threads, batch %d", a->opt.device ? a->opt.device : "cpu", s->threads, s->batch);
    if (r->samples != s->batch) printf(" (%lld sample%s per run)", (long long)r->samples, r->samples == 1 ? "" : "s");
    if (s->plan_batch < s->batch)
        printf(" in micro-batches of %d on %d lane%s", s->plan_batch, s->lanes, s->lanes > 1 ? "s" : "");
    printf("\n");
    if (s->cache == NN_CACHE_HIT)
        printf("load        %.1f ms (cache hit, %s)\n", r->load_ms, s->cache_path);
    else if (s->cache == NN_CACHE_MISS && s->cache_path)
        printf("load        %.1f ms (cache miss, wrote %s)\n", r->load_ms, s->cache_path);
    else
        printf("load        %.1f ms (cache %s)\n", r->load_ms, s->cache == NN_CACHE_OFF ? "off" : "miss, not written");
    printf("first       %.1f ms to the first result (load + one prediction)\n", r->first_result_ms);
    const lat_stats *l = &r->lat;
    printf("latency     median %.3f  mean %.3f  min %.3f  max %.3f  stddev %.3f ms  (%d run%s, %.2f s)\n", l->median,
           l->mean, l->min, l->max, l->stddev, l->n, l->n == 1 ? "" : "s", r->timed_s);
    printf("percentiles p90 %.3f  p95 %.3f  p99 %.3f ms\n", l->p90, l->p95, l->p99);
    printf("throughput  %.2f samples/s (%d runs x %lld sample%s in %.3f s of back-to-back runs)\n", r->throughput, l->n,
           (long long)r->samples, r->samples == 1 ? "" : "s", r->timed_s);
    printf("memory      %.1f MB peak RSS; the model needs %.1f MiB: %.1f weights, %.1f activation arena, %.1f "
           "scratch, %.1f inputs and outputs\n",
           r->rss_mb, s->memory_bytes / MIB, s->weight_bytes / MIB, s->arena_bytes / MIB, s->workspace_bytes / MIB,
           s->io_bytes / MIB);
    if (r->have_energy)
        printf("energy      %.4f J/sample (%.1f W average, Linux powercap, whole CPU package)\n",
               r->joules / ((double)r->samples * l->n), r->joules / r->timed_s);
    else if (a->verbose)
        fprintf(stderr, "nnrun: energy not reported: %s\n", r->energy_reason);
    if (a->opt.profile) print_profile_text(h->m);
}

void print_json(const args *a, const held *h, const measured *r) {
    const nn_model_stats *s = &r->stats;
    const lat_stats *l = &r->lat;
    printf("{\"model\": ");
    json_str(a->model);
    printf(", \"version\": \"%s\", \"batch\": %d, \"samples\": %lld, \"device\": ", NN_VERSION_STRING, s->batch,
           (long long)r->samples);
    json_str(a->opt.device ? a->opt.device : "cpu");
    printf(", \"plan_batch\": %d, \"lanes\": %d, \"threads\": %d, \"nodes\": %d, \"nodes_parsed\": %d, "
           "\"parameters\": %lld",
           s->plan_batch, s->lanes, s->threads, s->nodes, s->nodes_parsed, (long long)s->parameters);
    printf(", \"load_ms\": %.3f, \"first_result_ms\": %.3f, \"iters\": %d, \"timed_s\": %.6f", r->load_ms,
           r->first_result_ms, l->n, r->timed_s);
    printf(", \"latency_ms\": {\"min\": %.6f, \"mean\": %.6f, \"median\": %.6f, \"p90\": %.6f, \"p95\": %.6f, "
           "\"p99\": %.6f, \"max\": %.6f, \"stddev\": %.6f}",
           l->min, l->mean, l->median, l->p90, l->p95, l->p99, l->max, l->stddev);
    printf(", \"noisy\": %s", lat_stats_noisy(l) ? "true" : "false");
    printf(", \"throughput\": %.3f, \"throughput_basis\": {\"unit\": \"samples/s\", \"runs\": %d, "
           "\"samples_per_run\": %lld, \"seconds\": %.6f}",
           r->throughput, l->n, (long long)r->samples, r->timed_s);
    printf(", \"peak_rss_mb\": %.1f, \"weight_bytes\": %lld, \"arena_bytes\": %lld, \"workspace_bytes\": %lld, "
           "\"io_bytes\": %lld, \"memory_bytes\": %lld",
           r->rss_mb, (long long)s->weight_bytes, (long long)s->arena_bytes, (long long)s->workspace_bytes,
           (long long)s->io_bytes, (long long)s->memory_bytes);
    printf(", \"cache\": \"%s\", \"cache_path\": ", cache_names[s->cache]);
    if (s->cache_path)
        json_str(s->cache_path);
    else
        printf("null");
    if (r->have_energy)
        printf(", \"energy\": {\"source\": \"powercap\", \"joules\": %.9g, \"joules_per_sample\": %.9g, \"watts\": "
               "%.9g}",
               r->joules, r->joules / ((double)r->samples * l->n), r->joules / r->timed_s);
    else
        printf(", \"energy_absent\": "), json_str(r->energy_reason);
    printf(", \"warnings\": [");
    for (int i = 0; i < n_warnings; i++) {
        printf("%s", i ? ", " : "");
        json_str(warnings[i]);
    }
    printf("]");
    if (a->opt.profile) print_profile_json(h->m);
    printf("}\n");
}

void print_scan(const args *a, const report *reps, int n, int best, int fits) {
    if (a->json) {
        printf("{\"model\": ");
        json_str(a->model);
        printf(", \"scan\": [");
        for (int i = 0; i < n; i++) {
            const report *r = &reps[i];
            printf("%s{\"batch\": %d, \"ok\": %s", i ? ", " : "", r->batch, r->ok ? "true" : "false");
            if (r->ok) {
                printf(", \"load_ms\": %.3f, \"latency_ms\": {\"min\": %.6f, \"mean\": %.6f, \"median\": %.6f, "
                       "\"p90\": %.6f, \"p95\": %.6f, \"p99\": %.6f, \"max\": %.6f, \"stddev\": %.6f}, \"iters\": "
                       "%d, \"throughput\": %.3f, \"peak_rss_mb\": %.1f",
                       r->load_ms, r->lat.min, r->lat.mean, r->lat.median, r->lat.p90, r->lat.p95, r->lat.p99,
                       r->lat.max, r->lat.stddev, r->lat.n, r->throughput, r->rss_mb);
                if (!isnan(r->joules_per_sample)) printf(", \"joules_per_sample\": %.9g", r->joules_per_sample);
                if (a->latency_budget > 0)
                    printf(", \"within_budget\": %s", r->lat.p99 <= a->latency_budget ? "true" : "false");
            } else {
                printf(", \"error\": ");
                json_str(r->error);
            }
            printf("}");
        }
        printf("], \"best_batch\": %d, \"budget_batch\": %d}\n", best >= 0 ? reps[best].batch : -1,
               fits >= 0 ? reps[fits].batch : -1);
        return;
    }
    printf("%-6s %12s %12s %12s %12s %14s %10s\n", "batch", "median ms", "p90 ms", "p99 ms", "stddev ms", "samples/s",
           "peak MB");
    for (int i = 0; i < n; i++) {
        const report *r = &reps[i];
        if (!r->ok)
            printf("%-6d failed (the error above, 'batch %d:')\n", r->batch, r->batch);
        else
            printf("%-6d %12.3f %12.3f %12.3f %12.3f %14.2f %10.1f%s\n", r->batch, r->lat.median, r->lat.p90,
                   r->lat.p99, r->lat.stddev, r->throughput, r->rss_mb,
                   a->latency_budget > 0 && r->lat.p99 <= a->latency_budget ? "  within budget" : "");
    }
    if (best >= 0) printf("best throughput: batch %d (%.2f samples/s)\n", reps[best].batch, reps[best].throughput);
    if (a->latency_budget > 0) {
        if (fits >= 0)
            printf("largest batch within %.1f ms p99: %d\n", a->latency_budget, reps[fits].batch);
        else
            printf("no batch size meets a p99 latency of %.1f ms\n", a->latency_budget);
    }
}
