#include "onnx_tensor.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

const char *nn_onnx_dtype_name(int32_t t) {
    static const char *const names[] = {"UNDEFINED", "FLOAT",  "UINT8",     "INT8",       "UINT16",  "INT16",
                                        "INT32",     "INT64",  "STRING",    "BOOL",       "FLOAT16", "DOUBLE",
                                        "UINT32",    "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"};
    return t >= 0 && t < (int32_t)(sizeof names / sizeof *names) ? names[t] : "UNKNOWN";
}

NN_API const char *nn_dtype_name(nn_dtype d) { return nn_onnx_dtype_name((int32_t)d); }

int nn_dtype_supported(int32_t t) { return t > 0 && nn_dtype_size((nn_dtype)t) > 0; }

NN_API size_t nn_dtype_size(nn_dtype d) {
    switch (d) {
    case NN_DTYPE_DOUBLE:
    case NN_DTYPE_INT64:
    case NN_DTYPE_UINT64: return 8;
    case NN_DTYPE_FLOAT:
    case NN_DTYPE_INT32:
    case NN_DTYPE_UINT32: return 4;
    case NN_DTYPE_FLOAT16:
    case NN_DTYPE_BFLOAT16:
    case NN_DTYPE_INT16:
    case NN_DTYPE_UINT16: return 2;
    case NN_DTYPE_UINT8:
    case NN_DTYPE_INT8:
    case NN_DTYPE_BOOL: return 1;
    case NN_DTYPE_STRING: return sizeof(char *);
    default: return 0;
    }
}

/* -1 for what has no count: an unknown rank or dimension, or one that overflows */
NN_API int64_t nn_tensor_elements(const nn_tensor *t) {
    if (t->ndim < 0 || t->ndim > NN_MAX_DIMS) return -1;
    return nn_dims_checked_elements(t->dims, (size_t)t->ndim);
}

int64_t nn_dims_checked_elements(const int64_t *dims, size_t ndim) {
    int64_t n = 1;
    for (size_t i = 0; i < ndim; i++) {
        if (dims[i] < 0 || __builtin_mul_overflow(n, dims[i], &n)) return -1;
    }
    return n;
}

/* A non-negative decimal byte count from external_data; -1 when it is anything else. */
static long long parse_byte_count(const char *s) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    return end == s || *end || errno || v < 0 ? -1 : v;
}

/* Open the external file named by the tensor's `location` (which must stay
 * inside base_dir) positioned at `offset`, after checking that it holds
 * `nbytes` from there. */
static nn_status open_external(const Onnx__TensorProto *tp, const char *base_dir, const char *what, size_t nbytes,
                               FILE **out) {
    const char *location = NULL, *offset_text = NULL, *length_text = NULL;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = tp->external_data[i];
        if (!e->key || !e->value) continue;
        if (!strcmp(e->key, "location"))
            location = e->value;
        else if (!strcmp(e->key, "offset"))
            offset_text = e->value;
        else if (!strcmp(e->key, "length"))
            length_text = e->value;
    }
    long long offset = offset_text ? parse_byte_count(offset_text) : 0;
    long long length = length_text ? parse_byte_count(length_text) : (long long)nbytes;
    if (offset < 0)
        return nn_set_error(NN_ERR_INVALID, "%s: external data offset '%s' is not a byte count", what, offset_text);
    if (length < 0)
        return nn_set_error(NN_ERR_INVALID, "%s: external data length '%s' is not a byte count", what, length_text);
    if (!base_dir) return nn_set_error(NN_ERR_INVALID, "%s: external data is not allowed here", what);
    if (!location || !location[0]) return nn_set_error(NN_ERR_INVALID, "%s: external data without a location", what);
    if (location[0] == '/' || strstr(location, "..") == location || strstr(location, "/../") ||
        (strlen(location) >= 3 && !strcmp(location + strlen(location) - 3, "/..")))
        return nn_set_error(NN_ERR_INVALID, "%s: external data location '%s' leaves the model's folder", what,
                            location);
    if ((unsigned long long)length != nbytes)
        return nn_set_error(NN_ERR_INVALID, "%s: external data length %lld does not match %zu bytes of dims", what,
                            length, nbytes);
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", base_dir, location) >= (int)sizeof path)
        return nn_set_error(NN_ERR_INVALID, "%s: external data path too long", what);
    /* Symlinks could still point outside: compare resolved paths. */
    char real_base[PATH_MAX], real_file[PATH_MAX];
    if (!realpath(base_dir, real_base) || !realpath(path, real_file))
        return nn_set_error(NN_ERR_IO, "%s: cannot open external data '%s': %s", what, path, strerror(errno));
    size_t bl = strlen(real_base);
    if (strncmp(real_file, real_base, bl) != 0 || real_file[bl] != '/')
        return nn_set_error(NN_ERR_INVALID, "%s: external data '%s' resolves outside the model's folder", what,
                            location);
    /* O_NONBLOCK: a FIFO must not block the load waiting for a writer */
    int fd = open(real_file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        if (fd >= 0) close(fd);
        return nn_set_error(NN_ERR_IO, "%s: cannot open external data '%s': %s", what, path, strerror(errno));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return nn_set_error(NN_ERR_INVALID, "%s: external data '%s' is not a regular file", what, location);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return nn_set_error(NN_ERR_IO, "%s: cannot open external data '%s': %s", what, path, strerror(errno));
    }
    if ((unsigned long long)sb.st_size < (unsigned long long)offset + nbytes ||
        fseeko(f, (off_t)offset, SEEK_SET) != 0) {
        fclose(f);
        return nn_set_error(NN_ERR_IO, "%s: external data '%s' is shorter than offset %lld + %zu bytes", what, location,
                            offset, nbytes);
    }
    *out = f;
    return NN_OK;
}

/* Values in the typed fields, whatever the dtype says. */
static size_t typed_values(const Onnx__TensorProto *tp) {
    return tp->n_float_data + tp->n_int32_data + tp->n_int64_data + tp->n_double_data + tp->n_uint64_data +
           tp->n_string_data;
}

/* The n strings of a STRING tensor: in the arena, or in one malloc'ed block
 * (the pointers, then the bytes) that free() releases whole.  A string
 * with a NUL inside would end early: refused. */
static nn_status strings_from_proto(const Onnx__TensorProto *tp, int64_t n, nn_arena *arena, const char *what,
                                    nn_tensor *out) {
    size_t bytes = (size_t)n * sizeof(char *);
    for (int64_t i = 0; i < n; i++) {
        const ProtobufCBinaryData *s = &tp->string_data[i];
        if (s->len && memchr(s->data, 0, s->len))
            return nn_set_error(NN_ERR_UNSUPPORTED, "%s: string %lld holds a NUL byte", what, (long long)i);
        if (s->len > SIZE_MAX / 4 || bytes > SIZE_MAX / 4) return nn_set_error(NN_ERR_INVALID, "%s: too big", what);
        bytes += s->len + 1;
    }
    char **ptrs = arena ? nn_arena_alloc(arena, bytes ? bytes : 1) : calloc(1, bytes ? bytes : 1);
    if (!ptrs) return nn_set_error(NN_ERR_NOMEM, "%s: out of memory for %zu bytes", what, bytes);
    char *text = (char *)(ptrs + n);
    for (int64_t i = 0; i < n; i++) {
        const ProtobufCBinaryData *s = &tp->string_data[i];
        ptrs[i] = text;
        if (s->len) memcpy(text, s->data, s->len);
        text[s->len] = 0;
        text += s->len + 1;
    }
    out->data = ptrs;
    return NN_OK;
}

nn_status nn_tensor_from_proto(const Onnx__TensorProto *tp, const nn_payload *raw, nn_arena *arena,
                               const char *base_dir, const char *what, nn_tensor *out) {
    memset(out, 0, sizeof *out);
    int32_t dt = tp->has_data_type ? tp->data_type : 0;
    if (!nn_dtype_supported(dt))
        return nn_set_error(NN_ERR_UNSUPPORTED, "%s has dtype %s, which is not supported", what,
                            nn_onnx_dtype_name(dt));
    if (tp->n_dims > NN_MAX_DIMS)
        return nn_set_error(NN_ERR_UNSUPPORTED, "%s has %zu dimensions, at most %d supported", what, tp->n_dims,
                            NN_MAX_DIMS);
    if (tp->segment) return nn_set_error(NN_ERR_UNSUPPORTED, "%s is segmented, which is not supported", what);
    int64_t n = nn_dims_checked_elements(tp->dims, tp->n_dims);
    size_t esz = nn_dtype_size((nn_dtype)dt);
    if (n < 0 || (uint64_t)n > SIZE_MAX / 2 / esz)
        return nn_set_error(NN_ERR_INVALID, "%s has negative or overflowing dims", what);
    size_t nbytes = (size_t)n * esz;
    out->dtype = (nn_dtype)dt;
    out->ndim = (int)tp->n_dims;
    if (tp->n_dims) memcpy(out->dims, tp->dims, sizeof(int64_t) * tp->n_dims);

    /* Find the values and check their count before allocating, so that a file
     * cannot make us reserve memory its data does not back. */
    FILE *external = NULL;
    const uint8_t *raw_bytes = NULL;
    size_t have = 0; /* values present in the typed field used */
    nn_status st = NN_OK;
    bool elsewhere = (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) ||
                     (raw && raw->data) || tp->has_raw_data;
    if (dt == NN_DTYPE_STRING && elsewhere)
        return nn_set_error(NN_ERR_INVALID,
                            "%s: dtype STRING with raw or external data (strings belong in string_data)", what);
    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        st = open_external(tp, base_dir, what, nbytes, &external);
    } else if (((raw && raw->data) || tp->has_raw_data) && typed_values(tp)) {
        st = nn_set_error(NN_ERR_INVALID, "%s has both raw_data and typed data (%zu typed values): which holds it?",
                          what, typed_values(tp));
    } else if ((raw && raw->data) || tp->has_raw_data) {
        raw_bytes = raw && raw->data ? raw->data : tp->raw_data.data;
        size_t len = raw && raw->data ? raw->length : tp->raw_data.len;
        if (len != nbytes)
            st = nn_set_error(NN_ERR_INVALID, "%s: raw_data has %zu bytes, dims need %zu", what, len, nbytes);
    } else if (dt == NN_DTYPE_STRING) {
        if (tp->n_string_data != (size_t)n)
            st = nn_set_error(NN_ERR_INVALID, "%s has dtype STRING with %zu strings, dims need %lld", what,
                              tp->n_string_data, (long long)n);
    } else {
        /* The 1- and 2-byte types and INT32 are stored widened in int32_data (FLOAT16, BFLOAT16 as their
         * bits), UINT32 and UINT64 in uint64_data. */
        have = dt == NN_DTYPE_FLOAT    ? tp->n_float_data
               : dt == NN_DTYPE_INT64  ? tp->n_int64_data
               : dt == NN_DTYPE_DOUBLE ? tp->n_double_data
               : dt == NN_DTYPE_UINT32 || dt == NN_DTYPE_UINT64 ? tp->n_uint64_data
                                                                 : tp->n_int32_data;
        if (have != (size_t)n)
            st = nn_set_error(NN_ERR_INVALID, "%s holds %zu values, dims need %lld", what, have, (long long)n);
    }
    if (st != NN_OK) return st;
    if (dt == NN_DTYPE_STRING) return strings_from_proto(tp, n, arena, what, out);
    void *data = arena ? nn_arena_alloc(arena, nbytes ? nbytes : 1) : calloc(1, nbytes ? nbytes : 1);
    if (!data) {
        if (external) fclose(external);
        return nn_set_error(NN_ERR_NOMEM, "%s: out of memory for %zu bytes", what, nbytes);
    }
    out->data = data;
    if (external) {
        if (fread(data, 1, nbytes, external) != nbytes)
            st = nn_set_error(NN_ERR_IO, "%s: cannot read %zu bytes of external data", what, nbytes);
        fclose(external);
    } else if (raw_bytes) {
        if (nbytes) memcpy(data, raw_bytes, nbytes); /* ONNX raw data is little-endian, as we are */
    } else if (dt == NN_DTYPE_FLOAT) {
        if (nbytes) memcpy(data, tp->float_data, nbytes);
    } else if (dt == NN_DTYPE_INT64) {
        if (nbytes) memcpy(data, tp->int64_data, nbytes);
    } else if (dt == NN_DTYPE_DOUBLE) {
        if (nbytes) memcpy(data, tp->double_data, nbytes);
    } else if (dt == NN_DTYPE_UINT64) {
        if (nbytes) memcpy(data, tp->uint64_data, nbytes);
    } else if (dt == NN_DTYPE_UINT32) {
        for (int64_t i = 0; i < n; i++)
            ((uint32_t *)data)[i] = (uint32_t)tp->uint64_data[i];
    } else {
        for (int64_t i = 0; i < n; i++) {
            int32_t v = tp->int32_data[i];
            switch (dt) {
            case NN_DTYPE_INT32: ((int32_t *)data)[i] = v; break;
            case NN_DTYPE_INT16: ((int16_t *)data)[i] = (int16_t)v; break;
            case NN_DTYPE_UINT16:
            case NN_DTYPE_FLOAT16:
            case NN_DTYPE_BFLOAT16: ((uint16_t *)data)[i] = (uint16_t)v; break;
            case NN_DTYPE_INT8: ((int8_t *)data)[i] = (int8_t)v; break;
            case NN_DTYPE_BOOL: ((uint8_t *)data)[i] = v != 0; break;
            default: ((uint8_t *)data)[i] = (uint8_t)v; break;
            }
        }
    }
    if (st != NN_OK && !arena) {
        free(data);
        out->data = NULL;
    }
    return st;
}
