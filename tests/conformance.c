/* ONNX backend conformance: runs every test in Debian's libonnx-testdata
 * (every suite folder under DATA_ROOT: node, pytorch-converted,
 * pytorch-operator, simple, ...) and compares outputs (floats:
 * |got - want| <= atol + rtol * |want|; integers and bools exactly).
 *
 * usage: conformance [-v] [--cache-dir DIR] [--device DEV] [--expected FILE] [FILTER...]
 *        conformance --write-expected FILE
 *   FILTER            substring of the test name: run only those
 *   --cache-dir DIR   run each test twice, building its plan, then loading it from the cache
 *   --device DEV      run on DEV, e.g. gpu0, instead of the CPU
 *   --expected FILE   the tests nn may refuse (default tests/conformance.expected, from the source tree)
 *   --write-expected FILE   run everything and write FILE from the results: regenerate the list with
 *                     `build/tests/conformance --write-expected tests/conformance.expected` when ops land
 *
 * Every test ends as one of: passed; refused (the engine said NN_ERR_UNSUPPORTED
 * with a reason, at load or at run time); failed (wrong output, any other error,
 * or a crash); set aside (training-only tests, never run: see set_aside[]).
 * The expected list holds one line per refused or set-aside test,
 * "suite/test<TAB>reason".  The run fails when a test fails (a wrong output is
 * never allowed, listed or not), is refused without being listed, or passes
 * while listed; a listed test refused for another reason is only noted.
 * Each test runs in a child process so that a crash is a reported failure,
 * not the end of the run. */
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nn.h"
#include "onnx.pb-c.h"
#include "values.h"

#define DATA_ROOT        "/usr/share/libonnx-testdata/data"
#define DEFAULT_EXPECTED "tests/conformance.expected"
static const double RTOL = 1e-3, ATOL = 1e-5;

/* Tests set aside: they exercise training, which an inference engine does
 * not do; they are listed in the expected file but never run. */
static const struct {
    const char *prefix, *reason;
} set_aside[] = {
    {"test_training_dropout", "training: training-mode Dropout draws a random mask"},
    {"test_nllloss_", "training: NegativeLogLikelihoodLoss, a training loss"},
    {"test_sce_", "training: SoftmaxCrossEntropyLoss, a training loss"},
    {"test_adagrad", "training: Adagrad optimizer step (ai.onnx.preview.training)"},
    {"test_adam", "training: Adam optimizer step (ai.onnx.preview.training)"},
    {"test_momentum", "training: Momentum optimizer step (ai.onnx.preview.training)"},
    {"test_nesterov_momentum", "training: Momentum optimizer step (ai.onnx.preview.training)"},
};

enum { REASON_SIZE = 400 };

typedef struct result {
    int passed, failed; /* data sets */
    int refused;        /* 1 when the engine refused the test (NN_ERR_UNSUPPORTED) */
    char reason[REASON_SIZE];
} result;

static int verbose;

static bool file_exists(const char *p) {
    struct stat s;
    return stat(p, &s) == 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* IEEE-754 binary16 bits to double (exact). */
/* bfloat16 is a float's upper half */
static double bf16_value(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static double half_value(uint16_t h) {
    int e = h >> 10 & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m | 0x400, e - 25);
    return h & 0x8000 ? -v : v;
}

static bool is_float_dtype(nn_dtype t) {
    return t == NN_DTYPE_FLOAT || t == NN_DTYPE_DOUBLE || t == NN_DTYPE_FLOAT16 || t == NN_DTYPE_BFLOAT16;
}

static double value_at(const nn_tensor *t, int64_t i) {
    switch (t->dtype) {
    case NN_DTYPE_FLOAT: return ((const float *)t->data)[i];
    case NN_DTYPE_DOUBLE: return ((const double *)t->data)[i];
    case NN_DTYPE_FLOAT16: return half_value(((const uint16_t *)t->data)[i]);
    case NN_DTYPE_BFLOAT16: return bf16_value(((const uint16_t *)t->data)[i]);
    case NN_DTYPE_INT64: return (double)((const int64_t *)t->data)[i];
    case NN_DTYPE_UINT64: return (double)((const uint64_t *)t->data)[i];
    case NN_DTYPE_INT32: return ((const int32_t *)t->data)[i];
    case NN_DTYPE_UINT32: return ((const uint32_t *)t->data)[i];
    case NN_DTYPE_INT16: return ((const int16_t *)t->data)[i];
    case NN_DTYPE_UINT16: return ((const uint16_t *)t->data)[i];
    case NN_DTYPE_INT8: return ((const int8_t *)t->data)[i];
    default: return ((const uint8_t *)t->data)[i];
    }
}

/* Integers compare as integers: a double cannot tell 64-bit values apart. */
static bool same_int(const nn_tensor *got, const nn_tensor *want, int64_t i) {
    size_t esz = nn_dtype_size(want->dtype);
    return !memcmp((const char *)got->data + (size_t)i * esz, (const char *)want->data + (size_t)i * esz, esz);
}

static const char *kind_name(nn_dtype t) {
    return t == NN_DTYPE_SEQUENCE ? "a sequence" : t == NN_DTYPE_NONE ? "an empty optional" : nn_dtype_name(t);
}

static bool compare_tensor(const nn_tensor *got, const nn_tensor *want, char *msg, size_t msg_size);

/* true when got matches want (a tensor, a sequence item by item, or an
 * empty optional); describes the worst mismatch in msg */
static bool compare(const nn_tensor *got, const nn_tensor *want, char *msg, size_t msg_size) {
    if (got->dtype != want->dtype && (nn_dtype_is_container(got->dtype) || nn_dtype_is_container(want->dtype))) {
        snprintf(msg, msg_size, "got %s, expected %s", kind_name(got->dtype), kind_name(want->dtype));
        return false;
    }
    if (want->dtype == NN_DTYPE_NONE) return true;
    if (want->dtype != NN_DTYPE_SEQUENCE) return compare_tensor(got, want, msg, msg_size);
    const nn_seq *g = got->data, *w = want->data;
    if (g->n != w->n) {
        snprintf(msg, msg_size, "a sequence of %lld tensors, expected %lld", (long long)g->n, (long long)w->n);
        return false;
    }
    for (int64_t i = 0; i < w->n; i++) {
        char inner[300];
        if (!compare_tensor(&g->items[i], &w->items[i], inner, sizeof inner)) {
            snprintf(msg, msg_size, "sequence item %lld: %.200s", (long long)i, inner);
            return false;
        }
    }
    return true;
}

static bool compare_tensor(const nn_tensor *got, const nn_tensor *want, char *msg, size_t msg_size) {
    if (got->dtype != want->dtype) {
        snprintf(msg, msg_size, "dtype %s, expected %s", nn_dtype_name(got->dtype), nn_dtype_name(want->dtype));
        return false;
    }
    bool same_shape = got->ndim == want->ndim;
    for (int d = 0; same_shape && d < got->ndim; d++)
        same_shape = got->dims[d] == want->dims[d];
    if (!same_shape) {
        int len = snprintf(msg, msg_size, "shape (");
        for (int d = 0; d < got->ndim; d++)
            len += snprintf(msg + len, msg_size - (size_t)len, "%lld,", (long long)got->dims[d]);
        len += snprintf(msg + len, msg_size - (size_t)len, "), expected (");
        for (int d = 0; d < want->ndim; d++)
            len += snprintf(msg + len, msg_size - (size_t)len, "%lld,", (long long)want->dims[d]);
        snprintf(msg + len, msg_size - (size_t)len, ")");
        return false;
    }
    int64_t n = nn_tensor_elements(want), worst = -1, bad = 0;
    if (want->dtype == NN_DTYPE_STRING) {
        for (int64_t i = 0; i < n; i++) {
            const char *g = ((char *const *)got->data)[i], *w = ((char *const *)want->data)[i];
            if (strcmp(g, w) != 0) {
                snprintf(msg, msg_size, "string %lld is \"%.60s\", expected \"%.60s\"", (long long)i, g, w);
                return false;
            }
        }
        return true;
    }
    double worst_excess = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = value_at(got, i), w = value_at(want, i);
        bool ok;
        double excess = 0;
        if (is_float_dtype(want->dtype)) {
            if (isnan(w) || isnan(g))
                ok = isnan(w) && isnan(g);
            else if (isinf(w) || isinf(g))
                ok = g == w;
            else {
                /* ONNX's BFLOAT16 data (onnx 1.12) truncates where the spec rounds to nearest:
                 * one bfloat16 step (2^-7 relative at most) apart */
                double rtol = want->dtype == NN_DTYPE_BFLOAT16 ? 0x1p-7 : RTOL;
                excess = fabs(g - w) - (ATOL + rtol * fabs(w));
                ok = excess <= 0;
            }
            if (!ok && !(excess > 0)) excess = INFINITY;
        } else {
            ok = same_int(got, want, i);
            excess = ok ? 0 : fabs(g - w) + 1;
        }
        if (!ok) {
            bad++;
            if (worst < 0 || excess > worst_excess) {
                worst = i;
                worst_excess = excess;
            }
        }
    }
    if (!bad) return true;
    snprintf(msg, msg_size, "%lld of %lld values differ; largest error %.6g at element %lld (got %.8g, expected %.8g)",
             (long long)bad, (long long)n, fabs(value_at(got, worst) - value_at(want, worst)), (long long)worst,
             value_at(got, worst), value_at(want, worst));
    return false;
}

/* Load input_*.pb or output_*.pb of a data set; returns the count, or -1
 * with the status of the file that failed in *st. */
static int load_set(const char *dir, const char *kind, const nn_value_kind *kinds, nn_tensor *ts, int cap,
                    nn_status *st) {
    int n = 0;
    for (; n < cap; n++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s_%d.pb", dir, kind, n);
        if (!file_exists(p)) break;
        if ((*st = nn_value_load(p, kinds[n], &ts[n])) != NN_OK) {
            for (int i = 0; i < n; i++)
                nn_tensor_release(&ts[i]);
            return -1;
        }
    }
    return n;
}

enum { MAX_IO = 32 };

/* --cache-dir DIR: every test runs twice, first building and writing its
 * plan (a miss), then from the cache (which must be a hit). */
static const char *cache_dir;
/* --device DEV: nn_options.device (NULL: the CPU) */
static const char *device;

static void *unpack_model(size_t len, const uint8_t *data) { return onnx__model_proto__unpack(NULL, len, data); }

static uint8_t *read_whole(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        rewind(f);
        buf = size >= 0 ? malloc((size_t)size + 1) : NULL;
        if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
            free(buf);
            buf = NULL;
        }
        *len = (size_t)(size > 0 ? size : 0);
    }
    fclose(f);
    return buf;
}

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    *v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

/* Top-level fields 3 to 7 of a message in protobuf wire format: the values of
 * a SequenceProto, or the value of an OptionalProto (onnx-data.proto, whose
 * generated code Debian does not ship; 1 is the name, 2 the elem_type).
 * -1 when the bytes are not protobuf. */
static long count_value_fields(const uint8_t *p, size_t len) {
    const uint8_t *end = p + len;
    long n = 0;
    while (p < end) {
        uint64_t key, v;
        if (!read_varint(&p, end, &key)) return -1;
        switch (key & 7) {
        case 0:
            if (!read_varint(&p, end, &v)) return -1;
            break;
        case 1: p += 8; break;
        case 5: p += 4; break;
        case 2:
            if (!read_varint(&p, end, &v) || v > (uint64_t)(end - p)) return -1;
            p += v;
            n += (key >> 3) >= 3 && (key >> 3) <= 7;
            break;
        default: return -1;
        }
        if (p > end) return -1;
    }
    return n;
}

/* What a test-data file for a graph input or output of type `tp` holds, when
 * it is not a tensor: "input_0.pb is a SequenceProto of 3 values".  Test
 * files store such values as SequenceProto / OptionalProto / MapProto, which
 * nn_tensor_load would misread as a TensorProto. */
static void describe_value_file(const Onnx__TypeProto *tp, const char *path, const char *file, char *out,
                                size_t out_size) {
    size_t len = 0;
    uint8_t *buf = read_whole(path, &len);
    if (!buf) return;
    long n = count_value_fields(buf, len);
    if (n < 0)
        snprintf(out, out_size, "%s is not protobuf", file);
    else if (tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE)
        snprintf(out, out_size, "%s is a SequenceProto of %ld value%s", file, n, n == 1 ? "" : "s");
    else if (tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE)
        snprintf(out, out_size, "%s is an OptionalProto, %s", file, n ? "holding a value" : "empty");
    else if (tp->value_case == ONNX__TYPE_PROTO__VALUE_MAP_TYPE)
        snprintf(out, out_size, "%s is a MapProto", file);
    free(buf);
}

/* The first test-data file in set_dir that holds no TensorProto, according to
 * the model's declared graph input and output types; "" when none. */
static void non_tensor_data(const char *model_path, const char *set_dir, char *out, size_t out_size) {
    out[0] = 0;
    size_t len = 0;
    uint8_t *buf = read_whole(model_path, &len);
    Onnx__ModelProto *mp = buf ? unpack_model(len, buf) : NULL;
    free(buf);
    if (!mp || !mp->graph) goto done;
    const Onnx__GraphProto *g = mp->graph;
    int k = 0; /* input_k.pb is the k-th graph input that is not an initializer */
    for (size_t i = 0; i < g->n_input && !out[0]; i++) {
        bool init = false;
        for (size_t j = 0; j < g->n_initializer && !init; j++)
            init = g->initializer[j]->name && g->input[i]->name && !strcmp(g->initializer[j]->name, g->input[i]->name);
        if (init) continue;
        const Onnx__TypeProto *tp = g->input[i]->type;
        char path[4600], file[64];
        snprintf(file, sizeof file, "input_%d.pb", k++);
        snprintf(path, sizeof path, "%s/%s", set_dir, file);
        if (tp && tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE)
            describe_value_file(tp, path, file, out, out_size);
    }
    for (size_t i = 0; i < g->n_output && !out[0]; i++) {
        const Onnx__TypeProto *tp = g->output[i]->type;
        char path[4600], file[64];
        snprintf(file, sizeof file, "output_%zu.pb", i);
        snprintf(path, sizeof path, "%s/%s", set_dir, file);
        if (tp && tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE)
            describe_value_file(tp, path, file, out, out_size);
    }
done:
    if (mp) onnx__model_proto__free_unpacked(mp, NULL);
}

static nn_options test_options(int batch) {
    nn_options opt = nn_options_default();
    opt.cache = cache_dir != NULL;
    opt.cache_dir = cache_dir;
    if (device) opt.device = device;
    if (batch > 0) opt.batch = batch;
    return opt;
}

static nn_value_kind type_kind(const Onnx__TypeProto *tp) {
    if (!tp) return NN_KIND_TENSOR;
    return tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE   ? NN_KIND_SEQUENCE
           : tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE ? NN_KIND_OPTIONAL
                                                                     : NN_KIND_TENSOR;
}

/* What the model's graph inputs (those not initializers, in order) and
 * outputs are: which kind of file input_k.pb / output_k.pb holds. */
static void io_kinds(const char *model_path, nn_value_kind *in, nn_value_kind *out) {
    for (int k = 0; k < MAX_IO; k++)
        in[k] = out[k] = NN_KIND_TENSOR;
    size_t len = 0;
    uint8_t *buf = read_whole(model_path, &len);
    Onnx__ModelProto *mp = buf ? unpack_model(len, buf) : NULL;
    free(buf);
    if (!mp || !mp->graph) goto done;
    const Onnx__GraphProto *g = mp->graph;
    int k = 0;
    for (size_t i = 0; i < g->n_input && k < MAX_IO; i++) {
        bool init = false;
        for (size_t j = 0; j < g->n_initializer && !init; j++)
            init = g->initializer[j]->name && g->input[i]->name && !strcmp(g->initializer[j]->name, g->input[i]->name);
        if (!init) in[k++] = type_kind(g->input[i]->type);
    }
    for (size_t i = 0; i < g->n_output && i < MAX_IO; i++)
        out[i] = type_kind(g->output[i]->type);
done:
    if (mp) onnx__model_proto__free_unpacked(mp, NULL);
}

/* A data file nn_tensor_load could not read (status st): the model's own
 * refusal when it has one (a graph input of a type nn does not hold), else the
 * file's: a refusal when it is NN_ERR_UNSUPPORTED, a failure otherwise. */
static void refuse_data(const char *name, const char *model_path, const char *set_dir, nn_status st, result *r) {
    char file_error[REASON_SIZE];
    snprintf(file_error, sizeof file_error, "%s", nn_last_error());
    nn_options opt = test_options(0);
    opt.cache = 0;
    nn_model *m = NULL;
    if (nn_load(model_path, &opt, &m) == NN_ERR_UNSUPPORTED) {
        char data[200];
        non_tensor_data(model_path, set_dir, data, sizeof data);
        snprintf(r->reason, sizeof r->reason, "%s%s%s%s", nn_last_error(), data[0] ? " (" : "", data,
                 data[0] ? ")" : "");
    } else if (st == NN_ERR_UNSUPPORTED) {
        snprintf(r->reason, sizeof r->reason, "%s", file_error);
    } else {
        printf("FAIL %s: test data: %s\n", name, file_error);
        r->failed++;
        nn_free(m);
        return;
    }
    nn_free(m);
    r->refused = 1;
}

static void dims_string(const nn_tensor *t, char *buf, size_t size) {
    size_t at = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < t->ndim && at < size; d++)
        at += (size_t)snprintf(buf + at, size - at, d ? ",%lld" : "%lld", (long long)t->dims[d]);
    if (at < size) snprintf(buf + at, size - at, "]");
}

/* Whether an input of the test data has a rank or fixed dimension other
 * than the model declares (the BFLOAT16 CastLike tests' `like` is [1] in
 * onnx 1.12's data, [3,4] in their models); says which in msg. */
static bool data_contradicts_model(const nn_model *m, const nn_tensor *in, int n_in, char *msg, size_t size) {
    for (int k = 0; k < n_in; k++) {
        nn_tensor decl = {0};
        const char *nm = "";
        if (nn_dtype_is_container(in[k].dtype) || nn_input_info(m, k, &nm, &decl) != NN_OK || decl.ndim < 0) continue;
        bool differ = decl.ndim != in[k].ndim;
        for (int d = 0; d < decl.ndim && !differ; d++)
            differ = decl.dims[d] >= 0 && decl.dims[d] != in[k].dims[d];
        if (differ) {
            char got[120], want[120];
            dims_string(&in[k], got, sizeof got);
            dims_string(&decl, want, sizeof want);
            snprintf(msg, size, "test data: input '%s' is %s, the model declares %s", nm, got, want);
            return true;
        }
    }
    return false;
}

static void run_test(const char *name, const char *dir, bool from_cache, result *r) {
    char model_path[4200];
    snprintf(model_path, sizeof model_path, "%s/model.onnx", dir);
    /* data sets, sorted */
    DIR *dd = opendir(dir);
    char *sets[64];
    int n_sets = 0;
    struct dirent *e;
    while (dd && (e = readdir(dd)) && n_sets < 64)
        if (!strncmp(e->d_name, "test_data_set_", 14)) sets[n_sets++] = strdup(e->d_name);
    if (dd) closedir(dd);
    qsort(sets, (size_t)n_sets, sizeof *sets, cmp_str);

    nn_model *m = NULL;
    nn_value_kind in_kinds[MAX_IO], out_kinds[MAX_IO];
    io_kinds(model_path, in_kinds, out_kinds);
    for (int s = 0; s < n_sets; s++) {
        char set_dir[4400];
        snprintf(set_dir, sizeof set_dir, "%s/%s", dir, sets[s]);
        nn_tensor in[MAX_IO] = {0}, want[MAX_IO] = {0}, got[MAX_IO] = {0};
        nn_status load_st = NN_OK;
        int n_in = load_set(set_dir, "input", in_kinds, in, MAX_IO, &load_st);
        int n_want = n_in < 0 ? -1 : load_set(set_dir, "output", out_kinds, want, MAX_IO, &load_st);
        if (n_in < 0 || n_want < 0) {
            refuse_data(name, model_path, set_dir, load_st, r);
            goto next;
        }
        if (!m) {
            /* bind a symbolic batch dimension to the data's */
            nn_options opt = test_options(n_in > 0 && in[0].ndim > 0 && in[0].dims[0] > 0 ? (int)in[0].dims[0] : 0);
            nn_status st = nn_load(model_path, &opt, &m);
            if (st == NN_ERR_UNSUPPORTED) {
                snprintf(r->reason, sizeof r->reason, "%s", nn_last_error());
                r->refused = 1;
                goto next;
            }
            if (st != NN_OK) {
                printf("FAIL %s: load%s: %s\n", name, from_cache ? " from the cache" : "", nn_last_error());
                r->failed++;
                goto next;
            }
            nn_model_stats stats;
            nn_model_get_stats(m, &stats);
            /* a plan the cache declines to store ("not cached: ...") is loaded afresh each time */
            bool declined = stats.cache_warning && !strncmp(stats.cache_warning, "not cached:", 11);
            if (from_cache && stats.cache != NN_CACHE_HIT && !declined) {
                printf("FAIL %s: second load was not a cache hit (%s)\n", name,
                       stats.cache_warning ? stats.cache_warning : "no warning");
                r->failed++;
                goto next;
            }
        }
        if (n_want != nn_output_count(m)) {
            printf("FAIL %s/%s: model has %d outputs, test data %d\n", name, sets[s], nn_output_count(m), n_want);
            r->failed++;
            goto next;
        }
        /* numpy has no bfloat16: ONNX's test data stores BFLOAT16 tensors as their UINT16 bits */
        for (int k = 0; k < n_in + n_want; k++) {
            nn_tensor *t = k < n_in ? &in[k] : &want[k - n_in];
            nn_tensor decl = {0};
            const char *nm = "";
            if ((k < n_in ? nn_input_info(m, k, &nm, &decl) : nn_output_info(m, k - n_in, &nm, &decl)) == NN_OK &&
                decl.dtype == NN_DTYPE_BFLOAT16 && t->dtype == NN_DTYPE_UINT16)
                t->dtype = NN_DTYPE_BFLOAT16;
        }
        nn_status st = nn_predict_values(m, in, n_in, got, n_want);
        if ((st == NN_ERR_ARG || st == NN_ERR_SHAPE) && data_contradicts_model(m, in, n_in, r->reason, sizeof r->reason)) {
            r->refused = 1; /* no runtime can run it as the model is declared */
            goto next;
        }
        if (st == NN_ERR_UNSUPPORTED) {
            snprintf(r->reason, sizeof r->reason, "%s", nn_last_error());
            r->refused = 1;
            goto next;
        }
        if (st != NN_OK) {
            printf("FAIL %s/%s: predict%s: %s\n", name, sets[s], from_cache ? " from the cache" : "", nn_last_error());
            r->failed++;
            goto next;
        }
        bool ok = true;
        for (int k = 0; k < n_want; k++) {
            char msg[300];
            if (!compare(&got[k], &want[k], msg, sizeof msg)) {
                const char *oname = "";
                nn_output_info(m, k, &oname, NULL);
                printf("FAIL %s/%s%s: output '%s': %s\n", name, sets[s], from_cache ? " (cache hit)" : "", oname, msg);
                ok = false;
            }
        }
        if (ok)
            r->passed++;
        else
            r->failed++;
    next:
        for (int k = 0; k < MAX_IO; k++) {
            nn_tensor_release(&in[k]);
            nn_tensor_release(&want[k]);
            nn_tensor_release(&got[k]);
        }
        if (r->refused) break;
    }
    nn_free(m);
    for (int s = 0; s < n_sets; s++)
        free(sets[s]);
    /* the list is one line per test: a reason never holds a tab or a newline */
    for (char *p = r->reason; *p; p++)
        if (*p == '\t' || *p == '\n' || *p == '\r') *p = ' ';
}

/* Run one test in a child; a crash becomes a failure. */
static void run_isolated(const char *name, const char *dir, result *r) {
    int fd[2];
    memset(r, 0, sizeof *r);
    if (pipe(fd) != 0) {
        perror("pipe");
        exit(2);
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        result cr = {0};
        run_test(name, dir, false, &cr);
        if (cache_dir && !cr.refused) run_test(name, dir, true, &cr);
        fflush(stdout);
        ssize_t w = write(fd[1], &cr, sizeof cr);
        _exit(w == (ssize_t)sizeof cr ? 0 : 3);
    }
    close(fd[1]);
    ssize_t got = read(fd[0], r, sizeof *r);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != (ssize_t)sizeof *r || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("FAIL %s: crashed (%s %d)\n", name, WIFSIGNALED(status) ? "signal" : "exit",
               WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        memset(r, 0, sizeof *r);
        r->failed = 1;
    }
}

/* ---- the expected list: "suite/test<TAB>reason" lines, '#' comments */
typedef struct entry {
    char *key, *reason;
    bool seen;
} entry;

typedef struct entries {
    entry *e;
    int n, cap;
} entries;

static int cmp_entry(const void *a, const void *b) { return strcmp(((const entry *)a)->key, ((const entry *)b)->key); }

static void entries_add(entries *l, const char *key, const char *reason) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->e = realloc(l->e, sizeof *l->e * (size_t)l->cap);
        if (!l->e) {
            fprintf(stderr, "conformance: out of memory\n");
            exit(2);
        }
    }
    l->e[l->n++] = (entry){strdup(key), strdup(reason), false};
}

/* false (with a message) when the file is missing or a line is malformed */
static bool read_expected(const char *path, entries *l) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "conformance: cannot read %s (run from the source tree, or pass --expected FILE)\n", path);
        return false;
    }
    char line[4096];
    int no = 0;
    bool ok = true;
    while (fgets(line, sizeof line, f)) {
        no++;
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        char *tab = strchr(line, '\t');
        if (!tab || tab == line || !tab[1]) {
            fprintf(stderr, "conformance: %s:%d: expected 'suite/test<TAB>reason'\n", path, no);
            ok = false;
            continue;
        }
        *tab = 0;
        entries_add(l, line, tab + 1);
    }
    fclose(f);
    qsort(l->e, (size_t)l->n, sizeof *l->e, cmp_entry);
    for (int i = 1; i < l->n; i++)
        if (!strcmp(l->e[i].key, l->e[i - 1].key)) {
            fprintf(stderr, "conformance: %s: %s is listed twice\n", path, l->e[i].key);
            ok = false;
        }
    return ok;
}

static entry *find_entry(entries *l, const char *key) {
    entry k = {(char *)key, NULL, false};
    return l->n ? bsearch(&k, l->e, (size_t)l->n, sizeof *l->e, cmp_entry) : NULL;
}

static const char *set_aside_reason(const char *name) {
    for (size_t x = 0; x < sizeof set_aside / sizeof *set_aside; x++)
        if (!strncmp(name, set_aside[x].prefix, strlen(set_aside[x].prefix))) return set_aside[x].reason;
    return NULL;
}

static bool write_expected(const char *path, entries *l) {
    qsort(l->e, (size_t)l->n, sizeof *l->e, cmp_entry);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return false;
    }
    fprintf(f, "# ONNX backend tests nn may refuse (suite/test<TAB>reason), and the training-only tests\n"
               "# set aside.  Written by tests/conformance.c; when ops land, regenerate it with\n"
               "#     build/tests/conformance --write-expected tests/conformance.expected\n"
               "# A wrong output is never listed: it fails the run.\n");
    for (int i = 0; i < l->n; i++)
        fprintf(f, "%s\t%s\n", l->e[i].key, l->e[i].reason);
    return fclose(f) == 0;
}

typedef struct tally {
    int passed, refused, failed, set_aside;
} tally;

int main(int argc, char **argv) {
    int n_filters = 0;
    const char *expected_path = DEFAULT_EXPECTED, *write_path = NULL;
    char **filters = calloc((size_t)argc, sizeof *filters);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v"))
            verbose = 1;
        else if (!strcmp(argv[i], "--cache-dir") && i + 1 < argc)
            cache_dir = argv[++i];
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else if (!strcmp(argv[i], "--expected") && i + 1 < argc)
            expected_path = argv[++i];
        else if (!strcmp(argv[i], "--write-expected") && i + 1 < argc)
            write_path = argv[++i];
        else if (argv[i][0] == '-') {
            fprintf(stderr, "conformance: unknown option '%s'\n", argv[i]);
            return 2;
        } else
            filters[n_filters++] = argv[i];
    }
    if (write_path && n_filters) {
        fprintf(stderr, "conformance: --write-expected runs every test; it takes no FILTER\n");
        return 2;
    }
    if (!file_exists(DATA_ROOT)) {
        fprintf(stderr, "conformance: %s not found (install Debian's libonnx-testdata)\n", DATA_ROOT);
        return 2;
    }
    entries expected = {0}, found = {0};
    if (!write_path && !read_expected(expected_path, &expected)) return 2;

    /* every suite folder, sorted */
    char *suites[64];
    int n_suites = 0, no_model = 0;
    DIR *rd = opendir(DATA_ROOT);
    struct dirent *e;
    while (rd && (e = readdir(rd)) && n_suites < 64)
        if (e->d_name[0] != '.') suites[n_suites++] = strdup(e->d_name);
    if (rd) closedir(rd);
    qsort(suites, (size_t)n_suites, sizeof *suites, cmp_str);

    tally all = {0};
    int mismatches = 0, notes = 0;
    for (int s = 0; s < n_suites; s++) {
        char root[512];
        snprintf(root, sizeof root, "%s/%s", DATA_ROOT, suites[s]);
        DIR *d = opendir(root);
        if (!d) continue;
        char *names[2048];
        int n = 0;
        while ((e = readdir(d)) && n < 2048)
            if (!strncmp(e->d_name, "test_", 5)) names[n++] = strdup(e->d_name);
        closedir(d);
        qsort(names, (size_t)n, sizeof *names, cmp_str);
        for (int i = 0; i < n; i++) {
            bool want = n_filters == 0;
            for (int f = 0; f < n_filters; f++)
                want |= strstr(names[i], filters[f]) != NULL;
            char dir[1024], model[1100], key[600];
            snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
            snprintf(model, sizeof model, "%s/model.onnx", dir);
            snprintf(key, sizeof key, "%s/%s", suites[s], names[i]);
            free(names[i]);
            if (!want) continue;
            /* suites such as real/ hold only a download address, no model: not tests of their own */
            if (!file_exists(model)) {
                no_model++;
                continue;
            }
            entry *listed = find_entry(&expected, key);
            if (listed) listed->seen = true;
            const char *aside = set_aside_reason(key + strlen(suites[s]) + 1);
            result r;
            if (aside) {
                all.set_aside++;
                entries_add(&found, key, aside);
                if (!write_path && !listed) {
                    printf("FAIL %s: set aside (%s) but not listed in %s\n", key, aside, expected_path);
                    mismatches++;
                }
                continue;
            }
            run_isolated(key, dir, &r);
            if (r.failed) {
                all.failed++; /* its FAIL lines are printed */
                if (listed) printf("FAIL %s: listed as refused in %s, but gives a wrong result\n", key, expected_path);
                continue;
            }
            if (r.refused) {
                all.refused++;
                entries_add(&found, key, r.reason);
                if (verbose) printf("refused %s: %s\n", key, r.reason);
                if (write_path) continue;
                if (!listed) {
                    printf("FAIL %s: newly refused: %s\n", key, r.reason);
                    mismatches++;
                } else if (strcmp(listed->reason, r.reason) != 0) {
                    printf("note %s: refused for another reason than listed: %s\n", key, r.reason);
                    notes++;
                }
                continue;
            }
            all.passed++;
            if (listed && !write_path) {
                printf("FAIL %s: passes, but %s lists it as refused: remove its line\n", key, expected_path);
                mismatches++;
            }
        }
        free(suites[s]);
    }
    if (!write_path && n_filters == 0)
        for (int i = 0; i < expected.n; i++)
            if (!expected.e[i].seen) {
                printf("note %s: listed in %s, but there is no such test\n", expected.e[i].key, expected_path);
                notes++;
            }
    int total = all.passed + all.refused + all.failed + all.set_aside, inference = total - all.set_aside;
    if (no_model)
        printf("conformance: %d test folders hold no model.onnx (a download address only): not run\n", no_model);
    printf("conformance: %d tests: %d passed, %d refused, %d failed, %d set aside (training)\n", total, all.passed,
           all.refused, all.failed, all.set_aside);
    bool ok = all.failed == 0 && mismatches == 0;
    if (write_path) {
        if (!write_expected(write_path, &found)) return 2;
        printf("conformance: wrote %d lines to %s%s\n", found.n, write_path,
               all.failed ? " (the failed tests are not listed: fix them)" : "");
    } else if (notes) {
        printf("conformance: %d notes (not failures); regenerate the list with --write-expected %s\n", notes,
               expected_path);
    }
    printf("%d of %d inference tests passed, %d refused, %d failed; %d unexpected against the list\n", all.passed,
           inference, all.refused, all.failed, mismatches);
    for (int i = 0; i < expected.n; i++) {
        free(expected.e[i].key);
        free(expected.e[i].reason);
    }
    for (int i = 0; i < found.n; i++) {
        free(found.e[i].key);
        free(found.e[i].reason);
    }
    free(expected.e);
    free(found.e);
    free(filters);
    return ok ? 0 : 1;
}
