/* A served model: its engine instance and its dynamic-batching queue.  One
 * worker thread per model takes the oldest request, waits up to the model's
 * queue delay for more, merges their samples along dim 0 up to the batch size,
 * runs nn_predict once and hands each request its rows of the outputs. */
#include "server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t srv_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void srv_job_free(srv_job *job) {
    if (!job) return;
    srv_request_free(&job->req);
    for (int i = 0; i < SRV_MAX_IO; i++)
        free(job->out[i].data);
    free(job);
}

static void finish(srv_job *j, int status, const char *msg) {
    j->status = status;
    if (msg) snprintf(j->err, sizeof j->err, "%s", msg);
    j->done(j, j->done_arg);
}

/* Rows [row, row + n) of a batched output, or all of it for a lone request. */
static int slice(const nn_tensor *src, int batched, int64_t row, int64_t n, nn_tensor *dst) {
    *dst = *src;
    dst->data = NULL;
    int64_t total = nn_tensor_elements(src);
    if (total < 0) return -1;
    size_t esz = nn_dtype_size(src->dtype), bytes = (size_t)total * esz, off = 0;
    if (batched && src->ndim > 0 && src->dims[0] > 0) {
        size_t row_bytes = bytes / (size_t)src->dims[0];
        off = (size_t)row * row_bytes;
        bytes = (size_t)n * row_bytes;
        dst->dims[0] = n;
    }
    dst->data = malloc(bytes ? bytes : 1);
    if (!dst->data) return -1;
    memcpy(dst->data, (const char *)src->data + off, bytes);
    return 0;
}

static void run_batch(srv_model *sm, srv_job **jobs, int nj, int64_t total) {
    const srv_model_info *mi = &sm->info;
    nn_tensor in[SRV_MAX_IO], out[SRV_MAX_IO];
    memset(out, 0, sizeof out);
    char msg[SRV_ERR_MAX];
    int64_t t0 = srv_now_us();
    int merged = nj > 1, status = 200;
    if (!merged) {
        memcpy(in, jobs[0]->req.in, sizeof(nn_tensor) * (size_t)mi->n_in);
    } else {
        memset(in, 0, sizeof in);
        for (int i = 0; i < mi->n_in && status == 200; i++) {
            in[i] = jobs[0]->req.in[i];
            in[i].dims[0] = total;
            size_t bytes = 0;
            for (int j = 0; j < nj; j++)
                bytes += (size_t)nn_tensor_elements(&jobs[j]->req.in[i]) * nn_dtype_size(in[i].dtype);
            in[i].data = malloc(bytes ? bytes : 1);
            if (!in[i].data) {
                snprintf(msg, sizeof msg, "out of memory merging %d requests", nj);
                status = 503;
                break;
            }
            size_t off = 0;
            for (int j = 0; j < nj; j++) {
                size_t b = (size_t)nn_tensor_elements(&jobs[j]->req.in[i]) * nn_dtype_size(in[i].dtype);
                memcpy((char *)in[i].data + off, jobs[j]->req.in[i].data, b);
                off += b;
            }
        }
    }
    if (status == 200 && nn_predict(sm->m, in, mi->n_in, out, mi->n_out) != NN_OK) {
        /* the inputs were checked against the model's shapes: what is left is the engine's refusal */
        snprintf(msg, sizeof msg, "model '%s': %s", sm->name, nn_last_error());
        status = 400;
    }
    int64_t t1 = srv_now_us();
    int64_t row = 0;
    for (int j = 0; j < nj; j++) {
        srv_job *job = jobs[j];
        int st = status;
        for (int k = 0; k < mi->n_out && st == 200; k++)
            if (slice(&out[k], merged && mi->out[k].ndim > 0 && mi->out[k].dims[0] < 0, row, job->req.samples,
                      &job->out[k])) {
                snprintf(msg, sizeof msg, "out of memory for the outputs");
                st = 503;
            }
        row += job->req.samples;
        pthread_mutex_lock(&sm->mu);
        srv_hist_add(&sm->met.queue_s, srv_time_bounds, (double)(t0 - job->t_enqueue) / 1e6);
        if (st != 200) sm->met.failures++;
        pthread_mutex_unlock(&sm->mu);
        finish(job, st, st == 200 ? NULL : msg);
    }
    pthread_mutex_lock(&sm->mu);
    srv_hist_add(&sm->met.compute_s, srv_time_bounds, (double)(t1 - t0) / 1e6);
    srv_hist_add(&sm->met.batch, srv_batch_bounds, (double)total);
    pthread_mutex_unlock(&sm->mu);
    for (int k = 0; k < mi->n_out; k++)
        nn_tensor_release(&out[k]);
    if (merged)
        for (int i = 0; i < mi->n_in; i++)
            free(in[i].data);
}

static srv_job *pop(srv_model *sm) {
    srv_job *j = sm->head;
    sm->head = j->next;
    if (!sm->head) sm->tail = NULL;
    sm->qlen--;
    j->next = NULL;
    return j;
}

static void *worker(void *arg) {
    srv_model *sm = arg;
    int cap = sm->cfg.max_batch > 1 ? sm->cfg.max_batch : 1;
    srv_job **jobs = calloc((size_t)cap, sizeof *jobs);
    pthread_mutex_lock(&sm->mu);
    for (;;) {
        while (!sm->head && !sm->stop)
            pthread_cond_wait(&sm->cv, &sm->mu);
        if (!sm->head) break;
        int nj = 0;
        int64_t total = 0;
        int64_t wait_until = sm->head->t_enqueue + sm->cfg.delay_us;
        for (;;) {
            /* requests that waited past their timeout are answered without running */
            while (sm->head && srv_now_us() > sm->head->deadline) {
                srv_job *late = pop(sm);
                sm->met.failures++;
                pthread_mutex_unlock(&sm->mu);
                finish(late, 503, "request timed out in the queue");
                pthread_mutex_lock(&sm->mu);
            }
            while (sm->head && nj < cap && jobs && (nj == 0 || total + sm->head->req.samples <= cap)) {
                srv_job *j = pop(sm);
                total += j->req.samples;
                jobs[nj++] = j;
            }
            if (!jobs && sm->head && !nj) {
                srv_job *j = pop(sm);
                pthread_mutex_unlock(&sm->mu);
                finish(j, 503, "out of memory");
                pthread_mutex_lock(&sm->mu);
            }
            if (!sm->cfg.batchable || nj == 0 || total >= cap || sm->stop || srv_now_us() >= wait_until) break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            int64_t left = wait_until - srv_now_us();
            if (left <= 0) break;
            ts.tv_sec += left / 1000000;
            ts.tv_nsec += (left % 1000000) * 1000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&sm->cv, &sm->mu, &ts);
        }
        if (!nj) continue;
        pthread_mutex_unlock(&sm->mu);
        run_batch(sm, jobs, nj, total);
        pthread_mutex_lock(&sm->mu);
    }
    pthread_mutex_unlock(&sm->mu);
    free(jobs);
    return NULL;
}

int srv_model_submit(srv_model *sm, srv_job *job, char *err, size_t en) {
    pthread_mutex_lock(&sm->mu);
    sm->met.requests++;
    if (!sm->ready || sm->stop) {
        sm->met.failures++;
        pthread_mutex_unlock(&sm->mu);
        snprintf(err, en, "model '%s' is not ready", sm->name);
        return 503;
    }
    if (sm->qlen >= sm->cfg.queue_limit) {
        sm->met.failures++;
        pthread_mutex_unlock(&sm->mu);
        snprintf(err, en, "model '%s': queue full (%d requests waiting)", sm->name, sm->cfg.queue_limit);
        return 503;
    }
    job->t_enqueue = srv_now_us();
    job->deadline = job->t_enqueue + sm->cfg.timeout_ms * 1000;
    job->next = NULL;
    if (sm->tail)
        sm->tail->next = job;
    else
        sm->head = job;
    sm->tail = job;
    sm->qlen++;
    pthread_cond_signal(&sm->cv);
    pthread_mutex_unlock(&sm->mu);
    return 0;
}

static void io_from(srv_io *io, const char *name, const nn_tensor *shape, int batched) {
    snprintf(io->name, sizeof io->name, "%s", name);
    io->dtype = shape->dtype;
    io->ndim = shape->ndim;
    for (int d = 0; d < shape->ndim; d++)
        io->dims[d] = shape->dims[d];
    if (batched && io->ndim > 0) io->dims[0] = -1;
}

int srv_model_start(srv_model *sm, const char *cache_dir, int cache, char *err, size_t en) {
    nn_options opt = nn_options_default();
    opt.batch = sm->cfg.max_batch > 1 ? sm->cfg.max_batch : 1;
    opt.threads = sm->cfg.threads;
    opt.precision = sm->cfg.bf16 ? NN_PRECISION_BF16 : NN_PRECISION_FP32;
    opt.cache = cache;
    opt.cache_dir = cache_dir;
    if (nn_load(sm->path, &opt, &sm->m) != NN_OK) {
        snprintf(err, en, "model '%s' (%s): %s", sm->name, sm->path, nn_last_error());
        return -1;
    }
    srv_model_info *mi = &sm->info;
    mi->n_in = nn_input_count(sm->m);
    mi->n_out = nn_output_count(sm->m);
    if (mi->n_in > SRV_MAX_IO || mi->n_out > SRV_MAX_IO) {
        snprintf(err, en, "model '%s': more than %d inputs or outputs", sm->name, SRV_MAX_IO);
        goto fail;
    }
    /* A batched model shows the bound batch size along dim 0 of every input; with batch 1 that cannot be told
     * from a fixed 1, and the engine refuses more samples for a fixed one.  Outputs are split along dim 0 only
     * when it carries the batch. */
    nn_tensor sh[SRV_MAX_IO];
    const char *names[SRV_MAX_IO];
    int batched = 1;
    for (int i = 0; i < mi->n_in; i++) {
        nn_input_info(sm->m, i, &names[i], &sh[i]);
        if (sh[i].ndim < 1 || sh[i].dims[0] != opt.batch) batched = 0;
        if (!srv_dtype_name(sh[i].dtype)) {
            snprintf(err, en, "model '%s': input '%s' has a datatype the protocol cannot carry", sm->name, names[i]);
            goto fail;
        }
    }
    mi->batched = batched;
    for (int i = 0; i < mi->n_in; i++)
        io_from(&mi->in[i], names[i], &sh[i], batched);
    for (int i = 0; i < mi->n_out; i++) {
        const char *name;
        nn_tensor s;
        nn_output_info(sm->m, i, &name, &s);
        io_from(&mi->out[i], name, &s, batched && s.ndim > 0 && s.dims[0] == opt.batch);
    }
    sm->cfg.batchable = batched && opt.batch > 1;
    if (sm->image.input[0]) {
        int k = 0;
        while (k < mi->n_in && strcmp(mi->in[k].name, sm->image.input))
            k++;
        srv_io *io = &mi->in[k];
        if (k == mi->n_in || io->dtype != NN_DTYPE_FLOAT || io->ndim != 4 || io->dims[1] != 3 || io->dims[2] < 1 ||
            io->dims[3] < 1 || io->dims[2] > 16384 || io->dims[3] > 16384) {
            snprintf(err, en, "model '%s': image_input '%s' is not an FP32 input of shape [N,3,H,W]", sm->name,
                     sm->image.input);
            goto fail;
        }
        sm->image.height = (int)io->dims[2];
        sm->image.width = (int)io->dims[3];
        io->bytes_input = 1;
        io->ndim = 1;
        io->dims[0] = -1;
    }
    if (pthread_create(&sm->worker, NULL, worker, sm)) {
        snprintf(err, en, "model '%s': cannot start its worker thread", sm->name);
        goto fail;
    }
    sm->started = 1;
    sm->ready = 1;
    return 0;
fail:
    nn_free(sm->m);
    sm->m = NULL;
    return -1;
}

void srv_model_stop(srv_model *sm) {
    pthread_mutex_lock(&sm->mu);
    sm->stop = 1;
    sm->ready = 0;
    pthread_cond_broadcast(&sm->cv);
    pthread_mutex_unlock(&sm->mu);
    if (sm->started) pthread_join(sm->worker, NULL);
    sm->started = 0;
    nn_free(sm->m);
    sm->m = NULL;
}
