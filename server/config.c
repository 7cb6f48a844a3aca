/* nnserve's command line and model repository.  A repository is a folder with
 * one sub-folder per model, named as the model is served; it holds the .onnx
 * file and optionally nnserve.conf, lines of `key = value` (docs/server.md). */
#include "server.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *f) {
    fprintf(f, "usage: nnserve [--model NAME=PATH]... [--model-repository DIR] [options]\n"
               "  --host ADDR            IPv4 address to listen on (default 127.0.0.1)\n"
               "  --port N               TCP port (default 8000)\n"
               "  --http-threads N       HTTP threads in libmicrohttpd's pool (default 4)\n"
               "  --decode-threads N     image decoding threads, for models with image_input (default 2)\n"
               "  --max-connections N    connections at once; more are refused (default 512)\n"
               "  --conn-timeout S       drop a connection idle for S seconds (default 30)\n"
               "  --max-body BYTES       largest request body (default 67108864)\n"
               "  --max-json-depth N     deepest nesting of a request's JSON (default 32)\n"
               "  --max-samples N        most samples in one request (default 1024)\n"
               "  --max-images N         most encoded images in one request (default 64)\n"
               "  --batch N              default max batch size of a model: 1 = batching off (default 8)\n"
               "  --queue-delay-us N     default time a request waits for others to batch with (default 2000)\n"
               "  --queue-limit N        default requests queued per model before 503 (default 256)\n"
               "  --timeout-ms N         default time a request may wait in its queue (default 30000)\n"
               "  --threads N            engine threads per model, 0 = all cores (default 0)\n"
               "  --precision P          default CPU precision of a model: fp32 or bf16 (AVX512-BF16 only)\n"
               "  --cache-dir DIR        plan cache folder (default: the engine's)\n"
               "  --no-cache             neither read nor write the plan cache\n"
               "  --drain-ms N           on SIGTERM, wait this long for requests in flight (default 30000)\n"
               "  --no-access-log        no line per request on stderr\n");
}

/* "fp32" or "bf16" into *bf16; -1 with a message otherwise. */
static int parse_precision(const char *where, const char *v, int *bf16) {
    if (!v || (strcmp(v, "fp32") && strcmp(v, "bf16"))) {
        fprintf(stderr, "nnserve: %s: precision must be fp32 or bf16\n", where);
        return -1;
    }
    *bf16 = !strcmp(v, "bf16");
    return 0;
}

int srv_valid_model_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n >= SRV_NAME_MAX || s[0] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return 0;
    }
    return 1;
}

static int parse_int(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "nnserve: %s needs an integer from %lld to %lld\n", opt, (long long)lo, (long long)hi);
        return -1;
    }
    *out = x;
    return 0;
}

static srv_model *add_model(srv_config *c, const char *name, const char *path) {
    if (!srv_valid_model_name(name)) {
        fprintf(stderr, "nnserve: model name '%s': use letters, digits, '_', '-' and '.', not first\n", name);
        return NULL;
    }
    for (int i = 0; i < c->n_models; i++)
        if (!strcmp(c->models[i]->name, name)) {
            fprintf(stderr, "nnserve: model '%s' given twice\n", name);
            return NULL;
        }
    if (c->n_models == SRV_MAX_MODELS) {
        fprintf(stderr, "nnserve: more than %d models\n", SRV_MAX_MODELS);
        return NULL;
    }
    if (strlen(path) >= sizeof c->models[0]->path) {
        fprintf(stderr, "nnserve: model '%s': path too long\n", name);
        return NULL;
    }
    srv_model *sm = calloc(1, sizeof *sm);
    if (!sm) return NULL;
    snprintf(sm->name, sizeof sm->name, "%s", name);
    snprintf(sm->path, sizeof sm->path, "%s", path);
    sm->cfg = c->defaults;
    /* ImageNet's statistics, as torchvision's models expect */
    sm->image = (srv_image_config){.resize = 256,
                                   .mean = {0.485f, 0.456f, 0.406f},
                                   .std = {0.229f, 0.224f, 0.225f},
                                   .scale = 255,
                                   .max_pixels = 50000000};
    pthread_mutex_init(&sm->mu, NULL);
    pthread_cond_init(&sm->cv, NULL);
    c->models[c->n_models++] = sm;
    return sm;
}

/* nnserve.conf: `key = value` lines, '#' comments; an unknown key is an error, not a typo silently ignored. */
static int read_model_config(srv_model *sm, const char *file, char *onnx, size_t onnx_len) {
    FILE *f = fopen(file, "r");
    if (!f) return errno == ENOENT ? 0 : (fprintf(stderr, "nnserve: %s: cannot read\n", file), -1);
    char line[512];
    int ln = 0, rc = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        ln++;
        char *p = line;
        p[strcspn(p, "#\r\n")] = 0;
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p) continue;
        char *eq = strchr(p, '=');
        if (!eq) {
            fprintf(stderr, "nnserve: %s:%d: expected key = value\n", file, ln);
            rc = -1;
            break;
        }
        char *k = p, *v = eq + 1, *e = eq;
        while (e > k && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        *e = 0;
        while (*v == ' ' || *v == '\t')
            v++;
        for (e = v + strlen(v); e > v && (e[-1] == ' ' || e[-1] == '\t'); e--)
            e[-1] = 0;
        int64_t x;
        char where[4700]; /* the file's path (PATH_MAX), the line and the key */
        snprintf(where, sizeof where, "%s:%d: %s", file, ln, k);
        if (!strcmp(k, "max_batch_size")) {
            rc = parse_int(where, v, 1, 4096, &x);
            sm->cfg.max_batch = (int)x;
        } else if (!strcmp(k, "max_queue_delay_us")) {
            rc = parse_int(where, v, 0, 10000000, &x);
            sm->cfg.delay_us = x;
        } else if (!strcmp(k, "queue_limit")) {
            rc = parse_int(where, v, 1, 1000000, &x);
            sm->cfg.queue_limit = (int)x;
        } else if (!strcmp(k, "timeout_ms")) {
            rc = parse_int(where, v, 1, 86400000, &x);
            sm->cfg.timeout_ms = x;
        } else if (!strcmp(k, "threads")) {
            rc = parse_int(where, v, 0, 1024, &x);
            sm->cfg.threads = (int)x;
        } else if (!strcmp(k, "precision")) {
            rc = parse_precision(where, v, &sm->cfg.bf16);
        } else if (!strcmp(k, "image_input")) {
            if (!*v || strlen(v) >= sizeof sm->image.input) {
                fprintf(stderr, "nnserve: %s: an input name\n", where);
                rc = -1;
            }
            snprintf(sm->image.input, sizeof sm->image.input, "%s", v);
        } else if (!strcmp(k, "image_resize")) {
            rc = parse_int(where, v, 0, 16384, &x);
            sm->image.resize = (int)x;
        } else if (!strcmp(k, "image_max_pixels")) {
            rc = parse_int(where, v, 1, (int64_t)1 << 32, &x);
            sm->image.max_pixels = x;
        } else if (!strcmp(k, "image_mean") || !strcmp(k, "image_std") || !strcmp(k, "image_scale")) {
            float f[3];
            int want = strcmp(k, "image_scale") ? 3 : 1;
            char tail;
            int got =
                want == 3 ? sscanf(v, "%f , %f , %f %c", &f[0], &f[1], &f[2], &tail) : sscanf(v, "%f %c", &f[0], &tail);
            if (got != want || (strcmp(k, "image_mean") && (f[0] <= 0 || (want == 3 && (f[1] <= 0 || f[2] <= 0))))) {
                fprintf(stderr, "nnserve: %s: %s\n", where,
                        want == 3 ? "three numbers a, b, c (std above 0)" : "a number above 0");
                rc = -1;
            } else if (!strcmp(k, "image_scale")) {
                sm->image.scale = f[0];
            } else {
                memcpy(!strcmp(k, "image_mean") ? sm->image.mean : sm->image.std, f, sizeof f);
            }
        } else if (!strcmp(k, "image_channels")) {
            if (strcmp(v, "RGB") && strcmp(v, "BGR")) {
                fprintf(stderr, "nnserve: %s: RGB or BGR\n", where);
                rc = -1;
            }
            sm->image.bgr = !strcmp(v, "BGR");
        } else if (!strcmp(k, "ensemble")) {
            sm->n_members = 0;
            for (char *save = NULL, *tok = strtok_r(v, ", \t", &save); tok && !rc;
                 tok = strtok_r(NULL, ", \t", &save)) {
                if (sm->n_members == SRV_MAX_MEMBERS || !srv_valid_model_name(tok)) {
                    fprintf(stderr, "nnserve: %s: up to %d model names\n", where, SRV_MAX_MEMBERS);
                    rc = -1;
                } else {
                    snprintf(sm->member_names[sm->n_members++], SRV_NAME_MAX, "%s", tok);
                }
            }
            if (!rc && sm->n_members < 1) fprintf(stderr, "nnserve: %s: no member\n", where), rc = -1;
        } else if (!strcmp(k, "combine")) {
            if (!strcmp(v, "mean_softmax"))
                sm->combine = SRV_COMBINE_MEAN_SOFTMAX;
            else if (!strcmp(v, "concat"))
                sm->combine = SRV_COMBINE_CONCAT;
            else
                fprintf(stderr, "nnserve: %s: mean_softmax or concat\n", where), rc = -1;
        } else if (!strcmp(k, "model_file")) {
            if (!*v || strchr(v, '/') || v[0] == '.') {
                fprintf(stderr, "nnserve: %s: a file name inside the model's folder\n", where);
                rc = -1;
            } else {
                snprintf(onnx, onnx_len, "%s", v);
            }
        } else {
            fprintf(stderr, "nnserve: %s:%d: unknown key '%s'\n", file, ln, k);
            rc = -1;
        }
    }
    fclose(f);
    return rc;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static int read_repository(srv_config *c, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "nnserve: --model-repository %s: cannot open the folder\n", dir);
        return -1;
    }
    struct dirent *e;
    int rc = 0, found = 0;
    char sub[PATH_MAX];
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(sub, &st) || !S_ISDIR(st.st_mode)) continue;
        /* the model file: named in the config, else the folder's one .onnx file */
        char onnx[256] = "", conf[PATH_MAX + 16], path[PATH_MAX + 260];
        srv_model *sm = add_model(c, e->d_name, sub);
        if (!sm) {
            rc = -1;
            break;
        }
        snprintf(conf, sizeof conf, "%s/nnserve.conf", sub);
        if (read_model_config(sm, conf, onnx, sizeof onnx)) {
            rc = -1;
            break;
        }
        if (sm->n_members) {
            if (!sm->combine) sm->combine = SRV_COMBINE_MEAN_SOFTMAX;
            found++;
            continue;
        }
        if (!onnx[0]) {
            DIR *md = opendir(sub);
            struct dirent *me;
            int n = 0;
            while (md && (me = readdir(md)))
                if (me->d_name[0] != '.' && ends_with(me->d_name, ".onnx")) {
                    n++;
                    snprintf(onnx, sizeof onnx, "%s", me->d_name);
                }
            if (md) closedir(md);
            if (n != 1) {
                fprintf(stderr, "nnserve: %s: %s\n", sub,
                        n ? "several .onnx files: name one with model_file" : "no .onnx file");
                rc = -1;
                break;
            }
        }
        snprintf(path, sizeof path, "%s/%s", sub, onnx);
        if (strlen(path) >= sizeof sm->path) {
            fprintf(stderr, "nnserve: %s: path too long\n", path);
            rc = -1;
            break;
        }
        snprintf(sm->path, sizeof sm->path, "%s", path);
        found++;
    }
    closedir(d);
    if (!rc && !found) {
        fprintf(stderr, "nnserve: --model-repository %s: no model folders\n", dir);
        rc = -1;
    }
    return rc;
}

int srv_config_parse(srv_config *c, int argc, char **argv) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8000;
    c->http_threads = 4;
    c->decode_threads = 2;
    c->max_connections = 512;
    c->conn_timeout_s = 30;
    c->access_log = 1;
    c->cache = 1;
    c->drain_ms = 30000;
    c->lim = (srv_limits){.max_body = 64 << 20, .max_json_depth = 32, .max_samples = 1024, .max_images = 64};
    c->defaults = (srv_model_config){.max_batch = 8, .delay_us = 2000, .queue_limit = 256, .timeout_ms = 30000};
    const char *repo = NULL;
    /* options first, so that defaults apply to every model whatever the order */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 1; i < argc; i++) {
            const char *s = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
            int64_t x = 0;
            int rc = 0, takes = 1;
            if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
                usage(stdout);
                return 1;
            } else if (!strcmp(s, "--model")) {
                const char *eq = v ? strchr(v, '=') : NULL;
                if (!eq || eq == v || !eq[1]) {
                    fprintf(stderr, "nnserve: --model needs NAME=PATH\n");
                    return -1;
                }
                if (pass == 1) {
                    char name[SRV_NAME_MAX];
                    size_t n = (size_t)(eq - v);
                    if (n >= sizeof name) n = sizeof name - 1;
                    memcpy(name, v, n);
                    name[n] = 0;
                    if (!add_model(c, name, eq + 1)) return -1;
                }
            } else if (!strcmp(s, "--model-repository")) {
                if (!v) return fprintf(stderr, "nnserve: --model-repository needs a folder\n"), -1;
                repo = v;
            } else if (!strcmp(s, "--host")) {
                if (!v) return fprintf(stderr, "nnserve: --host needs an address\n"), -1;
                c->host = v;
            } else if (!strcmp(s, "--port")) {
                rc = parse_int(s, v, 0, 65535, &x), c->port = (int)x;
            } else if (!strcmp(s, "--http-threads")) {
                rc = parse_int(s, v, 1, 256, &x), c->http_threads = (int)x;
            } else if (!strcmp(s, "--decode-threads")) {
                rc = parse_int(s, v, 1, 64, &x), c->decode_threads = (int)x;
            } else if (!strcmp(s, "--max-connections")) {
                rc = parse_int(s, v, 1, 100000, &x), c->max_connections = (int)x;
            } else if (!strcmp(s, "--conn-timeout")) {
                rc = parse_int(s, v, 1, 3600, &x), c->conn_timeout_s = (int)x;
            } else if (!strcmp(s, "--max-body")) {
                rc = parse_int(s, v, 1024, (int64_t)1 << 32, &x), c->lim.max_body = (size_t)x;
            } else if (!strcmp(s, "--max-json-depth")) {
                rc = parse_int(s, v, 2, 1000, &x), c->lim.max_json_depth = (int)x;
            } else if (!strcmp(s, "--max-samples")) {
                rc = parse_int(s, v, 1, 1 << 20, &x), c->lim.max_samples = x;
            } else if (!strcmp(s, "--max-images")) {
                rc = parse_int(s, v, 1, 1 << 20, &x), c->lim.max_images = x;
            } else if (!strcmp(s, "--batch")) {
                rc = parse_int(s, v, 1, 4096, &x), c->defaults.max_batch = (int)x;
            } else if (!strcmp(s, "--queue-delay-us")) {
                rc = parse_int(s, v, 0, 10000000, &x), c->defaults.delay_us = x;
            } else if (!strcmp(s, "--queue-limit")) {
                rc = parse_int(s, v, 1, 1000000, &x), c->defaults.queue_limit = (int)x;
            } else if (!strcmp(s, "--timeout-ms")) {
                rc = parse_int(s, v, 1, 86400000, &x), c->defaults.timeout_ms = x;
            } else if (!strcmp(s, "--threads")) {
                rc = parse_int(s, v, 0, 1024, &x), c->defaults.threads = (int)x;
            } else if (!strcmp(s, "--precision")) {
                rc = parse_precision(s, v, &c->defaults.bf16);
            } else if (!strcmp(s, "--drain-ms")) {
                rc = parse_int(s, v, 0, 3600000, &x), c->drain_ms = x;
            } else if (!strcmp(s, "--cache-dir")) {
                if (!v) return fprintf(stderr, "nnserve: --cache-dir needs a folder\n"), -1;
                c->cache_dir = v;
            } else if (!strcmp(s, "--no-cache")) {
                c->cache = 0, takes = 0;
            } else if (!strcmp(s, "--no-access-log")) {
                c->access_log = 0, takes = 0;
            } else {
                fprintf(stderr, "nnserve: unknown option '%s'\n", s);
                usage(stderr);
                return -1;
            }
            if (rc) return -1;
            i += takes;
        }
    }
    if (repo && read_repository(c, repo)) return -1;
    /* an ensemble's members are other models of this server, never ensembles themselves */
    for (int i = 0; i < c->n_models; i++) {
        srv_model *sm = c->models[i];
        for (int k = 0; k < sm->n_members; k++) {
            srv_model *m = NULL;
            for (int j = 0; j < c->n_models; j++)
                if (!strcmp(c->models[j]->name, sm->member_names[k])) m = c->models[j];
            if (!m || m->n_members) {
                fprintf(stderr, "nnserve: ensemble '%s': member '%s' is %s\n", sm->name, sm->member_names[k],
                        m ? "an ensemble" : "not a model of this server");
                return -1;
            }
            sm->members[k] = m;
        }
    }
    if (!c->n_models) {
        fprintf(stderr, "nnserve: no model (use --model NAME=PATH or --model-repository DIR)\n");
        return -1;
    }
    return 0;
}

void srv_config_free(srv_config *c) {
    for (int i = 0; i < c->n_models; i++) {
        pthread_mutex_destroy(&c->models[i]->mu);
        pthread_cond_destroy(&c->models[i]->cv);
        free(c->models[i]);
    }
    c->n_models = 0;
}
