/* libFuzzer target for nnserve's request parsing: the JSON header and the
 * binary tensor data split of an Open Inference Protocol infer request,
 * against a model with a batched FP32 image input and an INT64 input.  The
 * first byte says whether an Inference-Header-Content-Length is given and
 * the next two its value, and bit 1 of the first byte makes "image" an input
 * of encoded images (BYTES, length-prefixed elements); the rest is the body.  A request that parses is
 * answered (response builder) with outputs of the right sizes.  Never a
 * crash, a leak or an out-of-bounds access.
 *   make fuzz FUZZ_TARGETS=request FUZZ_SECONDS=N */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../server/server.h"

static srv_model_info model(void) {
    srv_model_info mi;
    memset(&mi, 0, sizeof mi);
    mi.n_in = 2;
    mi.n_out = 2;
    mi.batched = 1;
    mi.in[0] = (srv_io){"image", NN_DTYPE_FLOAT, 4, {-1, 3, 2, 2}};
    mi.in[1] = (srv_io){"ids", NN_DTYPE_INT64, 2, {-1, 3}};
    mi.out[0] = (srv_io){"scores", NN_DTYPE_FLOAT16, 2, {-1, 5}};
    mi.out[1] = (srv_io){"mask", NN_DTYPE_BOOL, 2, {-1, 2}};
    return mi;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    static srv_model_info plain, images;
    static int init;
    if (!init) {
        plain = images = model();
        images.in[0].bytes_input = 1;
        images.in[0].ndim = 1;
        init = 1;
    }
    const srv_model_info *mip = data[0] & 2 ? &images : &plain;
#define mi (*mip)
    srv_limits lim = {.max_body = 1 << 20, .max_json_depth = 16, .max_samples = 64, .max_images = 8};
    int64_t hl = data[0] & 1 ? (int64_t)(data[1] | data[2] << 8) : -1;
    /* a copy of exactly the body: reads past it are caught */
    size_t len = size - 3;
    char *body = malloc(len ? len : 1);
    if (!body) return 0;
    memcpy(body, data + 3, len);
    srv_request rq;
    char err[SRV_ERR_MAX];
    if (srv_parse_infer(&mi, &lim, body, len, hl, &rq, err, sizeof err) == 200) {
        nn_tensor out[2];
        memset(out, 0, sizeof out);
        for (int k = 0; k < 2; k++) {
            out[k].dtype = mi.out[k].dtype;
            out[k].ndim = 2;
            out[k].dims[0] = rq.samples;
            out[k].dims[1] = mi.out[k].dims[1];
            out[k].data = calloc((size_t)(rq.samples * out[k].dims[1]), nn_dtype_size(out[k].dtype));
        }
        char *resp;
        size_t rlen, rhl;
        if (out[0].data && out[1].data && !srv_build_response("m", &mi, &rq, out, &resp, &rlen, &rhl)) free(resp);
        free(out[0].data);
        free(out[1].data);
        srv_request_free(&rq);
    }
    free(body);
    return 0;
}
#undef mi
