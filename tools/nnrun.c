/* nnrun: load an ONNX model, run it, report load time, latency percentiles,
 * throughput and peak memory.  `nnrun --help` lists the options. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nn.h"
#include "nnrun_ensemble.h"

enum { EXIT_ERROR = 1, EXIT_USAGE = 2, MAX_INPUT_FILES = 64 };

typedef struct args {
    const char *model;
    nn_options opt;
    bool batch_given;
    int warmup, iters;
    double duration;
    const char *input_name[MAX_INPUT_FILES], *input_file[MAX_INPUT_FILES];
    int n_input_files;
    const char *save_dir;
    bool json;
    int scan[32], n_scan;  /* --scan-batch sizes */
    double latency_budget; /* ms, 0 = none */
    bool quiet;            /* measure only (scan children) */
    const char *ensemble;  /* --ensemble mean|concat: the models below with `model` first */
    const char *models[8];
    int n_models;
} args;

/* What one measurement found; scan children send it to the parent. */
typedef struct report {
    int ok, batch;
    double load_ms, median, p90, p99, throughput, rss_mb;
} report;

static void usage(FILE *f) {
    fprintf(f, "usage: nnrun MODEL.onnx [options]\n"
               "  --batch N            batch size bound to the symbolic batch dimension (default 1;\n"
               "                       with --input, taken from the data)\n"
               "  --device DEV         cpu or gpuN (default cpu)\n"
               "  --threads N          worker threads, 0 = all cores (default 0)\n"
               "  --micro-batch N      CPU: run a batch as micro-batches of N samples on independent lanes,\n"
               "                       one per thread (default: chosen from the model; N = batch: never)\n"
               "  --warmup N           untimed runs before measuring (default 3)\n"
               "  --iters N            timed runs (default 20)\n"
               "  --duration SEC       time runs for SEC seconds instead of --iters\n"
               "  --input NAME=FILE    feed input NAME from a .npy or ONNX TensorProto .pb file\n"
               "                       (default: seeded random data of the model's input shapes)\n"
               "  --save-outputs DIR   write each output as DIR/<output name>.npy\n"
               "  --no-opt             run the graph as parsed, without the optimizer\n"
               "  --passes LIST        run only these optimizer passes, in this order (comma-separated)\n"
               "  --disable-pass NAME  leave a pass out (comma-separated for several)\n"
               "  --verify             check the IR after every pass\n"
               "  --profile            print time per operator type after the run\n"
               "  --no-winograd        3x3 convs use the GEMM only (slower, about twice as exact)\n"
               "  --tf32 on|off        GPU: fp32 convs and GEMMs may use TF32 tensor cores (default off)\n"
               "  --fp16               GPU: weights and activations in half precision, fp32 accumulation\n"
               "  --cache-dir DIR      keep optimized plans in DIR (default: $NN_CACHE_DIR, else\n"
               "                       $XDG_CACHE_HOME/nn, else ~/.cache/nn)\n"
               "  --no-cache           neither read nor write the plan cache\n"
               "  --max-memory SIZE    refuse a model needing more memory than SIZE bytes (suffix K, M or G)\n"
               "  --scan-batch LIST    measure each batch size (e.g. 1,2,4,8,16,32,64,128), each in a fresh\n"
               "                       process, and report the best throughput\n"
               "  --latency-budget MS  with --scan-batch: also report the largest batch whose p99 latency fits\n"
               "  --json               print the report as one JSON object\n"
               "  --ensemble HOW       with several models (nnrun m1.onnx m2.onnx ...): combine their outputs\n"
               "                       (mean: of softmax; concat), members at once vs one after another\n"
               "  --version            print the engine version\n"
               "  --help               this text\n");
}

static int parse_int(const char *opt, const char *s, int min, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s ? s : "", &end, 10);
    if (!s || end == s || *end || errno || v < min || v > 1 << 30) {
        fprintf(stderr, "nnrun: %s needs an integer >= %d, got '%s'\n", opt, min, s ? s : "");
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* A byte count with an optional binary suffix: 512M, 2G, 65536. */
static int parse_size(const char *opt, const char *s, int64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s ? s : "", &end);
    int shift = 0;
    if (s && end != s && *end && !end[1])
        shift = *end == 'K' || *end == 'k'   ? 10
                : *end == 'M' || *end == 'm' ? 20
                : *end == 'G' || *end == 'g' ? 30
                                             : -1;
    else if (s && end != s && *end)
        shift = -1;
    if (!s || end == s || errno || shift < 0 || !(v > 0) || v * (double)(1ll << shift) > 9e18) {
        fprintf(stderr, "nnrun: %s needs a size > 0 in bytes, with an optional K, M or G suffix, got '%s'\n", opt,
                s ? s : "");
        return -1;
    }
    *out = (int64_t)(v * (double)(1ll << shift));
    return 0;
}

static int parse_args(int argc, char **argv, args *a) {
    a->opt = nn_options_default();
    a->warmup = 3;
    a->iters = 20;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(s, "--version")) {
            printf("nnrun %s\n", NN_VERSION_STRING);
            exit(0);
        } else if (!strcmp(s, "--batch")) {
            if (parse_int(s, v, 1, &a->opt.batch)) return -1;
            a->batch_given = true;
            i++;
        } else if (!strcmp(s, "--device")) {
            if (!v) return fprintf(stderr, "nnrun: --device needs a value\n"), -1;
            a->opt.device = v;
            i++;
        } else if (!strcmp(s, "--micro-batch")) {
            if (parse_int(s, v, 1, &a->opt.micro_batch)) return -1;
            i++;
        } else if (!strcmp(s, "--threads")) {
            if (parse_int(s, v, 0, &a->opt.threads)) return -1;
            i++;
        } else if (!strcmp(s, "--warmup")) {
            if (parse_int(s, v, 0, &a->warmup)) return -1;
            i++;
        } else if (!strcmp(s, "--iters")) {
            if (parse_int(s, v, 1, &a->iters)) return -1;
            i++;
        } else if (!strcmp(s, "--duration")) {
            char *end;
            a->duration = v ? strtod(v, &end) : 0;
            if (!v || *end || !(a->duration > 0)) return fprintf(stderr, "nnrun: --duration needs seconds > 0\n"), -1;
            i++;
        } else if (!strcmp(s, "--input")) {
            const char *eq = v ? strchr(v, '=') : NULL;
            if (!eq || eq == v || !eq[1]) return fprintf(stderr, "nnrun: --input needs NAME=FILE\n"), -1;
            if (a->n_input_files == MAX_INPUT_FILES) return fprintf(stderr, "nnrun: too many --input\n"), -1;
            a->input_name[a->n_input_files] = strndup(v, (size_t)(eq - v));
            a->input_file[a->n_input_files++] = eq + 1;
            i++;
        } else if (!strcmp(s, "--save-outputs")) {
            if (!v) return fprintf(stderr, "nnrun: --save-outputs needs a directory\n"), -1;
            a->save_dir = v;
            i++;
        } else if (!strcmp(s, "--no-opt")) {
            a->opt.optimize = 0;
        } else if (!strcmp(s, "--passes") || !strcmp(s, "--disable-pass")) {
            if (!v) return fprintf(stderr, "nnrun: %s needs a list of pass names\n", s), -1;
            if (s[2] == 'p')
                a->opt.passes = v;
            else
                a->opt.disable_passes = v;
            i++;
        } else if (!strcmp(s, "--verify")) {
            a->opt.verify = 1;
        } else if (!strcmp(s, "--profile")) {
            a->opt.profile = 1;
        } else if (!strcmp(s, "--no-winograd")) {
            a->opt.winograd = 0;
        } else if (!strcmp(s, "--cache-dir")) {
            if (!v || !v[0]) return fprintf(stderr, "nnrun: --cache-dir needs a folder\n"), -1;
            a->opt.cache_dir = v;
            i++;
        } else if (!strcmp(s, "--tf32")) {
            if (!v || (strcmp(v, "on") && strcmp(v, "off")))
                return fprintf(stderr, "nnrun: --tf32 needs on or off\n"), -1;
            a->opt.tf32 = !strcmp(v, "on");
            i++;
        } else if (!strcmp(s, "--fp16")) {
            a->opt.fp16 = 1;
        } else if (!strcmp(s, "--no-cache")) {
            a->opt.cache = 0;
        } else if (!strcmp(s, "--max-memory")) {
            if (parse_size(s, v, &a->opt.max_memory)) return -1;
            i++;
        } else if (!strcmp(s, "--scan-batch")) {
            char *list = v ? strdup(v) : NULL, *save = NULL;
            for (char *tok = list ? strtok_r(list, ",", &save) : NULL; tok; tok = strtok_r(NULL, ",", &save)) {
                if (a->n_scan == 32 || parse_int(s, tok, 1, &a->scan[a->n_scan])) {
                    free(list);
                    return fprintf(stderr, "nnrun: --scan-batch takes up to 32 sizes >= 1\n"), -1;
                }
                a->n_scan++;
            }
            free(list);
            if (!a->n_scan) return fprintf(stderr, "nnrun: --scan-batch needs a list of sizes\n"), -1;
            i++;
        } else if (!strcmp(s, "--latency-budget")) {
            char *end;
            a->latency_budget = v ? strtod(v, &end) : 0;
            if (!v || *end || !(a->latency_budget > 0))
                return fprintf(stderr, "nnrun: --latency-budget needs milliseconds > 0\n"), -1;
            i++;
        } else if (!strcmp(s, "--json")) {
            a->json = true;
        } else if (!strcmp(s, "--ensemble")) {
            if (!v) return fprintf(stderr, "nnrun: --ensemble needs mean or concat\n"), -1;
            a->ensemble = v;
            i++;
        } else if (s[0] == '-') {
            fprintf(stderr, "nnrun: unknown option '%s' (see --help)\n", s);
            return -1;
        } else if (a->n_models == 8) {
            fprintf(stderr, "nnrun: more than 8 models given\n");
            return -1;
        } else {
            if (!a->model) a->model = s;
            a->models[a->n_models++] = s;
        }
    }
    if (!a->model) {
        usage(stderr);
        return -1;
    }
    if (a->n_models > 1 && !a->ensemble) {
        fprintf(stderr, "nnrun: more than one model given ('%s' and '%s'): use --ensemble\n", a->models[0],
                a->models[1]);
        return -1;
    }
    return 0;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* xorshift: reproducible inputs without libc's rand state */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double next_uniform(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / (double)(1ull << 53);
}

static int fill_random(nn_tensor *t) {
    int64_t n = nn_tensor_elements(t);
    t->data = malloc((size_t)n * nn_dtype_size(t->dtype) + 1);
    if (!t->data) return -1;
    for (int64_t i = 0; i < n; i++) {
        double u = next_uniform();
        switch (t->dtype) {
        case NN_DTYPE_FLOAT: ((float *)t->data)[i] = (float)(2 * u - 1); break;
        case NN_DTYPE_INT64: ((int64_t *)t->data)[i] = (int64_t)(u * 10); break;
        case NN_DTYPE_INT32: ((int32_t *)t->data)[i] = (int32_t)(u * 10); break;
        case NN_DTYPE_DOUBLE: ((double *)t->data)[i] = 2 * u - 1; break;
        case NN_DTYPE_FLOAT16: ((uint16_t *)t->data)[i] = u < 0.5 ? 0xbc00 : 0x3c00; break; /* -1 or 1 */
        default: { /* the other integers and bools: 0 or 1, little-endian */
            size_t esz = nn_dtype_size(t->dtype);
            memset((char *)t->data + (size_t)i * esz, 0, esz);
            ((uint8_t *)t->data)[(size_t)i * esz] = u < 0.5;
            break;
        }
        }
    }
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(const double *sorted, int n, double p) {
    double pos = p / 100.0 * (n - 1);
    int lo = (int)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

static void shape_str(const nn_tensor *t, char *buf, size_t size) {
    int len = snprintf(buf, size, "%s[", nn_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++)
        len += snprintf(buf + len, size - (size_t)len, "%s%lld", d ? "," : "", (long long)t->dims[d]);
    snprintf(buf + len, size - (size_t)len, "]");
}

/* JSON string with the characters JSON forbids escaped */
static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

static int fail(const char *what) {
    fprintf(stderr, "nnrun: %s%s\n", what ? what : "", nn_last_error());
    return EXIT_ERROR;
}

/* What a session holds: released on every way out of it. */
typedef struct held {
    nn_tensor files[MAX_INPUT_FILES]; /* data not yet handed to `in` */
    nn_model *m;
    nn_tensor *in, *out;
    int n_in, n_out;
    double *lat;
} held;

static int run_session(args *ap, report *rep, held *h) {
    args a = *ap;

    /* Input files first: with --input the batch comes from the data. */
    nn_tensor *files = h->files;
    for (int i = 0; i < a.n_input_files; i++) {
        if (nn_tensor_load(a.input_file[i], &files[i]) != NN_OK) return fail("");
        if (!a.batch_given && i == 0 && files[i].ndim > 0 && files[i].dims[0] > 0) a.opt.batch = (int)files[i].dims[0];
    }

    double t0 = now_ms();
    nn_status st = nn_load(a.model, &a.opt, &h->m);
    nn_model *m = h->m;
    double load_ms = now_ms() - t0;
    if (st == NN_ERR_DEVICE || st == NN_ERR_ARG) {
        fprintf(stderr, "nnrun: %s\n", nn_last_error());
        return EXIT_USAGE;
    }
    if (st != NN_OK) return fail("");
    nn_model_stats stats;
    nn_model_get_stats(m, &stats);
    if (stats.cache_warning) fprintf(stderr, "nnrun: warning: %s\n", stats.cache_warning);

    int n_in = h->n_in = nn_input_count(m), n_out = h->n_out = nn_output_count(m);
    nn_tensor *in = h->in = calloc((size_t)n_in + 1, sizeof *in);
    nn_tensor *out = h->out = calloc((size_t)n_out + 1, sizeof *out);
    if (!in || !out) return fail("out of memory");
    for (int f = 0; f < a.n_input_files; f++) {
        int found = -1;
        for (int i = 0; i < n_in; i++) {
            const char *name;
            nn_input_info(m, i, &name, NULL);
            if (!strcmp(name, a.input_name[f])) found = i;
        }
        if (found < 0) {
            fprintf(stderr, "nnrun: --input '%s': the model has no input of that name\n", a.input_name[f]);
            return EXIT_USAGE;
        }
        in[found] = files[f];
        files[f].data = NULL; /* in[found] owns it now */
    }
    for (int i = 0; i < n_in; i++) {
        if (in[i].data) continue;
        const char *name;
        nn_input_info(m, i, &name, &in[i]);
        if (a.n_input_files) {
            fprintf(stderr, "nnrun: input '%s' not given (use --input %s=FILE)\n", name, name);
            return EXIT_USAGE;
        }
        for (int d = 0; d < in[i].ndim; d++)
            if (in[i].dims[d] < 0) {
                fprintf(stderr,
                        "nnrun: input '%s' has a symbolic dimension %d besides the batch; give it with --input\n", name,
                        d);
                return EXIT_USAGE;
            }
        if (fill_random(&in[i])) return fail("out of memory");
    }
    int64_t samples = n_in > 0 && in[0].ndim > 0 ? in[0].dims[0] : 1;

    /* time to first result: the load plus the first prediction */
    double first0 = now_ms();
    if (nn_predict(m, in, n_in, out, n_out) != NN_OK) return fail("");
    double first_result_ms = load_ms + (now_ms() - first0);
    for (int w = 0; w <= a.warmup; w++) {
        for (int k = 0; k < n_out; k++)
            nn_tensor_release(&out[k]);
        if (w < a.warmup && nn_predict(m, in, n_in, out, n_out) != NN_OK) return fail("");
    }
    int cap = a.iters, n_runs = 0;
    double *lat = h->lat = malloc(sizeof(double) * (size_t)cap);
    double start = now_ms();
    for (;;) {
        if (a.duration > 0 ? now_ms() - start >= a.duration * 1e3 && n_runs > 0 : n_runs == a.iters) break;
        if (n_runs == cap) {
            cap *= 2;
            double *grown = realloc(lat, sizeof(double) * (size_t)cap);
            if (!grown) return fail("out of memory");
            lat = h->lat = grown;
        }
        if (!lat) return fail("out of memory");
        double r0 = now_ms();
        if (nn_predict(m, in, n_in, out, n_out) != NN_OK) return fail("");
        lat[n_runs++] = now_ms() - r0;
        if (n_runs < a.iters || a.duration > 0)
            for (int k = 0; k < n_out; k++)
                nn_tensor_release(&out[k]);
    }
    double total_ms = now_ms() - start;
    if (a.duration > 0 && nn_predict(m, in, n_in, out, n_out) != NN_OK) return fail("");
    qsort(lat, (size_t)n_runs, sizeof *lat, cmp_double);
    double med = percentile(lat, n_runs, 50), p90 = percentile(lat, n_runs, 90), p99 = percentile(lat, n_runs, 99);
    double throughput = samples * n_runs / (total_ms / 1e3);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss_mb = ru.ru_maxrss / 1024.0;
    static const char *const cache_names[] = {"off", "miss", "hit"};
    const char *cache = cache_names[stats.cache];

    if (a.save_dir) {
        mkdir(a.save_dir, 0777);
        for (int k = 0; k < n_out; k++) {
            const char *name;
            nn_output_info(m, k, &name, NULL);
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.npy", a.save_dir, name);
            for (char *c = path + strlen(a.save_dir) + 1; *c; c++)
                if (*c == '/') *c = '_';
            if (nn_tensor_save_npy(path, &out[k]) != NN_OK) return fail("");
        }
    }

    if (a.quiet) {
        /* a --scan-batch child: the parent prints the table */
    } else if (a.json) {
        printf("{\"model\": ");
        json_str(a.model);
        printf(", \"batch\": %d, \"samples\": %lld, \"device\": ", stats.batch, (long long)samples);
        json_str(a.opt.device ? a.opt.device : "cpu");
        printf(", \"plan_batch\": %d, \"lanes\": %d", stats.plan_batch, stats.lanes);
        printf(", \"threads\": %d, \"nodes\": %d, \"nodes_parsed\": %d, \"parameters\": %lld, \"arena_bytes\": %lld, "
               "\"load_ms\": %.3f, \"iters\": %d, \"latency_ms\": {\"median\": %.3f, \"p90\": %.3f, \"p99\": %.3f, "
               "\"min\": %.3f, \"max\": %.3f}, \"throughput\": %.3f, \"peak_rss_mb\": %.1f, \"weight_bytes\": %lld, "
               "\"first_result_ms\": %.3f, \"cache\": \"%s\", \"cache_path\": ",
               stats.threads, stats.nodes, stats.nodes_parsed, (long long)stats.parameters,
               (long long)stats.arena_bytes, load_ms, n_runs, med, p90, p99, lat[0], lat[n_runs - 1], throughput,
               rss_mb, (long long)stats.weight_bytes, first_result_ms, cache);
        if (stats.cache_path)
            json_str(stats.cache_path);
        else
            printf("null");
        printf("}\n");
    } else {
        printf("model       %s\n", a.model);
        for (int i = 0; i < n_in; i++) {
            const char *name;
            char buf[256];
            nn_input_info(m, i, &name, NULL);
            shape_str(&in[i], buf, sizeof buf);
            printf("input       %s %s\n", name, buf);
        }
        for (int k = 0; k < n_out; k++) {
            const char *name;
            char buf[256];
            nn_output_info(m, k, &name, NULL);
            shape_str(&out[k], buf, sizeof buf);
            printf("output      %s %s\n", name, buf);
        }
        printf("nodes       %d parsed, %d executed\n", stats.nodes_parsed, stats.nodes);
        printf("parameters  %lld\n", (long long)stats.parameters);
        printf("device      %s, %d threads, batch %d", a.opt.device ? a.opt.device : "cpu", stats.threads, stats.batch);
        if (stats.plan_batch < stats.batch)
            printf(" in micro-batches of %d on %d lane%s", stats.plan_batch, stats.lanes, stats.lanes > 1 ? "s" : "");
        printf("\n");
        if (stats.cache == NN_CACHE_HIT)
            printf("load        %.1f ms (cache hit, %s)\n", load_ms, stats.cache_path);
        else if (stats.cache == NN_CACHE_MISS && stats.cache_path)
            printf("load        %.1f ms (cache miss, wrote %s)\n", load_ms, stats.cache_path);
        else
            printf("load        %.1f ms (cache %s)\n", load_ms,
                   stats.cache == NN_CACHE_OFF ? "off" : "miss, not written");
        printf("first       %.1f ms to the first result (load + one prediction)\n", first_result_ms);
        printf("latency     median %.3f ms  p90 %.3f ms  p99 %.3f ms  (%d runs)\n", med, p90, p99, n_runs);
        printf("throughput  %.2f samples/s\n", throughput);
        printf("memory      %.1f MB peak RSS, %.1f MB weights, %.1f MB activation arena, %.1f MB scratch\n", rss_mb,
               stats.weight_bytes / 1048576.0, stats.arena_bytes / 1048576.0, stats.workspace_bytes / 1048576.0);
    }
    *rep = (report){1, stats.batch, load_ms, med, p90, p99, throughput, rss_mb};
    if (a.opt.profile) nn_profile_print(m, a.json ? stderr : stdout);
    return 0;
}

/* Load, run and (unless quiet) print the report for one configuration. */
static int session(args *ap, report *rep) {
    held h = {0};
    int rc = run_session(ap, rep, &h);
    for (int k = 0; h.out && k < h.n_out; k++)
        nn_tensor_release(&h.out[k]);
    for (int i = 0; h.in && i < h.n_in; i++)
        nn_tensor_release(&h.in[i]);
    for (int f = 0; f < MAX_INPUT_FILES; f++)
        nn_tensor_release(&h.files[f]);
    free(h.in);
    free(h.out);
    free(h.lat);
    nn_free(h.m);
    return rc;
}

/* Each batch size runs in its own process, so that its peak RSS is its own. */
static int scan(args *a) {
    report reps[32];
    for (int i = 0; i < a->n_scan; i++) {
        int fd[2];
        memset(&reps[i], 0, sizeof reps[i]);
        reps[i].batch = a->scan[i];
        if (pipe(fd) != 0) return fail("pipe failed: ");
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) return fail("fork failed: ");
        if (pid == 0) {
            close(fd[0]);
            args child = *a;
            child.opt.batch = a->scan[i];
            child.batch_given = true;
            child.quiet = true;
            report r = {0};
            int rc = session(&child, &r);
            ssize_t w = write(fd[1], &r, sizeof r);
            _exit(rc == 0 && w == (ssize_t)sizeof r ? 0 : 1);
        }
        close(fd[1]);
        if (read(fd[0], &reps[i], sizeof reps[i]) != (ssize_t)sizeof reps[i]) reps[i].ok = 0;
        close(fd[0]);
        int status;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) reps[i].ok = 0;
    }
    int best = -1, fits = -1;
    for (int i = 0; i < a->n_scan; i++) {
        if (!reps[i].ok) continue;
        if (best < 0 || reps[i].throughput > reps[best].throughput) best = i;
        if (a->latency_budget > 0 && reps[i].p99 <= a->latency_budget && (fits < 0 || reps[i].batch > reps[fits].batch))
            fits = i;
    }
    if (a->json) {
        printf("{\"model\": ");
        json_str(a->model);
        printf(", \"scan\": [");
        for (int i = 0; i < a->n_scan; i++) {
            const report *r = &reps[i];
            printf("%s{\"batch\": %d, \"ok\": %s", i ? ", " : "", r->batch, r->ok ? "true" : "false");
            if (r->ok)
                printf(", \"load_ms\": %.3f, \"latency_ms\": {\"median\": %.3f, \"p90\": %.3f, \"p99\": %.3f}, "
                       "\"throughput\": %.3f, \"peak_rss_mb\": %.1f",
                       r->load_ms, r->median, r->p90, r->p99, r->throughput, r->rss_mb);
            printf("}");
        }
        printf("], \"best_batch\": %d, \"budget_batch\": %d}\n", best >= 0 ? reps[best].batch : -1,
               fits >= 0 ? reps[fits].batch : -1);
    } else {
        printf("%-6s %12s %12s %12s %14s %10s\n", "batch", "median ms", "p90 ms", "p99 ms", "samples/s", "peak MB");
        for (int i = 0; i < a->n_scan; i++) {
            const report *r = &reps[i];
            if (!r->ok)
                printf("%-6d failed (see the error above)\n", r->batch);
            else
                printf("%-6d %12.3f %12.3f %12.3f %14.2f %10.1f\n", r->batch, r->median, r->p90, r->p99, r->throughput,
                       r->rss_mb);
        }
        if (best >= 0) printf("best throughput: batch %d (%.2f samples/s)\n", reps[best].batch, reps[best].throughput);
        if (a->latency_budget > 0) {
            if (fits >= 0)
                printf("largest batch within %.1f ms p99: %d\n", a->latency_budget, reps[fits].batch);
            else
                printf("no batch size meets a p99 latency of %.1f ms\n", a->latency_budget);
        }
    }
    return best >= 0 ? 0 : EXIT_ERROR;
}

int main(int argc, char **argv) {
    args a = {0};
    if (parse_args(argc, argv, &a)) return EXIT_USAGE;
    if (a.latency_budget > 0 && !a.n_scan) {
        fprintf(stderr, "nnrun: --latency-budget needs --scan-batch\n");
        return EXIT_USAGE;
    }
    if (a.n_scan && (a.n_input_files || a.save_dir)) {
        fprintf(stderr,
                "nnrun: --scan-batch feeds random inputs; it does not combine with --input or --save-outputs\n");
        return EXIT_USAGE;
    }
    int rc;
    if (a.ensemble) {
        if (a.n_scan || a.n_input_files || a.save_dir || a.duration > 0) {
            fprintf(stderr, "nnrun: --ensemble feeds random inputs for --iters runs; it takes no --scan-batch, "
                            "--input, --save-outputs or --duration\n");
            return EXIT_USAGE;
        }
        rc = nnrun_ensemble(a.models, a.n_models, a.ensemble, &a.opt, a.warmup, a.iters);
    } else if (a.n_scan) {
        rc = scan(&a);
    } else {
        report r;
        rc = session(&a, &r);
    }
    for (int i = 0; i < a.n_input_files; i++)
        free((char *)a.input_name[i]);
    return rc;
}
