/* Tensor files: NumPy .npy (read and write) and ONNX TensorProto .pb (read). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "error.h"
#include "import.h"
#include "onnx_tensor.h"

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static const struct {
    const char *descr;
    nn_dtype dtype;
} npy_types[] = {{"<f4", NN_DTYPE_FLOAT}, {"<i8", NN_DTYPE_INT64},   {"<i4", NN_DTYPE_INT32},   {"|b1", NN_DTYPE_BOOL},
                 {"|u1", NN_DTYPE_UINT8}, {"|i1", NN_DTYPE_INT8},    {"<f2", NN_DTYPE_FLOAT16}, {"<f8", NN_DTYPE_DOUBLE},
                 {"<i2", NN_DTYPE_INT16}, {"<u2", NN_DTYPE_UINT16}, {"<u4", NN_DTYPE_UINT32},  {"<u8", NN_DTYPE_UINT64}};

/* Parse the python-dict header of a .npy file. */
static nn_status parse_npy_header(const char *path, const char *h, nn_tensor *t) {
    const char *p = strstr(h, "'descr':");
    if (!p) return nn_set_error(NN_ERR_PARSE, "'%s': .npy header has no descr", path);
    p = strchr(p + 8, '\'');
    if (!p) return nn_set_error(NN_ERR_PARSE, "'%s': malformed .npy descr", path);
    t->dtype = NN_DTYPE_UNDEFINED;
    for (size_t i = 0; i < sizeof npy_types / sizeof *npy_types; i++)
        if (!strncmp(p + 1, npy_types[i].descr, 3) && p[4] == '\'') t->dtype = npy_types[i].dtype;
    if (t->dtype == NN_DTYPE_UNDEFINED)
        return nn_set_error(NN_ERR_UNSUPPORTED,
                            "'%s': .npy dtype %.6s is not supported (float16/32/64, int8/16/32/64, uint8/16/32/64, bool)", path,
                            p);
    if (strstr(h, "'fortran_order': True"))
        return nn_set_error(NN_ERR_UNSUPPORTED, "'%s': Fortran-ordered .npy arrays are not supported", path);
    p = strstr(h, "'shape':");
    p = p ? strchr(p, '(') : NULL;
    if (!p) return nn_set_error(NN_ERR_PARSE, "'%s': .npy header has no shape", path);
    p++;
    t->ndim = 0;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')') break;
        char *end;
        long long d = strtoll(p, &end, 10);
        if (end == p || d < 0) return nn_set_error(NN_ERR_PARSE, "'%s': malformed .npy shape", path);
        if (t->ndim == NN_MAX_DIMS)
            return nn_set_error(NN_ERR_UNSUPPORTED, "'%s': more than %d dimensions", path, NN_MAX_DIMS);
        t->dims[t->ndim++] = d;
        p = end;
    }
    if (*p != ')') return nn_set_error(NN_ERR_PARSE, "'%s': malformed .npy shape", path);
    return NN_OK;
}

static nn_status load_npy(const char *path, nn_tensor *t) {
    FILE *f = fopen(path, "rb");
    if (!f) return nn_set_error(NN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    nn_status st = NN_OK;
    unsigned char pre[10];
    char *header = NULL;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        st = nn_set_error(NN_ERR_PARSE, "'%s' is not a .npy file", path);
        goto out;
    }
    size_t hlen;
    if (pre[6] == 1) {
        hlen = pre[8] | (size_t)pre[9] << 8;
    } else {
        unsigned char more[2];
        if (fread(more, 1, 2, f) != 2) {
            st = nn_set_error(NN_ERR_IO, "'%s': truncated .npy header", path);
            goto out;
        }
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)more[0] << 16 | (size_t)more[1] << 24;
    }
    if (hlen > 1 << 20 || !(header = calloc(1, hlen + 1)) || fread(header, 1, hlen, f) != hlen) {
        st = nn_set_error(NN_ERR_IO, "'%s': truncated .npy header", path);
        goto out;
    }
    if ((st = parse_npy_header(path, header, t)) != NN_OK) goto out;
    int64_t n = nn_dims_checked_elements(t->dims, (size_t)t->ndim);
    if (n < 0) {
        st = nn_set_error(NN_ERR_PARSE, "'%s': .npy shape overflows", path);
        goto out;
    }
    size_t bytes = (size_t)n * nn_dtype_size(t->dtype);
    /* the file must hold the data before we reserve memory for it */
    struct stat sb;
    long at = ftell(f);
    if (at < 0 || fstat(fileno(f), &sb) != 0 || (uint64_t)sb.st_size - (uint64_t)at < bytes ||
        (uint64_t)n > SIZE_MAX / 8) {
        st = nn_set_error(NN_ERR_IO, "'%s': truncated .npy data (expected %zu bytes)", path, bytes);
        goto out;
    }
    t->data = malloc(bytes ? bytes : 1);
    if (!t->data) {
        st = nn_set_error(NN_ERR_NOMEM, "'%s': out of memory for %zu bytes", path, bytes);
        goto out;
    }
    if (fread(t->data, 1, bytes, f) != bytes) {
        st = nn_set_error(NN_ERR_IO, "'%s': truncated .npy data (expected %zu bytes)", path, bytes);
        nn_tensor_release(t);
    }
out:
    free(header);
    fclose(f);
    return st;
}

static void *unpack_tensor(size_t len, const uint8_t *data) { return onnx__tensor_proto__unpack(NULL, len, data); }

static nn_status load_pb(const char *path, nn_tensor *t) {
    Onnx__TensorProto *tp = NULL;
    nn_status st = nn_read_protobuf(path, unpack_tensor, (void **)&tp);
    if (st != NN_OK) return st;
    char what[300];
    snprintf(what, sizeof what, "tensor file '%s'", path);
    st = nn_tensor_from_proto(tp, NULL, NULL, NULL, what, t);
    onnx__tensor_proto__free_unpacked(tp, NULL);
    return st;
}

NN_API nn_status nn_tensor_load(const char *path, nn_tensor *t) {
    if (!path || !t) return nn_set_error(NN_ERR_ARG, "nn_tensor_load: NULL argument");
    memset(t, 0, sizeof *t);
    if (ends_with(path, ".npy")) return load_npy(path, t);
    if (ends_with(path, ".pb")) return load_pb(path, t);
    return nn_set_error(NN_ERR_ARG, "'%s': unknown tensor file type (expected .npy or .pb)", path);
}

NN_API nn_status nn_tensor_save_npy(const char *path, const nn_tensor *t) {
    if (!path || !t) return nn_set_error(NN_ERR_ARG, "nn_tensor_save_npy: NULL argument");
    const char *descr = NULL;
    for (size_t i = 0; i < sizeof npy_types / sizeof *npy_types; i++)
        if (npy_types[i].dtype == t->dtype) descr = npy_types[i].descr;
    if (!descr) return nn_set_error(NN_ERR_UNSUPPORTED, "cannot save dtype %s as .npy", nn_dtype_name(t->dtype));
    char header[256];
    int len = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int d = 0; d < t->ndim; d++)
        len += snprintf(header + len, sizeof header - (size_t)len, "%lld%s", (long long)t->dims[d],
                        t->ndim == 1 ? "," : (d + 1 < t->ndim ? ", " : ""));
    len += snprintf(header + len, sizeof header - (size_t)len, "), }");
    /* pad with spaces so that data starts 64-byte aligned, newline last */
    int total = 10 + len + 1;
    int pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) return nn_set_error(NN_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
    unsigned hl = (unsigned)(len + pad + 1);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff), (unsigned char)(hl >> 8)};
    size_t bytes = (size_t)nn_tensor_elements(t) * nn_dtype_size(t->dtype);
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(header, 1, (size_t)len, f) == (size_t)len;
    for (int i = 0; ok && i < pad; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF && fwrite(t->data, 1, bytes, f) == bytes;
    ok = (fclose(f) == 0) && ok;
    return ok ? NN_OK : nn_set_error(NN_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
}
