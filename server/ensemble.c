/* Ensembles: a repository entry that runs its member models on the same
 * input and combines their outputs, by the mean of their softmaxes (over the
 * last axis) or by concatenation along the last axis.  Each member gets its
 * own copy of the request in its own queue, so members run concurrently on
 * their workers and batch with the members' other traffic; the last member
 * to finish combines and answers. */
#include "server.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ens_state {
    srv_job *parent;
    srv_model *ens;
    int left; /* members still running (atomics) */
    srv_job *sub[SRV_MAX_MEMBERS];
} ens_state;

static void softmax_rows(float *dst, const float *src, int64_t rows, int64_t cols, float weight) {
    for (int64_t r = 0; r < rows; r++) {
        const float *s = src + r * cols;
        float *d = dst + r * cols, m = -INFINITY, sum = 0;
        for (int64_t c = 0; c < cols; c++)
            m = s[c] > m ? s[c] : m;
        for (int64_t c = 0; c < cols; c++)
            sum += expf(s[c] - m);
        for (int64_t c = 0; c < cols; c++)
            d[c] += weight * expf(s[c] - m) / sum;
    }
}

static int combine(const srv_model *ens, ens_state *es, nn_tensor *out, char *err, size_t en) {
    int n = ens->n_members;
    const nn_tensor *o0 = &es->sub[0]->out[0];
    *out = *o0;
    int64_t cols = o0->dims[o0->ndim - 1], rows = nn_tensor_elements(o0) / (cols ? cols : 1), total_cols = 0;
    for (int i = 0; i < n; i++)
        total_cols += es->sub[i]->out[0].dims[o0->ndim - 1];
    if (ens->combine == SRV_COMBINE_CONCAT) out->dims[out->ndim - 1] = total_cols;
    float *d = calloc((size_t)(rows * (ens->combine == SRV_COMBINE_CONCAT ? total_cols : cols)) + 1, sizeof(float));
    if (!d) return snprintf(err, en, "out of memory combining the ensemble"), 503;
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        const nn_tensor *o = &es->sub[i]->out[0];
        int64_t c = o->dims[o->ndim - 1];
        if (ens->combine == SRV_COMBINE_MEAN_SOFTMAX) {
            softmax_rows(d, o->data, rows, cols, 1.0f / (float)n);
        } else {
            for (int64_t r = 0; r < rows; r++)
                memcpy(d + r * total_cols + off, (const float *)o->data + r * c, (size_t)c * 4);
            off += c;
        }
    }
    out->data = d;
    return 200;
}

static void member_done(srv_job *sub, void *arg) {
    (void)sub;
    ens_state *es = arg;
    if (__atomic_sub_fetch(&es->left, 1, __ATOMIC_ACQ_REL)) return;
    srv_job *p = es->parent;
    int st = 200;
    for (int i = 0; i < es->ens->n_members && st == 200; i++)
        if (es->sub[i]->status != 200) {
            st = es->sub[i]->status;
            snprintf(p->err, sizeof p->err, "member '%.64s': %.180s", es->ens->members[i]->name, es->sub[i]->err);
        }
    if (st == 200) st = combine(es->ens, es, &p->out[0], p->err, sizeof p->err);
    p->status = st;
    if (st != 200) {
        pthread_mutex_lock(&es->ens->mu);
        es->ens->met.failures++;
        pthread_mutex_unlock(&es->ens->mu);
    }
    for (int i = 0; i < es->ens->n_members; i++)
        srv_job_free(es->sub[i]);
    free(es);
    p->done(p, p->done_arg);
}

int srv_ensemble_submit(srv_model *ens, srv_job *job, char *err, size_t en) {
    pthread_mutex_lock(&ens->mu);
    ens->met.requests++;
    pthread_mutex_unlock(&ens->mu);
    ens_state *es = calloc(1, sizeof *es);
    if (!es) return snprintf(err, en, "out of memory"), 503;
    es->parent = job;
    es->ens = ens;
    int n = ens->n_members;
    for (int i = 0; i < n; i++) {
        srv_job *s = calloc(1, sizeof *s);
        es->sub[i] = s;
        if (!s) goto oom;
        s->req.samples = job->req.samples;
        for (int k = 0; k < ens->info.n_in; k++) {
            const nn_tensor *t = &job->req.in[k];
            size_t bytes = (size_t)nn_tensor_elements(t) * nn_dtype_size(t->dtype);
            s->req.in[k] = *t;
            s->req.in[k].data = malloc(bytes ? bytes : 1);
            if (!s->req.in[k].data) goto oom;
            memcpy(s->req.in[k].data, t->data, bytes);
        }
        s->done = member_done;
        s->done_arg = es;
        s->model = ens->members[i];
    }
    /* every member is submitted: one refused still answers through member_done */
    es->left = n;
    for (int i = 0; i < n; i++) {
        char e[SRV_ERR_MAX];
        int st = srv_model_submit(ens->members[i], es->sub[i], e, sizeof e);
        if (st) {
            es->sub[i]->status = st;
            snprintf(es->sub[i]->err, sizeof es->sub[i]->err, "%s", e);
            member_done(es->sub[i], es);
        }
    }
    return 0;
oom:
    for (int i = 0; i < n; i++)
        srv_job_free(es->sub[i]);
    free(es);
    return snprintf(err, en, "out of memory"), 503;
}

/* An ensemble's inputs are its members' (all the same); its one output "output" is FP32. */
int srv_ensemble_start(srv_model *ens, char *err, size_t en) {
    srv_model *m0 = ens->members[0];
    srv_model_info *mi = &ens->info;
    memset(mi, 0, sizeof *mi);
    mi->n_in = m0->info.n_in;
    mi->batched = m0->info.batched;
    memcpy(mi->in, m0->info.in, sizeof mi->in);
    int64_t cols = 0;
    for (int i = 0; i < ens->n_members; i++) {
        const srv_model_info *m = &ens->members[i]->info;
        if (!ens->members[i]->ready)
            return snprintf(err, en, "ensemble '%s': member '%s' is not loaded", ens->name, ens->members[i]->name), -1;
        if (m->n_in != mi->n_in || memcmp(m->in, mi->in, sizeof(srv_io) * (size_t)mi->n_in) ||
            m->batched != mi->batched)
            return snprintf(err, en, "ensemble '%s': member '%s' has other inputs than '%s'", ens->name,
                            ens->members[i]->name, m0->name),
                   -1;
        if (ens->members[i]->image.input[0])
            return snprintf(err, en, "ensemble '%s': member '%s' takes images (not supported in ensembles)", ens->name,
                            ens->members[i]->name),
                   -1;
        const srv_io *o = &m->out[0], *o0 = &m0->info.out[0];
        if (m->n_out != 1 || o->dtype != NN_DTYPE_FLOAT || o->ndim < 1 || o->ndim != o0->ndim ||
            memcmp(o->dims, o0->dims, sizeof(int64_t) * (size_t)(o->ndim - 1)) || o->dims[o->ndim - 1] < 1)
            return snprintf(err, en, "ensemble '%s': member '%s' must have one FP32 output shaped like '%s''s",
                            ens->name, ens->members[i]->name, m0->name),
                   -1;
        if (ens->combine == SRV_COMBINE_MEAN_SOFTMAX && o->dims[o->ndim - 1] != o0->dims[o0->ndim - 1])
            return snprintf(err, en, "ensemble '%s': mean_softmax needs outputs of one size", ens->name), -1;
        cols += o->dims[o->ndim - 1];
    }
    mi->n_out = 1;
    mi->out[0] = m0->info.out[0];
    snprintf(mi->out[0].name, sizeof mi->out[0].name, "output");
    if (ens->combine == SRV_COMBINE_CONCAT) mi->out[0].dims[mi->out[0].ndim - 1] = cols;
    ens->ready = 1;
    return 0;
}
