/* The library's side of the malformed-model corpus: nn_load one file and,
 * when it loads, nn_predict once on zeros at the model's input shapes.
 *   nn_load MODEL.onnx
 * Exit 0 when both succeed; 1 with `nn_load: <nn_last_error()>` as the only
 * line on stderr when either fails; 2 for a broken test setup.
 * The plan cache follows the environment ($NN_CACHE_DIR): the runner points
 * it at a temporary folder. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

/* why the driver itself gave up (the library's errors are in nn_last_error) */
static char driver_error[256];

/* Zero-filled inputs at the shapes the model declares (its bound batch). */
static nn_status predict_zeros(nn_model *m) {
    int n_in = nn_input_count(m), n_out = nn_output_count(m);
    nn_tensor *in = calloc((size_t)n_in + 1, sizeof *in), *out = calloc((size_t)n_out + 1, sizeof *out);
    nn_status st = NN_OK;
    if (!in || !out) {
        snprintf(driver_error, sizeof driver_error, "out of memory");
        st = NN_ERR_NOMEM;
    }
    for (int i = 0; i < n_in && st == NN_OK; i++) {
        const char *name;
        if ((st = nn_input_info(m, i, &name, &in[i])) != NN_OK) break;
        for (int d = 0; d < in[i].ndim; d++)
            if (in[i].dims[d] < 0) in[i].dims[d] = 1; /* a dimension the model leaves open: feed 1 */
        int64_t n = nn_tensor_elements(&in[i]);
        size_t bytes = n < 0 ? SIZE_MAX : (size_t)n * nn_dtype_size(in[i].dtype);
        if (n < 0 || bytes / nn_dtype_size(in[i].dtype) != (size_t)n || !(in[i].data = calloc(1, bytes ? bytes : 1))) {
            snprintf(driver_error, sizeof driver_error,
                     "cannot feed zeros to input '%s': no memory for its declared shape", name);
            st = NN_ERR_NOMEM;
        }
    }
    if (st == NN_OK) st = nn_predict(m, in, n_in, out, n_out);
    for (int i = 0; in && i < n_in; i++)
        free(in[i].data);
    for (int i = 0; out && i < n_out; i++)
        nn_tensor_release(&out[i]);
    free(in);
    free(out);
    return st;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: nn_load MODEL.onnx\n");
        return 2;
    }
    nn_options opt = nn_options_default();
    opt.threads = 1;
    nn_model *m = NULL;
    nn_status st = nn_load(argv[1], &opt, &m);
    if (st == NN_OK) st = predict_zeros(m);
    nn_free(m);
    if (st != NN_OK) {
        fprintf(stderr, "nn_load: %s\n", driver_error[0] ? driver_error : nn_last_error());
        return 1;
    }
    return 0;
}
