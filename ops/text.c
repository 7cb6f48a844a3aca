/* Text: Cast to and from STRING (ops/text.h, called by Cast and
 * CastLike), StringNormalizer and TfIdfVectorizer.
 *
 * Strings are `char *` elements whose bytes live in call->pool, the
 * caller's input or the model's constants (docs/sequences.md); an op makes
 * new ones in the pool and may pass an input's pointers on unchanged. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/arena.h"
#include "half.h"
#include "text.h"

/* ---- Cast to STRING: numbers as std::to_chars writes them (what ONNX
 * Runtime's Cast gives): the fewest significant digits that read back to
 * the same value, in fixed or scientific notation, whichever is shorter
 * (fixed on a tie); NaN and infinities as "NaN", "INF", "-INF", the
 * spellings Cast reads back.  Integers in decimal. */

/* The shortest round-trip form of x; `is_float`: round trip through float. */
static void shortest(double x, bool is_float, char *out, size_t size) {
    if (isnan(x)) {
        snprintf(out, size, "NaN");
        return;
    }
    if (isinf(x)) {
        snprintf(out, size, x < 0 ? "-INF" : "INF");
        return;
    }
    if (x == 0) {
        snprintf(out, size, signbit(x) ? "-0" : "0");
        return;
    }
    char sci[48];
    int p = 1;
    for (; p < 17; p++) {
        snprintf(sci, sizeof sci, "%.*e", p - 1, x);
        if (is_float ? strtof(sci, NULL) == (float)x : strtod(sci, NULL) == x) break;
    }
    snprintf(sci, sizeof sci, "%.*e", p - 1, x);
    /* the digits and the exponent of "-d.ddde+XX" */
    const char *s = sci;
    bool neg = *s == '-';
    if (neg) s++;
    char digits[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    int exp = atoi(s + 1);
    char fixed[400];
    int len = 0;
    if (neg) fixed[len++] = '-';
    if (exp >= 0) {
        for (int i = 0; i <= exp || i < nd; i++) {
            if (i == exp + 1) fixed[len++] = '.';
            fixed[len++] = i < nd ? digits[i] : '0';
        }
    } else {
        fixed[len++] = '0';
        fixed[len++] = '.';
        for (int i = 0; i < -exp - 1; i++)
            fixed[len++] = '0';
        for (int i = 0; i < nd; i++)
            fixed[len++] = digits[i];
    }
    fixed[len] = 0;
    snprintf(out, size, "%s", len <= (int)strlen(sci) ? fixed : sci);
}

/* A number in a STRING tensor, whole: "+INF", "INF", "-INF" and "NaN" in
 * any case, or what strtod reads with nothing left over. */
static bool parse_double(const char *s, double *v) {
    if (!strcasecmp(s, "INF") || !strcasecmp(s, "+INF")) return *v = INFINITY, true;
    if (!strcasecmp(s, "-INF")) return *v = -INFINITY, true;
    if (!strcasecmp(s, "NaN")) return *v = NAN, true;
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return end != s && !*end;
}

static bool parse_float(const char *s, float *v) {
    double d;
    if (!parse_double(s, &d)) return false;
    if (isnan(d) || isinf(d)) return *v = (float)d, true;
    char *end;
    *v = strtof(s, &end); /* rounded once, from the text */
    return true;
}

bool nn_cast_string_supported(nn_dtype from, nn_dtype to) {
    /* FLOAT16 and BOOL have spellings of their own in ONNX Runtime ("1.5"
     * through float, "1"/"0" vs "True"): not matched, so refused */
    if (from == NN_DTYPE_STRING)
        return to == NN_DTYPE_STRING || to == NN_DTYPE_FLOAT || to == NN_DTYPE_DOUBLE || to == NN_DTYPE_INT8 ||
               to == NN_DTYPE_INT16 || to == NN_DTYPE_INT32 || to == NN_DTYPE_INT64 || to == NN_DTYPE_UINT8 ||
               to == NN_DTYPE_UINT16 || to == NN_DTYPE_UINT32 || to == NN_DTYPE_UINT64;
    return to == NN_DTYPE_STRING && from != NN_DTYPE_FLOAT16 && from != NN_DTYPE_BOOL && from != NN_DTYPE_UNDEFINED &&
           nn_cast_string_supported(NN_DTYPE_STRING, from);
}

static nn_status to_string(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    int64_t n = nn_tensor_elements(x);
    char **dst = c->out[0].data;
    for (int64_t i = 0; i < n; i++) {
        char buf[400];
        switch (x->dtype) {
        case NN_DTYPE_FLOAT: shortest(((const float *)x->data)[i], true, buf, sizeof buf); break;
        case NN_DTYPE_DOUBLE: shortest(((const double *)x->data)[i], false, buf, sizeof buf); break;
        case NN_DTYPE_UINT64:
            snprintf(buf, sizeof buf, "%llu", (unsigned long long)((const uint64_t *)x->data)[i]);
            break;
        case NN_DTYPE_UINT32: snprintf(buf, sizeof buf, "%u", ((const uint32_t *)x->data)[i]); break;
        case NN_DTYPE_UINT16: snprintf(buf, sizeof buf, "%u", ((const uint16_t *)x->data)[i]); break;
        case NN_DTYPE_UINT8: snprintf(buf, sizeof buf, "%u", ((const uint8_t *)x->data)[i]); break;
        default: snprintf(buf, sizeof buf, "%lld", (long long)nn_tensor_get_int(x, i)); break;
        }
        if (!(dst[i] = nn_pool_strndup(c->pool, buf, strlen(buf))))
            return nn_call_error(c, NN_ERR_NOMEM, "out of memory for strings");
    }
    return NN_OK;
}

static nn_status from_string(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    nn_tensor *y = &c->out[0];
    int64_t n = nn_tensor_elements(x);
    char *const *src = x->data;
    for (int64_t i = 0; i < n; i++) {
        const char *s = src[i] ? src[i] : "";
        bool ok = true;
        if (y->dtype == NN_DTYPE_FLOAT) {
            ok = parse_float(s, &((float *)y->data)[i]);
        } else if (y->dtype == NN_DTYPE_DOUBLE) {
            ok = parse_double(s, &((double *)y->data)[i]);
        } else if (y->dtype == NN_DTYPE_UINT64 || y->dtype == NN_DTYPE_UINT32 || y->dtype == NN_DTYPE_UINT16 ||
                   y->dtype == NN_DTYPE_UINT8) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(s, &end, 10);
            uint64_t max = y->dtype == NN_DTYPE_UINT64   ? UINT64_MAX
                           : y->dtype == NN_DTYPE_UINT32 ? UINT32_MAX
                           : y->dtype == NN_DTYPE_UINT16 ? UINT16_MAX
                                                         : UINT8_MAX;
            ok = end != s && !*end && !errno && s[0] != '-' && v <= max;
            if (ok && y->dtype == NN_DTYPE_UINT64) ((uint64_t *)y->data)[i] = v;
            if (ok && y->dtype == NN_DTYPE_UINT32) ((uint32_t *)y->data)[i] = (uint32_t)v;
            if (ok && y->dtype == NN_DTYPE_UINT16) ((uint16_t *)y->data)[i] = (uint16_t)v;
            if (ok && y->dtype == NN_DTYPE_UINT8) ((uint8_t *)y->data)[i] = (uint8_t)v;
        } else {
            char *end;
            errno = 0;
            long long v = strtoll(s, &end, 10);
            int64_t lo = y->dtype == NN_DTYPE_INT64   ? INT64_MIN
                         : y->dtype == NN_DTYPE_INT32 ? INT32_MIN
                         : y->dtype == NN_DTYPE_INT16 ? INT16_MIN
                                                      : INT8_MIN;
            int64_t hi = y->dtype == NN_DTYPE_INT64   ? INT64_MAX
                         : y->dtype == NN_DTYPE_INT32 ? INT32_MAX
                         : y->dtype == NN_DTYPE_INT16 ? INT16_MAX
                                                      : INT8_MAX;
            ok = end != s && !*end && !errno && v >= lo && v <= hi;
            if (ok && y->dtype == NN_DTYPE_INT64) ((int64_t *)y->data)[i] = v;
            if (ok && y->dtype == NN_DTYPE_INT32) ((int32_t *)y->data)[i] = (int32_t)v;
            if (ok && y->dtype == NN_DTYPE_INT16) ((int16_t *)y->data)[i] = (int16_t)v;
            if (ok && y->dtype == NN_DTYPE_INT8) ((int8_t *)y->data)[i] = (int8_t)v;
        }
        if (!ok)
            return nn_call_error(c, NN_ERR_INVALID, "string %lld (\"%.40s\") is not a %s", (long long)i, s,
                                 nn_dtype_name(y->dtype));
    }
    return NN_OK;
}

nn_status nn_cast_string(nn_call *c) {
    if (c->in[0].dtype == NN_DTYPE_STRING && c->out[0].dtype == NN_DTYPE_STRING) {
        int64_t n = nn_tensor_elements(&c->in[0]);
        if (n && c->out[0].data != c->in[0].data) memcpy(c->out[0].data, c->in[0].data, sizeof(char *) * (size_t)n);
        return NN_OK;
    }
    return c->out[0].dtype == NN_DTYPE_STRING ? to_string(c) : from_string(c);
}

/* ---- StringNormalizer (opset 10): drop the stopwords from a [C] or [1, C]
 * string tensor, then change case.  Case is changed and compared for ASCII
 * letters only; text with other bytes is refused where case matters (the
 * locale's mapping is not implemented). */

typedef struct strnorm_params {
    int action; /* 0 NONE, 1 LOWER, 2 UPPER */
    bool case_sensitive;
    int n_stop;
    const char *const *stop; /* in the model's arena: see NN_OPF_UNCACHED */
} strnorm_params;

static nn_status parse_StringNormalizer(nn_parse_ctx *ctx) {
    strnorm_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    const char *action;
    int64_t sensitive;
    nn_status st = nn_attr_string(ctx, "case_change_action", "NONE", &action);
    if (st == NN_OK) st = nn_attr_int(ctx, "is_case_sensitive", 0, &sensitive);
    if (st != NN_OK) return st;
    p->action = !strcmp(action, "NONE") ? 0 : !strcmp(action, "LOWER") ? 1 : !strcmp(action, "UPPER") ? 2 : -1;
    if (p->action < 0)
        return nn_parse_error(ctx, NN_ERR_INVALID, "case_change_action '%s' is none of NONE, LOWER, UPPER", action);
    p->case_sensitive = sensitive != 0;
    const nn_attr *a = nn_attr_find(ctx, "stopwords");
    if (a && a->type != NN_ATTR_STRINGS)
        return nn_parse_error(ctx, NN_ERR_INVALID, "attribute 'stopwords' must be a list of strings");
    p->n_stop = a ? a->n : 0;
    p->stop = a ? a->strings : NULL;
    return NN_OK;
}

static nn_status check_StringNormalizer(const void *params, char *err, size_t err_size) {
    const strnorm_params *p = params;
    if (p->action < 0 || p->action > 2 || !nn_check_bool(&p->case_sensitive) || p->n_stop < 0 ||
        (p->n_stop && !p->stop))
        return nn_check_error(err, err_size, "invalid StringNormalizer attributes");
    return NN_OK;
}

static bool ascii(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80) return false;
    return true;
}

static bool is_stopword(const strnorm_params *p, const char *s) {
    for (int k = 0; k < p->n_stop; k++)
        if (p->case_sensitive ? !strcmp(s, p->stop[k]) : !strcasecmp(s, p->stop[k])) return true;
    return false;
}

/* Checks the input and counts the strings kept. */
static nn_status strnorm_count(nn_call *c, int64_t *kept) {
    const strnorm_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    if (x->dtype != NN_DTYPE_STRING)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "input has dtype %s, expected STRING", nn_dtype_name(x->dtype));
    if (!(x->ndim == 1 || (x->ndim == 2 && x->dims[0] == 1)))
        return nn_call_error(c, NN_ERR_SHAPE, "input must be [C] or [1, C], got rank %d", x->ndim);
    int64_t n = nn_tensor_elements(x);
    if (n && !x->data) return NN_DYNAMIC; /* the count depends on the text */
    char *const *s = x->data;
    *kept = 0;
    for (int64_t i = 0; i < n; i++) {
        if ((p->action || (!p->case_sensitive && p->n_stop)) && !ascii(s[i]))
            return nn_call_error(c, NN_ERR_UNSUPPORTED,
                                 "string %lld is not ASCII: case mapping beyond ASCII is not supported", (long long)i);
        *kept += !is_stopword(p, s[i]);
    }
    return NN_OK;
}

static nn_status infer_StringNormalizer(nn_call *c) {
    int64_t kept = 0;
    nn_status st = strnorm_count(c, &kept);
    if (st != NN_OK) return st;
    int64_t dims[2] = {1, kept ? kept : 1}; /* all dropped: one empty string */
    if (c->in[0].ndim == 1) dims[0] = dims[1];
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_STRING, c->in[0].ndim, dims);
    return NN_OK;
}

static nn_status run_StringNormalizer(nn_call *c) {
    const strnorm_params *p = c->params;
    int64_t n = nn_tensor_elements(&c->in[0]), k = 0;
    char *const *src = c->in[0].data;
    char **dst = c->out[0].data;
    for (int64_t i = 0; i < n; i++) {
        if (is_stopword(p, src[i])) continue;
        if (!p->action) {
            dst[k++] = src[i];
            continue;
        }
        size_t len = strlen(src[i]);
        char *s = nn_pool_strndup(c->pool, src[i], len);
        if (!s) return nn_call_error(c, NN_ERR_NOMEM, "out of memory for strings");
        for (size_t j = 0; j < len; j++)
            if (p->action == 1 && s[j] >= 'A' && s[j] <= 'Z')
                s[j] = (char)(s[j] - 'A' + 'a');
            else if (p->action == 2 && s[j] >= 'a' && s[j] <= 'z')
                s[j] = (char)(s[j] - 'a' + 'A');
        dst[k++] = s;
    }
    if (!k) dst[0] = nn_pool_strndup(c->pool, "", 0);
    return dst[0] ? NN_OK : nn_call_error(c, NN_ERR_NOMEM, "out of memory for strings");
}

const nn_op_desc nn_op_StringNormalizer = {.name = "StringNormalizer",
                                           .min_inputs = 1,
                                           .max_inputs = 1,
                                           .min_outputs = 1,
                                           .max_outputs = 1,
                                           .flags = NN_OPF_ANY_DTYPE | NN_OPF_UNCACHED,
                                           .parse = parse_StringNormalizer,
                                           .check = check_StringNormalizer,
                                           .infer = infer_StringNormalizer,
                                           .run = run_StringNormalizer};

/* ---- TfIdfVectorizer (opset 9): counts of the pool's n-grams in each row
 * of a [C] or [N, C] input (int32/int64 against pool_int64s, strings
 * against pool_strings), n-grams of min..max items taken skip + 1 apart
 * for every skip up to max_skip_count (a 1-gram once), weighted by mode. */

enum { TFIDF_TF, TFIDF_IDF, TFIDF_TFIDF };

typedef struct tfidf_params {
    int64_t min_n, max_n, max_skip, out_dim;
    int mode;
    int n_starts, n_grams, n_pool;
    const int64_t *starts;  /* ngram_counts: where the (i+1)-grams start in the pool */
    const int64_t *indexes; /* ngram_indexes: output column of each n-gram */
    const float *weights;   /* per n-gram; NULL: ones */
    const int64_t *pool_ints;
    const char *const *pool_strings; /* (all in the model's arena: see NN_OPF_UNCACHED) */
} tfidf_params;

static nn_status tfidf_ints(nn_parse_ctx *ctx, const char *name, const int64_t **v, int *n) {
    const nn_attr *a = nn_attr_find(ctx, name);
    if (a && a->type != NN_ATTR_INTS)
        return nn_parse_error(ctx, NN_ERR_INVALID, "attribute '%s' must be a list of ints", name);
    *v = a ? a->ints : NULL;
    *n = a ? a->n : 0;
    return NN_OK;
}

/* The pool's layout: the (i+1)-grams fill [starts[i], starts[i+1]) in
 * whole n-grams, and there are as many n-grams as indexes (and weights). */
static nn_status tfidf_validate(const tfidf_params *p, char *err, size_t size) {
    if (p->mode < TFIDF_TF || p->mode > TFIDF_TFIDF || p->min_n < 1 || p->max_n < p->min_n || p->max_n > p->n_starts ||
        p->max_skip < 0 || p->max_skip > NN_ATTR_EXTENT_MAX || p->n_pool < 0)
        return nn_check_error(err, size, "gram lengths %lld..%lld, skip %lld or mode do not fit %d ngram_counts",
                              (long long)p->min_n, (long long)p->max_n, (long long)p->max_skip, p->n_starts);
    if (!p->starts || (!p->pool_ints == !p->pool_strings) || !p->indexes)
        return nn_check_error(err, size, "needs ngram_counts, ngram_indexes and one of pool_int64s, pool_strings");
    int64_t grams = 0;
    for (int i = 0; i < p->n_starts; i++) {
        int64_t begin = p->starts[i], end = i + 1 < p->n_starts ? p->starts[i + 1] : p->n_pool;
        if (begin < 0 || end < begin || end > p->n_pool || (end - begin) % (i + 1))
            return nn_check_error(err, size, "ngram_counts[%d] = %lld does not split the pool into %d-grams", i,
                                  (long long)begin, i + 1);
        grams += (end - begin) / (i + 1);
    }
    if (grams != p->n_grams)
        return nn_check_error(err, size, "the pool holds %lld n-grams, ngram_indexes %d", (long long)grams, p->n_grams);
    for (int i = 0; i < p->n_grams; i++)
        if (p->indexes[i] < 0 || p->indexes[i] >= NN_ATTR_EXTENT_MAX)
            return nn_check_error(err, size, "ngram_indexes[%d] = %lld is out of range", i, (long long)p->indexes[i]);
    return NN_OK;
}

static nn_status parse_TfIdfVectorizer(nn_parse_ctx *ctx) {
    tfidf_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    const char *mode;
    nn_status st = nn_attr_int(ctx, "min_gram_length", 0, &p->min_n);
    if (st == NN_OK) st = nn_attr_int(ctx, "max_gram_length", 0, &p->max_n);
    if (st == NN_OK) st = nn_attr_int(ctx, "max_skip_count", 0, &p->max_skip);
    if (st == NN_OK) st = nn_attr_string(ctx, "mode", "", &mode);
    if (st == NN_OK) st = tfidf_ints(ctx, "ngram_counts", &p->starts, &p->n_starts);
    if (st == NN_OK) st = tfidf_ints(ctx, "ngram_indexes", &p->indexes, &p->n_grams);
    if (st == NN_OK) st = tfidf_ints(ctx, "pool_int64s", &p->pool_ints, &p->n_pool);
    if (st != NN_OK) return st;
    p->mode = !strcmp(mode, "TF")      ? TFIDF_TF
              : !strcmp(mode, "IDF")   ? TFIDF_IDF
              : !strcmp(mode, "TFIDF") ? TFIDF_TFIDF
                                       : -1;
    const nn_attr *a = nn_attr_find(ctx, "pool_strings");
    if (a && (a->type != NN_ATTR_STRINGS || p->pool_ints))
        return nn_parse_error(ctx, NN_ERR_INVALID, "pool_strings must be a list of strings, and pool_int64s absent");
    if (a) {
        p->pool_strings = a->strings;
        p->n_pool = a->n;
    }
    const nn_attr *w = nn_attr_find(ctx, "weights");
    if (w && (w->type != NN_ATTR_FLOATS || w->n != p->n_grams))
        return nn_parse_error(ctx, NN_ERR_INVALID, "weights must be %d floats, one per n-gram", p->n_grams);
    p->weights = w ? w->floats : NULL;
    if ((st = tfidf_validate(p, ctx->err, ctx->err_size)) != NN_OK) return st;
    for (int i = 0; i < p->n_grams; i++)
        if (p->indexes[i] + 1 > p->out_dim) p->out_dim = p->indexes[i] + 1;
    return NN_OK;
}

static nn_status check_TfIdfVectorizer(const void *params, char *err, size_t err_size) {
    return tfidf_validate(params, err, err_size);
}

static nn_status infer_TfIdfVectorizer(nn_call *c) {
    const tfidf_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    bool strings = p->pool_strings != NULL;
    if (strings ? x->dtype != NN_DTYPE_STRING : x->dtype != NN_DTYPE_INT32 && x->dtype != NN_DTYPE_INT64)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "input has dtype %s, the pool holds %s", nn_dtype_name(x->dtype),
                             strings ? "strings" : "int64s");
    if (x->ndim != 1 && x->ndim != 2)
        return nn_call_error(c, NN_ERR_SHAPE, "input must be [C] or [N, C], got rank %d", x->ndim);
    int64_t dims[2] = {x->dims[0], p->out_dim};
    if (x->ndim == 1) dims[0] = p->out_dim;
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, x->ndim, dims);
    return NN_OK;
}

/* Whether the n items of row x from `at`, `step` apart, are n-gram g of the pool. */
static bool gram_at(const tfidf_params *p, const nn_tensor *x, int64_t at, int64_t step, int64_t n, int64_t g) {
    for (int64_t k = 0; k < n; k++) {
        int64_t i = at + k * step;
        if (p->pool_strings ? strcmp(((char *const *)x->data)[i], p->pool_strings[g + k]) != 0
                            : nn_tensor_get_int(x, i) != p->pool_ints[g + k])
            return false;
    }
    return true;
}

static nn_status run_TfIdfVectorizer(nn_call *c) {
    const tfidf_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    int64_t rows = x->ndim == 2 ? x->dims[0] : 1, cols = x->dims[x->ndim - 1];
    float *y = c->out[0].data;
    memset(y, 0, sizeof(float) * (size_t)(rows * p->out_dim));
    for (int64_t r = 0; r < rows; r++) {
        float *out = y + r * p->out_dim;
        int gram = 0; /* index of the first n-gram of length n among all n-grams */
        for (int64_t n = 1; n <= p->n_starts; n++) {
            int64_t begin = p->starts[n - 1], end = n < p->n_starts ? p->starts[n] : p->n_pool;
            int64_t count = (end - begin) / n;
            if (n >= p->min_n && n <= p->max_n)
                for (int64_t g = 0; g < count; g++) {
                    int64_t hits = 0;
                    for (int64_t skip = 0; skip <= (n == 1 ? 0 : p->max_skip) && (n - 1) * (skip + 1) < cols; skip++)
                        for (int64_t at = 0; at + (n - 1) * (skip + 1) < cols; at++)
                            hits += gram_at(p, x, r * cols + at, skip + 1, n, begin + g * n);
                    int k = gram + (int)g;
                    float w = p->weights ? p->weights[k] : 1.0f;
                    out[p->indexes[k]] = p->mode == TFIDF_TF    ? (float)hits
                                         : p->mode == TFIDF_IDF ? (hits ? w : 0.0f)
                                                                : (float)hits * w;
                }
            gram += (int)count;
        }
    }
    return NN_OK;
}

const nn_op_desc nn_op_TfIdfVectorizer = {.name = "TfIdfVectorizer",
                                          .min_inputs = 1,
                                          .max_inputs = 1,
                                          .min_outputs = 1,
                                          .max_outputs = 1,
                                          .flags = NN_OPF_ANY_DTYPE | NN_OPF_UNCACHED,
                                          .parse = parse_TfIdfVectorizer,
                                          .check = check_TfIdfVectorizer,
                                          .infer = infer_TfIdfVectorizer,
                                          .run = run_TfIdfVectorizer};
