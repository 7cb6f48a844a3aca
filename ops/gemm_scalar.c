/* The portable GEMM kernels (gemm_kernel.h), for a processor without AVX2
 * or a non-x86 build (NN_ISA_SCALAR):
 *   blas    what that ISA runs: each task's block of C is one cblas_sgemm of
 *           Debian's single-threaded OpenBLAS, called inside our own thread
 *           team; packing, im2col and the epilogue stay ours.
 *   scalar  the plain-C 4 x 16 tile, the reference the others agree with;
 *           kept for a build without OpenBLAS, selected by no ISA now. */
#include <cblas.h>
#include <pthread.h>

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

/* ---- OpenBLAS per block.  MR = 1 makes a packed A block (pre-packed
 * weights included) a plain row-major matrix; NR = NC makes a packed B block
 * one row-major panel, so every variant (conv im2col, transposed or
 * prologue'd B, pre-packed B) reaches OpenBLAS as plain matrices. */
#define BLAS_NR 256

/* Debian's serial OpenBLAS is built without USE_LOCKING: its buffer pool is
 * unguarded, and two threads in cblas_sgemm at once can share a buffer
 * (seen here: wrong products within 200 rounds of 8 concurrent calls).  One
 * call at a time, then; packing and the epilogue still run in parallel. */
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;

static void block_blas(const tile_args *t) {
    int m = t->mr, n = t->nr, k = (int)t->kc;
    float beta = t->load_c ? 1.0f : 0.0f;
    if (k > 0) {
        pthread_mutex_lock(&blas_lock);
        if (t->trans_c) /* C(i, j) at c[j*ldc + i] is C column-major; A and B are then stored transposed */
            cblas_sgemm(CblasColMajor, CblasTrans, CblasTrans, m, n, k, 1.0f, t->a, k, t->b, (int)t->ldb, beta, t->c,
                        (int)t->ldc);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, t->a, k, t->b, (int)t->ldb, beta,
                        t->c, (int)t->ldc);
        pthread_mutex_unlock(&blas_lock);
    }
    if (!t->last) return;
    /* the epilogue over the block, along C's lines (rows, or a transposed C's columns) */
    int lines = t->trans_c ? n : m, len = t->trans_c ? m : n;
    for (int l = 0; l < lines; l++) {
        float *c = t->c + l * t->ldc;
        const float *res = t->res ? t->res + l * t->ldr : NULL;
        for (int e = 0; e < len; e++) {
            int i = t->trans_c ? e : l, j = t->trans_c ? l : e;
            float v = k > 0 || t->load_c ? c[e] : 0.0f; /* K = 0: no call wrote C */
            if (t->bias_row) v += t->bias_row[i];
            if (t->bias_col) v += t->bias_col[j];
            if (res) v += res[e];
            c[e] = nn_act_apply(t->act, t->alpha, t->beta, v);
        }
    }
}

const gemm_kernel nn_gemm_kernel_blas = {.name = "scalar",
                                         .mr = 1,
                                         .nr = BLAS_NR,
                                         .mc = 512,
                                         .nc = BLAS_NR,
                                         .b_in_place = true,
                                         .block = block_blas,
                                         .act = act_scalar,
                                         .dot = dot_scalar,
                                         .axpy = axpy_scalar,
                                         .pack_conv = pack_conv_scalar,
                                         .pack_plain = pack_plain_scalar};
