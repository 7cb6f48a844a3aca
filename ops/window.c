#include "window.h"

#include <string.h>

nn_status nn_window_parse(nn_parse_ctx *ctx, nn_window_attrs *w) {
    const char *ap;
    nn_status st;
    if ((st = nn_attr_string(ctx, "auto_pad", "NOTSET", &ap)) ||
        (st = nn_attr_ints(ctx, "kernel_shape", w->kernel, NSP_MAX, &w->n_kernel)) ||
        (st = nn_attr_ints(ctx, "strides", w->strides, NSP_MAX, &w->n_strides)) ||
        (st = nn_attr_ints(ctx, "dilations", w->dilations, NSP_MAX, &w->n_dilations)) ||
        (st = nn_attr_ints(ctx, "pads", w->pads, 2 * NSP_MAX, &w->n_pads)))
        return st;
    /* "" appears in some exporters' output for the default */
    if (!strcmp(ap, "NOTSET") || !*ap)
        w->auto_pad = NN_AUTO_PAD_NOTSET;
    else if (!strcmp(ap, "SAME_UPPER"))
        w->auto_pad = NN_AUTO_PAD_SAME_UPPER;
    else if (!strcmp(ap, "SAME_LOWER"))
        w->auto_pad = NN_AUTO_PAD_SAME_LOWER;
    else if (!strcmp(ap, "VALID"))
        w->auto_pad = NN_AUTO_PAD_VALID;
    else
        return nn_parse_error(ctx, NN_ERR_INVALID, "unknown auto_pad '%s'", ap);
    return NN_OK;
}

nn_status nn_window_check(const nn_window_attrs *w, char *err, size_t err_size) {
    if (w->auto_pad < NN_AUTO_PAD_NOTSET || w->auto_pad > NN_AUTO_PAD_VALID)
        return nn_check_error(err, err_size, "auto_pad %d is not a known mode", (int)w->auto_pad);
    const struct {
        const char *name;
        int n, cap;
        const int64_t *v;
    } lists[] = {{"kernel_shape", w->n_kernel, NSP_MAX, w->kernel},
                 {"strides", w->n_strides, NSP_MAX, w->strides},
                 {"dilations", w->n_dilations, NSP_MAX, w->dilations},
                 {"pads", w->n_pads, 2 * NSP_MAX, w->pads}};
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
        if (!nn_check_count(lists[i].n, lists[i].cap))
            return nn_check_error(err, err_size, "%s has %d values (at most %d)", lists[i].name, lists[i].n,
                                  lists[i].cap);
        for (int k = 0; k < lists[i].n; k++)
            if (!nn_check_extent(lists[i].v[k]))
                return nn_check_error(err, err_size, "%s[%d] = %lld is out of range", lists[i].name, k,
                                      (long long)lists[i].v[k]);
    }
    return NN_OK;
}

int64_t nn_padded_extent(int64_t out, int64_t stride, int64_t kernel, int64_t dilation, int64_t pad, int64_t in) {
    int64_t touched = (out - 1) * stride + (kernel - 1) * dilation + 1;
    return touched > pad + in ? touched : pad + in;
}

static void fill_run(float *dst, int64_t n, float fill) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = fill;
}

void nn_pad_plane(float *dst, int64_t ph, int64_t pw, int64_t slack, const float *src, int64_t h, int64_t w, int64_t pt,
                  int64_t pl, float fill) {
    /* only the border is filled: the interior is copied over */
    fill_run(dst, pt * pw, fill);
    for (int64_t r = 0; r < h; r++) {
        float *row = dst + (pt + r) * pw;
        fill_run(row, pl, fill);
        memcpy(row + pl, src + r * w, sizeof(float) * (size_t)w);
        fill_run(row + pl + w, pw - pl - w, fill);
    }
    fill_run(dst + (pt + h) * pw, (ph - pt - h) * pw + slack, fill);
}

/* Each padded row as [even columns | odd columns]: padded column c lands at
 * (c & 1) * ceil(pw / 2) + c / 2. */
void nn_pad_plane_split(float *dst, int64_t ph, int64_t pw, int64_t slack, const float *src, int64_t h, int64_t w,
                        int64_t pt, int64_t pl, float fill) {
    int64_t half = (pw + 1) / 2;
    fill_run(dst, pt * pw, fill);
    for (int64_t r = 0; r < h; r++) {
        float *even = dst + (pt + r) * pw, *odd = even + half;
        for (int64_t c = 0; c < pl; c++)
            (c & 1 ? odd : even)[c / 2] = fill;
        for (int64_t c = pl + w; c < pw; c++)
            (c & 1 ? odd : even)[c / 2] = fill;
        /* src[2j] lands in column pl + 2j, src[2j + 1] in the other parity */
        const float *s = src + r * w;
        float *restrict to_a = (pl & 1 ? odd : even) + pl / 2, *restrict to_b = (pl & 1 ? even : odd) + (pl + 1) / 2;
        for (int64_t j = 0; j < w / 2; j++) {
            to_a[j] = s[2 * j];
            to_b[j] = s[2 * j + 1];
        }
        if (w & 1) to_a[w / 2] = s[w - 1];
    }
    fill_run(dst + (pt + h) * pw, (ph - pt - h) * pw + slack, fill);
}

bool nn_flat_taps_init(nn_flat_taps *t, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t pt, int64_t pl,
                       int64_t dh, int64_t dw) {
    if (kh > NN_FLAT_TAPS || kw > NN_FLAT_TAPS || dh < 1 || dw < 1 || dh > NN_FLAT_VECS * 16 ||
        dw > NN_FLAT_VECS * 16 || pt < 0 || pl < 0 || pt >= (kh - 1) * dh + 1 || pl >= (kw - 1) * dw + 1 || h < 1 ||
        w < 1 || h * w > NN_FLAT_VECS * 16)
        return false;
    *t = (nn_flat_taps){
        .n = h * w, .w = w, .vecs = (h * w + 15) / 16, .kh = kh, .kw = kw, .pt = pt, .pl = pl, .dh = dh, .dw = dw};
    for (int64_t i = 0; i < t->n; i++) {
        int64_t v = i / 16, row = i / w, col = i % w;
        uint16_t bit = (uint16_t)(1u << (i % 16));
        for (int64_t tap = 0; tap < kw; tap++)
            if (col + tap * dw - pl >= 0 && col + tap * dw - pl < w) t->row_tap[v][tap] |= bit;
        for (int64_t tap = 0; tap < kh; tap++)
            if (row + tap * dh - pt >= 0 && row + tap * dh - pt < h) t->col_tap[v][tap] |= bit;
    }
    return true;
}

void nn_odometer_next(int64_t *pos, const int64_t *dims, int n) {
    for (int d = n - 1; d >= 0; d--) {
        if (++pos[d] < dims[d]) return;
        pos[d] = 0;
    }
}

int64_t nn_window_out(nn_auto_pad auto_pad, int64_t in, int64_t ext, int64_t s, int64_t *pb, int64_t *pe) {
    if (auto_pad == NN_AUTO_PAD_SAME_UPPER || auto_pad == NN_AUTO_PAD_SAME_LOWER) {
        int64_t out = (in + s - 1) / s, total = (out - 1) * s + ext - in;
        if (total < 0) total = 0;
        *pb = auto_pad == NN_AUTO_PAD_SAME_UPPER ? total / 2 : total - total / 2;
        *pe = total - *pb;
        return out;
    }
    if (auto_pad == NN_AUTO_PAD_VALID) *pb = *pe = 0;
    return in + *pb + *pe < ext ? 0 : (in + *pb + *pe - ext) / s + 1;
}
