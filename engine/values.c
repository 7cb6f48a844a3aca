/* Sequences, optionals and strings at the engine's edge: packing them for a
 * caller, reading them from test-data files, checking them as inputs. */
#include "values.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "import.h"
#include "model.h"
#include "onnx_tensor.h"

static size_t align16(size_t x) { return (x + 15) & ~(size_t)15; }

/* Bytes tensor t's data takes packed: its elements, and for strings the
 * bytes they point to.  false when the size is invalid or overflows. */
static bool packed_tensor_bytes(const nn_tensor *t, size_t *out) {
    int64_t n = nn_tensor_elements(t);
    size_t esz = nn_dtype_size(t->dtype);
    if (n < 0 || !esz || (uint64_t)n > SIZE_MAX / 4 / esz) return false;
    size_t b = (size_t)n * esz;
    if (t->dtype == NN_DTYPE_STRING)
        for (int64_t i = 0; i < n; i++) {
            const char *s = ((char *const *)t->data)[i];
            size_t len = s ? strlen(s) : 0;
            if (b > SIZE_MAX / 4 || len > SIZE_MAX / 4) return false;
            b += len + 1;
        }
    *out = align16(b);
    return true;
}

/* Copy t's data (and strings) to `at`; dst gets t's shape and data = at. */
static void pack_tensor(const nn_tensor *t, char *at, nn_tensor *dst) {
    *dst = *t;
    dst->data = at;
    int64_t n = nn_tensor_elements(t);
    size_t b = (size_t)n * nn_dtype_size(t->dtype);
    if (t->dtype != NN_DTYPE_STRING) {
        if (b) memcpy(at, t->data, b);
        return;
    }
    char **ptrs = (char **)at, *text = at + b;
    for (int64_t i = 0; i < n; i++) {
        const char *s = ((char *const *)t->data)[i];
        size_t len = s ? strlen(s) : 0;
        ptrs[i] = text;
        if (len) memcpy(text, s, len);
        text[len] = 0;
        text += len + 1;
    }
}

static void *block_alloc(nn_arena *a, size_t bytes) { return a ? nn_arena_alloc(a, bytes) : malloc(bytes); }

nn_status nn_value_pack(const nn_tensor *src, nn_tensor *dst, const char *what) {
    return nn_value_pack_in(src, dst, NULL, what);
}

nn_status nn_value_pack_in(const nn_tensor *src, nn_tensor *dst, nn_arena *arena, const char *what) {
    memset(dst, 0, sizeof *dst);
    if (src->dtype == NN_DTYPE_NONE) {
        dst->dtype = NN_DTYPE_NONE;
        return NN_OK;
    }
    if (src->dtype != NN_DTYPE_SEQUENCE) {
        size_t bytes;
        if (!packed_tensor_bytes(src, &bytes)) return nn_set_error(NN_ERR_SHAPE, "%s: invalid tensor size", what);
        char *block = block_alloc(arena, bytes ? bytes : 1);
        if (!block) return nn_set_error(NN_ERR_NOMEM, "%s: out of memory for %zu bytes", what, bytes);
        pack_tensor(src, block, dst);
        return NN_OK;
    }
    const nn_seq *s = src->data;
    if (!s || s->n < 0 || s->n > NN_SEQ_MAX_LENGTH)
        return nn_set_error(NN_ERR_SHAPE, "%s: a sequence of %lld tensors is longer than NN_SEQ_MAX_LENGTH or invalid",
                            what, s ? (long long)s->n : -1LL);
    size_t head = align16(sizeof(nn_seq) + sizeof(nn_tensor) * (size_t)s->n), bytes = head;
    for (int64_t i = 0; i < s->n; i++) {
        size_t b;
        if (!packed_tensor_bytes(&s->items[i], &b) || b > SIZE_MAX / 4 - bytes)
            return nn_set_error(NN_ERR_SHAPE, "%s: item %lld has an invalid size", what, (long long)i);
        bytes += b;
    }
    char *block = block_alloc(arena, bytes);
    if (!block) return nn_set_error(NN_ERR_NOMEM, "%s: out of memory for %zu bytes", what, bytes);
    nn_seq *out = (nn_seq *)block;
    nn_tensor *items = (nn_tensor *)(block + sizeof(nn_seq));
    *out = (nn_seq){.elem = s->elem, .n = s->n, .items = items, .used = NULL, .cap = s->n};
    char *at = block + head;
    for (int64_t i = 0; i < s->n; i++) {
        size_t b;
        packed_tensor_bytes(&s->items[i], &b);
        pack_tensor(&s->items[i], at, &items[i]);
        at += b;
    }
    dst->dtype = NN_DTYPE_SEQUENCE;
    dst->data = block;
    return NN_OK;
}

/* ---- SequenceProto / OptionalProto (onnx-data.proto, whose generated code
 * Debian does not ship): read from the protobuf wire format here; the
 * tensors inside are TensorProtos, decoded by protobuf-c. */

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    *v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

typedef struct field {
    uint32_t number;
    const uint8_t *data; /* length-delimited fields */
    size_t len;
} field;

/* The next field of a message; 0: the end, -1: not protobuf. */
static int next_field(const uint8_t **p, const uint8_t *end, field *f) {
    if (*p >= end) return 0;
    uint64_t key, v;
    if (!read_varint(p, end, &key)) return -1;
    f->number = (uint32_t)(key >> 3);
    f->data = NULL;
    f->len = 0;
    switch (key & 7) {
    case 0: return read_varint(p, end, &v) ? 1 : -1;
    case 1:
        if (end - *p < 8) return -1;
        *p += 8;
        return 1;
    case 5:
        if (end - *p < 4) return -1;
        *p += 4;
        return 1;
    case 2:
        if (!read_varint(p, end, &v) || v > (uint64_t)(end - *p)) return -1;
        f->data = *p;
        f->len = (size_t)v;
        *p += v;
        return 1;
    default: return -1;
    }
}

static nn_status tensor_from_bytes(const uint8_t *data, size_t len, const char *what, nn_tensor *out) {
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, len, data);
    if (!tp) return nn_set_error(NN_ERR_PARSE, "%s: a tensor inside is not a valid TensorProto", what);
    nn_status st = nn_tensor_from_proto(tp, NULL, NULL, NULL, what, out);
    onnx__tensor_proto__free_unpacked(tp, NULL);
    return st;
}

static nn_status sequence_from_bytes(const uint8_t *data, size_t len, const char *what, nn_tensor *out) {
    const uint8_t *p = data, *end = data + len;
    field f;
    int r;
    int64_t n = 0;
    while ((r = next_field(&p, end, &f)) > 0) {
        if (f.number >= 4 && f.number <= 7)
            return nn_set_error(NN_ERR_UNSUPPORTED, "%s: a sequence of sequences, maps or optionals is not supported",
                                what);
        n += f.number == 3;
    }
    if (r < 0) return nn_set_error(NN_ERR_PARSE, "%s is not a valid SequenceProto", what);
    if (n > NN_SEQ_MAX_LENGTH)
        return nn_set_error(NN_ERR_UNSUPPORTED, "%s: a sequence of %lld tensors, more than NN_SEQ_MAX_LENGTH (%d)",
                            what, (long long)n, NN_SEQ_MAX_LENGTH);
    nn_tensor *items = calloc((size_t)n + 1, sizeof *items);
    if (!items) return nn_set_error(NN_ERR_NOMEM, "%s: out of memory", what);
    nn_status st = NN_OK;
    int64_t k = 0;
    for (p = data; st == NN_OK && next_field(&p, end, &f) > 0;)
        if (f.number == 3) st = tensor_from_bytes(f.data, f.len, what, &items[k++]);
    for (int64_t i = 1; st == NN_OK && i < n; i++)
        if (items[i].dtype != items[0].dtype)
            st = nn_set_error(NN_ERR_INVALID, "%s: tensor %lld is %s, tensor 0 %s", what, (long long)i,
                              nn_dtype_name(items[i].dtype), nn_dtype_name(items[0].dtype));
    if (st == NN_OK) {
        nn_seq s = {.elem = n ? items[0].dtype : NN_DTYPE_UNDEFINED, .n = n, .items = items, .cap = n};
        nn_tensor t = {.dtype = NN_DTYPE_SEQUENCE, .data = &s};
        st = nn_value_pack(&t, out, what);
    }
    for (int64_t i = 0; i < k; i++)
        free(items[i].data);
    free(items);
    return st;
}

nn_status nn_value_load(const char *path, nn_value_kind kind, nn_tensor *out) {
    memset(out, 0, sizeof *out);
    if (kind == NN_KIND_TENSOR) return nn_tensor_load(path, out);
    size_t len = 0;
    uint8_t *buf = NULL;
    nn_status st = nn_read_file(path, &buf, &len);
    if (st != NN_OK) return st;
    char what[300];
    snprintf(what, sizeof what, "value file '%s'", path);
    if (kind == NN_KIND_SEQUENCE) {
        st = sequence_from_bytes(buf, len, what, out);
    } else { /* an OptionalProto: field 3 a tensor, 5 a sequence, none: empty */
        const uint8_t *p = buf, *end = buf + len;
        field f, value = {0};
        int r;
        while ((r = next_field(&p, end, &f)) > 0)
            if (f.number >= 3 && f.number <= 7) value = f;
        if (r < 0)
            st = nn_set_error(NN_ERR_PARSE, "%s is not a valid OptionalProto", what);
        else if (value.number == 3)
            st = tensor_from_bytes(value.data, value.len, what, out);
        else if (value.number == 5)
            st = sequence_from_bytes(value.data, value.len, what, out);
        else if (value.number)
            st = nn_set_error(NN_ERR_UNSUPPORTED, "%s: an optional of a map, sparse tensor or optional", what);
        else
            out->dtype = NN_DTYPE_NONE;
    }
    free(buf);
    return st;
}

nn_value_kind nn_input_kind(const nn_model *m, int i) {
    return m && i >= 0 && i < m->g.n_inputs ? m->g.values[m->g.inputs[i]].kind : NN_KIND_TENSOR;
}
nn_value_kind nn_output_kind(const nn_model *m, int i) {
    return m && i >= 0 && i < m->g.n_outputs ? m->g.values[m->g.outputs[i]].kind : NN_KIND_TENSOR;
}
