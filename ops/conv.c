/* Conv and ConvTranspose over any number of spatial dims (fp32): attributes,
 * geometry, and which kernel runs a call (conv_choose_path).
 *
 * Conv is one GEMM per (image, group): W[g] (M/g x C/g*K) times the im2col
 * matrix (C/g*K x out positions), run by ops/gemm.c, which packs the im2col
 * panels straight from the input (nothing is materialized) and applies bias
 * and the fused epilogue (residual, activation) to each output tile while it
 * is in cache.  The weights are packed for the kernel once, in prepare.
 * Depthwise 2-D convolutions (conv_depthwise.c) skip the GEMM: per-group
 * products would be tiny; so do convs with a few input channels (the RGB
 * stems, conv_direct.c), whose short K makes the im2col packing cost as
 * much as the product; and grouped convs with few channels per group
 * (conv_grouped.c), whose per-group products would fill under half a tile;
 * and convs dilated across much of their plane (conv_taps.c), most of whose
 * (tap, output) pairs read padding: one GEMM per tap over the outputs it
 * reaches.  3x3 stride-1 convs go through Winograd (winograd.c) where it
 * wins, dilated ones as one conv per phase.  ConvTranspose
 * (conv_transpose.c) is the adjoint. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_kernels.h"
#include "epilogue.h"
#include "gemm.h"
#include "geom.h"
#include "op.h"
#include "window.h"
#include "winograd.h"

typedef struct conv_params {
    nn_window_attrs w;
    int64_t group;
    /* element counts; -1 when the attribute is absent */
    int n_out_padding, n_out_shape;
    int64_t out_padding[NSP_MAX], out_shape[NN_MAX_DIMS];
} conv_params;

/* Everything a kernel needs, resolved once from params and input shapes
 * (conv_geom, geom.h: the CUDA backend resolves it through nn_conv_resolve). */

static nn_status parse_conv(nn_parse_ctx *ctx) {
    conv_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    nn_status st;
    if ((st = nn_window_parse(ctx, &p->w)) || (st = nn_attr_int(ctx, "group", 1, &p->group)) ||
        (st = nn_attr_ints(ctx, "output_padding", p->out_padding, NSP_MAX, &p->n_out_padding)) ||
        (st = nn_attr_ints(ctx, "output_shape", p->out_shape, NN_MAX_DIMS, &p->n_out_shape)))
        return st;
    ctx->params = p;
    return NN_OK;
}

/* group divides channel counts and multiplies them (conv_resolve): at
 * least 1, and small enough that the product cannot overflow. */
static nn_status conv_check(const void *params, char *err, size_t err_size) {
    const conv_params *p = params;
    nn_status st = nn_window_check(&p->w, err, err_size);
    if (st != NN_OK) return st;
    if (p->group < 1 || p->group > NN_ATTR_EXTENT_MAX)
        return nn_check_error(err, err_size, "group must be >= 1, got %lld", (long long)p->group);
    if (!nn_check_count(p->n_out_padding, NSP_MAX) || !nn_check_count(p->n_out_shape, NN_MAX_DIMS))
        return nn_check_error(err, err_size, "output_padding (%d) or output_shape (%d) has too many values",
                              p->n_out_padding, p->n_out_shape);
    for (int k = 0; k < p->n_out_padding; k++)
        if (!nn_check_extent(p->out_padding[k]))
            return nn_check_error(err, err_size, "output_padding[%d] = %lld is out of range", k,
                                  (long long)p->out_padding[k]);
    for (int k = 0; k < p->n_out_shape; k++)
        if (!nn_check_extent(p->out_shape[k]))
            return nn_check_error(err, err_size, "output_shape[%d] = %lld is out of range", k,
                                  (long long)p->out_shape[k]);
    return NN_OK;
}

static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

/* A conv whose im2col matrix is its input as it lies: 1x1, stride 1, no
 * padding on either side (trailing pads alone would add output positions). */
static bool is_pointwise(const conv_geom *g) {
    for (int d = 0; d < g->nsp; d++)
        if (g->kernel[d] != 1 || g->stride[d] != 1 || g->pad[d] != 0 || g->out[d] != g->in[d]) return false;
    return true;
}

/* A prologue (nn_prologue) is applied while the GEMM packs a pointwise
 * conv's input, whose rows are the channels; other convs read their input
 * through padding or windows, where it has no place. */
static nn_status check_prologue(const nn_call *c, const conv_geom *g) {
    const nn_prologue *pr = c->prologue;
    if (!is_pointwise(g) || g->group != 1 || (pr->act != NN_ACT_NONE && pr->act != NN_ACT_RELU))
        return nn_call_error(c, NN_ERR_UNSUPPORTED,
                             "an input prologue needs a 1x1, stride-1, unpadded conv with one group, and Relu or no "
                             "activation");
    int ops[2] = {pr->scale, pr->shift};
    for (int k = 0; k < 2; k++)
        if (ops[k] < 0 || !nn_present(c, ops[k]) || nn_tensor_elements(&c->in[ops[k]]) != g->in_ch)
            return nn_call_error(c, NN_ERR_SHAPE, "prologue %s (input %d) must hold %lld floats, one per channel",
                                 k ? "shift" : "scale", ops[k], (long long)g->in_ch);
    return NN_OK;
}

/* Validate shapes and attributes and resolve pads and output dims: the one
 * place infer, workspace and run get their geometry from. */
static nn_status conv_resolve(const nn_call *c, bool transpose, conv_geom *g) {
    const conv_params *p = c->params;
    const nn_tensor *x = &c->in[0], *w = &c->in[1];
    for (int i = 0; i < c->n_in; i++)
        if (nn_present(c, i) && c->in[i].dtype != NN_DTYPE_FLOAT)
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "input %d: dtype %s not supported (float only)", i,
                                 nn_dtype_name(c->in[i].dtype));
    if (x->ndim < 3 || w->ndim != x->ndim)
        return nn_call_error(c, NN_ERR_SHAPE, "X must have rank >= 3 and W the same rank (X rank %d, W rank %d)",
                             x->ndim, w->ndim);
    int nsp = g->nsp = x->ndim - 2;
    g->batch = x->dims[0];
    g->in_ch = x->dims[1];
    g->group = p->group;
    if (transpose) {
        if (w->dims[0] != g->in_ch || g->in_ch % g->group)
            return nn_call_error(c, NN_ERR_SHAPE,
                                 "W dim 0 (%lld) must equal X channels (%lld), divisible by group %lld",
                                 (long long)w->dims[0], (long long)g->in_ch, (long long)g->group);
        if (__builtin_mul_overflow(w->dims[1], g->group, &g->out_ch))
            return nn_call_error(c, NN_ERR_SHAPE, "W dim 1 (%lld) times group %lld overflows", (long long)w->dims[1],
                                 (long long)g->group);
    } else {
        int64_t in_ch; /* shapes are untrusted (a model's declared input, a plan cache): no overflow */
        if (__builtin_mul_overflow(w->dims[1], g->group, &in_ch) || in_ch != g->in_ch || w->dims[0] % g->group)
            return nn_call_error(c, NN_ERR_SHAPE, "W %lldx%lld does not fit X channels %lld with group %lld",
                                 (long long)w->dims[0], (long long)w->dims[1], (long long)g->in_ch,
                                 (long long)g->group);
        g->out_ch = w->dims[0];
    }
    if (nn_present(c, 2) && (c->in[2].ndim != 1 || c->in[2].dims[0] != g->out_ch))
        return nn_call_error(c, NN_ERR_SHAPE, "bias must have shape [%lld]", (long long)g->out_ch);
    if ((p->w.n_kernel >= 0 && p->w.n_kernel != nsp) || (p->w.n_strides >= 0 && p->w.n_strides != nsp) ||
        (p->w.n_dilations >= 0 && p->w.n_dilations != nsp) || (p->w.n_pads >= 0 && p->w.n_pads != 2 * nsp) ||
        (p->n_out_padding >= 0 && p->n_out_padding != nsp) ||
        (p->n_out_shape >= 0 && p->n_out_shape != nsp && p->n_out_shape != nsp + 2))
        return nn_call_error(c, NN_ERR_INVALID,
                             "kernel_shape/strides/dilations/pads/output_* lengths do not fit %d spatial dims", nsp);

    g->in_size = g->out_size = g->kernel_size = 1;
    for (int d = 0; d < nsp; d++) {
        int64_t in = g->in[d] = x->dims[2 + d];
        int64_t k = g->kernel[d] = w->dims[2 + d];
        int64_t s = g->stride[d] = p->w.n_strides >= 0 ? p->w.strides[d] : 1;
        int64_t dil = g->dilation[d] = p->w.n_dilations >= 0 ? p->w.dilations[d] : 1;
        int64_t pb = p->w.n_pads >= 0 ? p->w.pads[d] : 0, pe = p->w.n_pads >= 0 ? p->w.pads[nsp + d] : 0;
        int64_t opad = p->n_out_padding >= 0 ? p->out_padding[d] : 0;
        if (p->w.n_kernel >= 0 && p->w.kernel[d] != k)
            return nn_call_error(c, NN_ERR_SHAPE, "kernel_shape[%d] = %lld but W has %lld", d,
                                 (long long)p->w.kernel[d], (long long)k);
        if (s < 1 || dil < 1 || pb < 0 || pe < 0 || opad < 0 || k < 1)
            return nn_call_error(c, NN_ERR_INVALID, "strides, dilations and kernel must be >= 1, pads >= 0");
        int64_t ext = (k - 1) * dil + 1, out;
        if (!transpose) {
            out = nn_window_out(p->w.auto_pad, in, ext, s, &pb, &pe);
        } else {
            int64_t full = s * (in - 1) + ext + opad; /* output length before cropping pads */
            if (p->n_out_shape >= 0 || p->w.auto_pad == NN_AUTO_PAD_SAME_UPPER ||
                p->w.auto_pad == NN_AUTO_PAD_SAME_LOWER) {
                out = p->n_out_shape >= 0 ? p->out_shape[p->n_out_shape - nsp + d] : in * s;
                /* total may be negative (output_shape longer than the full
                 * result): the floor split then appends zeros at the end */
                int64_t total = full - out;
                pb = p->w.auto_pad == NN_AUTO_PAD_SAME_UPPER ? floor_div(total, 2) : total - floor_div(total, 2);
            } else {
                if (p->w.auto_pad == NN_AUTO_PAD_VALID) pb = pe = 0;
                out = full - pb - pe;
            }
        }
        if (out < 1)
            return nn_call_error(c, NN_ERR_SHAPE, "spatial dim %d: output size %lld (input %lld, kernel %lld)", d,
                                 (long long)out, (long long)in, (long long)k);
        g->out[d] = out;
        g->pad[d] = pb;
        g->in_size *= in;
        g->out_size *= out;
        g->kernel_size *= k;
    }
    /* plane offsets are 32-bit in the GEMM's im2col tables, all sizes in BLAS */
    if (g->in_size > INT_MAX ||
        (transpose && (g->out_size > INT_MAX || g->kernel_size * (g->in_ch + g->out_ch) > INT_MAX)))
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "convolution too large for 32-bit sizes");
    return c->prologue && !transpose ? check_prologue(c, g) : NN_OK;
}

nn_status nn_conv_resolve(const nn_call *c, bool transpose, nn_conv_geom *g) { return conv_resolve(c, transpose, g); }

static nn_status infer_common(nn_call *c, bool transpose) {
    conv_geom g;
    nn_status st = conv_resolve(c, transpose, &g);
    if (st != NN_OK) return st;
    int64_t dims[NN_MAX_DIMS] = {g.batch, g.out_ch};
    for (int d = 0; d < g.nsp; d++)
        dims[2 + d] = g.out[d];
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, g.nsp + 2, dims);
    return NN_OK;
}

static nn_status infer_conv(nn_call *c) { return infer_common(c, false); }
static nn_status infer_conv_transpose(nn_call *c) { return infer_common(c, true); }

static bool is_depthwise_2d(const conv_geom *g) { return g->nsp == 2 && g->in_ch == g->group; }

/* Kernel taps that read only padding, for every output, multiply zeros: a
 * conv dilated past its plane (DeepLab's ASPP, rates 12 to 36 on a 14x14
 * map) is then a smaller conv, often 1x1, on the same input.  Along each
 * dim the taps that reach the input form one run [lo, hi); the GEMM path
 * runs the kernel cut to it, with the pad moved on by lo * dilation, on
 * weights cut in prepare (docs/perf-notes.md, "Dilated convs: taps that
 * read only padding").  False when every tap counts, when none does (the
 * output is the bias) or when the cut would start inside the input. */
static bool trim_taps(const conv_geom *g, int64_t lo[NSP_MAX], int64_t hi[NSP_MAX]) {
    bool cut = false;
    for (int d = 0; d < g->nsp; d++) {
        int64_t k = g->kernel[d], dil = g->dilation[d], pad = g->pad[d], last = (g->out[d] - 1) * g->stride[d];
        /* tap t reaches the input when t * dil - pad < in and last + t * dil - pad >= 0 */
        int64_t a = pad - last <= 0 ? 0 : (pad - last + dil - 1) / dil;
        int64_t b = (g->in[d] + pad - 1) / dil + 1;
        if (b > k) b = k;
        if (a >= b || a * dil > pad) return false;
        lo[d] = a;
        hi[d] = b;
        cut |= a > 0 || b < k;
    }
    return cut;
}

/* g with its kernel cut by trim_taps, for the GEMM on weights prepared
 * (cut) in prepare: `prepared` says that they were. */
static void gemm_taps(conv_geom *g, bool prepared) {
    int64_t lo[NSP_MAX], hi[NSP_MAX];
    if (!prepared || !trim_taps(g, lo, hi)) return;
    g->kernel_size = 1;
    for (int d = 0; d < g->nsp; d++) {
        g->kernel[d] = hi[d] - lo[d];
        g->pad[d] -= lo[d] * g->dilation[d];
        g->kernel_size *= g->kernel[d];
    }
}

/* The weights w of the uncut g, cut as trim_taps says into `to`
 * (out_ch x in_ch / group x the cut kernel). */
static void cut_weights(const conv_geom *g, const float *w, float *to) {
    int64_t lo[NSP_MAX], hi[NSP_MAX], dims[NSP_MAX], pos[NSP_MAX] = {0}, cut = 1;
    trim_taps(g, lo, hi);
    for (int d = 0; d < g->nsp; d++)
        cut *= dims[d] = hi[d] - lo[d];
    int64_t rows = g->out_ch * (g->in_ch / g->group);
    for (int64_t t = 0; t < cut; t++) {
        int64_t at = 0;
        for (int d = 0; d < g->nsp; d++)
            at = at * g->kernel[d] + lo[d] + pos[d];
        for (int64_t r = 0; r < rows; r++)
            to[r * cut + t] = w[r * g->kernel_size + at];
        nn_odometer_next(pos, dims, g->nsp);
    }
}

/* A conv on at most this many positions (a 7x7 plane) computes positions
 * x channels, its output stored transposed into NCHW: its rows (positions)
 * pad to the kernel's 14-row tiles instead of its columns to 32-column
 * ones (49 positions: 56 computed instead of 64), and its columns
 * (channels) come in multiples of 32.  On a 14x14 plane the transposition
 * costs as much as the padding it saves (docs/perf-notes.md, "Pointwise
 * convs on 7x7 planes").  A pointwise conv's rows are its input read
 * transposed; a 2-D KxK conv's are its im2col matrix, packed as A an
 * image at a time (im2col_rows, nn_gemm_pack_conv_a). */
#define POSITIONS_AS_ROWS_MAX 64
/* A KxK conv packs its im2col matrix (K x positions) before the GEMM, a
 * pass that costs about as much as IM2COL_ROWS_COST multiply-adds per
 * float packed, measured (docs/perf-notes.md, "KxK convs on 7x7 planes");
 * it goes positions x channels where that and the padded tiles together
 * come under IM2COL_ROWS_GAIN of the padded channels x positions.  Judged
 * with the AVX-512 kernel's 14 x 32 tiles whatever kernel runs, so that
 * the choice (and the weights prepared for it) is the conv's alone; the
 * packed A is bounded by IM2COL_ROWS_MAX_FLOATS (ResNet's 3x3 convs on
 * 7x7 planes, 4608 x 56). */
#define IM2COL_ROWS_COST       40.0
#define IM2COL_ROWS_GAIN       0.95
#define IM2COL_ROWS_MAX_FLOATS (1 << 18)
static bool im2col_rows(const nn_call *c, const conv_geom *g) {
    if (is_pointwise(g) || g->nsp != 2 || g->group != 1 || c->prologue || g->out_size <= 1 ||
        g->out_size > POSITIONS_AS_ROWS_MAX ||
        g->in_ch * g->kernel_size * nn_round_up(g->out_size, 14) > IM2COL_ROWS_MAX_FLOATS)
        return false;
    double as_rows = (double)(nn_round_up(g->out_size, 14) * nn_round_up(g->out_ch, 32));
    double as_cols = (double)(nn_round_up(g->out_ch, 14) * nn_round_up(g->out_size, 32));
    return as_rows / as_cols + IM2COL_ROWS_COST / (double)g->out_ch < IM2COL_ROWS_GAIN;
}
static bool positions_as_rows(const nn_call *c, const conv_geom *g) {
    /* one position is a matrix-vector product (squeeze-excitation's convs), which the GEMM runs as one */
    return (is_pointwise(g) && g->group == 1 && !c->prologue && g->out_size > 1 &&
            g->out_size <= POSITIONS_AS_ROWS_MAX) ||
           im2col_rows(c, g);
}

/* The GEMM for all (image, group) products of a Conv; `packed` is the
 * weights packed in prepare (as A, or as B for positions_as_rows), or NULL. */
static nn_gemm conv_gemm(const nn_call *c, const conv_geom *g, nn_gemm_conv *cv, const nn_gemm_packed *packed) {
    int64_t cg = g->in_ch / g->group, mg = g->out_ch / g->group, kdim = cg * g->kernel_size;
    const nn_epilogue *e = c->epilogue;
    bool pointwise = is_pointwise(g);
    *cv = (nn_gemm_conv){.nsp = g->nsp, .channels = cg};
    for (int d = 0; d < g->nsp; d++) {
        cv->in[d] = g->in[d];
        cv->out[d] = g->out[d];
        cv->kernel[d] = g->kernel[d];
        cv->stride[d] = g->stride[d];
        cv->dilation[d] = g->dilation[d];
        cv->pad[d] = g->pad[d];
    }
    nn_gemm gm = {
        .m = mg,
        .n = g->out_size,
        .k = kdim,
        .a = c->in[1].data,
        .lda = kdim,
        .a_packed = packed,
        .b = c->in[0].data,
        .ldb = g->in_size,
        /* a pointwise conv's B is its input as it lies: channels x positions */
        .b_conv = pointwise ? NULL : cv,
        .c = c->out[0].data,
        .ldc = g->out_size,
        .alpha = 1.0f,
        .bias_kind = nn_present(c, 2) ? NN_GEMM_BIAS_ROW : NN_GEMM_BIAS_NONE,
        .bias = nn_present(c, 2) ? c->in[2].data : NULL,
        .residual = nn_epilogue_residual(c),
        .ldr = g->out_size,
        .act = e ? e->act : NN_ACT_NONE,
        .act_alpha = e ? e->alpha : 0.0f,
        .act_beta = e ? e->beta : 0.0f,
        .b_scale = c->prologue ? c->in[c->prologue->scale].data : NULL,
        .b_shift = c->prologue ? c->in[c->prologue->shift].data : NULL,
        .b_act = c->prologue ? c->prologue->act : NN_ACT_NONE,
        .batch = {g->batch, g->group},
        .stride_a = {0, mg * kdim},
        .stride_b = {g->in_ch * g->in_size, cg * g->in_size},
        .stride_c = {g->out_ch * g->out_size, mg * g->out_size},
        .stride_bias = {0, mg},
        .bf16 = c->bf16,
    };
    if (!positions_as_rows(c, g)) return gm;
    /* positions x K times K x out_ch: X (or its im2col matrix) and W read
     * transposed, C stored transposed (group 1, no prologue) */
    gm.m = g->out_size;
    gm.n = g->out_ch;
    gm.k = kdim;
    /* a KxK conv's A, its im2col matrix, is packed an image at a time by run_conv */
    gm.a = pointwise ? c->in[0].data : NULL;
    gm.lda = g->in_size;
    gm.trans_a = true;
    gm.a_packed = NULL;
    gm.b = c->in[1].data;
    gm.ldb = kdim;
    gm.b_conv = NULL; /* the im2col matrix is A here */
    gm.trans_b = true;
    gm.b_packed = packed;
    gm.trans_c = true;
    if (gm.bias_kind != NN_GEMM_BIAS_NONE) gm.bias_kind = NN_GEMM_BIAS_COL;
    gm.stride_a[0] = g->in_ch * g->in_size;
    gm.stride_b[0] = 0;
    return gm;
}

/* Which way prepare goes: Winograd weights, packed GEMM weights, or nothing
 * (depthwise convs, the direct few-channel convs and matrix-vector
 * products read the weights as they are).  The engine frees the original
 * weights once prepared (prepared_inputs), so run must use what is made
 * here. */
typedef enum conv_prep { PREP_NONE, PREP_WINOGRAD, PREP_GEMM, PREP_TAPS, PREP_DEPTHWISE } conv_prep;

/* What prepare makes: this header, then at CONV_PREPARED_DATA bytes the
 * weights transformed for Winograd, a packed GEMM block, the per-tap GEMM
 * blocks of conv_taps.c, or a depthwise conv's weights as they are
 * followed by the same laid out for its channel-blocked kernel. */
typedef struct conv_prepared {
    int32_t kind;  /* conv_prep */
    int32_t lanes; /* PREP_DEPTHWISE: channels per block of the blocked weights */
} conv_prepared;
#define CONV_PREPARED_DATA 64
static const void *prepared_data(const conv_prepared *p) { return (const char *)p + CONV_PREPARED_DATA; }

/* The Winograd view of a 2-D conv; false when Winograd does not apply or
 * would not win (nn_winograd_applicable says when). */
static bool winograd_shape(const conv_geom *g, nn_winograd_shape *s) {
    if (g->nsp != 2) return false;
    *s = (nn_winograd_shape){.batch = g->batch,
                             .in_ch = g->in_ch,
                             .out_ch = g->out_ch,
                             .group = g->group,
                             .in_h = g->in[0],
                             .in_w = g->in[1],
                             .out_h = g->out[0],
                             .out_w = g->out[1],
                             .pad_top = g->pad[0],
                             .pad_left = g->pad[1],
                             .kernel_h = g->kernel[0],
                             .kernel_w = g->kernel[1],
                             .stride_h = g->stride[0],
                             .stride_w = g->stride[1],
                             .dilation_h = g->dilation[0],
                             .dilation_w = g->dilation[1]};
    return nn_winograd_applicable(s);
}

/* How a Conv runs. */
typedef enum conv_path {
    PATH_DEPTHWISE, /* conv_depthwise.c, weights as they are (and blocked in prepare, where its kernel takes them) */
    PATH_DIRECT,    /* conv_direct.c, weights as they are */
    PATH_GROUPED,   /* conv_grouped.c, weights as they are */
    PATH_WINOGRAD,  /* winograd.c, weights transformed in prepare */
    PATH_GEMM,      /* the GEMM, weights packed in prepare when they are constants */
    PATH_TAPS,      /* conv_taps.c, a GEMM per tap on weights packed in prepare (constants only) */
} conv_path;

/* The one place that decides which path a Conv takes: prepare asks with
 * `prepared` NULL, the later hooks (workspace, prepared_fits, run) with
 * what prepare made, or NULL when it did not run (weights that are not
 * constants).  The depthwise and direct kernels read the input as it is,
 * so a conv with a prologue goes to the GEMM, which applies it.
 * *ph, *pw: the direct kernel's padded plane; *ws: the Winograd view. */
static conv_path conv_choose_path(const nn_call *c, const conv_geom *g, const conv_prepared *prepared,
                                  nn_winograd_shape *ws, int64_t *ph, int64_t *pw) {
    if (!c->prologue && is_depthwise_2d(g)) return PATH_DEPTHWISE;
    if (!c->prologue && nn_conv_grouped_fits(g)) return PATH_GROUPED;
    if (prepared) {
        if (prepared->kind == PREP_TAPS) return PATH_TAPS;
        return prepared->kind == PREP_WINOGRAD && winograd_shape(g, ws) ? PATH_WINOGRAD : PATH_GEMM;
    }
    /* constant weights only (run breaks to the GEMM when they were not prepared); fp32 only */
    if (!c->prologue && !c->bf16 && c->in[1].data && nn_conv_taps_fits(g)) return PATH_TAPS;
    if (!c->prologue && nn_conv_direct_fits(g, ph, pw)) return PATH_DIRECT;
    return c->winograd && c->in[1].data && winograd_shape(g, ws) ? PATH_WINOGRAD : PATH_GEMM;
}

/* the engine asks after prepare: room for the path prepare picked */
static size_t workspace_conv(const nn_call *c) {
    conv_geom g;
    nn_gemm_conv cv;
    nn_winograd_shape ws;
    int64_t ph, pw;
    const conv_prepared *p = c->prepared;
    if (conv_resolve(c, false, &g) != NN_OK) return 0;
    switch (conv_choose_path(c, &g, p, &ws, &ph, &pw)) {
    case PATH_DEPTHWISE: return nn_conv_depthwise_workspace(&g, c->threads);
    case PATH_DIRECT: return nn_conv_direct_workspace(&g);
    case PATH_GROUPED: return nn_conv_grouped_workspace(&g, c->threads);
    case PATH_WINOGRAD:
        if (p) return nn_winograd_workspace(&ws, c->threads);
        break; /* not prepared: the GEMM reads the weights as they are */
    case PATH_TAPS:
        if (p) return nn_conv_taps_workspace(&g, c->threads);
        break; /* likewise */
    case PATH_GEMM: break;
    }
    gemm_taps(&g, p && p->kind == PREP_GEMM);
    nn_gemm_packed packed = p ? nn_gemm_block_view(prepared_data(p)) : (nn_gemm_packed){0};
    nn_gemm gm = conv_gemm(c, &g, &cv, p ? &packed : NULL);
    size_t im2col = im2col_rows(c, &g) ? nn_gemm_conv_a_bytes(&gm, &cv, c->threads) : 0;
    return im2col + nn_gemm_workspace(&gm, c->threads);
}

/* What prepare makes: Winograd weights, packed GEMM weights, or nothing
 * (the depthwise and direct kernels, and matrix-vector products, read the
 * weights as they are). */
static conv_prep prepare_kind(const nn_call *c, conv_geom *g, nn_winograd_shape *ws) {
    int64_t ph, pw;
    if (conv_resolve(c, false, g) != NN_OK || !c->in[1].data) return PREP_NONE;
    switch (conv_choose_path(c, g, NULL, ws, &ph, &pw)) {
    case PATH_WINOGRAD: return PREP_WINOGRAD;
    case PATH_TAPS: return PREP_TAPS;
    case PATH_DEPTHWISE: return nn_conv_depthwise_prepared_floats(g) ? PREP_DEPTHWISE : PREP_NONE;
    case PATH_GEMM: {
        /* a matrix-vector product, cut or not, reads its weights as they are */
        conv_geom cut = *g;
        gemm_taps(&cut, true);
        return is_pointwise(&cut) && cut.out_size == 1 ? PREP_NONE : PREP_GEMM;
    }
    default: return PREP_NONE;
    }
}

/* A depthwise conv's prepared weights: as they are (the per-plane kernels,
 * and the engine frees the originals), then blocked; 0 when its kernel
 * does not take them blocked. */
static size_t depthwise_prepared_bytes(const conv_geom *g) {
    size_t blocked = nn_conv_depthwise_prepared_floats(g);
    return blocked ? sizeof(float) * ((size_t)(g->out_ch * g->kernel_size) + blocked) : 0;
}

static size_t prepared_size_conv(const nn_call *c) {
    conv_geom g;
    nn_gemm_conv cv;
    nn_winograd_shape ws;
    switch (prepare_kind(c, &g, &ws)) {
    case PREP_WINOGRAD: return CONV_PREPARED_DATA + nn_winograd_prepared_size(&ws);
    case PREP_TAPS: return CONV_PREPARED_DATA + nn_conv_taps_prepared_size(&g);
    case PREP_DEPTHWISE: return CONV_PREPARED_DATA + depthwise_prepared_bytes(&g);
    case PREP_GEMM: {
        gemm_taps(&g, true);
        nn_gemm gm = conv_gemm(c, &g, &cv, NULL);
        return CONV_PREPARED_DATA +
               (positions_as_rows(c, &g) ? nn_gemm_pack_b_block_bytes(&gm) : nn_gemm_pack_a_block_bytes(&gm));
    }
    default: return 0;
    }
}

static nn_status prepare_conv(const nn_call *c, void *prepared) {
    conv_geom g;
    nn_gemm_conv cv;
    nn_winograd_shape ws;
    conv_prepared *p = prepared;
    void *data = (char *)prepared + CONV_PREPARED_DATA;
    switch (prepare_kind(c, &g, &ws)) {
    case PREP_WINOGRAD: p->kind = PREP_WINOGRAD; return nn_winograd_prepare(&ws, c->in[1].data, data, c->threads);
    case PREP_DEPTHWISE: {
        size_t plain = (size_t)(g.out_ch * g.kernel_size);
        p->kind = PREP_DEPTHWISE;
        p->lanes = nn_conv_depthwise_lanes();
        memcpy(data, c->in[1].data, sizeof(float) * plain);
        nn_conv_depthwise_prepare(&g, c->in[1].data, (float *)data + plain);
        return NN_OK;
    }
    case PREP_TAPS:
        p->kind = PREP_TAPS;
        return nn_conv_taps_prepare(&g, c->in[1].data, data)
                   ? NN_OK
                   : nn_call_error(c, NN_ERR_NOMEM, "no memory for the conv's per-tap weights");
    case PREP_GEMM: {
        conv_geom cut = g;
        gemm_taps(&cut, true);
        float *w = NULL;
        if (cut.kernel_size != g.kernel_size) {
            w = malloc(sizeof(float) * (size_t)(cut.out_ch * (cut.in_ch / cut.group) * cut.kernel_size));
            if (!w) return nn_call_error(c, NN_ERR_NOMEM, "no memory for the conv's cut weights");
            cut_weights(&g, c->in[1].data, w);
        }
        nn_gemm gm = conv_gemm(c, &cut, &cv, NULL);
        if (w) {
            if (positions_as_rows(c, &cut))
                gm.b = w;
            else
                gm.a = w;
        }
        p->kind = PREP_GEMM;
        if (positions_as_rows(c, &cut))
            nn_gemm_pack_b_block(&gm, data);
        else
            nn_gemm_pack_a_block(&gm, data);
        free(w);
        return NN_OK;
    }
    default: return nn_call_error(c, NN_ERR_INTERNAL, "nothing to prepare");
    }
}

static bool prepared_fits_conv(const nn_call *c, const void *prepared, size_t size) {
    conv_geom g;
    nn_gemm_conv cv;
    nn_winograd_shape ws;
    int64_t ph, pw;
    const conv_prepared *p = prepared;
    if (size < CONV_PREPARED_DATA || conv_resolve(c, false, &g) != NN_OK) return false;
    size -= CONV_PREPARED_DATA;
    switch (conv_choose_path(c, &g, p, &ws, &ph, &pw)) {
    case PATH_DEPTHWISE: return p->kind == PREP_DEPTHWISE && size == depthwise_prepared_bytes(&g) && size > 0;
    case PATH_WINOGRAD: return size == nn_winograd_prepared_size(&ws);
    /* a block made when the conv was not one (shapes changed) is refused: the kind alone chose the path */
    case PATH_TAPS: return nn_conv_taps_fits(&g) && nn_conv_taps_prepared_fits(&g, prepared_data(p), size);
    case PATH_GEMM: {
        if (p->kind != PREP_GEMM) return false;
        gemm_taps(&g, true);
        nn_gemm gm = conv_gemm(c, &g, &cv, NULL);
        return positions_as_rows(c, &g) ? nn_gemm_block_fits_b(&gm, prepared_data(p), size)
                                        : nn_gemm_block_fits_a(&gm, prepared_data(p), size);
    }
    default: return false;
    }
}

static nn_status run_conv(nn_call *c) {
    conv_geom g;
    nn_winograd_shape ws;
    int64_t ph, pw;
    const conv_prepared *p = c->prepared;
    nn_status st = conv_resolve(c, false, &g);
    if (st != NN_OK) return st;
    const float *bias = nn_present(c, 2) ? c->in[2].data : NULL, *res = nn_epilogue_residual(c);
    switch (conv_choose_path(c, &g, p, &ws, &ph, &pw)) {
    case PATH_DEPTHWISE: {
        const float *w = c->in[1].data, *wblk = NULL;
        if (p) {
            if (p->kind != PREP_DEPTHWISE || !depthwise_prepared_bytes(&g))
                return nn_call_error(c, NN_ERR_INTERNAL, "weights were prepared for another kernel than depthwise");
            w = prepared_data(p);
            /* laid out for other lanes (the ISA changed since): each block laid out as it runs */
            wblk = p->lanes == nn_conv_depthwise_lanes() ? w + g.out_ch * g.kernel_size : NULL;
        }
        if (!w) return nn_call_error(c, NN_ERR_INTERNAL, "depthwise conv without its weights");
        nn_conv_depthwise_run(&g, c->in[0].data, w, wblk, bias, c->out[0].data, c->epilogue, res, c->workspace,
                              c->workspace_size, c->threads);
        return NN_OK;
    }
    case PATH_DIRECT:
#if NN_HAVE_X86                                                      /* elsewhere conv_choose_path never takes it */
        if (c->workspace_size < nn_conv_direct_workspace(&g)) break; /* the GEMM needs none here */
        nn_conv_direct_run(&g, ph, pw, c->in[0].data, c->in[1].data, bias, c->out[0].data, c->epilogue, res,
                           c->workspace, c->threads);
        return NN_OK;
#endif
        break;
    case PATH_GROUPED:
#if NN_HAVE_X86 /* elsewhere conv_choose_path never takes it */
        if (c->workspace_size < nn_conv_grouped_workspace(&g, c->threads)) break; /* the GEMM needs none here */
        nn_conv_grouped_run(&g, c->in[0].data, c->in[1].data, bias, c->out[0].data, c->epilogue, res, c->workspace,
                            c->threads);
        return NN_OK;
#endif
        break;
    case PATH_WINOGRAD:
        if (!p) break; /* not prepared: the GEMM reads the weights as they are */
        st = nn_winograd_run(&ws, c->in[0].data, prepared_data(p), bias, c->epilogue, res, c->out[0].data, c->workspace,
                             c->workspace_size, c->threads);
        return st == NN_OK ? NN_OK
                           : nn_call_error(c, st, "Winograd conv failed (workspace of %zu bytes)", c->workspace_size);
    case PATH_TAPS:
        if (!p) break; /* not prepared: the GEMM reads the weights as they are */
        if (!nn_conv_taps_fits(&g))
            return nn_call_error(c, NN_ERR_INTERNAL, "weights were prepared per tap, shapes no longer fit it");
        if (!nn_conv_taps_run(&g, prepared_data(p), c->in[0].data, bias, c->out[0].data, c->epilogue, res,
                              c->workspace, c->workspace_size, c->threads))
            return nn_call_error(c, NN_ERR_INTERNAL, "conv workspace too small (%zu bytes) for the per-tap GEMMs",
                                 c->workspace_size);
        return NN_OK;
    case PATH_GEMM:
        if (p && p->kind == PREP_WINOGRAD)
            return nn_call_error(c, NN_ERR_INTERNAL, "weights were prepared for Winograd, shapes no longer fit it");
        if (p && p->kind == PREP_TAPS)
            return nn_call_error(c, NN_ERR_INTERNAL, "weights were prepared per tap, shapes no longer fit it");
        break;
    }
    nn_gemm_conv cv;
    gemm_taps(&g, p && p->kind == PREP_GEMM);
    nn_gemm_packed packed = p ? nn_gemm_block_view(prepared_data(p)) : (nn_gemm_packed){0};
    nn_gemm gm = conv_gemm(c, &g, &cv, p ? &packed : NULL);
    if (!im2col_rows(c, &g)) {
        if (!nn_gemm_run(&gm, c->workspace, c->workspace_size, c->threads))
            return nn_call_error(c, NN_ERR_INTERNAL, "conv workspace too small or weights packed for another kernel");
        return NN_OK;
    }
    /* an image at a time: its im2col matrix packed as A, then the GEMM */
    size_t a_bytes = nn_gemm_conv_a_bytes(&gm, &cv, c->threads);
    int64_t out_image = g.out_ch * g.out_size;
    for (int64_t n = 0; n < g.batch; n++) {
        nn_gemm one = gm;
        nn_gemm_packed a;
        if (!nn_gemm_pack_conv_a(&gm, &cv, (const float *)c->in[0].data + n * g.in_ch * g.in_size, c->workspace,
                                 c->workspace_size, c->threads, &a))
            return nn_call_error(c, NN_ERR_INTERNAL, "conv workspace too small for its im2col matrix");
        one.batch[0] = one.batch[1] = 1;
        one.a_packed = &a;
        one.c = (float *)c->out[0].data + n * out_image;
        if (one.residual) one.residual += n * out_image;
        if (!nn_gemm_run(&one, (char *)c->workspace + a_bytes, c->workspace_size - a_bytes, c->threads))
            return nn_call_error(c, NN_ERR_INTERNAL, "conv workspace too small or weights packed for another kernel");
    }
    return NN_OK;
}

static size_t workspace_conv_transpose(const nn_call *c) {
    conv_geom g;
    return conv_resolve(c, true, &g) == NN_OK ? nn_conv_transpose_workspace(&g, c->threads) : 0;
}

static nn_status run_conv_transpose(nn_call *c) {
    conv_geom g;
    nn_status st = conv_resolve(c, true, &g);
    if (st != NN_OK) return st;
    if (!nn_conv_transpose_run(&g, c->in[0].data, c->in[1].data, nn_present(c, 2) ? c->in[2].data : NULL,
                               c->out[0].data, c->epilogue, nn_epilogue_residual(c), c->workspace, c->workspace_size,
                               c->threads))
        return nn_call_error(c, NN_ERR_INTERNAL, "conv-transpose workspace too small");
    return NN_OK;
}

/* "3x3 stride 2 group 32, depthwise": what nndump shows on a Conv */
static void describe_conv(const nn_call *c, char *buf, size_t size) {
    conv_geom g;
    nn_winograd_shape ws;
    int64_t ph, pw;
    buf[0] = 0;
    if (conv_resolve(c, false, &g) != NN_OK) return;
    int len = 0;
    for (int d = 0; d < g.nsp && len < (int)size; d++)
        len += snprintf(buf + len, size - (size_t)len, "%s%lld", d ? "x" : "", (long long)g.kernel[d]);
    for (int d = 0; d < g.nsp && len < (int)size; d++)
        len += snprintf(buf + len, size - (size_t)len, "%s%lld", d ? "x" : " stride ", (long long)g.stride[d]);
    bool dilated = false;
    for (int d = 0; d < g.nsp; d++) dilated |= g.dilation[d] > 1;
    for (int d = 0; d < g.nsp && dilated && len < (int)size; d++)
        len += snprintf(buf + len, size - (size_t)len, "%s%lld", d ? "x" : " dilation ", (long long)g.dilation[d]);
    if (g.group > 1 && len < (int)size)
        len += snprintf(buf + len, size - (size_t)len, " group %lld", (long long)g.group);
    static const char *const names[] = {"depthwise",           "direct", "grouped",
                                        "winograd F(4x4,3x3)", "gemm",   "gemm per tap"};
    const conv_prepared *p = c->prepared;
    conv_path path = conv_choose_path(c, &g, p, &ws, &ph, &pw);
    /* a Winograd or per-tap conv not yet prepared runs the GEMM on its weights as they are */
    if ((path == PATH_WINOGRAD || path == PATH_TAPS) && !p && !c->in[1].data) path = PATH_GEMM;
    if (len < (int)size)
        len += snprintf(buf + len, size - (size_t)len, ", %s%s%s", names[path],
                        path == PATH_GEMM && c->bf16 ? " bf16" : "",
                        path == PATH_WINOGRAD && dilated ? " by phases" : "");
    if (path == PATH_DEPTHWISE && len < (int)size)
        len += snprintf(buf + len, size - (size_t)len, " %s", nn_conv_depthwise_kernel(&g));
    conv_geom cut = g;
    gemm_taps(&cut, path == PATH_GEMM && p && p->kind == PREP_GEMM);
    for (int d = 0; d < g.nsp && cut.kernel_size != g.kernel_size && len < (int)size; d++)
        len += snprintf(buf + len, size - (size_t)len, "%s%lld", d ? "x" : " on taps cut to ", (long long)cut.kernel[d]);
    if (path == PATH_GEMM && positions_as_rows(c, &cut) && len < (int)size)
        snprintf(buf + len, size - (size_t)len, ", positions x channels");
}

const nn_op_desc nn_op_Conv = {.name = "Conv",
                               .min_inputs = 2,
                               .max_inputs = 3,
                               .min_outputs = 1,
                               .max_outputs = 1,
                               .flags = NN_OPF_EPILOGUE | NN_OPF_PROLOGUE,
                               .parse = parse_conv,
                               .check = conv_check,
                               .infer = infer_conv,
                               .workspace = workspace_conv,
                               .run = run_conv,
                               .prepared_size = prepared_size_conv,
                               .prepare = prepare_conv,
                               .describe = describe_conv,
                               .prepared_fits = prepared_fits_conv,
                               .prepared_inputs = 1u << 1};
const nn_op_desc nn_op_ConvTranspose = {.name = "ConvTranspose",
                                        .min_inputs = 2,
                                        .max_inputs = 3,
                                        .min_outputs = 1,
                                        .max_outputs = 1,
                                        .flags = NN_OPF_EPILOGUE,
                                        .parse = parse_conv,
                                        .check = conv_check,
                                        .infer = infer_conv_transpose,
                                        .workspace = workspace_conv_transpose,
                                        .run = run_conv_transpose};

bool nn_conv_window(const void *params, nn_window_attrs *w, int64_t *group) {
    const conv_params *p = params;
    if (!p || p->n_out_padding >= 0 || p->n_out_shape >= 0) return false;
    *w = p->w;
    *group = p->group;
    return true;
}

bool nn_conv_set_window(void *params, const nn_window_attrs *w) {
    conv_params *p = params;
    if (!p || p->n_out_padding >= 0 || p->n_out_shape >= 0) return false;
    p->w = *w;
    return true;
}
