/* nnrun --ensemble: run several models on the same random input and combine
 * their outputs (mean of softmax or concatenation, as nnserve's ensembles),
 * timing the members one after another (each on every thread) against the
 * members at once (one thread each, or an equal share of --threads). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nn.h"
#include "nnrun_ensemble.h"

enum { MAX_MEMBERS = 8 };

typedef struct member {
    nn_model *m;
    nn_tensor in[16], out;
    int n_in;
    nn_status st;
} member;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *run_member(void *arg) {
    member *mb = arg;
    nn_tensor_release(&mb->out);
    mb->st = nn_predict(mb->m, mb->in, mb->n_in, &mb->out, 1);
    return NULL;
}

/* mean of softmax over the last axis, or concatenation along it, into a freshly allocated buffer */
static float *combine(member *mb, int n, int mean) {
    const nn_tensor *o0 = &mb[0].out;
    int64_t cols = o0->dims[o0->ndim - 1], rows = nn_tensor_elements(o0) / cols, total = 0;
    for (int i = 0; i < n; i++)
        total += mb[i].out.dims[mb[i].out.ndim - 1];
    float *d = calloc((size_t)(rows * (mean ? cols : total)), sizeof(float));
    if (!d) return NULL;
    for (int64_t off = 0, i = 0; i < n; i++) {
        const float *s = mb[i].out.data;
        int64_t c = mb[i].out.dims[mb[i].out.ndim - 1];
        for (int64_t r = 0; r < rows; r++) {
            if (mean) {
                float m = -INFINITY, sum = 0;
                for (int64_t k = 0; k < c; k++)
                    m = fmaxf(m, s[r * c + k]);
                for (int64_t k = 0; k < c; k++)
                    sum += expf(s[r * c + k] - m);
                for (int64_t k = 0; k < c; k++)
                    d[r * c + k] += expf(s[r * c + k] - m) / sum / (float)n;
            } else {
                memcpy(d + r * total + off, s + r * c, (size_t)c * sizeof(float));
            }
        }
        off += c;
    }
    return d;
}

static int load_all(member *mb, const char *const *models, int n, const nn_options *opt) {
    for (int i = 0; i < n; i++) {
        if (nn_load(models[i], opt, &mb[i].m) != NN_OK)
            return fprintf(stderr, "nnrun: %s: %s\n", models[i], nn_last_error()), -1;
        if (nn_output_count(mb[i].m) != 1 || nn_input_count(mb[i].m) != nn_input_count(mb[0].m) ||
            nn_input_count(mb[i].m) > 16)
            return fprintf(stderr, "nnrun: --ensemble: %s must have one output and the inputs of %s\n", models[i],
                           models[0]),
                   -1;
        nn_tensor o;
        const char *name;
        nn_output_info(mb[i].m, 0, &name, &o);
        if (o.dtype != NN_DTYPE_FLOAT || o.ndim < 1)
            return fprintf(stderr, "nnrun: --ensemble: %s's output '%s' is not FP32\n", models[i], name), -1;
    }
    return 0;
}

static void free_all(member *mb, int n) {
    for (int i = 0; i < n; i++) {
        nn_tensor_release(&mb[i].out);
        nn_free(mb[i].m);
    }
}

/* Seconds per ensemble prediction over iters, members sequential (par = 0) or in threads. */
static double time_runs(member *mb, int n, int iters, int par, int mean, int *err) {
    double t0 = now_ms();
    for (int it = 0; it < iters && !*err; it++) {
        pthread_t th[MAX_MEMBERS];
        for (int i = 0; i < n; i++)
            if (!par || pthread_create(&th[i], NULL, run_member, &mb[i]))
                run_member(&mb[i]);
            else
                continue;
        if (par)
            for (int i = 0; i < n; i++)
                pthread_join(th[i], NULL);
        for (int i = 0; i < n; i++)
            if (mb[i].st != NN_OK) {
                fprintf(stderr, "nnrun: member %d: %s\n", i, nn_last_error());
                *err = 1;
            }
        if (!*err) {
            float *d = combine(mb, n, mean);
            if (!d) *err = 1;
            free(d);
        }
    }
    return (now_ms() - t0) / 1e3 / iters;
}

int nnrun_ensemble(const char *const *models, int n, const char *how, const nn_options *opt, int warmup, int iters) {
    if (n < 2 || n > MAX_MEMBERS) return fprintf(stderr, "nnrun: --ensemble takes 2 to %d models\n", MAX_MEMBERS), 2;
    int mean = !strcmp(how, "mean");
    if (!mean && strcmp(how, "concat")) return fprintf(stderr, "nnrun: --ensemble takes mean or concat\n"), 2;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = opt->threads ? opt->threads : (int)(cores > 0 ? cores : 1);
    nn_options seq_opt = *opt, par_opt = *opt;
    seq_opt.threads = threads;
    par_opt.threads = threads / n > 0 ? threads / n : 1;
    member seq[MAX_MEMBERS], par[MAX_MEMBERS];
    memset(seq, 0, sizeof seq);
    memset(par, 0, sizeof par);
    int rc = 1, err = 0;
    if (load_all(seq, models, n, &seq_opt) || load_all(par, models, n, &par_opt)) goto out;
    /* one random input, shared by every member (they must take the same shapes) */
    int n_in = nn_input_count(seq[0].m);
    nn_tensor in[16];
    memset(in, 0, sizeof in);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int k = 0; k < n_in; k++) {
        const char *name;
        nn_input_info(seq[0].m, k, &name, &in[k]);
        int64_t el = nn_tensor_elements(&in[k]);
        size_t bytes = el > 0 ? (size_t)el * nn_dtype_size(in[k].dtype) : 0;
        in[k].data = calloc(bytes ? bytes : 1, 1);
        if (!in[k].data) goto free_in;
        if (in[k].dtype == NN_DTYPE_FLOAT)
            for (int64_t e = 0; e < el; e++) {
                s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                ((float *)in[k].data)[e] = (float)((double)(s >> 11) / (double)(1ull << 53)) * 2 - 1;
            }
    }
    for (int i = 0; i < n; i++) {
        seq[i].n_in = par[i].n_in = n_in;
        memcpy(seq[i].in, in, sizeof in);
        memcpy(par[i].in, in, sizeof in);
    }
    time_runs(seq, n, warmup > 0 ? warmup : 1, 0, mean, &err);
    time_runs(par, n, warmup > 0 ? warmup : 1, 1, mean, &err);
    double t_seq = time_runs(seq, n, iters, 0, mean, &err), t_par = time_runs(par, n, iters, 1, mean, &err);
    if (!err) {
        int64_t batch = in[0].ndim > 0 ? in[0].dims[0] : 1;
        printf("ensemble    %d models, %s, batch %lld, %d iterations\n", n, mean ? "mean of softmax" : "concat",
               (long long)batch, iters);
        printf("sequential  %.2f ms per prediction, %.2f samples/s (members one after another, %d threads each)\n",
               t_seq * 1e3, batch / t_seq, seq_opt.threads);
        printf("concurrent  %.2f ms per prediction, %.2f samples/s (members at once, %d threads each)\n", t_par * 1e3,
               batch / t_par, par_opt.threads);
        rc = 0;
    }
free_in:
    for (int k = 0; k < n_in; k++)
        free(in[k].data);
    for (int i = 0; i < n; i++)
        memset(seq[i].in, 0, sizeof seq[i].in), memset(par[i].in, 0, sizeof par[i].in);
out:
    free_all(seq, n);
    free_all(par, n);
    return rc;
}
