/* libFuzzer target for the plan cache reader: the input is a plan file.
 * Built with FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION, the reader skips its
 * key and checksum comparisons, so every input reaches the parsing and
 * validation behind them, as a re-sealed file would.  A plan that loads
 * as a hit is also run once on zeros, so that crafted params and shapes
 * reach the kernels.  Any input must give a hit or a miss with a warning:
 * never a crash, a leak, an out-of-bounds access or undefined behaviour.
 *   make fuzz FUZZ_TARGETS=cache FUZZ_SECONDS=N
 * Seeds: plans of the ONNX node-test models (tests/fuzz/cache_seeds.sh).
 * The model file named by NN_FUZZ_MODEL (a small one by default) only
 * gives the cache a path: in fuzz builds its bytes do not key the plan. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn.h"

enum { MODEL_MEMORY_LIMIT = 64 << 20, MAX_IO = 16 };

static char work_folder[] = "/tmp/nn_fuzz_cache_XXXXXX";
static char plan_path[4200];
static const char *model_path;

static nn_options fuzz_options(void) {
    nn_options o = nn_options_default();
    o.threads = 1;
    o.cache_dir = work_folder;
    o.max_memory = MODEL_MEMORY_LIMIT;
    return o;
}

/* Load the model once so that the cache folder holds its plan: that is the
 * file name nn_load looks for, which every input then replaces. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    model_path = getenv("NN_FUZZ_MODEL");
    if (!model_path) model_path = "/usr/share/libonnx-testdata/data/node/test_relu/model.onnx";
    if (!mkdtemp(work_folder)) {
        perror("fuzz_cache: mkdtemp");
        abort();
    }
    nn_options o = fuzz_options();
    nn_model *m = NULL;
    if (nn_load(model_path, &o, &m) != NN_OK) {
        fprintf(stderr, "fuzz_cache: cannot load %s: %s\n", model_path, nn_last_error());
        abort();
    }
    nn_free(m);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "ls %s/*.nnplan", work_folder);
    FILE *ls = popen(cmd, "r");
    if (!ls || !fgets(plan_path, sizeof plan_path, ls)) {
        fprintf(stderr, "fuzz_cache: no plan was written in %s\n", work_folder);
        abort();
    }
    pclose(ls);
    plan_path[strcspn(plan_path, "\n")] = 0;
    return 0;
}

static void predict_zeros(nn_model *m) {
    int n_in = nn_input_count(m), n_out = nn_output_count(m);
    if (n_in > MAX_IO || n_out > MAX_IO) return;
    nn_tensor in[MAX_IO] = {0}, out[MAX_IO] = {0};
    bool runnable = true;
    for (int i = 0; i < n_in && runnable; i++) {
        runnable = nn_input_info(m, i, NULL, &in[i]) == NN_OK;
        int64_t n = runnable ? nn_tensor_elements(&in[i]) : -1;
        runnable = n >= 0 && n <= MODEL_MEMORY_LIMIT / 8 &&
                   (in[i].data = calloc(1, (size_t)n * nn_dtype_size(in[i].dtype) + 1)) != NULL;
    }
    if (runnable) nn_predict(m, in, n_in, out, n_out);
    for (int i = 0; i < n_in; i++)
        free(in[i].data);
    for (int i = 0; i < n_out; i++)
        nn_tensor_release(&out[i]);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    FILE *f = fopen(plan_path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
        perror("fuzz_cache: writing the plan");
        abort();
    }
    nn_options o = fuzz_options();
    nn_model *m = NULL;
    if (nn_load(model_path, &o, &m) == NN_OK) {
        nn_model_stats s;
        if (nn_model_get_stats(m, &s) == NN_OK && s.cache == NN_CACHE_HIT) predict_zeros(m);
        nn_free(m);
    }
    return 0;
}
