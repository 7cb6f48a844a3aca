/* libFuzzer target for everything nn reads from files: the first byte picks
 * the reader (ONNX model, .npy tensor, .pb tensor), the rest is the file.
 * Any input must give a result or a one-line error: never a crash, a leak
 * or an out-of-bounds read.
 *   make fuzz   (builds build/fuzz_load with ASan and runs it for FUZZ_SECONDS) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    static const char *const ext[] = {"onnx", "npy", "pb"};
    if (size < 1) return 0;
    const char *kind = ext[data[0] % 3];
    char path[64];
    snprintf(path, sizeof path, "/tmp/nn_fuzz_%d.%s", (int)getpid(), kind);
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data + 1, 1, size - 1, f);
    fclose(f);
    nn_status st;
    if (kind == ext[0]) {
        nn_options opt = nn_options_default();
        opt.threads = 1;
        nn_model *m = NULL;
        st = nn_load(path, &opt, &m);
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
