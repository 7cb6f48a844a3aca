/* nnserve: the Open Inference Protocol v2 over HTTP/REST in front of libnn.
 * One header for the server's parts: protocol (JSON codec), queue (dynamic
 * batching), metrics, config (options and model repository) and http. */
#ifndef NNSERVE_SERVER_H
#define NNSERVE_SERVER_H

#include "nn.h"
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_MAX_IO      16
#define SRV_NAME_MAX    128
#define SRV_ERR_MAX     256
#define SRV_MAX_MODELS  64
#define SRV_MAX_MEMBERS 8

/* A graph input or output as the protocol shows it: dims[0] is -1 when batched. */
typedef struct srv_io {
    char name[SRV_NAME_MAX];
    nn_dtype dtype;
    int ndim;
    int64_t dims[NN_MAX_DIMS];
    int bytes_input; /* encoded images (BYTES, shape [-1]) that image.c turns into the model's input */
} srv_io;

typedef struct srv_model_info {
    int n_in, n_out;
    srv_io in[SRV_MAX_IO], out[SRV_MAX_IO];
    int batched; /* every input has the batch along dim 0 */
} srv_model_info;

typedef struct srv_limits {
    size_t max_body;     /* bytes of a request body */
    int max_json_depth;  /* nesting of arrays and objects */
    int64_t max_samples; /* along the batch dimension, per request */
    int64_t max_images;  /* encoded images per request: each decodes to far more bytes than it takes */
} srv_limits;

/* A parsed infer request: inputs in the model's order, data malloc'ed. */
typedef struct srv_request {
    char *id;
    int64_t samples;
    nn_tensor in[SRV_MAX_IO];
    size_t in_bytes[SRV_MAX_IO]; /* size of a BYTES input's data */
    int want_out[SRV_MAX_IO];
    int out_binary[SRV_MAX_IO];
} srv_request;

/* ---- protocol.c: the JSON codec (no I/O: the fuzzer calls these directly) */
const char *srv_dtype_name(nn_dtype dt);
/* Returns 200, or the 4xx status with the reason in err.  header_len is the
 * Inference-Header-Content-Length, -1 when absent. */
int srv_parse_infer(const srv_model_info *mi, const srv_limits *lim, const char *body, size_t len, int64_t header_len,
                    srv_request *rq, char *err, size_t errlen);
void srv_request_free(srv_request *rq);
/* The response for outs[0..n_out) (unwanted ones ignored).  *header_len is 0
 * when the body is JSON only.  Returns 0, -1 when out of memory. */
int srv_build_response(const char *model, const srv_model_info *mi, const srv_request *rq, const nn_tensor *outs,
                       char **body, size_t *len, size_t *header_len);
char *srv_model_metadata(const char *model, const srv_model_info *mi);
char *srv_error_json(const char *msg);
/* The next element of a BYTES tensor's binary form; 0, or -1 when it runs past len. */
int srv_bytes_element(const uint8_t *buf, size_t len, size_t *off, const uint8_t **elem, size_t *elem_len);
int srv_json_depth_ok(const char *s, size_t n, int max_depth);

/* ---- metrics.c */
#define SRV_HIST_BUCKETS 16
typedef struct srv_hist {
    uint64_t count[SRV_HIST_BUCKETS + 1]; /* the last one is +Inf */
    uint64_t n;
    double sum;
} srv_hist;
typedef struct srv_metrics {
    uint64_t requests, failures;
    srv_hist queue_s, compute_s, batch;
} srv_metrics;
struct srv_config;
char *srv_metrics_text(const struct srv_config *c, size_t *len);
void srv_hist_add(srv_hist *h, const double *bounds, double v);
extern const double srv_time_bounds[SRV_HIST_BUCKETS];
extern const double srv_batch_bounds[SRV_HIST_BUCKETS];

/* ---- queue.c: a model and its batching queue */
typedef struct srv_job srv_job;
struct srv_job {
    srv_request req;
    nn_tensor out[SRV_MAX_IO]; /* this request's slice of the batch's outputs */
    int status;                /* HTTP status once done */
    char err[SRV_ERR_MAX];
    int64_t t_enqueue, deadline; /* monotonic microseconds */
    struct srv_model *model;
    void (*done)(srv_job *job, void *arg);
    void *done_arg;
    srv_job *next;
};

typedef struct srv_model_config {
    int max_batch;      /* samples merged into one run; 1 = batching off */
    int64_t delay_us;   /* how long the first request waits for more */
    int queue_limit;    /* requests waiting; more get 503 */
    int64_t timeout_ms; /* a request still queued after this gets 503 */
    int threads;        /* engine threads, 0 = all cores */
    int bf16;           /* nn_options.precision bf16 (docs/precision.md) */
    int batchable;      /* set at load: merging is possible */
} srv_model_config;

/* nnserve.conf's image_* keys (docs/server.md) */
typedef struct srv_image_config {
    char input[SRV_NAME_MAX]; /* the model input fed from images; empty: none */
    int resize;               /* shorter side before the center crop; 0: stretch to the input's size */
    int height, width;        /* the input's, set at load */
    float mean[3], std[3], scale;
    int bgr;
    int64_t max_pixels; /* refuse larger images before decoding (decompression bombs) */
} srv_image_config;

typedef struct srv_model {
    char name[SRV_NAME_MAX];
    char path[4096];
    srv_model_config cfg;
    srv_image_config image;
    /* an ensemble (no engine model of its own): its members and how their outputs combine */
    int n_members, combine;
    struct srv_model *members[SRV_MAX_MEMBERS];
    char member_names[SRV_MAX_MEMBERS][SRV_NAME_MAX];
    srv_model_info info;
    nn_model *m;
    volatile int ready;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job *head, *tail;
    int qlen, stop, started;
    pthread_t worker;
    srv_metrics met; /* under mu */
} srv_model;

int64_t srv_now_us(void);
/* Load the model and start its worker; 0 or -1 with err. */
int srv_model_start(srv_model *sm, const char *cache_dir, int cache, char *err, size_t errlen);
/* 0 queued (done() will be called from the worker), else the HTTP status to answer. */
int srv_model_submit(srv_model *sm, srv_job *job, char *err, size_t errlen);
/* Finish what is queued, stop the worker, free the model. */
void srv_model_stop(srv_model *sm);
void srv_job_free(srv_job *job);

/* ---- image.c */
/* n encoded images into an FP32 [n, 3, H, W] tensor; 200, or the status with err */
int srv_image_to_tensor(const srv_image_config *ic, const uint8_t *buf, size_t len, int64_t n, nn_tensor *out,
                        char *err, size_t errlen);
int srv_decode_start(int threads, int queue_limit);
/* 0: queued (decoded, then submitted to job->model), else the HTTP status */
int srv_decode_submit(srv_job *job, char *err, size_t errlen);
void srv_decode_stop(void);

/* ---- ensemble.c */
enum { SRV_COMBINE_MEAN_SOFTMAX = 1, SRV_COMBINE_CONCAT = 2 };
int srv_ensemble_start(srv_model *ens, char *err, size_t errlen);
int srv_ensemble_submit(srv_model *ens, srv_job *job, char *err, size_t errlen);

/* ---- config.c */
struct srv_config {
    const char *host;
    int port;
    int http_threads;
    int decode_threads;
    int max_connections;
    int conn_timeout_s;
    int access_log;
    const char *cache_dir;
    int cache;
    int64_t drain_ms;
    srv_limits lim;
    srv_model_config defaults;
    int n_models;
    srv_model *models[SRV_MAX_MODELS];
};
typedef struct srv_config srv_config;
/* Parse the command line (and the repository it names); 0 ok, 1 help printed, -1 error printed. */
int srv_config_parse(srv_config *c, int argc, char **argv);
int srv_valid_model_name(const char *s);
void srv_config_free(srv_config *c);

/* ---- http.c */
typedef struct srv_server srv_server;
srv_server *srv_http_start(srv_config *c, char *err, size_t errlen);
void srv_http_set_ready(srv_server *s, int ready);
/* Stop taking connections, wait up to drain_ms for requests in flight, stop. */
void srv_http_stop(srv_server *s, int64_t drain_ms);

#endif
