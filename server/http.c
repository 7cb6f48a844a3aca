/* HTTP/REST front of the Open Inference Protocol on libmicrohttpd: routing,
 * request bodies, responses, the access log and draining.  An infer request
 * suspends its connection while its job waits in the model's queue; the
 * worker resumes it, so a few HTTP threads carry any number of waiting
 * requests. */
#include "server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct srv_server {
    srv_config *c;
    struct MHD_Daemon *d;
    volatile int ready;
    int inflight; /* requests between their first callback and their completion (atomics) */
};

enum { READING, QUEUED, DONE };

typedef struct req_ctx {
    srv_server *s;
    struct MHD_Connection *conn;
    int64_t t0;
    char method[16], url[256];
    int status;
    size_t bytes;
    char *body;
    size_t len, cap;
    int too_big;
    srv_job *job;
    srv_model *model;
    int state; /* atomics: the worker sets DONE */
} req_ctx;

static enum MHD_Result answer(struct MHD_Connection *c, req_ctx *x, int status, char *body, size_t len,
                              const char *ctype, size_t header_len) {
    struct MHD_Response *r = body ? MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE)
                                  : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    if (ctype) MHD_add_response_header(r, "Content-Type", ctype);
    if (header_len) {
        char b[32];
        snprintf(b, sizeof b, "%zu", header_len);
        MHD_add_response_header(r, "Inference-Header-Content-Length", b);
    }
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    x->status = status;
    x->bytes = len;
    return ret;
}

static enum MHD_Result answer_json(struct MHD_Connection *c, req_ctx *x, int status, char *json) {
    if (!json) return MHD_NO;
    return answer(c, x, status, json, strlen(json), "application/json", 0);
}

static enum MHD_Result answer_error(struct MHD_Connection *c, req_ctx *x, int status, const char *msg) {
    return answer_json(c, x, status, srv_error_json(msg));
}

static void count(srv_model *sm, int failed) {
    pthread_mutex_lock(&sm->mu);
    sm->met.requests++;
    sm->met.failures += failed != 0;
    pthread_mutex_unlock(&sm->mu);
}

/* Called by the model's worker: the last touch of x before the connection's thread takes it back. */
static void job_done(srv_job *job, void *arg) {
    (void)job;
    req_ctx *x = arg;
    struct MHD_Connection *c = x->conn;
    __atomic_store_n(&x->state, DONE, __ATOMIC_RELEASE);
    MHD_resume_connection(c);
}

static enum MHD_Result finish_infer(struct MHD_Connection *c, req_ctx *x) {
    srv_job *j = x->job;
    srv_model *sm = x->model;
    if (j->status != 200) return answer_error(c, x, j->status, j->err);
    char *body;
    size_t len, hl;
    if (srv_build_response(sm->name, &sm->info, &j->req, j->out, &body, &len, &hl)) {
        count(sm, 1);
        return answer_error(c, x, 500, "out of memory building the response");
    }
    return answer(c, x, 200, body, len, hl ? "application/octet-stream" : "application/json", hl);
}

static enum MHD_Result infer(struct MHD_Connection *c, req_ctx *x, srv_model *sm) {
    char err[SRV_ERR_MAX];
    if (!sm->ready) {
        count(sm, 1);
        snprintf(err, sizeof err, "model '%s' is not ready", sm->name);
        return answer_error(c, x, 503, err);
    }
    int64_t hl = -1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Inference-Header-Content-Length");
    if (h) {
        char *end;
        long long v = strtoll(h, &end, 10);
        if (end == h || *end || v < 0) {
            count(sm, 1);
            return answer_error(c, x, 400, "Inference-Header-Content-Length is not a non-negative integer");
        }
        hl = v;
    }
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return answer_error(c, x, 503, "out of memory");
    int st = srv_parse_infer(&sm->info, &x->s->c->lim, x->body ? x->body : "", x->len, hl, &j->req, err, sizeof err);
    if (st != 200) {
        free(j);
        count(sm, 1);
        return answer_error(c, x, st, err);
    }
    free(x->body);
    x->body = NULL;
    j->done = job_done;
    j->done_arg = x;
    x->job = j;
    x->model = sm;
    x->state = QUEUED;
    /* suspended before it is queued: the worker may resume it at once */
    MHD_suspend_connection(c);
    j->model = sm;
    st = sm->n_members        ? srv_ensemble_submit(sm, j, err, sizeof err)
         : sm->image.input[0] ? srv_decode_submit(j, err, sizeof err)
                              : srv_model_submit(sm, j, err, sizeof err);
    if (st) {
        j->status = st;
        snprintf(j->err, sizeof j->err, "%s", err);
        job_done(j, x);
    }
    return MHD_YES;
}

static srv_model *find_model(srv_config *c, const char *name) {
    for (int i = 0; i < c->n_models; i++)
        if (!strcmp(c->models[i]->name, name)) return c->models[i];
    return NULL;
}

static enum MHD_Result route(struct MHD_Connection *c, req_ctx *x, const char *url, const char *method) {
    srv_server *s = x->s;
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    char err[SRV_ERR_MAX + 128];
    if (!strcmp(url, "/v2/health/live")) {
        if (!get) return answer_error(c, x, 405, "use GET");
        return answer(c, x, 200, NULL, 0, NULL, 0);
    }
    if (!strcmp(url, "/v2/health/ready")) {
        if (!get) return answer_error(c, x, 405, "use GET");
        /* the protocol says false is a 4xx */
        return s->ready ? answer(c, x, 200, NULL, 0, NULL, 0) : answer_error(c, x, 400, "models are still loading");
    }
    if (!strcmp(url, "/v2") || !strcmp(url, "/v2/")) {
        if (!get) return answer_error(c, x, 405, "use GET");
        char *b = strdup("{\"name\":\"nnserve\",\"version\":\"" NN_VERSION_STRING
                         "\",\"extensions\":[\"binary_tensor_data\"]}");
        return answer_json(c, x, 200, b);
    }
    if (!strcmp(url, "/metrics")) {
        if (!get) return answer_error(c, x, 405, "use GET");
        size_t len;
        char *b = srv_metrics_text(s->c, &len);
        if (!b) return answer_error(c, x, 500, "out of memory");
        return answer(c, x, 200, b, len, "text/plain; version=0.0.4", 0);
    }
    static const char prefix[] = "/v2/models/";
    if (strncmp(url, prefix, sizeof prefix - 1)) return answer_error(c, x, 404, "no such endpoint");
    char path[512], *seg[6];
    int n = 0;
    if (strlen(url + sizeof prefix - 1) >= sizeof path) return answer_error(c, x, 404, "no such endpoint");
    snprintf(path, sizeof path, "%s", url + sizeof prefix - 1);
    for (char *p = path, *tok; n < 6 && (tok = strsep(&p, "/"));)
        seg[n++] = tok;
    if (n == 6 || n == 0) return answer_error(c, x, 404, "no such endpoint");
    if (!srv_valid_model_name(seg[0])) return answer_error(c, x, 400, "invalid model name");
    srv_model *sm = find_model(s->c, seg[0]);
    if (!sm) {
        snprintf(err, sizeof err, "unknown model '%s'", seg[0]);
        return answer_error(c, x, 404, err);
    }
    int i = 1;
    if (i < n && !strcmp(seg[i], "versions")) {
        if (i + 1 >= n) return answer_error(c, x, 404, "no such endpoint");
        if (strcmp(seg[i + 1], "1")) {
            snprintf(err, sizeof err, "model '%s' has no version '%.64s' (it has version 1)", sm->name, seg[i + 1]);
            return answer_error(c, x, 404, err);
        }
        i += 2;
    }
    if (i == n) {
        if (!get) return answer_error(c, x, 405, "use GET");
        if (!sm->ready) {
            snprintf(err, sizeof err, "model '%s' is not loaded yet", sm->name);
            return answer_error(c, x, 503, err);
        }
        return answer_json(c, x, 200, srv_model_metadata(sm->name, &sm->info));
    }
    if (i + 1 == n && !strcmp(seg[i], "ready")) {
        if (!get) return answer_error(c, x, 405, "use GET");
        return sm->ready ? answer(c, x, 200, NULL, 0, NULL, 0) : answer_error(c, x, 400, "model is not ready");
    }
    if (i + 1 == n && !strcmp(seg[i], "infer")) {
        if (!post) return answer_error(c, x, 405, "use POST");
        return infer(c, x, sm);
    }
    return answer_error(c, x, 404, "no such endpoint");
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv_server *s = cls;
    req_ctx *x = *con_cls;
    if (!x) {
        x = calloc(1, sizeof *x);
        if (!x) return MHD_NO;
        x->s = s;
        x->conn = c;
        x->t0 = srv_now_us();
        snprintf(x->method, sizeof x->method, "%s", method);
        snprintf(x->url, sizeof x->url, "%s", url);
        __atomic_add_fetch(&s->inflight, 1, __ATOMIC_ACQ_REL);
        *con_cls = x;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->c->lim.max_body) {
            char err[128];
            snprintf(err, sizeof err, "request body over %zu bytes", s->c->lim.max_body);
            return answer_error(c, x, 413, err);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (x->too_big) return MHD_YES;
        if (n > s->c->lim.max_body - x->len) {
            x->too_big = 1;
            free(x->body);
            x->body = NULL;
            x->len = x->cap = 0;
            return MHD_YES;
        }
        if (x->len + n > x->cap) {
            size_t cap = x->cap ? x->cap : 4096;
            while (cap < x->len + n)
                cap *= 2;
            if (cap > s->c->lim.max_body) cap = s->c->lim.max_body;
            char *b = realloc(x->body, cap);
            if (!b) return MHD_NO;
            x->body = b;
            x->cap = cap;
        }
        memcpy(x->body + x->len, upload, n);
        x->len += n;
        return MHD_YES;
    }
    int st = __atomic_load_n(&x->state, __ATOMIC_ACQUIRE);
    if (st == DONE) return finish_infer(c, x);
    if (st == QUEUED) return MHD_YES;
    if (x->too_big) {
        char err[128];
        snprintf(err, sizeof err, "request body over %zu bytes", s->c->lim.max_body);
        return answer_error(c, x, 413, err);
    }
    return route(c, x, url, method);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv_server *s = cls;
    req_ctx *x = *con_cls;
    if (!x) return;
    if (s->c->access_log) {
        char ip[INET6_ADDRSTRLEN] = "-", ts[32];
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr && ci->client_addr->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)ci->client_addr)->sin_addr, ip, sizeof ip);
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
        fprintf(stderr, "%s %s \"%s %s\" %d %zu %.3fms%s\n", ts, ip, x->method, x->url, x->status, x->bytes,
                (double)(srv_now_us() - x->t0) / 1000, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " aborted");
    }
    srv_job_free(x->job);
    free(x->body);
    free(x);
    *con_cls = NULL;
    __atomic_sub_fetch(&s->inflight, 1, __ATOMIC_ACQ_REL);
}

srv_server *srv_http_start(srv_config *c, char *err, size_t en) {
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)c->port);
    if (inet_pton(AF_INET, c->host, &sa.sin_addr) != 1) {
        snprintf(err, en, "--host '%s' is not an IPv4 address", c->host);
        return NULL;
    }
    srv_server *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->c = c;
    /* the connection memory limit bounds a request's headers: beyond it libmicrohttpd answers 431 itself */
    s->d =
        MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC, (uint16_t)c->port, NULL,
                         NULL, handler, s, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_THREAD_POOL_SIZE,
                         (unsigned)c->http_threads, MHD_OPTION_CONNECTION_LIMIT, (unsigned)c->max_connections,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)c->conn_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                         (size_t)64 * 1024, MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_END);
    if (!s->d) {
        snprintf(err, en, "cannot listen on %s:%d", c->host, c->port);
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "nnserve: listening on http://%s:%u\n", c->host, di ? di->port : (unsigned)c->port);
    return s;
}

void srv_http_set_ready(srv_server *s, int ready) { s->ready = ready; }

static void wait_idle(srv_server *s, int64_t ms) {
    int64_t end = srv_now_us() + ms * 1000;
    while (__atomic_load_n(&s->inflight, __ATOMIC_ACQUIRE) > 0 && srv_now_us() < end)
        usleep(5000);
}

void srv_http_stop(srv_server *s, int64_t drain_ms) {
    s->ready = 0;
    /* no new connections; those open finish what they started */
    MHD_socket fd = MHD_quiesce_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
    wait_idle(s, drain_ms);
    int left = __atomic_load_n(&s->inflight, __ATOMIC_ACQUIRE);
    srv_decode_stop();
    /* the workers answer what is still queued before they stop, which resumes those connections */
    for (int i = 0; i < s->c->n_models; i++)
        srv_model_stop(s->c->models[i]);
    wait_idle(s, 1000);
    fprintf(stderr, "nnserve: drained (%d requests were still in flight at the deadline)\n", left);
    MHD_stop_daemon(s->d);
    free(s);
}
