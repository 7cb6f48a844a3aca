/* pipeline MODEL.onnx BATCH SAMPLES [DEVICE]
 *
 * Loads MODEL on a GPU (default gpu0) at batch size BATCH, runs one warm-up
 * nn_predict, then SAMPLES samples of seeded random input in one timed
 * nn_predict, and prints one line: samples per second and what the CUDA
 * backend measured (cuda/stats.h), including the share of copy time the
 * batch pipeline hid under compute.  Exit status 2 when the device is not
 * available, 1 on any other error. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../../cuda/stats.h"
#include "nn.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 4 || atoi(argv[2]) < 1 || atoll(argv[3]) < 1) {
        fprintf(stderr, "usage: pipeline MODEL.onnx BATCH SAMPLES [DEVICE]\n");
        return 1;
    }
    nn_options opt = nn_options_default();
    opt.batch = atoi(argv[2]);
    opt.device = argc > 4 ? argv[4] : "gpu0";
    int64_t samples = atoll(argv[3]);
    nn_model *m;
    nn_status st = nn_load(argv[1], &opt, &m);
    if (st != NN_OK) {
        fprintf(stderr, "pipeline: %s\n", nn_last_error());
        return st == NN_ERR_DEVICE ? 2 : 1;
    }
    int n_in = nn_input_count(m), n_out = nn_output_count(m), rc = 1;
    nn_tensor *in = calloc((size_t)n_in + 1, sizeof *in), *out = calloc((size_t)n_out + 1, sizeof *out);
    uint32_t seed = 1;
    for (int i = 0; i < n_in && in; i++) {
        nn_input_info(m, i, NULL, &in[i]);
        if (in[i].dtype != NN_DTYPE_FLOAT) {
            fprintf(stderr, "pipeline: input %d is not float\n", i);
            goto done;
        }
        if (in[i].ndim > 0 && in[i].dims[0] == opt.batch) in[i].dims[0] = samples; /* the batched dim */
        int64_t n = nn_tensor_elements(&in[i]);
        float *p = malloc(sizeof(float) * (size_t)(n + 1));
        for (int64_t k = 0; k < n; k++) {
            seed = seed * 1664525u + 1013904223u;
            p[k] = (float)(seed >> 8) / (float)(1u << 24) - 0.5f;
        }
        in[i].data = p;
    }
    if (!in || !out || nn_predict(m, in, n_in, out, n_out) != NN_OK) {
        fprintf(stderr, "pipeline: %s\n", nn_last_error());
        goto done;
    }
    for (int i = 0; i < n_out; i++)
        nn_tensor_release(&out[i]);
    double t0 = now();
    if (nn_predict(m, in, n_in, out, n_out) != NN_OK) {
        fprintf(stderr, "pipeline: %s\n", nn_last_error());
        goto done;
    }
    double secs = now() - t0;
    nn_cuda_stats s;
    if (nn_cuda_get_stats(m, &s) != NN_OK) {
        fprintf(stderr, "pipeline: %s\n", nn_last_error());
        goto done;
    }
    printf("batch=%d samples=%lld throughput=%.1f batches=%lld upload_ms=%.2f compute_ms=%.2f download_ms=%.2f "
           "wall_ms=%.2f overlap=%.1f%% graphs=%s gpu_nodes=%d cpu_nodes=%d\n",
           opt.batch, (long long)samples, (double)samples / secs, (long long)s.batches, s.upload_ms, s.compute_ms,
           s.download_ms, s.wall_ms, 100.0 * s.overlap, s.graphs ? "yes" : "no", s.gpu_nodes, s.cpu_nodes);
    rc = 0;
done:
    for (int i = 0; i < n_in && in; i++)
        free(in[i].data);
    for (int i = 0; i < n_out && out; i++)
        nn_tensor_release(&out[i]);
    free(in);
    free(out);
    nn_free(m);
    return rc;
}
