/* Images per second through nnserve's pre-processing (server/image.c: decode
 * with DCT scaling, resize, center crop, normalize), one thread, per file.
 * Also the CPU time per image, which a machine shared with other jobs
 * distorts less than wall time.
 * usage: bench_decode SECONDS FILE... */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../server/server.h"

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 3) return fprintf(stderr, "usage: bench_decode SECONDS FILE...\n"), 2;
    double seconds = atof(argv[1]);
    srv_image_config ic = {.resize = 256,
                           .height = 224,
                           .width = 224,
                           .mean = {0.485f, 0.456f, 0.406f},
                           .std = {0.229f, 0.224f, 0.225f},
                           .scale = 255,
                           .max_pixels = 50000000};
    for (int f = 2; f < argc; f++) {
        FILE *fp = fopen(argv[f], "rb");
        if (!fp) return fprintf(stderr, "bench_decode: cannot read %s\n", argv[f]), 1;
        fseek(fp, 0, SEEK_END);
        long n = ftell(fp);
        fseek(fp, 0, SEEK_SET);
        uint8_t *buf = malloc((size_t)n + 4);
        if (!buf || fread(buf + 4, 1, (size_t)n, fp) != (size_t)n)
            return fprintf(stderr, "bench_decode: %s\n", argv[f]), 1;
        fclose(fp);
        buf[0] = (uint8_t)n, buf[1] = (uint8_t)(n >> 8), buf[2] = (uint8_t)(n >> 16), buf[3] = (uint8_t)(n >> 24);
        int64_t t0 = srv_now_us(), count = 0;
        double c0 = cpu_s();
        while (srv_now_us() - t0 < seconds * 1e6) {
            nn_tensor t;
            char err[SRV_ERR_MAX];
            if (srv_image_to_tensor(&ic, buf, (size_t)n + 4, 1, &t, err, sizeof err) != 200)
                return fprintf(stderr, "bench_decode: %s: %s\n", argv[f], err), 1;
            free(t.data);
            count++;
        }
        double s = (double)(srv_now_us() - t0) / 1e6;
        printf("%-32s %8ld bytes %9.1f images/s %8.3f ms each, %8.3f ms CPU each\n", argv[f], n, count / s,
               1e3 * s / count, 1e3 * (cpu_s() - c0) / count);
        free(buf);
    }
    return 0;
}
