/* ConvTranspose (conv_kernels.h), the adjoint of Conv: the GEMM W[g]^T x X[g]
 * (our GEMM, as Conv's) gives each input position's contributions per output
 * channel and kernel tap, which col2im scatter-adds into the output. */
#include "conv_kernels.h"
#include "epilogue.h"
#include "par.h"
#include "window.h"

/* Offsets of kernel tap `tap`: along dim d it reads position i*stride + off[d]. */
static void tap_offsets(const conv_geom *g, int64_t tap, int64_t *off) {
    for (int d = g->nsp - 1; d >= 0; d--) {
        off[d] = (tap % g->kernel[d]) * g->dilation[d] - g->pad[d];
        tap /= g->kernel[d];
    }
}

/* Advance a row-major position over dims[0..n); wraps to all zeros at the end. */

/* Row offset (in units of the last dim) that positions pos*stride + off map to
 * in a grid of `dims`, over all but the last dim; -1 when outside the grid. */
static int64_t outer_offset(const conv_geom *g, const int64_t *pos, const int64_t *off, const int64_t *dims) {
    int64_t base = 0;
    for (int d = 0; d < g->nsp - 1; d++) {
        int64_t i = pos[d] * g->stride[d] + off[d];
        if (i < 0 || i >= dims[d]) return -1;
        base = base * dims[d] + i;
    }
    return base;
}

typedef struct col2im_job {
    const conv_geom *g;
    const float *col, *bias, *res;
    float *y;
    const nn_epilogue *e;
} col2im_job;

/* Output channels [m0, m1) of col2im below. */
static void col2im_range(void *ctx, int64_t m0, int64_t m1, int seat) {
    (void)seat;
    const col2im_job *jb = ctx;
    const conv_geom *g = jb->g;
    const float *col = jb->col, *bias = jb->bias, *res = jb->res;
    float *y = jb->y;
    int last = g->nsp - 1;
    int64_t inner = g->in[last], outer = g->in_size / inner;
    for (int64_t m = m0; m < m1; m++) {
        float *dst = y + m * g->out_size;
        float b0 = bias ? bias[m] : 0.0f;
        for (int64_t i = 0; i < g->out_size; i++)
            dst[i] = b0;
        for (int64_t tap = 0; tap < g->kernel_size; tap++) {
            int64_t off[NSP_MAX], pos[NSP_MAX] = {0}, lo, hi;
            tap_offsets(g, tap, off);
            nn_valid_range(off[last], g->stride[last], g->out[last], inner, &lo, &hi);
            const float *src = col + (m * g->kernel_size + tap) * g->in_size;
            for (int64_t o = 0; o < outer; o++, src += inner) {
                int64_t base = outer_offset(g, pos, off, g->out);
                nn_odometer_next(pos, g->in, last);
                if (base < 0) continue;
                float *row = dst + base * g->out[last];
                for (int64_t j = lo; j < hi; j++)
                    row[j * g->stride[last] + off[last]] += src[j];
            }
        }
        nn_epilogue_apply(jb->e, dst, res ? res + m * g->out_size : NULL, g->out_size);
    }
}

/* y (channels x out positions) = bias + scatter-add of col (channels*K x in
 * positions), then the epilogue (res: the residual planes matching y, or NULL). */
static void col2im(const conv_geom *g, int64_t channels, const float *col, const float *bias, float *y,
                   const nn_epilogue *e, const float *res, int threads) {
    col2im_job jb = {.g = g, .col = col, .bias = bias, .res = res, .y = y, .e = e};
    nn_par_for_range(channels * g->kernel_size * g->in_size > NN_PAR_MIN ? threads : 1, channels, 1, col2im_range, &jb);
}

/* One product per (image, group): col (M/g * K x in positions) =
 * W[g]^T (W is C x M/g*K: group g's rows are its input channels) x X[g],
 * run by our GEMM with the call's threads; col2im follows each. */
static nn_gemm transpose_gemm(const conv_geom *g, const float *x, const float *w, float *col) {
    int64_t cg = g->in_ch / g->group, rows = g->out_ch / g->group * g->kernel_size;
    return (nn_gemm){.m = rows,
                     .n = g->in_size,
                     .k = cg,
                     .a = w,
                     .lda = rows,
                     .trans_a = true,
                     .b = x,
                     .ldb = g->in_size,
                     .c = col,
                     .ldc = g->in_size,
                     .alpha = 1.0f};
}

static size_t col_bytes(const conv_geom *g) {
    size_t bytes = sizeof(float) * (size_t)(g->out_ch / g->group * g->kernel_size * g->in_size);
    return (bytes + 63) / 64 * 64; /* the GEMM's scratch after it stays aligned */
}

size_t nn_conv_transpose_workspace(const conv_geom *g, int threads) {
    nn_gemm gm = transpose_gemm(g, NULL, NULL, NULL);
    return col_bytes(g) + nn_gemm_workspace(&gm, threads);
}

bool nn_conv_transpose_run(const conv_geom *g, const float *x, const float *w, const float *bias, float *y,
                           const nn_epilogue *e, const float *res, void *workspace, size_t workspace_size,
                           int threads) {
    if (workspace_size < nn_conv_transpose_workspace(g, threads)) return false;
    float *col = workspace;
    void *scratch = (char *)workspace + col_bytes(g);
    size_t scratch_size = workspace_size - col_bytes(g);
    int64_t cg = g->in_ch / g->group, mg = g->out_ch / g->group, rows = mg * g->kernel_size;
    for (int64_t n = 0; n < g->batch; n++)
        for (int64_t grp = 0; grp < g->group; grp++) {
            nn_gemm gm = transpose_gemm(g, x + (n * g->in_ch + grp * cg) * g->in_size, w + grp * cg * rows, col);
            if (!nn_gemm_run(&gm, scratch, scratch_size, threads)) return false;
            int64_t first = (n * g->out_ch + grp * mg) * g->out_size;
            col2im(g, mg, col, bias ? bias + grp * mg : NULL, y + first, e, res ? res + first : NULL, threads);
        }
    return true;
}
