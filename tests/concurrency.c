/* Concurrent use of the library on a real model: outputs must be bit-identical
 * to a single-threaded run.
 *   1. N threads call nn_predict on one shared model (the API serializes them);
 *   2. N threads each load their own model from the same file and predict,
 *      twice, with the plan cache on in a fresh folder: the first wave races
 *      to build and write the cache, the second may read it.
 *   concurrency [--model PATH] [--workers N] [--threads N]
 * --threads is the model's own worker count (options.threads); `make tsan`
 * runs with 1 (see the Makefile).  Not run under valgrind: it serializes
 * threads, so it would only be slow; TSan and ASan cover it instead. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "nn.h"

enum { SAMPLES = 3, MAX_WORKERS = 16 };

static const char *model_path = "models/mobilenetv2.onnx";
static int model_threads = 2;
static char cache_dir[] = "/tmp/nn_concurrency_XXXXXX";

typedef struct sample {
    nn_tensor in, ref; /* input and the single-threaded output */
} sample;
static sample samples[SAMPLES];

static nn_options options(int cache) {
    nn_options opt = nn_options_default();
    opt.threads = model_threads;
    opt.cache = cache;
    opt.cache_dir = cache_dir;
    return opt;
}

/* Seeded inputs of the model's input shape (one sample each). */
static int make_inputs(nn_model *m) {
    if (nn_input_count(m) != 1 || nn_output_count(m) != 1) {
        fprintf(stderr, "concurrency: %s must have one input and one output\n", model_path);
        return -1;
    }
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (int s = 0; s < SAMPLES; s++) {
        nn_input_info(m, 0, NULL, &samples[s].in);
        size_t n = (size_t)nn_tensor_elements(&samples[s].in);
        float *x = malloc(n * sizeof *x);
        if (!x) return -1;
        for (size_t i = 0; i < n; i++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((state >> 40) & 0xffff) / 32768.0f - 1.0f;
        }
        samples[s].in.data = x;
    }
    return 0;
}

/* Run sample s on m and compare with its reference bit for bit (the
 * thread's check case names the caller); returns the failed checks. */
static int run_and_compare(nn_model *m, int s) {
    nn_tensor out;
    nn_status st = nn_predict(m, &samples[s].in, 1, &out, 1);
    if (!CHECK(st == NN_OK, "sample %d: nn_predict: expected OK, got %s: %s", s, nn_strerror(st), nn_last_error()))
        return 1;
    const nn_tensor *ref = &samples[s].ref;
    bool same_shape = out.dtype == ref->dtype && out.ndim == ref->ndim && !memcmp(out.dims, ref->dims, sizeof out.dims);
    bool ok = CHECK(same_shape, "sample %d: output %s with %d dims [%lld, ...], expected %s with %d dims [%lld, ...]",
                    s, nn_dtype_name(out.dtype), out.ndim, (long long)out.dims[0], nn_dtype_name(ref->dtype), ref->ndim,
                    (long long)ref->dims[0]);
    if (ok) {
        size_t n = (size_t)nn_tensor_elements(ref), size = nn_dtype_size(ref->dtype), first = 0;
        const char *got = out.data, *want = ref->data;
        while (first < n && !memcmp(got + first * size, want + first * size, size))
            first++;
        bool floats = ref->dtype == NN_DTYPE_FLOAT && first < n;
        ok = CHECK(first == n,
                   "sample %d: expected the single-threaded output bit for bit, element %zu is %.9g, not %.9g%s", s,
                   first, floats ? ((const float *)got)[first] : 0.0, floats ? ((const float *)want)[first] : 0.0,
                   floats ? "" : " (not floats)");
    }
    nn_tensor_release(&out);
    return !ok;
}

typedef struct worker {
    int id;
    nn_model *shared; /* NULL: load a model of its own */
    int errors;
    nn_cache_state cache;
} worker;

static void *shared_worker(void *arg) {
    worker *w = arg;
    check_set_case("shared model, thread %d", w->id);
    for (int rep = 0; rep < SAMPLES; rep++)
        w->errors += run_and_compare(w->shared, (w->id + rep) % SAMPLES);
    return NULL;
}

static void *own_model_worker(void *arg) {
    worker *w = arg;
    check_set_case("own model, thread %d", w->id);
    nn_options opt = options(1);
    nn_model *m = NULL;
    nn_status st = nn_load(model_path, &opt, &m);
    if (!CHECK(st == NN_OK, "nn_load: expected OK, got %s: %s", nn_strerror(st), nn_last_error())) {
        w->errors++;
        return NULL;
    }
    nn_model_stats stats;
    w->cache = nn_model_get_stats(m, &stats) == NN_OK ? stats.cache : NN_CACHE_OFF;
    for (int rep = 0; rep < SAMPLES; rep++)
        w->errors += run_and_compare(m, (w->id + rep) % SAMPLES);
    nn_free(m);
    return NULL;
}

/* Start n workers on fn, wait for all; returns the errors they saw. */
static int run_workers(int n, void *(*fn)(void *), nn_model *shared, const char *label) {
    worker w[MAX_WORKERS];
    pthread_t t[MAX_WORKERS];
    int errors = 0, hits = 0, started = 0;
    for (; started < n; started++) {
        w[started] = (worker){.id = started, .shared = shared};
        if (!CHECK(pthread_create(&t[started], NULL, fn, &w[started]) == 0, "%s: thread %d: expected started, failed",
                   label, started)) {
            errors++;
            break;
        }
    }
    for (int i = 0; i < started; i++) {
        pthread_join(t[i], NULL);
        errors += w[i].errors;
        hits += w[i].cache == NN_CACHE_HIT;
    }
    printf("%-34s %d threads x %d predictions: %s", label, n, SAMPLES, errors ? "FAIL" : "bit-identical");
    printf(fn == own_model_worker ? " (%d loaded from the plan cache)\n" : "\n", hits);
    return errors;
}

int main(int argc, char **argv) {
    int workers = 4;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            model_path = argv[i + 1];
        else if (!strcmp(argv[i], "--workers"))
            workers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            model_threads = atoi(argv[i + 1]);
        else
            break;
    }
    if (argc % 2 == 0 || workers < 1 || workers > MAX_WORKERS || model_threads < 0) {
        fprintf(stderr, "usage: concurrency [--model PATH] [--workers 1..%d] [--threads N]\n", MAX_WORKERS);
        return 2;
    }
    if (!mkdtemp(cache_dir)) {
        perror("concurrency: mkdtemp");
        return 2;
    }
    /* the single-threaded reference, without the cache */
    nn_options opt = options(0);
    nn_model *m;
    if (nn_load(model_path, &opt, &m) != NN_OK) {
        fprintf(stderr, "concurrency: %s\n", nn_last_error());
        return 2;
    }
    if (make_inputs(m) != 0) return 2;
    for (int s = 0; s < SAMPLES; s++) {
        if (nn_predict(m, &samples[s].in, 1, &samples[s].ref, 1) != NN_OK) {
            fprintf(stderr, "concurrency: reference run: %s\n", nn_last_error());
            return 2;
        }
    }
    printf("%s, %d threads per model: reference outputs from one thread\n", model_path, model_threads);

    run_workers(workers, shared_worker, m, "one shared model:");
    nn_free(m);
    run_workers(workers, own_model_worker, NULL, "a model per thread, cold cache:");
    run_workers(workers, own_model_worker, NULL, "a model per thread, warm cache:");

    for (int s = 0; s < SAMPLES; s++) {
        free(samples[s].in.data);
        nn_tensor_release(&samples[s].ref);
    }
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache_dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", cache_dir);
    return check_summary();
}
