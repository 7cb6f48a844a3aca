/* Object-detection heads and spatial samplers: NonMaxSuppression,
 * RoiAlign and GridSample.
 *
 * NonMaxSuppression keeps a number of boxes known only once it ran: its
 * infer says NN_DYNAMIC, `bound` sizes the output for every candidate, and
 * run shrinks it to the boxes kept. */
#include <math.h>
#include <string.h>

#include "op.h"
#include "par.h"

/* ---- NonMaxSuppression (opsets 10, 11), with onnxruntime's choices where
 *      the spec leaves room: candidates strictly above score_threshold, in
 *      descending score with the lower box index first on ties; a box is
 *      suppressed when its IoU with a kept one is strictly above
 *      iou_threshold. */

typedef struct nms_params {
    int32_t center_point_box;
} nms_params;

static nn_status parse_nms(nn_parse_ctx *ctx) {
    nms_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    int64_t v;
    nn_status st = nn_attr_int(ctx, "center_point_box", 0, &v);
    if (st != NN_OK) return st;
    if (v != 0 && v != 1)
        return nn_parse_error(ctx, NN_ERR_INVALID, "center_point_box must be 0 or 1, got %lld", (long long)v);
    p->center_point_box = (int32_t)v;
    return NN_OK;
}

static nn_status check_nms(const void *params, char *err, size_t err_size) {
    const nms_params *p = params;
    if (p->center_point_box != 0 && p->center_point_box != 1) {
        snprintf(err, err_size, "center_point_box %d not 0 or 1", (int)p->center_point_box);
        return NN_ERR_INVALID;
    }
    return NN_OK;
}

typedef struct nms_args {
    int64_t batches, classes, boxes, max_per_class;
    float iou, score;
    bool has_score;
} nms_args;

static nn_status scalar_float(nn_call *c, int i, const char *what, float *out) {
    const nn_tensor *t = &c->in[i];
    if (t->dtype != NN_DTYPE_FLOAT) return nn_call_error(c, NN_ERR_INVALID, "%s must be float", what);
    if (nn_tensor_elements(t) != 1) return nn_call_error(c, NN_ERR_SHAPE, "%s must hold one value", what);
    if (!t->data) return NN_DYNAMIC;
    *out = *(const float *)t->data;
    return NN_OK;
}

/* Shapes and scalar inputs; NN_DYNAMIC while a scalar is not known. */
static nn_status nms_read(nn_call *c, nms_args *a) {
    const nn_tensor *boxes = &c->in[0], *scores = &c->in[1];
    if (boxes->dtype != NN_DTYPE_FLOAT || scores->dtype != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "boxes and scores must be float");
    if (boxes->ndim != 3 || boxes->dims[2] != 4 || scores->ndim != 3 || scores->dims[0] != boxes->dims[0] ||
        scores->dims[2] != boxes->dims[1])
        return nn_call_error(c, NN_ERR_SHAPE, "boxes must be [batches, boxes, 4] and scores [batches, classes, boxes]");
    *a = (nms_args){.batches = boxes->dims[0], .classes = scores->dims[1], .boxes = boxes->dims[1]};
    nn_status st = NN_OK;
    if (nn_present(c, 2)) {
        int n;
        st = nn_input_ints(c, 2, "max_output_boxes_per_class", &a->max_per_class, 1, &n);
        if (st == NN_OK && n != 1)
            return nn_call_error(c, NN_ERR_SHAPE, "max_output_boxes_per_class must hold one value");
        if (st == NN_OK && a->max_per_class < 0) a->max_per_class = 0;
    }
    if (st == NN_OK && nn_present(c, 3)) st = scalar_float(c, 3, "iou_threshold", &a->iou);
    if (st == NN_OK && !(a->iou >= 0.0f && a->iou <= 1.0f))
        return nn_call_error(c, NN_ERR_INVALID, "iou_threshold %g outside [0, 1]", (double)a->iou);
    a->has_score = nn_present(c, 4);
    if (st == NN_OK && a->has_score) st = scalar_float(c, 4, "score_threshold", &a->score);
    return st;
}

static nn_status infer_nms(nn_call *c) {
    nms_args a;
    nn_status st = nms_read(c, &a);
    return st != NN_OK ? st : NN_DYNAMIC; /* how many are kept is only known once it ran */
}

static int64_t nms_bound_rows(const nms_args *a) {
    int64_t per = a->max_per_class < a->boxes ? a->max_per_class : a->boxes;
    return a->batches * a->classes * per;
}

static nn_status bound_nms(nn_call *c) {
    nms_args a;
    nn_status st = nms_read(c, &a);
    if (st != NN_OK) return st;
    int64_t dims[2] = {nms_bound_rows(&a), 3};
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_INT64, 2, dims);
    return NN_OK;
}

/* Per candidate box: its place in the score order, merge scratch, its
 * place in the order of ymin (int64 each); its corners and area, the
 * kept boxes' corners and areas (5 floats each); whether it was kept. */
static size_t workspace_nms(const nn_call *c) {
    return (size_t)c->in[0].dims[1] * (3 * sizeof(int64_t) + 10 * sizeof(float) + 1);
}

/* Box b as (ymin, xmin, ymax, xmax, area), whichever corners or centre it
 * came as. */
static void box_corners(const float *b, bool center, float *out) {
    if (center) {
        out[0] = b[1] - b[3] / 2, out[1] = b[0] - b[2] / 2;
        out[2] = b[1] + b[3] / 2, out[3] = b[0] + b[2] / 2;
    } else {
        out[0] = fminf(b[0], b[2]), out[1] = fminf(b[1], b[3]);
        out[2] = fmaxf(b[0], b[2]), out[3] = fmaxf(b[1], b[3]);
    }
    out[4] = (out[2] - out[0]) * (out[3] - out[1]);
}

/* Whether box q (ymin, xmin, ymax, xmax, area) suppresses box p: their IoU
 * is above threshold.  Boxes of no area suppress nothing.  Branch-free, so
 * that loops over many q vectorize. */
static inline int iou_above(const float *p, float q0, float q1, float q2, float q3, float q4, float threshold) {
    float ih = fminf(p[2], q2) - fmaxf(p[0], q0), iw = fminf(p[3], q3) - fmaxf(p[1], q1);
    float inter = ih * iw, uni = p[4] + q4 - inter;
    return (ih > 0) & (iw > 0) & (p[4] > 0) & (q4 > 0) & (uni > 0) & (inter / uni > threshold);
}

/* Whether one of the n kept boxes (k: their columns) suppresses p, in
 * blocks of 64 that the compiler vectorizes. */
static bool suppressed_by_kept(const float *p, float *const k[5], int64_t n, float threshold) {
    for (int64_t j0 = 0; j0 < n; j0 += 64) {
        int64_t end = j0 + 64 < n ? j0 + 64 : n;
        int hit = 0;
        for (int64_t j = j0; j < end; j++)
            hit |= iou_above(p, k[0][j], k[1][j], k[2][j], k[3][j], k[4][j], threshold);
        if (hit) return true;
    }
    return false;
}

/* Sort idx[0..n) by key[idx[.]], descending or ascending; equal keys keep
 * their order (a stable merge sort, using tmp). */
static void sort_by_key(int64_t *idx, int64_t *tmp, int64_t n, const float *key, bool descending) {
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, o = lo;
            while (i < mid && j < hi) {
                bool right_first = descending ? key[idx[j]] > key[idx[i]] : key[idx[j]] < key[idx[i]];
                tmp[o++] = right_first ? idx[j++] : idx[i++];
            }
            while (i < mid)
                tmp[o++] = idx[i++];
            while (j < hi)
                tmp[o++] = idx[j++];
        }
        memcpy(idx, tmp, sizeof *idx * (size_t)n);
    }
}

/* First i in [0, n) with ymin[byy[i]] >= v (n if none). */
static int64_t first_at_or_above(const int64_t *byy, int64_t n, const float *ymin, double v) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if ((double)ymin[byy[mid]] >= v)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Greedy NMS of one class's n candidates (rank r: cand[.][r], in score
 * order); is_kept[r] set for the survivors, at most max of them.  A
 * candidate need only be tested against kept boxes whose y extent meets
 * its own: those lie in a window of the ymin order no wider than the
 * tallest box, found by binary search.  Where the window holds more boxes
 * than have been kept, the kept list is scanned instead.  Either way the
 * same test on the same boxes: the result does not depend on the path. */
static void nms_class(float *const cand[5], int64_t n, int64_t max, float threshold, int64_t *byy, int64_t *tmp,
                      float *const kept[5], uint8_t *is_kept) {
    int64_t m = 0, n_kept = 0;
    float tallest = 0.0f;
    for (int64_t r = 0; r < n; r++) {
        is_kept[r] = 0;
        if (!(cand[4][r] > 0)) continue; /* suppresses nothing */
        byy[m++] = r;
        float h = cand[2][r] - cand[0][r];
        tallest = isfinite(h) && isfinite(cand[0][r]) ? fmaxf(tallest, h) : INFINITY;
    }
    sort_by_key(byy, tmp, m, cand[0], false);
    for (int64_t r = 0; r < n && n_kept < max; r++) {
        float p[5] = {cand[0][r], cand[1][r], cand[2][r], cand[3][r], cand[4][r]};
        bool drop = false;
        if (p[4] > 0) {
            int64_t i0 = 0, i1 = m;
            if (isfinite(tallest) && isfinite(p[0]) && isfinite(p[2])) {
                /* q.ymax <= q.ymin + tallest: below this q ends before p starts (margin for rounding) */
                double lo = (double)p[0] - (double)tallest * (1 + 1e-6) - fabs((double)p[0]) * 1e-6 - 1e-30;
                i0 = first_at_or_above(byy, m, cand[0], lo);
                i1 = first_at_or_above(byy, m, cand[0], (double)p[2]); /* from here q starts after p ends */
            }
            if (i1 - i0 < n_kept) {
                for (int64_t i = i0; i < i1 && !drop; i++) {
                    int64_t q = byy[i];
                    drop = is_kept[q] &&
                           iou_above(p, cand[0][q], cand[1][q], cand[2][q], cand[3][q], cand[4][q], threshold);
                }
            } else {
                drop = suppressed_by_kept(p, kept, n_kept, threshold);
            }
        }
        if (drop) continue;
        for (int k = 0; k < 5; k++)
            kept[k][n_kept] = p[k];
        n_kept++;
        is_kept[r] = 1;
    }
}

static nn_status run_nms(nn_call *c) {
    const nms_params *p = c->params;
    nms_args a;
    nn_status st = nms_read(c, &a);
    if (st != NN_OK) return st;
    if (nms_bound_rows(&a) > c->out[0].dims[0])
        return nn_call_error(c, NN_ERR_INTERNAL, "output sized for %lld boxes, fewer than the bound",
                             (long long)c->out[0].dims[0]);
    int64_t nb = a.boxes, *order = c->workspace, *tmp = order + nb, *byy = tmp + nb, *y = c->out[0].data, rows = 0;
    float *cand[5], *kept[5]; /* columns: corners and areas of the candidates (by rank), of the kept boxes */
    for (int k = 0; k < 5; k++) {
        cand[k] = (float *)(byy + nb) + k * nb;
        kept[k] = (float *)(byy + nb) + (5 + k) * nb;
    }
    uint8_t *is_kept = (uint8_t *)(kept[4] + nb);
    const float *boxes = c->in[0].data, *scores = c->in[1].data;
    for (int64_t b = 0; b < a.batches; b++)
        for (int64_t cl = 0; cl < a.classes && a.max_per_class > 0; cl++) {
            const float *sc = scores + (b * a.classes + cl) * nb, *bx = boxes + b * nb * 4;
            int64_t n = 0;
            for (int64_t i = 0; i < nb; i++)
                if (!a.has_score || sc[i] > a.score) order[n++] = i;
            sort_by_key(order, tmp, n, sc, true); /* lower box index first on ties */
            for (int64_t r = 0; r < n; r++) {
                float q[5];
                box_corners(bx + order[r] * 4, p->center_point_box, q);
                for (int k = 0; k < 5; k++)
                    cand[k][r] = q[k];
            }
            nms_class(cand, n, a.max_per_class, a.iou, byy, tmp, kept, is_kept);
            for (int64_t r = 0; r < n; r++)
                if (is_kept[r]) {
                    y[rows * 3] = b, y[rows * 3 + 1] = cl, y[rows * 3 + 2] = order[r];
                    rows++;
                }
        }
    c->out[0].dims[0] = rows;
    return NN_OK;
}

const nn_op_desc nn_op_NonMaxSuppression = {.name = "NonMaxSuppression",
                                            .min_inputs = 2,
                                            .max_inputs = 5,
                                            .min_outputs = 1,
                                            .max_outputs = 1,
                                            .parse = parse_nms,
                                            .check = check_nms,
                                            .infer = infer_nms,
                                            .workspace = workspace_nms,
                                            .run = run_nms,
                                            .bound = bound_nms};

/* ---- RoiAlign (opsets 10, 16): bilinear samples averaged (or the
 *      largest weighted corner taken, as onnxruntime's max mode does) over
 *      each bin of each region */

enum { ROI_AVG, ROI_MAX };

typedef struct roi_params {
    int64_t out_h, out_w, sampling_ratio;
    float spatial_scale;
    int32_t mode, half_pixel; /* half_pixel: shift by -0.5 (opset 16's default) */
} roi_params;

static nn_status parse_roi_align(nn_parse_ctx *ctx) {
    roi_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    const char *mode, *ctm;
    nn_status st = nn_attr_int(ctx, "output_height", 1, &p->out_h);
    if (st == NN_OK) st = nn_attr_int(ctx, "output_width", 1, &p->out_w);
    if (st == NN_OK) st = nn_attr_int(ctx, "sampling_ratio", 0, &p->sampling_ratio);
    if (st == NN_OK) st = nn_attr_float(ctx, "spatial_scale", 1.0f, &p->spatial_scale);
    if (st == NN_OK) st = nn_attr_string(ctx, "mode", "avg", &mode);
    /* opset 10 had no attribute and behaved as output_half_pixel */
    if (st == NN_OK)
        st = nn_attr_string(ctx, "coordinate_transformation_mode",
                            ctx->opset >= 16 ? "half_pixel" : "output_half_pixel", &ctm);
    if (st != NN_OK) return st;
    if (!strcmp(mode, "avg") || !strcmp(mode, "max"))
        p->mode = !strcmp(mode, "max") ? ROI_MAX : ROI_AVG;
    else
        return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "mode '%s' not supported (avg, max)", mode);
    if (!strcmp(ctm, "half_pixel") || !strcmp(ctm, "output_half_pixel"))
        p->half_pixel = !strcmp(ctm, "half_pixel");
    else
        return nn_parse_error(ctx, NN_ERR_UNSUPPORTED,
                              "coordinate_transformation_mode '%s' not supported (half_pixel, output_half_pixel)", ctm);
    if (p->out_h < 1 || p->out_w < 1 || p->out_h > INT32_MAX || p->out_w > INT32_MAX || p->sampling_ratio < 0 ||
        p->sampling_ratio > INT32_MAX || !isfinite(p->spatial_scale))
        return nn_parse_error(ctx, NN_ERR_INVALID,
                              "output_height %lld, output_width %lld or sampling_ratio %lld out of range",
                              (long long)p->out_h, (long long)p->out_w, (long long)p->sampling_ratio);
    return NN_OK;
}

static nn_status check_roi_align(const void *params, char *err, size_t err_size) {
    const roi_params *p = params;
    if (p->out_h < 1 || p->out_w < 1 || p->out_h > INT32_MAX || p->out_w > INT32_MAX || p->sampling_ratio < 0 ||
        p->sampling_ratio > INT32_MAX || !isfinite(p->spatial_scale) || (p->mode != ROI_AVG && p->mode != ROI_MAX) ||
        (p->half_pixel & ~1)) {
        snprintf(err, err_size, "output size, sampling_ratio, spatial_scale, mode or coordinate mode out of range");
        return NN_ERR_INVALID;
    }
    return NN_OK;
}

static nn_status infer_roi_align(nn_call *c) {
    const roi_params *p = c->params;
    const nn_tensor *x = &c->in[0], *rois = &c->in[1], *bi = &c->in[2];
    if (x->dtype != NN_DTYPE_FLOAT || rois->dtype != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "X and rois must be float");
    if (bi->dtype != NN_DTYPE_INT64 && bi->dtype != NN_DTYPE_INT32)
        return nn_call_error(c, NN_ERR_INVALID, "batch_indices must be int64");
    if (x->ndim != 4 || rois->ndim != 2 || rois->dims[1] != 4 || bi->ndim != 1 || bi->dims[0] != rois->dims[0])
        return nn_call_error(c, NN_ERR_SHAPE, "X must be [N, C, H, W], rois [R, 4], batch_indices [R]");
    int64_t dims[4] = {rois->dims[0], x->dims[1], p->out_h, p->out_w};
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, 4, dims);
    return NN_OK;
}

/* One bilinear sample of plane (h x w) at (y, x): its four corners'
 * offsets and weights (all zero outside the plane by more than a pixel). */
static void roi_sample(int64_t h, int64_t w, float y, float x, int64_t *pos, float *wt) {
    memset(pos, 0, 4 * sizeof *pos);
    memset(wt, 0, 4 * sizeof *wt);
    /* (written to fail for NaN too) */
    if (h <= 0 || w <= 0 || !(y >= -1.0f && y <= (float)h && x >= -1.0f && x <= (float)w)) return;
    if (y <= 0) y = 0;
    if (x <= 0) x = 0;
    int64_t y0 = (int64_t)y, x0 = (int64_t)x, y1, x1;
    if (y0 >= h - 1)
        y0 = y1 = h - 1, y = (float)y0;
    else
        y1 = y0 + 1;
    if (x0 >= w - 1)
        x0 = x1 = w - 1, x = (float)x0;
    else
        x1 = x0 + 1;
    float ly = y - (float)y0, lx = x - (float)x0, hy = 1.0f - ly, hx = 1.0f - lx;
    pos[0] = y0 * w + x0, pos[1] = y0 * w + x1, pos[2] = y1 * w + x0, pos[3] = y1 * w + x1;
    wt[0] = hy * hx, wt[1] = hy * lx, wt[2] = ly * hx, wt[3] = ly * lx;
}

/* Samples per bin side when sampling_ratio is 0: ceil(bin), 0 for a
 * region that is empty, inverted or not a number. */
static int64_t grid_size(float bin) {
    if (!(bin > 0.0f)) return 0;
    return bin < (float)INT32_MAX ? (int64_t)ceilf(bin) : INT32_MAX;
}

typedef struct roi_job {
    const roi_params *p;
    const nn_tensor *bi;
    const float *rois, *src;
    float *dst;
    int64_t channels, h, w, oh, ow;
    float offset;
} roi_job;

/* Output planes [lo, hi) of run_roi_align: plane rc is roi rc / channels, channel rc % channels. */
static void roi_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const roi_job *j = ctx;
    const roi_params *p = j->p;
    const nn_tensor *bi = j->bi;
    const float *rois = j->rois, *src = j->src;
    float *dst = j->dst, offset = j->offset;
    int64_t channels = j->channels, h = j->h, w = j->w, oh = j->oh, ow = j->ow;
    for (int64_t rc = lo; rc < hi; rc++) {
        int64_t r = rc / channels, ch = rc % channels;
        const float *roi = rois + r * 4, *plane = src + (nn_tensor_get_int(bi, r) * channels + ch) * h * w;
        float x0 = roi[0] * p->spatial_scale - offset, y0 = roi[1] * p->spatial_scale - offset;
        float rw = roi[2] * p->spatial_scale - offset - x0, rh = roi[3] * p->spatial_scale - offset - y0;
        if (!p->half_pixel) { /* the legacy mode forces regions of at least one pixel */
            rw = fmaxf(rw, 1.0f);
            rh = fmaxf(rh, 1.0f);
        }
        float bin_h = rh / (float)oh, bin_w = rw / (float)ow;
        int64_t gh = p->sampling_ratio > 0 ? p->sampling_ratio : grid_size(rh / (float)oh);
        int64_t gw = p->sampling_ratio > 0 ? p->sampling_ratio : grid_size(rw / (float)ow);
        float count = (float)(gh * gw > 1 ? gh * gw : 1);
        float *out = dst + rc * oh * ow;
        for (int64_t py = 0; py < oh; py++)
            for (int64_t px = 0; px < ow; px++) {
                float acc = 0.0f;
                bool first = true;
                for (int64_t iy = 0; iy < gh; iy++) {
                    float yy = y0 + (float)py * bin_h + ((float)iy + 0.5f) * bin_h / (float)gh;
                    for (int64_t ix = 0; ix < gw; ix++) {
                        float xx = x0 + (float)px * bin_w + ((float)ix + 0.5f) * bin_w / (float)gw;
                        int64_t pos[4];
                        float wt[4];
                        roi_sample(h, w, yy, xx, pos, wt);
                        if (p->mode == ROI_AVG) {
                            acc += wt[0] * plane[pos[0]] + wt[1] * plane[pos[1]] + wt[2] * plane[pos[2]] +
                                   wt[3] * plane[pos[3]];
                        } else {
                            float v = fmaxf(fmaxf(wt[0] * plane[pos[0]], wt[1] * plane[pos[1]]),
                                            fmaxf(wt[2] * plane[pos[2]], wt[3] * plane[pos[3]]));
                            acc = first ? v : fmaxf(acc, v);
                            first = false;
                        }
                    }
                }
                out[py * ow + px] = p->mode == ROI_AVG ? acc / count : acc;
            }
    }
}

static nn_status run_roi_align(nn_call *c) {
    const roi_params *p = c->params;
    const nn_tensor *x = &c->in[0], *bi = &c->in[2];
    int64_t n_rois = c->in[1].dims[0], channels = x->dims[1], h = x->dims[2], w = x->dims[3];
    for (int64_t r = 0; r < n_rois; r++) {
        int64_t b = nn_tensor_get_int(bi, r);
        if (b < 0 || b >= x->dims[0])
            return nn_call_error(c, NN_ERR_INVALID, "batch index %lld of roi %lld out of range for %lld images",
                                 (long long)b, (long long)r, (long long)x->dims[0]);
    }
    roi_job j = {.p = p,
                 .bi = bi,
                 .rois = c->in[1].data,
                 .src = x->data,
                 .dst = c->out[0].data,
                 .channels = channels,
                 .h = h,
                 .w = w,
                 .oh = p->out_h,
                 .ow = p->out_w,
                 .offset = p->half_pixel ? 0.5f : 0.0f};
    nn_par_for_range(n_rois * channels > 1 ? c->threads : 1, n_rois * channels, 1, roi_range, &j);
    return NN_OK;
}

const nn_op_desc nn_op_RoiAlign = {.name = "RoiAlign",
                                   .min_inputs = 3,
                                   .max_inputs = 3,
                                   .min_outputs = 1,
                                   .max_outputs = 1,
                                   .parse = parse_roi_align,
                                   .check = check_roi_align,
                                   .infer = infer_roi_align,
                                   .run = run_roi_align};

/* ---- GridSample (opset 16): X [N, C, H, W] sampled at grid [N, Ho, Wo, 2]
 *      (x, y in [-1, 1]), with PyTorch's grid_sample conventions */

enum { GS_BILINEAR, GS_NEAREST, GS_BICUBIC };
enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };

typedef struct grid_params {
    int32_t mode, padding, align_corners;
} grid_params;

static nn_status parse_grid_sample(nn_parse_ctx *ctx) {
    static const char *const modes[] = {"bilinear", "nearest", "bicubic"}, *const pads[] = {"zeros", "border",
                                                                                            "reflection"};
    grid_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    const char *mode, *pad;
    int64_t align;
    nn_status st = nn_attr_string(ctx, "mode", "bilinear", &mode);
    if (st == NN_OK) st = nn_attr_string(ctx, "padding_mode", "zeros", &pad);
    if (st == NN_OK) st = nn_attr_int(ctx, "align_corners", 0, &align);
    if (st != NN_OK) return st;
    p->mode = p->padding = -1;
    for (int k = 0; k < 3; k++) {
        if (!strcmp(mode, modes[k])) p->mode = k;
        if (!strcmp(pad, pads[k])) p->padding = k;
    }
    if (p->mode < 0) return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "mode '%s' not supported", mode);
    if (p->padding < 0) return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "padding_mode '%s' not supported", pad);
    p->align_corners = align != 0;
    return NN_OK;
}

static nn_status check_grid_sample(const void *params, char *err, size_t err_size) {
    const grid_params *p = params;
    if (p->mode < 0 || p->mode > GS_BICUBIC || p->padding < 0 || p->padding > GS_REFLECTION ||
        (p->align_corners & ~1)) {
        snprintf(err, err_size, "mode %d, padding_mode %d or align_corners %d out of range", (int)p->mode,
                 (int)p->padding, (int)p->align_corners);
        return NN_ERR_INVALID;
    }
    return NN_OK;
}

static nn_status infer_grid_sample(nn_call *c) {
    const nn_tensor *x = &c->in[0], *g = &c->in[1];
    if (x->dtype != NN_DTYPE_FLOAT || g->dtype != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "X and grid must be float");
    if (x->ndim != 4 || g->ndim != 4 || g->dims[0] != x->dims[0] || g->dims[3] != 2)
        return nn_call_error(c, NN_ERR_SHAPE, "X must be [N, C, H, W] and grid [N, Ho, Wo, 2] (4-D only)");
    int64_t dims[4] = {x->dims[0], x->dims[1], g->dims[1], g->dims[2]};
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, 4, dims);
    return NN_OK;
}

/* Reflect v into [lo2 / 2, hi2 / 2] (bounds given doubled). */
static float reflect(float v, float lo2, float hi2) {
    if (lo2 == hi2) return 0.0f;
    float lo = lo2 / 2, span = (hi2 - lo2) / 2;
    v = fabsf(v - lo);
    float extra = fmodf(v, span);
    /* the parity of the flips, without a cast that NaN or a huge v would overflow */
    return fmodf(floorf(v / span), 2.0f) == 0.0f ? extra + lo : span - extra + lo;
}

/* A pixel coordinate after the padding mode (zeros leaves it as it is). */
static float pad_coord(const grid_params *p, float v, int64_t size) {
    if (p->padding == GS_ZEROS) return v;
    if (p->padding == GS_REFLECTION)
        v = p->align_corners ? reflect(v, 0.0f, 2.0f * (float)(size - 1)) : reflect(v, -1.0f, 2.0f * (float)size - 1);
    return fminf(fmaxf(v, 0.0f), (float)(size - 1));
}

/* plane[y][x], 0 outside (and for coordinates that are not numbers) */
static float pixel(const float *plane, int64_t h, int64_t w, float y, float x) {
    if (!(y >= 0 && y < (float)h && x >= 0 && x < (float)w)) return 0.0f;
    return plane[(int64_t)y * w + (int64_t)x];
}

static void cubic_weights(float t, float *wt) {
    const float a = -0.75f;
    float t1 = t + 1, t2 = 1 - t, t3 = 2 - t;
    wt[0] = ((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a;
    wt[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
    wt[2] = ((a + 2) * t2 - (a + 3)) * t2 * t2 + 1;
    wt[3] = ((a * t3 - 5 * a) * t3 + 8 * a) * t3 - 4 * a;
}

static float grid_sample_at(const grid_params *p, const float *plane, int64_t h, int64_t w, float gx, float gy) {
    /* [-1, 1] to pixels: the corner pixels' centres, or their outer edges */
    float x = p->align_corners ? (gx + 1) / 2 * (float)(w - 1) : ((gx + 1) * (float)w - 1) / 2;
    float y = p->align_corners ? (gy + 1) / 2 * (float)(h - 1) : ((gy + 1) * (float)h - 1) / 2;
    if (p->mode == GS_BICUBIC) { /* padding applies to each of the 16 taps */
        float x0 = floorf(x), y0 = floorf(y), wx[4], wy[4], acc = 0.0f;
        cubic_weights(x - x0, wx);
        cubic_weights(y - y0, wy);
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++)
                acc += wy[i] * wx[j] *
                       pixel(plane, h, w, pad_coord(p, y0 - 1 + (float)i, h), pad_coord(p, x0 - 1 + (float)j, w));
        return acc;
    }
    x = pad_coord(p, x, w);
    y = pad_coord(p, y, h);
    if (p->mode == GS_NEAREST) return pixel(plane, h, w, nearbyintf(y), nearbyintf(x));
    float x0 = floorf(x), y0 = floorf(y), lx = x - x0, ly = y - y0;
    return (1 - ly) * ((1 - lx) * pixel(plane, h, w, y0, x0) + lx * pixel(plane, h, w, y0, x0 + 1)) +
           ly * ((1 - lx) * pixel(plane, h, w, y0 + 1, x0) + lx * pixel(plane, h, w, y0 + 1, x0 + 1));
}

typedef struct grid_job {
    const grid_params *p;
    const float *src, *grid;
    float *dst;
    int64_t ch, h, w, oh, ow;
} grid_job;

/* Output planes [lo, hi) of run_grid_sample (plane nc: image nc / ch). */
static void grid_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const grid_job *j = ctx;
    int64_t ch = j->ch, h = j->h, w = j->w, oh = j->oh, ow = j->ow;
    for (int64_t nc = lo; nc < hi; nc++) {
        const float *plane = j->src + nc * h * w, *g = j->grid + nc / ch * oh * ow * 2;
        for (int64_t i = 0; i < oh * ow; i++)
            j->dst[nc * oh * ow + i] = grid_sample_at(j->p, plane, h, w, g[2 * i], g[2 * i + 1]);
    }
}

static nn_status run_grid_sample(nn_call *c) {
    const grid_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    int64_t n = x->dims[0], ch = x->dims[1], h = x->dims[2], w = x->dims[3];
    int64_t oh = c->in[1].dims[1], ow = c->in[1].dims[2];
    grid_job j = {.p = p,
                  .src = x->data,
                  .grid = c->in[1].data,
                  .dst = c->out[0].data,
                  .ch = ch,
                  .h = h,
                  .w = w,
                  .oh = oh,
                  .ow = ow};
    /* at least ~1024 samples a task */
    nn_par_for_range(n * ch > 1 && n * ch * oh * ow > 4096 ? c->threads : 1, n * ch, 1024 / (oh * ow > 0 ? oh * ow : 1),
                     grid_range, &j);
    return NN_OK;
}

const nn_op_desc nn_op_GridSample = {.name = "GridSample",
                                     .min_inputs = 2,
                                     .max_inputs = 2,
                                     .min_outputs = 1,
                                     .max_outputs = 1,
                                     .parse = parse_grid_sample,
                                     .check = check_grid_sample,
                                     .infer = infer_grid_sample,
                                     .run = run_grid_sample};
