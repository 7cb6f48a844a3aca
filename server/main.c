/* nnserve: load the models, serve them until SIGTERM or SIGINT, drain, exit 0. */
#include "server.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    srv_config c;
    int r = srv_config_parse(&c, argc, argv);
    if (r) {
        srv_config_free(&c);
        return r > 0 ? 0 : 2;
    }
    /* every thread inherits the mask: the signals are taken only by sigwait below */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    char err[SRV_ERR_MAX + 512];
    if (srv_decode_start(c.decode_threads, 1024)) {
        fprintf(stderr, "nnserve: cannot start the image decode threads\n");
        srv_config_free(&c);
        return 1;
    }
    srv_server *s = srv_http_start(&c, err, sizeof err);
    if (!s) {
        fprintf(stderr, "nnserve: %s\n", err);
        srv_config_free(&c);
        return 1;
    }
    /* readiness stays false until every model is loaded (the server answers meanwhile) */
    for (int i = 0; i < c.n_models; i++) {
        srv_model *sm = c.models[i];
        if (sm->n_members) continue;
        int64_t t0 = srv_now_us();
        if (srv_model_start(sm, c.cache_dir, c.cache, err, sizeof err)) {
            fprintf(stderr, "nnserve: %s\n", err);
            srv_http_stop(s, 0);
            srv_config_free(&c);
            return 1;
        }
        nn_model_stats st;
        nn_model_get_stats(sm->m, &st);
        fprintf(stderr, "nnserve: model '%s' loaded in %.1f ms (plan cache %s), batch %d%s, queue delay %lld us\n",
                sm->name, (double)(srv_now_us() - t0) / 1000,
                st.cache == NN_CACHE_HIT    ? "hit"
                : st.cache == NN_CACHE_MISS ? "miss"
                                            : "off",
                st.batch, sm->cfg.batchable ? "" : " (no merging)", (long long)sm->cfg.delay_us);
    }
    /* ensembles once their members are loaded */
    for (int i = 0; i < c.n_models; i++) {
        srv_model *sm = c.models[i];
        if (!sm->n_members) continue;
        if (srv_ensemble_start(sm, err, sizeof err)) {
            fprintf(stderr, "nnserve: %s\n", err);
            srv_http_stop(s, 0);
            srv_config_free(&c);
            return 1;
        }
        fprintf(stderr, "nnserve: ensemble '%s' of %d models ready\n", sm->name, sm->n_members);
    }
    srv_http_set_ready(s, 1);
    fprintf(stderr, "nnserve: ready\n");
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "nnserve: %s, draining\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    srv_http_stop(s, c.drain_ms);
    srv_config_free(&c);
    return 0;
}
