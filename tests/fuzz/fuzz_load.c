/* libFuzzer target for everything nn reads from files: the first byte picks
 * the reader (ONNX model, .npy tensor, .pb tensor), the rest is the file.
 * A model that loads is also run once on zeros, so odd shapes reach the
 * kernels.  Any input must give a result or a one-line error: never a crash,
 * a leak, an out-of-bounds access or undefined behaviour.
 *   make fuzz FUZZ_SECONDS=N   (builds build/fuzz_load with ASan + UBSan, seeds it, runs it)
 * A crash found here becomes a case in tests/malformed/gen_corpus.py. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn.h"

/* Models may claim this much memory at most: the fuzzer looks for bugs, not for big models. */
enum { MODEL_MEMORY_LIMIT = 64 << 20 };

/* One folder for this process: a model's external data resolves inside it. */
static char work_folder[] = "/tmp/nn_fuzz_XXXXXX";

static void remove_work_folder(void) { rmdir(work_folder); }

static const char *work_dir(void) {
    static int made;
    if (!made) {
        if (!mkdtemp(work_folder)) {
            perror("fuzz_load: mkdtemp");
            abort();
        }
        atexit(remove_work_folder);
        made = 1;
    }
    return work_folder;
}

static nn_status predict_zeros(nn_model *m) {
    enum { MAX_IO = 16 };
    int n_in = nn_input_count(m), n_out = nn_output_count(m);
    if (n_in > MAX_IO || n_out > MAX_IO) return NN_OK;
    nn_tensor in[MAX_IO] = {0}, out[MAX_IO] = {0};
    nn_status st = NN_OK;
    bool runnable = true; /* false for inputs too big to allocate here */
    for (int i = 0; i < n_in && st == NN_OK && runnable; i++) {
        st = nn_input_info(m, i, NULL, &in[i]);
        int64_t n = nn_tensor_elements(&in[i]);
        runnable = n >= 0 && n <= MODEL_MEMORY_LIMIT;
        if (st == NN_OK && runnable && !(in[i].data = calloc(1, (size_t)n * nn_dtype_size(in[i].dtype) + 1)))
            st = NN_ERR_NOMEM;
    }
    if (st == NN_OK && runnable) st = nn_predict(m, in, n_in, out, n_out);
    for (int i = 0; i < n_in; i++)
        free(in[i].data);
    for (int i = 0; i < n_out; i++)
        nn_tensor_release(&out[i]);
    return st;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    static const char *const ext[] = {"onnx", "npy", "pb"};
    if (size < 1) return 0;
    const char *kind = ext[data[0] % 3];
    char path[64];
    snprintf(path, sizeof path, "%s/input.%s", work_dir(), kind);
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data + 1, 1, size - 1, f);
    fclose(f);
    nn_status st;
    if (kind == ext[0]) {
        nn_options opt = nn_options_default();
        opt.threads = 1;
        opt.cache = 0; /* the plan cache is a file of our own making, not this input */
        opt.max_memory = MODEL_MEMORY_LIMIT;
        nn_model *m = NULL;
        st = nn_load(path, &opt, &m);
        nn_model_stats stats;
        if (st == NN_OK && nn_model_get_stats(m, &stats) == NN_OK && stats.arena_bytes <= MODEL_MEMORY_LIMIT)
            st = predict_zeros(m);
        nn_free(m);
    } else {
        nn_tensor t;
        st = nn_tensor_load(path, &t);
        if (st == NN_OK) nn_tensor_release(&t);
    }
    unlink(path);
    if (st != NN_OK && (strchr(nn_last_error(), '\n') || !nn_last_error()[0])) abort(); /* one non-empty line */
    return 0;
}
