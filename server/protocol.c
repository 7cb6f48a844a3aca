/* The Open Inference Protocol v2 JSON codec, with the binary tensor data
 * extension: parse an infer request into tensors, build the response and the
 * metadata documents.  Everything here is pure (no I/O, no globals), so that
 * tests/fuzz/fuzz_request.c can drive it. */
#include "server.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    nn_dtype dt;
} DTYPES[] = {
    {"BOOL", NN_DTYPE_BOOL},     {"UINT8", NN_DTYPE_UINT8},  {"UINT16", NN_DTYPE_UINT16}, {"UINT32", NN_DTYPE_UINT32},
    {"UINT64", NN_DTYPE_UINT64}, {"INT8", NN_DTYPE_INT8},    {"INT16", NN_DTYPE_INT16},   {"INT32", NN_DTYPE_INT32},
    {"INT64", NN_DTYPE_INT64},   {"FP16", NN_DTYPE_FLOAT16}, {"FP32", NN_DTYPE_FLOAT},    {"FP64", NN_DTYPE_DOUBLE},
};

const char *srv_dtype_name(nn_dtype dt) {
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (DTYPES[i].dt == dt) return DTYPES[i].name;
    return NULL;
}

static nn_dtype dtype_parse(const char *s) {
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (!strcmp(DTYPES[i].name, s)) return DTYPES[i].dt;
    return NN_DTYPE_UNDEFINED;
}

static uint16_t float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff;
    if (e == 0xff) return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
    int ex = (int)e - 127 + 15;
    if (ex >= 31) return (uint16_t)(sign | 0x7c00);
    if (ex <= 0) {
        if (ex < -10) return (uint16_t)sign;
        m |= 0x800000;
        uint32_t shift = (uint32_t)(14 - ex), half = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = sign | ((uint32_t)ex << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* a carry into the exponent is still right */
    return (uint16_t)h;
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
    if (e == 0) {
        float f = ldexpf((float)m, -24);
        return sign ? -f : f;
    }
    if (e == 31)
        x = sign | 0x7f800000 | (m << 13);
    else
        x = sign | ((e - 15 + 127) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static int fail(char *err, size_t n, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return status;
}

/* Jansson nests as deep as its input: count brackets outside strings first. */
int srv_json_depth_ok(const char *s, size_t n, int max_depth) {
    int d = 0, in_str = 0, esc = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (esc)
                esc = 0;
            else if (c == '\\')
                esc = 1;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '[' || c == '{') {
            if (++d > max_depth) return 0;
        } else if (c == ']' || c == '}') {
            d--;
        }
    }
    return 1;
}

/* One JSON scalar into element i of a tensor of type dt; 0 ok, -1 wrong kind or out of range. */
static int store(json_t *v, nn_dtype dt, void *out, int64_t i) {
    if (dt == NN_DTYPE_BOOL) {
        int b;
        if (json_is_boolean(v))
            b = json_is_true(v);
        else if (json_is_integer(v) && (json_integer_value(v) == 0 || json_integer_value(v) == 1))
            b = (int)json_integer_value(v);
        else
            return -1;
        ((uint8_t *)out)[i] = (uint8_t)b;
        return 0;
    }
    if (dt == NN_DTYPE_FLOAT || dt == NN_DTYPE_DOUBLE || dt == NN_DTYPE_FLOAT16) {
        if (!json_is_number(v)) return -1;
        double d = json_number_value(v);
        if (dt == NN_DTYPE_FLOAT)
            ((float *)out)[i] = (float)d;
        else if (dt == NN_DTYPE_DOUBLE)
            ((double *)out)[i] = d;
        else
            ((uint16_t *)out)[i] = float_to_half((float)d);
        return 0;
    }
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    switch (dt) {
    case NN_DTYPE_UINT8:
        if (x < 0 || x > UINT8_MAX) return -1;
        ((uint8_t *)out)[i] = (uint8_t)x;
        return 0;
    case NN_DTYPE_INT8:
        if (x < INT8_MIN || x > INT8_MAX) return -1;
        ((int8_t *)out)[i] = (int8_t)x;
        return 0;
    case NN_DTYPE_UINT16:
        if (x < 0 || x > UINT16_MAX) return -1;
        ((uint16_t *)out)[i] = (uint16_t)x;
        return 0;
    case NN_DTYPE_INT16:
        if (x < INT16_MIN || x > INT16_MAX) return -1;
        ((int16_t *)out)[i] = (int16_t)x;
        return 0;
    case NN_DTYPE_UINT32:
        if (x < 0 || x > (json_int_t)UINT32_MAX) return -1;
        ((uint32_t *)out)[i] = (uint32_t)x;
        return 0;
    case NN_DTYPE_INT32:
        if (x < INT32_MIN || x > INT32_MAX) return -1;
        ((int32_t *)out)[i] = (int32_t)x;
        return 0;
    case NN_DTYPE_UINT64:
        if (x < 0) return -1;
        ((uint64_t *)out)[i] = (uint64_t)x;
        return 0;
    case NN_DTYPE_INT64: ((int64_t *)out)[i] = (int64_t)x; return 0;
    default: return -1;
    }
}

/* Row-major data, flat or nested: depth is already bounded by srv_json_depth_ok. */
static int flatten(json_t *v, nn_dtype dt, void *out, int64_t cap, int64_t *n) {
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            int r = flatten(e, dt, out, cap, n);
            if (r) return r;
        }
        return 0;
    }
    if (*n >= cap) return 1;
    if (store(v, dt, out, *n)) return 2;
    (*n)++;
    return 0;
}

static int find_io(const srv_io *io, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(io[i].name, name)) return i;
    return -1;
}

/* An element of a BYTES tensor in the binary form: a 4-byte little-endian length, then the bytes. */
int srv_bytes_element(const uint8_t *buf, size_t len, size_t *off, const uint8_t **elem, size_t *elem_len) {
    if (len - *off < 4) return -1;
    uint32_t n = (uint32_t)buf[*off] | (uint32_t)buf[*off + 1] << 8 | (uint32_t)buf[*off + 2] << 16 |
                 (uint32_t)buf[*off + 3] << 24;
    *off += 4;
    if (n > len - *off) return -1;
    *elem = buf + *off;
    *elem_len = n;
    *off += n;
    return 0;
}

/* Encoded images: BYTES of shape [n], binary data of n length-prefixed elements, kept as they are for image.c. */
static int parse_bytes_input(const srv_model_info *mi, const srv_limits *lim, json_t *jin, const char *dts,
                             const char **bin, size_t *bin_left, srv_request *rq, const srv_io *io, nn_tensor *t,
                             char *err, size_t en) {
    if (strcmp(dts, "BYTES"))
        return fail(err, en, 400, "input '%s' takes encoded images: BYTES, not %.32s", io->name, dts);
    json_t *shape = json_object_get(jin, "shape"), *d0 = json_array_get(shape, 0);
    if (!json_is_array(shape) || json_array_size(shape) != 1 || !json_is_integer(d0))
        return fail(err, en, 400, "input '%s': the shape of encoded images is [count]", io->name);
    int64_t n = json_integer_value(d0);
    int64_t most = lim->max_images < lim->max_samples ? lim->max_images : lim->max_samples;
    if (n < 1 || n > most)
        return fail(err, en, 400, "input '%s': %lld images, allowed 1 to %lld", io->name, (long long)n,
                    (long long)most);
    if (rq->samples && n != rq->samples)
        return fail(err, en, 400, "input '%s' has %lld samples, another input %lld", io->name, (long long)n,
                    (long long)rq->samples);
    json_t *params = json_object_get(jin, "parameters");
    json_t *bds = params ? json_object_get(params, "binary_data_size") : NULL;
    if (!bds || json_object_get(jin, "data"))
        return fail(err, en, 400, "input '%s': send the image files as binary data (binary_data_size)", io->name);
    if (!json_is_integer(bds) || json_integer_value(bds) < 0 || (uint64_t)json_integer_value(bds) > *bin_left)
        return fail(err, en, 400, "input '%s': binary_data_size is not a size within the %zu bytes that follow",
                    io->name, *bin_left);
    size_t size = (size_t)json_integer_value(bds), off = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *e;
        size_t el;
        if (srv_bytes_element((const uint8_t *)*bin, size, &off, &e, &el))
            return fail(err, en, 400, "input '%s': element %lld runs past binary_data_size", io->name, (long long)i);
    }
    if (off != size)
        return fail(err, en, 400, "input '%s': %zu bytes follow the %lld elements", io->name, size - off, (long long)n);
    t->data = malloc(size ? size : 1);
    if (!t->data) return fail(err, en, 503, "out of memory for input '%s'", io->name);
    memcpy(t->data, *bin, size);
    *bin += size;
    *bin_left -= size;
    t->ndim = 1;
    t->dims[0] = n;
    t->dtype = NN_DTYPE_UINT8;
    rq->in_bytes[io - mi->in] = size;
    rq->samples = n;
    return 200;
}

/* One element of "inputs" into rq->in[k]; bin/bin_left: the binary data not yet claimed. */
static int parse_input(const srv_model_info *mi, const srv_limits *lim, json_t *jin, size_t json_len, const char **bin,
                       size_t *bin_left, srv_request *rq, char *err, size_t en) {
    if (!json_is_object(jin)) return fail(err, en, 400, "each element of \"inputs\" must be an object");
    const char *name = json_string_value(json_object_get(jin, "name"));
    if (!name) return fail(err, en, 400, "an input has no \"name\" string");
    int k = find_io(mi->in, mi->n_in, name);
    if (k < 0) return fail(err, en, 400, "the model has no input named '%.100s'", name);
    const srv_io *io = &mi->in[k];
    nn_tensor *t = &rq->in[k];
    if (t->data) return fail(err, en, 400, "input '%s' given twice", io->name);
    const char *dts = json_string_value(json_object_get(jin, "datatype"));
    if (!dts) return fail(err, en, 400, "input '%s' has no \"datatype\" string", io->name);
    if (io->bytes_input) return parse_bytes_input(mi, lim, jin, dts, bin, bin_left, rq, io, t, err, en);
    nn_dtype dt = dtype_parse(dts);
    if (dt == NN_DTYPE_UNDEFINED)
        return fail(err, en, 400, "input '%s': unknown or unsupported datatype '%.32s'", io->name, dts);
    if (dt != io->dtype)
        return fail(err, en, 400, "input '%s' is %s, the request says %s", io->name, srv_dtype_name(io->dtype), dts);
    json_t *shape = json_object_get(jin, "shape");
    if (!json_is_array(shape)) return fail(err, en, 400, "input '%s' has no \"shape\" array", io->name);
    if ((int)json_array_size(shape) != io->ndim)
        return fail(err, en, 400, "input '%s' has rank %d, the request's shape has %zu dimensions", io->name, io->ndim,
                    json_array_size(shape));
    int64_t elems = 1;
    for (int d = 0; d < io->ndim; d++) {
        json_t *jd = json_array_get(shape, (size_t)d);
        if (!json_is_integer(jd) || json_integer_value(jd) < 0)
            return fail(err, en, 400, "input '%s': shape[%d] is not a non-negative integer", io->name, d);
        int64_t v = json_integer_value(jd);
        if (io->dims[d] >= 0 && v != io->dims[d])
            return fail(err, en, 400, "input '%s': shape[%d] is %lld, the model needs %lld", io->name, d, (long long)v,
                        (long long)io->dims[d]);
        if (io->dims[d] < 0 && (v < 1 || v > lim->max_samples))
            return fail(err, en, 400, "input '%s': %lld samples, allowed 1 to %lld", io->name, (long long)v,
                        (long long)lim->max_samples);
        if (v && elems > INT64_MAX / v)
            return fail(err, en, 400, "input '%s': the shape's element count overflows", io->name);
        elems *= v;
        t->dims[d] = v;
    }
    t->ndim = io->ndim;
    t->dtype = dt;
    int64_t samples = mi->batched ? t->dims[0] : 1;
    if (rq->samples && samples != rq->samples)
        return fail(err, en, 400, "input '%s' has %lld samples, another input %lld", io->name, (long long)samples,
                    (long long)rq->samples);
    rq->samples = samples;
    size_t esz = nn_dtype_size(dt);
    json_t *params = json_object_get(jin, "parameters");
    json_t *bds = params ? json_object_get(params, "binary_data_size") : NULL;
    json_t *data = json_object_get(jin, "data");
    if (bds) {
        if (data) return fail(err, en, 400, "input '%s' has both \"data\" and binary_data_size", io->name);
        if (!json_is_integer(bds) || json_integer_value(bds) < 0)
            return fail(err, en, 400, "input '%s': binary_data_size is not a non-negative integer", io->name);
        uint64_t n = (uint64_t)json_integer_value(bds);
        if (n > *bin_left)
            return fail(err, en, 400, "input '%s': binary_data_size %llu, but only %zu bytes of binary data remain",
                        io->name, (unsigned long long)n, *bin_left);
        if ((uint64_t)elems > n / esz || (uint64_t)elems * esz != n)
            return fail(err, en, 400, "input '%s': binary_data_size %llu, the shape needs %lld elements of %zu bytes",
                        io->name, (unsigned long long)n, (long long)elems, esz);
        t->data = malloc(n ? n : 1);
        if (!t->data) return fail(err, en, 503, "out of memory for input '%s'", io->name);
        memcpy(t->data, *bin, n);
        *bin += n;
        *bin_left -= n;
        return 200;
    }
    if (!data) return fail(err, en, 400, "input '%s' has neither \"data\" nor binary_data_size", io->name);
    /* every element takes at least a byte of JSON: a shape larger than the text is a lie, refused before allocating */
    if ((uint64_t)elems > json_len)
        return fail(err, en, 400, "input '%s': shape declares %lld elements, \"data\" cannot hold them", io->name,
                    (long long)elems);
    t->data = malloc(elems ? (size_t)elems * esz : 1);
    if (!t->data) return fail(err, en, 503, "out of memory for input '%s'", io->name);
    int64_t got = 0;
    int r = flatten(data, dt, t->data, elems, &got);
    if (r == 1)
        return fail(err, en, 400, "input '%s': \"data\" holds more than the shape's %lld elements", io->name,
                    (long long)elems);
    if (r == 2)
        return fail(err, en, 400, "input '%s': element %lld of \"data\" is not a valid %s", io->name, (long long)got,
                    dts);
    if (got != elems)
        return fail(err, en, 400, "input '%s': \"data\" holds %lld elements, the shape %lld", io->name, (long long)got,
                    (long long)elems);
    return 200;
}

int srv_parse_infer(const srv_model_info *mi, const srv_limits *lim, const char *body, size_t len, int64_t header_len,
                    srv_request *rq, char *err, size_t en) {
    memset(rq, 0, sizeof *rq);
    size_t jlen = len;
    if (header_len >= 0) {
        if ((uint64_t)header_len > len)
            return fail(err, en, 400, "Inference-Header-Content-Length %lld is more than the body's %zu bytes",
                        (long long)header_len, len);
        jlen = (size_t)header_len;
    }
    if (!srv_json_depth_ok(body, jlen, lim->max_json_depth))
        return fail(err, en, 400, "the request's JSON nests deeper than %d", lim->max_json_depth);
    json_error_t je;
    json_t *root = json_loadb(body, jlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) return fail(err, en, 400, "malformed JSON at line %d, column %d: %s", je.line, je.column, je.text);
    int st = 200;
    if (!json_is_object(root)) {
        st = fail(err, en, 400, "the request is not a JSON object");
        goto out;
    }
    json_t *jid = json_object_get(root, "id");
    if (jid) {
        if (!json_is_string(jid) || json_string_length(jid) > 256) {
            st = fail(err, en, 400, "\"id\" must be a string of at most 256 bytes");
            goto out;
        }
        rq->id = strdup(json_string_value(jid));
        if (!rq->id) {
            st = fail(err, en, 503, "out of memory");
            goto out;
        }
    }
    int all_binary = 0;
    json_t *params = json_object_get(root, "parameters");
    if (params) {
        json_t *b = json_object_get(params, "binary_data_output");
        if (b && !json_is_boolean(b)) {
            st = fail(err, en, 400, "parameter binary_data_output must be a boolean");
            goto out;
        }
        all_binary = b && json_is_true(b);
    }
    json_t *inputs = json_object_get(root, "inputs");
    if (!json_is_array(inputs)) {
        st = fail(err, en, 400, "the request has no \"inputs\" array");
        goto out;
    }
    if ((int)json_array_size(inputs) != mi->n_in) {
        st = fail(err, en, 400, "the model has %d inputs, the request gives %zu", mi->n_in, json_array_size(inputs));
        goto out;
    }
    const char *bin = body + jlen;
    size_t bin_left = len - jlen;
    size_t i;
    json_t *jin;
    json_array_foreach(inputs, i, jin) {
        st = parse_input(mi, lim, jin, jlen, &bin, &bin_left, rq, err, en);
        if (st != 200) goto out;
    }
    if (bin_left) {
        st = fail(err, en, 400, "%zu bytes of binary data follow the JSON that no input claims", bin_left);
        goto out;
    }
    json_t *outputs = json_object_get(root, "outputs");
    if (outputs) {
        if (!json_is_array(outputs)) {
            st = fail(err, en, 400, "\"outputs\" must be an array");
            goto out;
        }
        json_t *jo;
        json_array_foreach(outputs, i, jo) {
            const char *name = json_is_object(jo) ? json_string_value(json_object_get(jo, "name")) : NULL;
            if (!name) {
                st = fail(err, en, 400, "each element of \"outputs\" needs a \"name\" string");
                goto out;
            }
            int k = find_io(mi->out, mi->n_out, name);
            if (k < 0) {
                st = fail(err, en, 400, "the model has no output named '%.100s'", name);
                goto out;
            }
            json_t *op = json_object_get(jo, "parameters");
            json_t *b = op ? json_object_get(op, "binary_data") : NULL;
            if (b && !json_is_boolean(b)) {
                st = fail(err, en, 400, "output '%s': binary_data must be a boolean", mi->out[k].name);
                goto out;
            }
            rq->want_out[k] = 1;
            rq->out_binary[k] = b ? json_is_true(b) : all_binary;
        }
    } else {
        for (int k = 0; k < mi->n_out; k++) {
            rq->want_out[k] = 1;
            rq->out_binary[k] = all_binary;
        }
    }
out:
    json_decref(root);
    if (st != 200) srv_request_free(rq);
    return st;
}

void srv_request_free(srv_request *rq) {
    free(rq->id);
    for (int i = 0; i < SRV_MAX_IO; i++)
        free(rq->in[i].data);
    memset(rq, 0, sizeof *rq);
}

static json_t *shape_json(const int64_t *dims, int ndim) {
    json_t *a = json_array();
    for (int d = 0; d < ndim && a; d++)
        json_array_append_new(a, json_integer(dims[d]));
    return a;
}

static json_t *data_json(const nn_tensor *t, int64_t n) {
    json_t *a = json_array();
    for (int64_t i = 0; i < n && a; i++) {
        json_t *v;
        switch (t->dtype) {
        case NN_DTYPE_FLOAT: v = json_real(((const float *)t->data)[i]); break;
        case NN_DTYPE_DOUBLE: v = json_real(((const double *)t->data)[i]); break;
        case NN_DTYPE_FLOAT16: v = json_real(half_to_float(((const uint16_t *)t->data)[i])); break;
        case NN_DTYPE_BOOL: v = json_boolean(((const uint8_t *)t->data)[i]); break;
        case NN_DTYPE_UINT8: v = json_integer(((const uint8_t *)t->data)[i]); break;
        case NN_DTYPE_INT8: v = json_integer(((const int8_t *)t->data)[i]); break;
        case NN_DTYPE_UINT16: v = json_integer(((const uint16_t *)t->data)[i]); break;
        case NN_DTYPE_INT16: v = json_integer(((const int16_t *)t->data)[i]); break;
        case NN_DTYPE_UINT32: v = json_integer(((const uint32_t *)t->data)[i]); break;
        case NN_DTYPE_INT32: v = json_integer(((const int32_t *)t->data)[i]); break;
        case NN_DTYPE_UINT64: v = json_integer((json_int_t)((const uint64_t *)t->data)[i]); break;
        case NN_DTYPE_INT64: v = json_integer(((const int64_t *)t->data)[i]); break;
        default: v = json_null(); break;
        }
        /* a NaN or infinity has no JSON form: json_real refuses it */
        if (!v) v = json_null();
        json_array_append_new(a, v);
    }
    return a;
}

int srv_build_response(const char *model, const srv_model_info *mi, const srv_request *rq, const nn_tensor *outs,
                       char **body, size_t *len, size_t *header_len) {
    *body = NULL;
    *len = *header_len = 0;
    json_t *root = json_object(), *arr = json_array();
    if (!root || !arr) goto oom;
    json_object_set_new(root, "model_name", json_string(model));
    json_object_set_new(root, "model_version", json_string("1"));
    if (rq->id) json_object_set_new(root, "id", json_string(rq->id));
    json_object_set_new(root, "outputs", arr);
    size_t bin_bytes = 0;
    for (int k = 0; k < mi->n_out; k++) {
        if (!rq->want_out[k]) continue;
        const nn_tensor *t = &outs[k];
        int64_t n = nn_tensor_elements(t);
        if (n < 0) n = 0;
        json_t *o = json_object();
        if (!o) goto oom;
        json_object_set_new(o, "name", json_string(mi->out[k].name));
        const char *dn = srv_dtype_name(t->dtype);
        json_object_set_new(o, "datatype", json_string(dn ? dn : "UNKNOWN"));
        json_object_set_new(o, "shape", shape_json(t->dims, t->ndim));
        if (rq->out_binary[k]) {
            size_t b = (size_t)n * nn_dtype_size(t->dtype);
            json_t *p = json_object();
            json_object_set_new(p, "binary_data_size", json_integer((json_int_t)b));
            json_object_set_new(o, "parameters", p);
            bin_bytes += b;
        } else {
            json_object_set_new(o, "data", data_json(t, n));
        }
        json_array_append_new(arr, o);
    }
    /* nine significant digits give back the same float */
    char *hdr = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(root);
    root = NULL;
    if (!hdr) goto oom;
    size_t hl = strlen(hdr);
    if (!bin_bytes) {
        *body = hdr;
        *len = hl;
        return 0;
    }
    char *b = malloc(hl + bin_bytes);
    if (!b) {
        free(hdr);
        goto oom;
    }
    memcpy(b, hdr, hl);
    free(hdr);
    size_t off = hl;
    for (int k = 0; k < mi->n_out; k++) {
        if (!rq->want_out[k] || !rq->out_binary[k]) continue;
        int64_t n = nn_tensor_elements(&outs[k]);
        size_t nb = n > 0 ? (size_t)n * nn_dtype_size(outs[k].dtype) : 0;
        if (nb) memcpy(b + off, outs[k].data, nb);
        off += nb;
    }
    *body = b;
    *len = off;
    *header_len = hl;
    return 0;
oom:
    json_decref(root);
    return -1;
}

static json_t *io_json(const srv_io *io, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n && a; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(io[i].name));
        const char *dn = io[i].bytes_input ? "BYTES" : srv_dtype_name(io[i].dtype);
        json_object_set_new(o, "datatype", json_string(dn ? dn : "UNKNOWN"));
        json_object_set_new(o, "shape", shape_json(io[i].dims, io[i].ndim));
        json_array_append_new(a, o);
    }
    return a;
}

char *srv_model_metadata(const char *model, const srv_model_info *mi) {
    json_t *root = json_object();
    if (!root) return NULL;
    json_object_set_new(root, "name", json_string(model));
    json_t *v = json_array();
    json_array_append_new(v, json_string("1"));
    json_object_set_new(root, "versions", v);
    json_object_set_new(root, "platform", json_string("onnx"));
    json_object_set_new(root, "inputs", io_json(mi->in, mi->n_in));
    json_object_set_new(root, "outputs", io_json(mi->out, mi->n_out));
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

char *srv_error_json(const char *msg) {
    json_t *root = json_object();
    if (!root) return NULL;
    /* jansson refuses invalid UTF-8: an error echoing raw request bytes must still be sent */
    json_t *s = json_string(msg);
    json_object_set_new(root, "error", s ? s : json_string("request refused (the reason is not valid UTF-8)"));
    char *out = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return out;
}
