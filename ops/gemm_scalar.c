/* The portable GEMM kernel (gemm_kernel.h): plain C, the reference the
 * others must agree with, and the one every compiler target builds. */
#include "gemm_kernel.h"

/* ---- scalar kernel */
#define SC_MR 4
#define SC_NR 16
static void tile_scalar(const tile_args *t) {
    float acc[SC_MR][SC_NR] = {{0}};
    const float *a = t->a, *b = t->b;
    for (int64_t p = 0; p < t->kc; p++, a += SC_MR, b += t->ldb)
        for (int i = 0; i < SC_MR; i++)
            for (int j = 0; j < SC_NR; j++)
                acc[i][j] += a[i] * b[j];
    merge_tile(t, &acc[0][0], SC_NR);
}

static void pack_plain_scalar(const float *src, int64_t ld, int64_t kc, int64_t nc, int nr, float *dst,
                              const b_prologue *pr) {
    pack_plain_body(src, ld, kc, nc, nr, dst, pr);
}

static inline __attribute__((always_inline)) void pack_vec_scalar(const vec_desc *dv, const int32_t *idx,
                                                                  const float *plane, float *d) {
    (void)dv;
    for (int j = 0; j < VEC; j++)
        d[j] = idx[j] >= 0 ? plane[idx[j]] : 0.0f;
}

ELEMENTWISE_FOR(scalar, )
PACK_CONV_FOR(scalar, )

const gemm_kernel nn_gemm_kernel_scalar = {.name = "scalar",
                                           .mr = SC_MR,
                                           .nr = SC_NR,
                                           .mc = 64,
                                           .nc = 256,
                                           .tile = tile_scalar,
                                           .act = act_scalar,
                                           .dot = dot_scalar,
                                           .axpy = axpy_scalar,
                                           .pack_conv = pack_conv_scalar,
                                           .pack_plain = pack_plain_scalar};
