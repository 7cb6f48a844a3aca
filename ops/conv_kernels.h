/* The Conv kernels other than the GEMM, one family per file, each run on
 * what ops/conv.c resolved and chose (conv_choose_path):
 *   conv_depthwise.c   depthwise 2-D convs (one input channel per group)
 *   conv_direct.c      convs with a few input channels (the RGB stems)
 *   conv_grouped.c     grouped convs with few channels per group
 *   conv_taps.c        convs dilated across much of their plane: a GEMM per tap
 *   conv_transpose.c   ConvTranspose: the GEMM, then col2im
 * They read plain pointers and the resolved geometry, never the graph. */
#ifndef NN_CONV_KERNELS_H
#define NN_CONV_KERNELS_H

#include "gemm.h"
#include "geom.h"
#include "isa.h"
#include "op.h"

typedef nn_conv_geom conv_geom;

/* y += residual, then the activation, over n outputs (the GEMM's vector code). */
static inline void nn_conv_epilogue(const nn_epilogue *e, float *y, const float *res, int64_t n) {
    if (!e) return;
    if (res)
        for (int64_t i = 0; i < n; i++)
            y[i] += res[i];
    nn_gemm_act(y, n, e->act, e->alpha, e->beta);
}

/* Depthwise 2-D.  Workspace bytes (0 when it needs none); run picks the
 * channel-blocked kernel when the workspace holds it, a per-plane one
 * otherwise.  The blocked kernel reads its weights laid out per block of
 * channels: prepared_floats says how many floats that takes for g (0 when
 * the kernel does not take g), prepare lays w out so, and run reads them
 * from wblk, or lays each block out itself when wblk is NULL (wblk must
 * have been laid out for the lanes in use now).  w is read by the per-plane
 * kernels and when wblk is NULL. */
size_t nn_conv_depthwise_workspace(const conv_geom *g, int threads);
/* which of the kernels below runs g, for nndump ("by rows", "channel-blocked", ...) */
const char *nn_conv_depthwise_kernel(const conv_geom *g);
size_t nn_conv_depthwise_prepared_floats(const conv_geom *g);
int nn_conv_depthwise_lanes(void); /* channels per block of the layout prepare makes now */
void nn_conv_depthwise_prepare(const conv_geom *g, const float *w, float *wblk);
void nn_conv_depthwise_run(const conv_geom *g, const float *x, const float *w, const float *wblk, const float *bias,
                           float *y, const nn_epilogue *e, const float *res, void *workspace, size_t workspace_size,
                           int threads);

/* Direct, for few input channels: whether g fits (its padded plane ph x pw;
 * never below AVX2), the workspace it needs, and the run (x86 code only). */
bool nn_conv_direct_fits(const conv_geom *g, int64_t *ph, int64_t *pw);
size_t nn_conv_direct_workspace(const conv_geom *g);
#if NN_HAVE_X86
void nn_conv_direct_run(const conv_geom *g, int64_t ph, int64_t pw, const float *x, const float *w, const float *bias,
                        float *y, const nn_epilogue *e, const float *res, float *planes, int threads);
#endif

/* Grouped, up to 64 channels per group (AVX-512): whether g fits, the
 * workspace it needs, and the run (x86 code only). */
bool nn_conv_grouped_fits(const conv_geom *g);
size_t nn_conv_grouped_workspace(const conv_geom *g, int threads);
#if NN_HAVE_X86
void nn_conv_grouped_run(const conv_geom *g, const float *x, const float *w, const float *bias, float *y,
                         const nn_epilogue *e, const float *res, void *workspace, int threads);
#endif

/* 2-D convs whose taps mostly read padding (dilated past much of the
 * plane), one GEMM per tap over the outputs it reaches: whether g is one
 * (one group, at most half its (tap, output) pairs reach the input), the
 * weights prepared (packed per tap; 0 bytes when no tap reaches), the
 * workspace, and the run (false: workspace too small). */
bool nn_conv_taps_fits(const conv_geom *g);
/* On by default; NN_CONV_TAPS=0 turns it off (A/B), and so does this (tests). */
void nn_conv_taps_enable(bool on);
size_t nn_conv_taps_prepared_size(const conv_geom *g);
bool nn_conv_taps_prepare(const conv_geom *g, const float *w, void *block); /* false: out of memory */
bool nn_conv_taps_prepared_fits(const conv_geom *g, const void *block, size_t size);
size_t nn_conv_taps_workspace(const conv_geom *g, int threads);
bool nn_conv_taps_run(const conv_geom *g, const void *block, const float *x, const float *bias, float *y,
                      const nn_epilogue *e, const float *res, void *workspace, size_t workspace_size, int threads);

/* ConvTranspose: workspace bytes, and the run (false: workspace too small). */
size_t nn_conv_transpose_workspace(const conv_geom *g, int threads);
bool nn_conv_transpose_run(const conv_geom *g, const float *x, const float *w, const float *bias, float *y,
                           const nn_epilogue *e, const float *res, void *workspace, size_t workspace_size, int threads);

#endif
