/* Image pre-processing in the serving pipeline: a BYTES input of encoded
 * JPEG or PNG files becomes the model's FP32 NCHW input.  JPEGs are decoded
 * by TurboJPEG at the smallest DCT scaling (1/8 .. 1) whose shorter side is
 * still at least the resize target, so large images never decode at full
 * size; then bilinear resize of the shorter side, center crop, mean/std
 * normalization.  Decoding runs on its own threads, between the HTTP thread
 * that parsed the request and the model's batching queue, so it overlaps
 * inference. */
#include "server.h"

#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

/* Decoded pixels, RGB8 interleaved. */
typedef struct pixels {
    uint8_t *p;
    int w, h;
} pixels;

static int decode_jpeg(tjhandle tj, const srv_image_config *ic, const uint8_t *buf, size_t len, pixels *out, char *err,
                       size_t en) {
    int w, h, sub, cs;
    if (tjDecompressHeader3(tj, buf, (unsigned long)len, &w, &h, &sub, &cs))
        return snprintf(err, en, "not a readable JPEG: %s", tjGetErrorStr2(tj)), -1;
    if (w <= 0 || h <= 0 || (int64_t)w * h > ic->max_pixels)
        return snprintf(err, en, "JPEG of %dx%d pixels is over the limit of %lld", w, h, (long long)ic->max_pixels), -1;
    /* the smallest DCT scaling whose shorter side still reaches the target */
    int target = ic->resize > 0 ? ic->resize : (ic->height > ic->width ? ic->height : ic->width), nsf = 0;
    tjscalingfactor *sf = tjGetScalingFactors(&nsf), best = {1, 1};
    int short_side = w < h ? w : h, best_side = short_side;
    for (int i = 0; sf && i < nsf; i++) {
        if (sf[i].num > sf[i].denom) continue;
        int s = TJSCALED(short_side, sf[i]);
        if (s >= target && s < best_side) {
            best = sf[i];
            best_side = s;
        }
    }
    out->w = TJSCALED(w, best);
    out->h = TJSCALED(h, best);
    out->p = malloc((size_t)out->w * (size_t)out->h * 3);
    if (!out->p) return snprintf(err, en, "out of memory for a %dx%d image", out->w, out->h), -1;
    /* progressive JPEGs with absurd scan counts are refused rather than decoded for minutes */
    if (tjDecompress2(tj, buf, (unsigned long)len, out->p, out->w, 0, out->h, TJPF_RGB, TJFLAG_LIMITSCANS)) {
        if (tjGetErrorCode(tj) == TJERR_FATAL) {
            snprintf(err, en, "corrupt JPEG: %s", tjGetErrorStr2(tj));
            free(out->p);
            out->p = NULL;
            return -1;
        }
        /* a warning (say, truncated data) still leaves a usable, partly grey image, as browsers show it */
    }
    return 0;
}

static int decode_png(const srv_image_config *ic, const uint8_t *buf, size_t len, pixels *out, char *err, size_t en) {
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&img, buf, len))
        return snprintf(err, en, "not a readable PNG: %s", img.message), -1;
    if ((int64_t)img.width * img.height > ic->max_pixels || !img.width || !img.height) {
        snprintf(err, en, "PNG of %ux%u pixels is over the limit of %lld", img.width, img.height,
                 (long long)ic->max_pixels);
        png_image_free(&img);
        return -1;
    }
    img.format = PNG_FORMAT_RGB;
    out->w = (int)img.width;
    out->h = (int)img.height;
    out->p = malloc(PNG_IMAGE_SIZE(img));
    if (!out->p) {
        png_image_free(&img);
        return snprintf(err, en, "out of memory for a %dx%d image", out->w, out->h), -1;
    }
    if (!png_image_finish_read(&img, NULL, out->p, 0, NULL)) {
        snprintf(err, en, "corrupt PNG: %s", img.message);
        free(out->p);
        out->p = NULL;
        png_image_free(&img);
        return -1;
    }
    return 0;
}

/* Resize the shorter side to ic->resize (or both sides to the input's when 0), center-crop to the input's
 * height and width, normalize into dst (3 planes). Only the cropped pixels are computed. */
static void resize_crop_normalize(const srv_image_config *ic, const pixels *src, float *dst) {
    int H = ic->height, W = ic->width;
    double rw, rh;
    if (ic->resize > 0) {
        double s = (double)ic->resize / (src->w < src->h ? src->w : src->h);
        rw = src->w * s;
        rh = src->h * s;
        if (rw < W) rw = W;
        if (rh < H) rh = H;
    } else {
        rw = W;
        rh = H;
    }
    double ox = (rw - W) / 2, oy = (rh - H) / 2, fx = src->w / rw, fy = src->h / rh;
    int order[3] = {0, 1, 2};
    if (ic->bgr) order[0] = 2, order[2] = 0;
    /* (v / scale - mean) / std as one multiply-add per channel */
    float mul[3], add[3];
    for (int ch = 0; ch < 3; ch++) {
        mul[ch] = 1.0f / (ic->scale * ic->std[ch]);
        add[ch] = -ic->mean[ch] / ic->std[ch];
    }
    /* the columns' taps are the same on every row: computed once */
    int xs[2 * 16384];
    float wxs[16384];
    for (int x = 0; x < W; x++) {
        double sx = (x + ox + 0.5) * fx - 0.5;
        if (sx < 0) sx = 0;
        int x0 = (int)sx, x1 = x0 + 1 < src->w ? x0 + 1 : x0;
        if (x0 >= src->w) x0 = x1 = src->w - 1;
        xs[2 * x] = x0 * 3;
        xs[2 * x + 1] = x1 * 3;
        wxs[x] = (float)(sx - x0);
    }
    float *plane[3];
    for (int ch = 0; ch < 3; ch++)
        plane[ch] = dst + (size_t)order[ch] * H * W;
    for (int y = 0; y < H; y++) {
        double sy = (y + oy + 0.5) * fy - 0.5;
        if (sy < 0) sy = 0;
        int y0 = (int)sy, y1 = y0 + 1 < src->h ? y0 + 1 : y0;
        if (y0 >= src->h) y0 = y1 = src->h - 1;
        float wy = (float)(sy - y0);
        const uint8_t *r0 = src->p + (size_t)y0 * src->w * 3, *r1 = src->p + (size_t)y1 * src->w * 3;
        for (int x = 0; x < W; x++) {
            float wx = wxs[x];
            const uint8_t *a = r0 + xs[2 * x], *b = r0 + xs[2 * x + 1], *c = r1 + xs[2 * x], *d = r1 + xs[2 * x + 1];
            for (int ch = 0; ch < 3; ch++) {
                float top = a[ch] + (b[ch] - a[ch]) * wx, bot = c[ch] + (d[ch] - c[ch]) * wx;
                plane[ch][(size_t)y * W + x] = (top + (bot - top) * wy) * mul[ch] + add[ch];
            }
        }
    }
}

int srv_image_to_tensor(const srv_image_config *ic, const uint8_t *buf, size_t len, int64_t n, nn_tensor *out,
                        char *err, size_t en) {
    size_t plane = (size_t)ic->height * ic->width * 3;
    float *dst = malloc((size_t)n * plane * sizeof(float));
    if (!dst) return snprintf(err, en, "out of memory for %lld images", (long long)n), 503;
    tjhandle tj = tjInitDecompress();
    if (!tj) {
        free(dst);
        return snprintf(err, en, "cannot start TurboJPEG"), 503;
    }
    size_t off = 0;
    int st = 200;
    for (int64_t i = 0; i < n && st == 200; i++) {
        const uint8_t *e;
        size_t el;
        pixels px = {0};
        char why[200];
        if (srv_bytes_element(buf, len, &off, &e, &el)) {
            snprintf(why, sizeof why, "BYTES element runs past the data");
            st = 400;
        } else if (el >= 3 && e[0] == 0xff && e[1] == 0xd8 && e[2] == 0xff) {
            if (decode_jpeg(tj, ic, e, el, &px, why, sizeof why)) st = 400;
        } else if (el >= 8 && !memcmp(e, "\x89PNG\r\n\x1a\n", 8)) {
            if (decode_png(ic, e, el, &px, why, sizeof why)) st = 400;
        } else {
            snprintf(why, sizeof why, "neither a JPEG nor a PNG file");
            st = 400;
        }
        if (st == 200)
            resize_crop_normalize(ic, &px, dst + (size_t)i * plane);
        else
            snprintf(err, en, "image %lld: %s", (long long)i, why);
        free(px.p);
    }
    tjDestroy(tj);
    if (st != 200) {
        free(dst);
        return st;
    }
    memset(out, 0, sizeof *out);
    out->dtype = NN_DTYPE_FLOAT;
    out->ndim = 4;
    out->dims[0] = n;
    out->dims[1] = 3;
    out->dims[2] = ic->height;
    out->dims[3] = ic->width;
    out->data = dst;
    return 200;
}

/* ---- the decode pool: jobs with encoded images wait here, decoded ones go on to their model's queue */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job *head, *tail;
    int qlen, limit, stop, n;
    pthread_t th[64];
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void decode_job(srv_job *j) {
    srv_model *sm = j->model;
    char err[SRV_ERR_MAX] = "";
    int st = 200;
    for (int k = 0; k < sm->info.n_in && st == 200; k++) {
        if (!sm->info.in[k].bytes_input) continue;
        nn_tensor t;
        nn_tensor *raw = &j->req.in[k];
        st = srv_image_to_tensor(&sm->image, raw->data, j->req.in_bytes[k], raw->dims[0], &t, err, sizeof err);
        if (st == 200) {
            free(raw->data);
            *raw = t;
        }
    }
    if (st != 200) {
        /* refused before its model's queue, which counts the others */
        pthread_mutex_lock(&sm->mu);
        sm->met.requests++;
        sm->met.failures++;
        pthread_mutex_unlock(&sm->mu);
    } else {
        st = srv_model_submit(sm, j, err, sizeof err);
    }
    if (st) {
        j->status = st;
        snprintf(j->err, sizeof j->err, "%s", err);
        j->done(j, j->done_arg);
    }
}

static void *decoder(void *arg) {
    (void)arg;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (!pool.head && !pool.stop)
            pthread_cond_wait(&pool.cv, &pool.mu);
        if (!pool.head) break;
        srv_job *j = pool.head;
        pool.head = j->next;
        if (!pool.head) pool.tail = NULL;
        pool.qlen--;
        j->next = NULL;
        pthread_mutex_unlock(&pool.mu);
        decode_job(j);
        pthread_mutex_lock(&pool.mu);
    }
    pthread_mutex_unlock(&pool.mu);
    return NULL;
}

int srv_decode_start(int threads, int queue_limit) {
    pool.limit = queue_limit;
    for (; pool.n < threads && pool.n < 64; pool.n++)
        if (pthread_create(&pool.th[pool.n], NULL, decoder, NULL)) return -1;
    return 0;
}

int srv_decode_submit(srv_job *j, char *err, size_t en) {
    pthread_mutex_lock(&pool.mu);
    if (pool.stop || pool.qlen >= pool.limit || !pool.n) {
        pthread_mutex_unlock(&pool.mu);
        snprintf(err, en, "image decode queue full (%d requests waiting)", pool.limit);
        return 503;
    }
    j->next = NULL;
    if (pool.tail)
        pool.tail->next = j;
    else
        pool.head = j;
    pool.tail = j;
    pool.qlen++;
    pthread_cond_signal(&pool.cv);
    pthread_mutex_unlock(&pool.mu);
    return 0;
}

/* Decodes what is queued, then stops the threads. */
void srv_decode_stop(void) {
    pthread_mutex_lock(&pool.mu);
    pool.stop = 1;
    pthread_cond_broadcast(&pool.cv);
    pthread_mutex_unlock(&pool.mu);
    for (int i = 0; i < pool.n; i++)
        pthread_join(pool.th[i], NULL);
    pool.n = 0;
}
