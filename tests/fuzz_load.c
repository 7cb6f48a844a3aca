/* libFuzzer target: any bytes given to nn_load as a model file must give a
 * model or a one-line error; never a crash, a leak or an out-of-bounds read.
 *   make fuzz            (builds build/fuzz_load with ASan and runs it for FUZZ_SECONDS) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/nn_fuzz_%d.onnx", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    nn_options opt = nn_options_default();
    opt.threads = 1;
    nn_model *m = NULL;
    if (nn_load(path, &opt, &m) == NN_OK) {
        nn_free(m);
    } else if (strchr(nn_last_error(), '\n') || !nn_last_error()[0]) {
        abort(); /* errors are one non-empty line */
    }
    return 0;
}
