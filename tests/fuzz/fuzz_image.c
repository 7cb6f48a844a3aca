/* libFuzzer target for nnserve's image path (server/image.c): the input is one
 * encoded file, decoded by TurboJPEG or libpng, resized, cropped and
 * normalized into a 3x32x48 tensor.  A pixel limit small enough for the
 * fuzzer stands in for image_max_pixels.  Never a crash, a leak or an
 * out-of-bounds access.
 *   make fuzz FUZZ_TARGETS=image FUZZ_SECONDS=N */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../server/server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > UINT32_MAX - 4) return 0;
    srv_image_config ic = {.resize = 40,
                           .height = 32,
                           .width = 48,
                           .mean = {0.5f, 0.5f, 0.5f},
                           .std = {0.25f, 0.25f, 0.25f},
                           .scale = 255,
                           .max_pixels = 1 << 20};
    uint8_t *buf = malloc(size + 4);
    if (!buf) return 0;
    buf[0] = (uint8_t)size, buf[1] = (uint8_t)(size >> 8), buf[2] = (uint8_t)(size >> 16),
    buf[3] = (uint8_t)(size >> 24);
    memcpy(buf + 4, data, size);
    nn_tensor t;
    char err[SRV_ERR_MAX];
    if (srv_image_to_tensor(&ic, buf, size + 4, 1, &t, err, sizeof err) == 200) free(t.data);
    free(buf);
    return 0;
}
