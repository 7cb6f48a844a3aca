#include "onnx_slim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

/* protobuf field numbers on the path to the payloads */
enum { MODEL_GRAPH = 7, GRAPH_INITIALIZER = 5, TENSOR_RAW_DATA = 9 };
enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

typedef struct cursor {
    const uint8_t *p, *end;
} cursor;

typedef struct outbuf {
    uint8_t *data;
    size_t len, cap;
    bool failed;
} outbuf;

typedef struct slimmer {
    nn_payload *payloads;
    size_t n_payloads, cap;
    bool failed; /* out of memory */
} slimmer;

static bool read_varint(cursor *c, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (c->p >= c->end) return false;
        uint8_t b = *c->p++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

static void put(outbuf *o, const void *data, size_t len) {
    if (o->failed) return;
    if (o->len + len > o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 4096;
        while (cap < o->len + len)
            cap *= 2;
        uint8_t *d = realloc(o->data, cap);
        if (!d) {
            o->failed = true;
            return;
        }
        o->data = d;
        o->cap = cap;
    }
    memcpy(o->data + o->len, data, len);
    o->len += len;
}

static void put_varint(outbuf *o, uint64_t v) {
    uint8_t b[10];
    int n = 0;
    do {
        b[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put(o, b, (size_t)n);
}

/* One field at c: its number, wire type, and the span it occupies (whole
 * field, and for LEN fields the payload).  false on malformed input. */
static bool next_field(cursor *c, uint32_t *field, int *wire, const uint8_t **start, cursor *payload) {
    *start = c->p;
    uint64_t key, len;
    if (!read_varint(c, &key)) return false;
    *field = (uint32_t)(key >> 3);
    *wire = (int)(key & 7);
    if (*field == 0) return false; /* no protobuf field has number 0 */
    switch (*wire) {
    case WIRE_VARINT: return read_varint(c, &len);
    case WIRE_FIXED64:
        if (c->end - c->p < 8) return false;
        c->p += 8;
        return true;
    case WIRE_FIXED32:
        if (c->end - c->p < 4) return false;
        c->p += 4;
        return true;
    case WIRE_LEN:
        if (!read_varint(c, &len) || len > (uint64_t)(c->end - c->p)) return false;
        payload->p = c->p;
        payload->end = c->p + len;
        c->p += len;
        return true;
    default: return false; /* groups are long gone from proto2 files like ONNX's */
    }
}

/* Copy the message in c to o, descending into `descend` (a LEN field) with
 * `child`, and leaving out field `drop` after recording it as a payload
 * (0: nothing to descend into / drop). */
typedef bool (*rewrite_fn)(slimmer *s, cursor c, outbuf *o);

static bool rewrite(slimmer *s, cursor c, outbuf *o, uint32_t descend, rewrite_fn child, uint32_t drop) {
    while (c.p < c.end) {
        uint32_t field;
        int wire;
        const uint8_t *start;
        cursor payload = {0};
        if (!next_field(&c, &field, &wire, &start, &payload)) return false;
        if (wire == WIRE_LEN && field == drop) {
            nn_payload *pl = &s->payloads[s->n_payloads - 1];
            pl->data = payload.p;
            pl->length = (size_t)(payload.end - payload.p);
        } else if (wire == WIRE_LEN && field == descend && child) {
            outbuf inner = {0};
            bool ok = child(s, payload, &inner);
            put_varint(o, (uint64_t)field << 3 | WIRE_LEN);
            put_varint(o, inner.len);
            if (inner.len) put(o, inner.data, inner.len);
            o->failed |= inner.failed;
            free(inner.data);
            if (!ok) return false;
        } else {
            put(o, start, (size_t)(c.p - start));
        }
    }
    return true;
}

static bool rewrite_tensor(slimmer *s, cursor c, outbuf *o) {
    if (s->n_payloads == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        nn_payload *p = realloc(s->payloads, sizeof *p * cap);
        if (!p) {
            s->failed = true;
            return false;
        }
        s->payloads = p;
        s->cap = cap;
    }
    s->payloads[s->n_payloads++] = (nn_payload){NULL, 0};
    return rewrite(s, c, o, 0, NULL, TENSOR_RAW_DATA);
}

static bool rewrite_graph(slimmer *s, cursor c, outbuf *o) {
    return rewrite(s, c, o, GRAPH_INITIALIZER, rewrite_tensor, 0);
}

/* protobuf-c decodes nested messages by recursion, with no depth limit: a
 * file nesting subgraphs (If/Loop bodies) or sequence types some ten
 * thousand deep would overflow the stack.  ONNX's recursive paths are few;
 * follow them (and nothing else) and refuse nesting no real model needs. */
enum { MAX_NESTING = 64 };

typedef enum msg_kind {
    MSG_NONE,
    MSG_MODEL,
    MSG_GRAPH,
    MSG_NODE,
    MSG_ATTRIBUTE,
    MSG_VALUE_INFO,
    MSG_TYPE,
    MSG_TYPE_WRAPPER, /* TypeProto.Sequence, .Map, .Optional */
    MSG_TRAINING_INFO,
    MSG_FUNCTION,
} msg_kind;

/* The kind of the message in LEN field `field` of a `kind` message, when it
 * is on a path that can lead back to a message of its own kind. */
static msg_kind nested_kind(msg_kind kind, uint32_t field) {
    switch (kind) {
    case MSG_MODEL:
        return field == 7 ? MSG_GRAPH : field == 20 ? MSG_TRAINING_INFO : field == 25 ? MSG_FUNCTION : MSG_NONE;
    case MSG_TRAINING_INFO: return field == 1 || field == 2 ? MSG_GRAPH : MSG_NONE; /* initialization, algorithm */
    case MSG_FUNCTION: return field == 7 ? MSG_NODE : MSG_NONE;
    case MSG_GRAPH: return field == 1 ? MSG_NODE : field >= 11 && field <= 13 ? MSG_VALUE_INFO : MSG_NONE;
    case MSG_NODE: return field == 5 ? MSG_ATTRIBUTE : MSG_NONE;
    case MSG_ATTRIBUTE: /* g, graphs; tp, type_protos */
        return field == 6 || field == 11 ? MSG_GRAPH : field == 14 || field == 15 ? MSG_TYPE : MSG_NONE;
    case MSG_VALUE_INFO: return field == 2 ? MSG_TYPE : MSG_NONE;
    case MSG_TYPE: return field == 4 || field == 5 || field == 9 ? MSG_TYPE_WRAPPER : MSG_NONE;
    case MSG_TYPE_WRAPPER: return field == 1 || field == 2 ? MSG_TYPE : MSG_NONE; /* elem_type, Map.value_type */
    default: return MSG_NONE;
    }
}

/* false when messages nest deeper than MAX_NESTING; malformed bytes are left
 * for the decoder to reject.  The recursion is bounded by MAX_NESTING. */
static bool nesting_within_limit(cursor c, msg_kind kind, int depth) {
    if (depth > MAX_NESTING) return false;
    while (c.p < c.end) {
        uint32_t field;
        int wire;
        const uint8_t *start;
        cursor payload = {0};
        if (!next_field(&c, &field, &wire, &start, &payload)) return true;
        msg_kind inner = wire == WIRE_LEN ? nested_kind(kind, field) : MSG_NONE;
        if (inner != MSG_NONE && !nesting_within_limit(payload, inner, depth + 1)) return false;
    }
    return true;
}

nn_status nn_onnx_file_open(const char *path, nn_onnx_file *f) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return nn_set_error(NN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return nn_set_error(NN_ERR_IO, "cannot read '%s': not a regular file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return nn_set_error(NN_ERR_PARSE, "'%s' is not a valid ONNX protobuf (empty file)", path);
    }
    f->size = (size_t)sb.st_size;
    void *map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return nn_set_error(NN_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
    f->map = map;
    madvise(f->map, f->size, MADV_SEQUENTIAL);

    slimmer s = {0};
    outbuf o = {0};
    cursor c = {f->map, f->map + f->size};
    bool ok = rewrite(&s, c, &o, MODEL_GRAPH, rewrite_graph, 0);
    f->slim = o.data;
    f->slim_size = o.len;
    f->payloads = s.payloads;
    f->n_payloads = s.n_payloads;
    if (s.failed || o.failed) {
        nn_onnx_file_close(f);
        return nn_set_error(NN_ERR_NOMEM, "out of memory reading '%s'", path);
    }
    if (!ok) {
        nn_onnx_file_close(f);
        return nn_set_error(NN_ERR_PARSE,
                            "'%s' is not a valid ONNX protobuf (decoding failed: truncated or not protobuf)", path);
    }
    if (!nesting_within_limit((cursor){f->slim, f->slim + f->slim_size}, MSG_MODEL, 0)) {
        nn_onnx_file_close(f);
        return nn_set_error(NN_ERR_PARSE,
                            "'%s' is not a valid ONNX model (subgraphs or types nested more than %d deep)", path,
                            MAX_NESTING);
    }
    return NN_OK;
}

void nn_onnx_file_release(const nn_onnx_file *f, const nn_payload *p) {
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t from = ((uintptr_t)p->data + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t to = ((uintptr_t)p->data + p->length) & ~((uintptr_t)page - 1);
    if (to > from && (uint8_t *)to <= f->map + f->size) madvise((void *)from, to - from, MADV_DONTNEED);
}

void nn_onnx_file_close(nn_onnx_file *f) {
    if (f->map) munmap(f->map, f->size);
    free(f->slim);
    free(f->payloads);
    memset(f, 0, sizeof *f);
}
