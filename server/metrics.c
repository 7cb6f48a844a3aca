/* Prometheus text exposition (format 0.0.4) of the per-model counters and
 * histograms that the batching workers keep under their model's lock. */
#include "server.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double srv_time_bounds[SRV_HIST_BUCKETS] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                  0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
const double srv_batch_bounds[SRV_HIST_BUCKETS] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512};

void srv_hist_add(srv_hist *h, const double *bounds, double v) {
    int b = 0;
    while (b < SRV_HIST_BUCKETS && v > bounds[b])
        b++;
    h->count[b]++;
    h->n++;
    h->sum += v;
}

typedef struct buf {
    char *s;
    size_t len, cap;
    int oom;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n + 1;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

static void hist(buf *b, const char *metric, const char *model, const srv_hist *h, const double *bounds) {
    uint64_t cum = 0;
    for (int i = 0; i < SRV_HIST_BUCKETS; i++) {
        cum += h->count[i];
        put(b, "%s_bucket{model=\"%s\",le=\"%g\"} %llu\n", metric, model, bounds[i], (unsigned long long)cum);
    }
    cum += h->count[SRV_HIST_BUCKETS];
    put(b, "%s_bucket{model=\"%s\",le=\"+Inf\"} %llu\n", metric, model, (unsigned long long)cum);
    put(b, "%s_sum{model=\"%s\"} %.9g\n", metric, model, h->sum);
    put(b, "%s_count{model=\"%s\"} %llu\n", metric, model, (unsigned long long)h->n);
}

/* Model names are checked at start-up ([A-Za-z0-9_.-]), so they need no escaping in a label. */
char *srv_metrics_text(const srv_config *c, size_t *len) {
    buf b = {malloc(4096), 0, 4096, 0};
    if (!b.s) return NULL;
    b.s[0] = 0;
    srv_metrics m[SRV_MAX_MODELS];
    int loaded = 0;
    for (int i = 0; i < c->n_models; i++) {
        srv_model *sm = c->models[i];
        pthread_mutex_lock(&sm->mu);
        m[i] = sm->met;
        pthread_mutex_unlock(&sm->mu);
        loaded += sm->ready != 0;
    }
    put(&b, "# HELP nn_models_loaded Models loaded and ready.\n# TYPE nn_models_loaded gauge\nnn_models_loaded %d\n",
        loaded);
    put(&b,
        "# HELP nn_models_configured Models the server was started with.\n# TYPE nn_models_configured gauge\n"
        "nn_models_configured %d\n",
        c->n_models);
    put(&b, "# HELP nn_requests_total Infer requests received per model.\n# TYPE nn_requests_total counter\n");
    for (int i = 0; i < c->n_models; i++)
        put(&b, "nn_requests_total{model=\"%s\"} %llu\n", c->models[i]->name, (unsigned long long)m[i].requests);
    put(&b, "# HELP nn_request_failures_total Infer requests answered with an error.\n"
            "# TYPE nn_request_failures_total counter\n");
    for (int i = 0; i < c->n_models; i++)
        put(&b, "nn_request_failures_total{model=\"%s\"} %llu\n", c->models[i]->name,
            (unsigned long long)m[i].failures);
    put(&b, "# HELP nn_queue_seconds Time a request waited in its model's queue.\n# TYPE nn_queue_seconds histogram\n");
    for (int i = 0; i < c->n_models; i++)
        hist(&b, "nn_queue_seconds", c->models[i]->name, &m[i].queue_s, srv_time_bounds);
    put(&b, "# HELP nn_compute_seconds Time of one batch's nn_predict.\n# TYPE nn_compute_seconds histogram\n");
    for (int i = 0; i < c->n_models; i++)
        hist(&b, "nn_compute_seconds", c->models[i]->name, &m[i].compute_s, srv_time_bounds);
    put(&b, "# HELP nn_batch_size Samples per batch run.\n# TYPE nn_batch_size histogram\n");
    for (int i = 0; i < c->n_models; i++)
        hist(&b, "nn_batch_size", c->models[i]->name, &m[i].batch, srv_batch_bounds);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    *len = b.len;
    return b.s;
}
