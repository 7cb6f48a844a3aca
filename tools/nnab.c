/* nnab: an in-process A/B of two load options on one model, for judging
 * optimizer passes and kernels on a noisy machine.
 *
 *   nnab MODEL [--disable-a PASSES] [--disable-b PASSES] [--batch N] [--threads N]
 *        [--rounds R] [--burst K] [--input FILE.npy]
 *
 * e.g. `nnab build/models/resnet50_qdq.onnx --disable-b layout_nhwc`:
 * B / A above 1 means the pass makes the model faster by that factor.
 * Loads MODEL twice (A, B: the default pipeline less each one's passes,
 * plan cache off), checks that both give the same outputs on one input
 * (the largest relative L2 over the outputs is printed), then alternates
 * them in R rounds of K predictions each, the order swapped every round,
 * and prints each one's median latency and the median of the per-round
 * ratios B / A: a stretch where the machine is slow hits both of a
 * round's bursts alike, which separate processes minutes apart do not. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void usage(void) {
    fprintf(stderr, "usage: nnab MODEL [--disable-a PASSES] [--disable-b PASSES] [--batch N] [--threads N] "
                    "[--rounds R] [--burst K] [--input FILE.npy]\n");
    exit(2);
}

static int int_arg(const char *flag, const char *v) {
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 1 || n > 1000000) {
        fprintf(stderr, "nnab: %s needs a positive integer, got '%s'\n", flag, v);
        exit(2);
    }
    return (int)n;
}

/* Seeded N(0,1)-ish floats for every float input, zeros elsewhere. */
static nn_tensor *make_inputs(nn_model *m, int batch, int *n_in) {
    *n_in = nn_input_count(m);
    nn_tensor *in = calloc((size_t)*n_in, sizeof *in);
    uint32_t seed = 1;
    for (int i = 0; in && i < *n_in; i++) {
        const char *name;
        nn_input_info(m, i, &name, &in[i]);
        if (in[i].ndim > 0 && in[i].dims[0] <= 0) in[i].dims[0] = batch;
        size_t n = (size_t)nn_tensor_elements(&in[i]), esz = nn_dtype_size(in[i].dtype);
        in[i].data = calloc(n ? n : 1, esz ? esz : 1);
        if (in[i].dtype == NN_DTYPE_FLOAT && in[i].data)
            for (size_t k = 0; k < n; k++) {
                seed = seed * 1664525u + 1013904223u;
                ((float *)in[i].data)[k] = ((float)(seed >> 8) / (float)(1u << 24) - 0.5f) * 3.4f;
            }
    }
    return in;
}

int main(int argc, char **argv) {
    const char *model = NULL, *dis[2] = {NULL, NULL}, *input = NULL;
    int batch = 1, threads = 0, rounds = 20, burst = 5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
            if (model) usage();
            model = a;
            continue;
        }
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--disable-a")) dis[0] = v;
        else if (!strcmp(a, "--disable-b")) dis[1] = v;
        else if (!strcmp(a, "--batch")) batch = int_arg(a, v);
        else if (!strcmp(a, "--threads")) threads = int_arg(a, v);
        else if (!strcmp(a, "--rounds")) rounds = int_arg(a, v);
        else if (!strcmp(a, "--burst")) burst = int_arg(a, v);
        else if (!strcmp(a, "--input")) input = v;
        else usage();
    }
    if (!model) usage();
    nn_model *m[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        nn_options o = nn_options_default();
        o.batch = batch;
        o.threads = threads;
        o.cache = 0;
        o.disable_passes = dis[k];
        if (nn_load(model, &o, &m[k]) != NN_OK) {
            fprintf(stderr, "nnab: %s (%s): %s\n", model, k ? "B" : "A", nn_last_error());
            nn_free(m[0]);
            return 1;
        }
    }
    int n_in = 0, rc = 0;
    nn_tensor *in = NULL;
    if (input) {
        in = calloc(1, sizeof *in);
        n_in = 1;
        if (!in || nn_tensor_load(input, in) != NN_OK) {
            fprintf(stderr, "nnab: %s: %s\n", input, nn_last_error());
            return 1;
        }
    } else
        in = make_inputs(m[0], batch, &n_in);
    int n_out = nn_output_count(m[0]);
    nn_tensor *out[2] = {calloc((size_t)n_out, sizeof(nn_tensor)), calloc((size_t)n_out, sizeof(nn_tensor))};
    for (int k = 0; k < 2; k++)
        if (nn_predict(m[k], in, n_in, out[k], n_out) != NN_OK) {
            fprintf(stderr, "nnab: predict (%s): %s\n", k ? "B" : "A", nn_last_error());
            return 1;
        }
    double worst = 0;
    for (int o = 0; o < n_out; o++) {
        if (out[0][o].dtype != NN_DTYPE_FLOAT) continue;
        const float *a = out[0][o].data, *b = out[1][o].data;
        double num = 0, den = 0;
        for (int64_t i = 0; i < nn_tensor_elements(&out[0][o]); i++) {
            num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
            den += (double)a[i] * a[i];
        }
        double r = den > 0 ? sqrt(num / den) : sqrt(num);
        worst = r > worst ? r : worst;
    }
    double *lat[2] = {malloc(sizeof(double) * (size_t)rounds), malloc(sizeof(double) * (size_t)rounds)};
    double *ratio = malloc(sizeof(double) * (size_t)rounds), *t = malloc(sizeof(double) * (size_t)burst);
    for (int r = 0; r < rounds && rc == 0; r++) {
        for (int s = 0; s < 2; s++) {
            int k = (r + s) % 2;
            for (int i = 0; i < burst; i++) {
                double t0 = now_ms();
                if (nn_predict_into(m[k], in, n_in, out[k], n_out) != NN_OK) {
                    fprintf(stderr, "nnab: predict: %s\n", nn_last_error());
                    rc = 1;
                    break;
                }
                t[i] = now_ms() - t0;
            }
            lat[k][r] = median(t, burst);
        }
        ratio[r] = lat[1][r] / lat[0][r];
    }
    if (rc == 0) {
        printf("nnab %s batch %d, %d rounds x %d runs, outputs B vs A: relative L2 %.2e\n", model, batch, rounds,
               burst, worst);
        double ra = median(ratio, rounds), a = median(lat[0], rounds), b = median(lat[1], rounds);
        printf("A (disable %s) %.3f ms   B (disable %s) %.3f ms   B / A %.3f (median of the rounds' ratios)\n",
               dis[0] ? dis[0] : "-", a, dis[1] ? dis[1] : "-", b, ra);
    }
    for (int k = 0; k < 2; k++) {
        for (int o = 0; o < n_out; o++)
            nn_tensor_release(&out[k][o]);
        free(out[k]);
        free(lat[k]);
        nn_free(m[k]);
    }
    free(ratio);
    free(t);
    for (int i = 0; i < n_in; i++)
        if (input)
            nn_tensor_release(&in[i]);
        else
            free(in[i].data);
    free(in);
    return rc;
}
