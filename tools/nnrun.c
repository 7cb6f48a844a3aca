/* nnrun: load an ONNX model, run it, report load time, latency statistics,
 * throughput, memory and energy.  `nnrun --help` lists the options;
 * docs/nnrun.md defines every figure of the report. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
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
#include "nnrun.h"
#include "nnrun_ensemble.h"

/* The failure of this process's measurement: printed at once, or, in a
 * scan child, handed to the parent, which prints it with the batch. */
static bool scan_child;
static char failure[480];
static int failure_rc;

static int failf(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int failf(int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(failure, sizeof failure, fmt, ap);
    va_end(ap);
    failure_rc = rc;
    if (!scan_child) fprintf(stderr, "nnrun: %s\n", failure);
    return rc;
}
/* the library's last error, with what nnrun was doing */
static int fail_nn(const char *what) { return failf(EXIT_ERROR, "%s%s", what, nn_last_error()); }

/* Warnings go to stderr as they happen and into the JSON report. */
char warnings[MAX_WARNINGS][320];
int n_warnings;
static void warnf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warnf(const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!scan_child) fprintf(stderr, "nnrun: warning: %s\n", msg);
    if (n_warnings < MAX_WARNINGS) snprintf(warnings[n_warnings++], sizeof warnings[0], "%s", msg);
}

static void usage(FILE *f) {
    fprintf(f, "usage: nnrun MODEL.onnx [options]\n"
               "  --batch N            batch size bound to the symbolic batch dimension (default 1;\n"
               "                       with --input, taken from the data)\n"
               "  --device DEV         cpu or gpuN (default cpu)\n"
               "  --threads N          worker threads, 0 = all cores (default 0)\n"
               "  --micro-batch N      CPU: run a batch as micro-batches of N samples on independent lanes,\n"
               "                       one per thread (default: chosen from the model; N = batch: never)\n"
               "  --warmup N           untimed runs before measuring (default 3)\n"
               "  --iters N            timed runs (default: as many as fill 1 s, at least 10)\n"
               "  --duration SEC       time runs for at least SEC seconds (with --iters: and at least N runs)\n"
               "  --input NAME=FILE    feed input NAME from a .npy or ONNX TensorProto .pb file; a model with\n"
               "                       one input takes --input FILE (default: seeded random data)\n"
               "  --save-outputs DIR   write each output as DIR/<output name>.npy (DIR is created if its\n"
               "                       parent exists, before anything runs)\n"
               "  --no-opt             run the graph as parsed, without the optimizer\n"
               "  --passes LIST        run only these optimizer passes, in this order (comma-separated)\n"
               "  --disable-pass NAME  leave a pass out (comma-separated for several)\n"
               "  --verify             check the IR after every pass\n"
               "  --profile            time per operator type and per node after the run\n"
               "  --no-winograd        3x3 convs use the GEMM only (slower, about twice as exact)\n"
               "  --tf32 on|off        GPU: fp32 convs and GEMMs may use TF32 tensor cores (default off)\n"
               "  --fp16               GPU: weights and activations in half precision, fp32 accumulation\n"
               "  --precision P        CPU: fp32 (default) or bf16 (bf16 GEMM weights and activations, fp32\n"
               "                       accumulation; needs AVX512-BF16, refused elsewhere; docs/precision.md)\n"
               "  --cache-dir DIR      keep optimized plans in DIR (default: $NN_CACHE_DIR, else\n"
               "                       $XDG_CACHE_HOME/nn, else ~/.cache/nn)\n"
               "  --no-cache           neither read nor write the plan cache\n"
               "  --max-memory SIZE    refuse a model needing more memory than SIZE bytes (suffix K, M or G);\n"
               "                       the refusal states the whole need\n"
               "  --scan-batch LIST    measure each batch size (e.g. 1,2,4,8,16,32,64,128), each in a fresh\n"
               "                       process, and report the best throughput\n"
               "  --latency-budget MS  with --scan-batch: also report the largest batch whose p99 latency fits\n"
               "  --json               print the whole report as one JSON object on stdout\n"
               "  --progress           progress lines on stderr even when it is not a terminal\n"
               "  --quiet              no progress lines\n"
               "  --verbose            also say why a figure is absent (energy)\n"
               "  --ensemble HOW       with several models (nnrun m1.onnx m2.onnx ...): combine their outputs\n"
               "                       (mean: of softmax; concat), members at once vs one after another\n"
               "  --version            engine version, CPU kernels, OpenMP runtime, CUDA backend\n"
               "  --help               this text\n");
}

static void print_version(void) {
    nn_build_info b;
    nn_get_build_info(&b);
    printf("nnrun %s\n", b.version);
    printf("cpu kernels  %s (instruction set %s; NN_ISA=avx512|avx2|scalar chooses another)\n", b.cpu_kernels, b.isa);
    char caches[256];
    nn_get_cpu_caches(caches, sizeof caches);
    printf("cpu caches   %s (NN_CPU_CACHES=l1d:32k,l2:1m,l3:32m or =fixed overrides)\n", caches);
    printf("openmp       %d, runtime %s, %d processors\n", b.openmp_version, b.openmp_library, b.processors);
    if (b.cuda_plugin)
        printf("cuda         plugin %s: --device gpuN uses it when a driver and GPU are found\n", b.cuda_plugin);
    else
        printf("cuda         no plugin found (libnn_cuda.so; NN_CUDA_PLUGIN may name it): CPU only\n");
}

static int parse_int(const char *opt, const char *s, int min, int *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s ? s : "", &end, 10);
    if (s && end != s && !*end && (errno == ERANGE || v > 1 << 30)) {
        fprintf(stderr, "nnrun: %s %s is too large (at most %d)\n", opt, s, 1 << 30);
        return -1;
    }
    if (!s || end == s || *end || errno || v < min) {
        fprintf(stderr, "nnrun: %s needs an integer >= %d, got '%s'\n", opt, min, s ? s : "");
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* A byte count with an optional binary suffix: 512M, 2G, 65536.  Rounded to
 * the nearest byte, so that a figure nnrun printed reads back as itself. */
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
    *out = llround(v * (double)(1ll << shift));
    return 0;
}

static int parse_args(int argc, char **argv, args *a) {
    a->opt = nn_options_default();
    a->warmup = 3;
    a->progress = isatty(STDERR_FILENO);
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(s, "--version")) {
            print_version();
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
            /* an existing file is FILE alone (the model's only input), even with a '=' in its name */
            struct stat st;
            const char *eq = v && stat(v, &st) != 0 ? strchr(v, '=') : NULL;
            if (!v || !v[0] || (eq && (eq == v || !eq[1])))
                return fprintf(stderr, "nnrun: --input needs NAME=FILE (or FILE for a model with one input)\n"), -1;
            if (a->n_input_files == MAX_INPUT_FILES) return fprintf(stderr, "nnrun: too many --input\n"), -1;
            a->input_name[a->n_input_files] = eq ? strndup(v, (size_t)(eq - v)) : NULL;
            a->input_file[a->n_input_files++] = eq ? eq + 1 : v;
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
        } else if (!strcmp(s, "--precision")) {
            if (!v || (strcmp(v, "fp32") && strcmp(v, "bf16")))
                return fprintf(stderr, "nnrun: --precision needs fp32 or bf16\n"), -1;
            a->opt.precision = !strcmp(v, "bf16") ? NN_PRECISION_BF16 : NN_PRECISION_FP32;
            i++;
        } else if (!strcmp(s, "--no-cache")) {
            a->opt.cache = 0;
        } else if (!strcmp(s, "--max-memory")) {
            if (parse_size(s, v, &a->opt.max_memory)) return -1;
            i++;
        } else if (!strcmp(s, "--scan-batch")) {
            if (!v || !v[0]) return fprintf(stderr, "nnrun: --scan-batch needs a list of sizes\n"), -1;
            /* every comma separates two sizes: "1,,4" and "1,4," are typos, not "1,4" */
            for (const char *p = v;; p++) {
                const char *comma = strchr(p, ',');
                size_t len = comma ? (size_t)(comma - p) : strlen(p);
                char tok[32];
                if (!len || len >= sizeof tok)
                    return fprintf(stderr, "nnrun: --scan-batch: empty or overlong size in '%s'\n", v), -1;
                memcpy(tok, p, len);
                tok[len] = 0;
                if (a->n_scan == 32) return fprintf(stderr, "nnrun: --scan-batch takes up to 32 sizes\n"), -1;
                if (parse_int("--scan-batch", tok, 1, &a->scan[a->n_scan])) return -1;
                a->n_scan++;
                if (!comma) break;
                p = comma;
            }
            i++;
        } else if (!strcmp(s, "--latency-budget")) {
            char *end;
            a->latency_budget = v ? strtod(v, &end) : 0;
            if (!v || *end || !(a->latency_budget > 0))
                return fprintf(stderr, "nnrun: --latency-budget needs milliseconds > 0\n"), -1;
            i++;
        } else if (!strcmp(s, "--json")) {
            a->json = true;
        } else if (!strcmp(s, "--quiet")) {
            a->quiet = true;
        } else if (!strcmp(s, "--verbose")) {
            a->verbose = true;
        } else if (!strcmp(s, "--progress")) {
            a->progress = true;
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
    if (a->quiet) a->progress = false;
    int procs = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (a->opt.threads > procs && procs > 0)
        warnf("--threads %d is more than the %d processors here: threads will take turns on them, which slows "
              "every run",
              a->opt.threads, procs);
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

void shape_str(const nn_tensor *t, char *buf, size_t size) {
    int len = snprintf(buf, size, "%s[", nn_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim && len < (int)size; d++)
        len += snprintf(buf + len, size - (size_t)len, "%s%lld", d ? "," : "", (long long)t->dims[d]);
    if (len < (int)size) snprintf(buf + len, size - (size_t)len, "]");
}

/* JSON string with the characters JSON forbids escaped */
void json_str(const char *s) {
    putchar('"');
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

static const char *plural(int64_t n) { return n == 1 ? "" : "s"; }

/* --save-outputs DIR: created now (its parent must exist), so that a typo
 * fails before the model loads, not after the timed runs. */
static int prepare_save_dir(const char *dir) {
    struct stat st;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return failf(EXIT_ERROR, "--save-outputs '%s': cannot create the folder: %s", dir, strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return failf(EXIT_ERROR, "--save-outputs '%s': not a folder", dir);
    if (access(dir, W_OK | X_OK) != 0)
        return failf(EXIT_ERROR, "--save-outputs '%s': cannot write there: %s", dir, strerror(errno));
    return 0;
}

/* dtype names as numpy users know them */
static const char *numpy_name(nn_dtype t) {
    switch (t) {
    case NN_DTYPE_FLOAT: return "float32";
    case NN_DTYPE_DOUBLE: return "float64";
    case NN_DTYPE_FLOAT16: return "float16";
    case NN_DTYPE_INT64: return "int64";
    case NN_DTYPE_INT32: return "int32";
    default: return nn_dtype_name(t);
    }
}

/* Input files onto the model's inputs, by name (or the only one). */
static int bind_files(const args *a, held *h) {
    nn_model *m = h->m;
    for (int f = 0; f < a->n_input_files; f++) {
        int found = -1;
        const char *want = a->input_name[f];
        if (!want && h->n_in != 1) {
            const char *first = "";
            if (h->n_in > 0) nn_input_info(m, 0, &first, NULL);
            return failf(EXIT_USAGE, "--input %s: the model has %d inputs, so give NAME=FILE (e.g. %s=%s)",
                         a->input_file[f], h->n_in, first, a->input_file[f]);
        }
        for (int i = 0; i < h->n_in; i++) {
            const char *name;
            nn_input_info(m, i, &name, NULL);
            if (!want || !strcmp(name, want)) found = i;
        }
        if (found < 0) return failf(EXIT_USAGE, "--input '%s': the model has no input of that name", want);
        const char *name;
        nn_tensor shape;
        nn_input_info(m, found, &name, &shape);
        nn_tensor *t = &h->files[f];
        if (t->dtype != shape.dtype)
            return failf(EXIT_USAGE, "--input %s: the file holds %s data and input '%s' takes %s%s", a->input_file[f],
                         numpy_name(t->dtype), name, numpy_name(shape.dtype),
                         t->dtype == NN_DTYPE_DOUBLE && shape.dtype == NN_DTYPE_FLOAT
                             ? " (numpy's default is float64: save x.astype(numpy.float32))"
                             : "");
        h->in[found] = *t;
        t->data = NULL; /* in[found] owns it now */
    }
    return 0;
}


/* This process's peak resident set in MB: VmHWM of /proc/self/status, the
 * high-water mark of this program's own address space.  getrusage's
 * ru_maxrss is the fallback only: after vfork + exec (Python's subprocess,
 * posix_spawn) it starts at the parent's peak, so a benchmark driver that
 * holds a few GB would be reported as this process's memory. */
static double peak_rss_mb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = -1;
    while (f && kb < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lld kB", &kb) != 1) kb = -1;
    if (f) fclose(f);
    if (kb >= 0) return kb / 1024.0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

static int run_session(const args *ap, measured *r, held *h) {
    args a = *ap;
    if (a.save_dir && prepare_save_dir(a.save_dir)) return EXIT_ERROR;

    /* Input files first: with --input the batch comes from the data. */
    for (int i = 0; i < a.n_input_files; i++) {
        if (nn_tensor_load(a.input_file[i], &h->files[i]) != NN_OK) return fail_nn("");
        const nn_tensor *t = &h->files[i];
        if (!a.batch_given && i == 0 && t->ndim > 0 && t->dims[0] > 0 && t->dims[0] <= 1 << 30)
            a.opt.batch = (int)t->dims[0];
    }

    double t0 = now_ms();
    nn_status st = nn_load(a.model, &a.opt, &h->m);
    nn_model *m = h->m;
    r->load_ms = now_ms() - t0;
    if (st == NN_ERR_DEVICE || st == NN_ERR_ARG) return failf(EXIT_USAGE, "%s", nn_last_error());
    if (st != NN_OK) return fail_nn("");
    nn_model_get_stats(m, &r->stats);
    if (r->stats.cache_warning) warnf("%s", r->stats.cache_warning);

    int n_in = h->n_in = nn_input_count(m), n_out = h->n_out = nn_output_count(m);
    nn_tensor *in = h->in = calloc((size_t)n_in + 1, sizeof *in);
    h->out = calloc((size_t)n_out + 1, sizeof *h->out);
    if (!in || !h->out) return failf(EXIT_ERROR, "out of memory for %d input and %d output descriptions", n_in, n_out);
    int rc = bind_files(&a, h);
    if (rc) return rc;
    for (int i = 0; i < n_in; i++) {
        if (in[i].data) continue;
        const char *name;
        nn_input_info(m, i, &name, &in[i]);
        if (a.n_input_files) return failf(EXIT_USAGE, "input '%s' not given (use --input %s=FILE)", name, name);
        for (int d = 0; d < in[i].ndim; d++)
            if (in[i].dims[d] < 0)
                return failf(EXIT_USAGE,
                             "input '%s' has a symbolic dimension %d besides the batch; give it with --input", name, d);
        if (fill_random(&in[i])) {
            char shape[256];
            shape_str(&in[i], shape, sizeof shape);
            return failf(EXIT_ERROR, "out of memory for %.1f MiB of random data for input '%s' %s (--batch %d)",
                         (double)nn_tensor_elements(&in[i]) * (double)nn_dtype_size(in[i].dtype) / 1048576.0, name,
                         shape, a.opt.batch);
        }
    }
    r->samples = n_in > 0 && in[0].ndim > 0 ? in[0].dims[0] : 1;
    if (a.batch_given && a.n_input_files && r->samples != a.opt.batch)
        warnf("--batch %d, but the input holds %lld sample%s: each run computes %lld, and the report counts the "
              "samples run",
              a.opt.batch, (long long)r->samples, plural(r->samples), (long long)r->samples);

    /* time to first result: the load plus the first prediction */
    double first0 = now_ms();
    if (nn_predict(m, in, n_in, h->out, n_out) != NN_OK) return fail_nn("");
    r->first_result_ms = r->load_ms + (now_ms() - first0);
    for (int w = 0; w < a.warmup; w++) {
        for (int k = 0; k < n_out; k++)
            nn_tensor_release(&h->out[k]);
        if (nn_predict(m, in, n_in, h->out, n_out) != NN_OK) return fail_nn("");
    }

    /* by default at least 10 runs and 1 s; --iters alone: exactly N; --duration: at least S s */
    int min_runs = a.iters ? a.iters : a.duration > 0 ? 1 : 10;
    double min_ms = a.duration > 0 ? a.duration * 1e3 : a.iters ? 0 : 1e3;
    int cap = min_runs > 64 ? min_runs : 64, n_runs = 0;
    double *lat = h->lat = malloc(sizeof(double) * (size_t)cap);
    if (!lat) return failf(EXIT_ERROR, "out of memory for %d latencies", cap);
    energy_meter meter;
    const char *device = a.opt.device ? a.opt.device : "cpu";
    bool on_cpu = !strcmp(device, "cpu"), metering = false;
    if (on_cpu)
        metering = energy_start(&meter, getenv("NN_POWERCAP_ROOT")) == 0;
    else
        snprintf(r->energy_reason, sizeof r->energy_reason,
                 "device %s: GPU energy would come from NVML, which nnrun does not read yet", device);
    double start = now_ms(), next_progress = start + 2000;
    for (;;) {
        double elapsed = now_ms() - start;
        if (n_runs >= min_runs && elapsed >= min_ms) break;
        if (n_runs == cap) {
            if (cap > 1 << 26) break; /* 64M runs are plenty */
            cap *= 2;
            double *grown = realloc(lat, sizeof(double) * (size_t)cap);
            if (!grown) return failf(EXIT_ERROR, "out of memory for %d latencies", cap);
            lat = h->lat = grown;
        }
        for (int k = 0; k < n_out; k++)
            nn_tensor_release(&h->out[k]);
        double r0 = now_ms();
        if (nn_predict(m, in, n_in, h->out, n_out) != NN_OK) return fail_nn("");
        double r1 = now_ms();
        lat[n_runs++] = r1 - r0;
        if (a.progress && !a.child && r1 >= next_progress) {
            fprintf(stderr, "nnrun: %.0f s, %d run%s so far\n", (r1 - start) / 1e3, n_runs, plural(n_runs));
            next_progress = r1 + 2000;
        }
    }
    double total_ms = now_ms() - start;
    if (metering) {
        r->have_energy = energy_stop(&meter, &r->joules) == 0;
        if (!r->have_energy) snprintf(r->energy_reason, sizeof r->energy_reason, "%s", meter.reason);
    } else if (on_cpu) {
        snprintf(r->energy_reason, sizeof r->energy_reason, "%s", meter.reason);
    }
    lat_stats_compute(lat, n_runs, &r->lat);
    r->timed_s = total_ms / 1e3;
    r->throughput = (double)r->samples * n_runs / r->timed_s;
    r->rss_mb = peak_rss_mb();
    if (lat_stats_noisy(&r->lat))
        warnf("p90 latency %.3f ms is more than 1.5x the median %.3f ms: the machine is noisy (other load, "
              "frequency changes); compare figures with care",
              r->lat.p90, r->lat.median);

    if (a.save_dir) {
        for (int k = 0; k < n_out; k++) {
            const char *name;
            nn_output_info(m, k, &name, NULL);
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.npy", a.save_dir, name);
            for (char *c = path + strlen(a.save_dir) + 1; *c; c++)
                if (*c == '/') *c = '_';
            if (nn_tensor_save_npy(path, &h->out[k]) != NN_OK) return fail_nn("");
        }
    }
    return 0;
}

/* Load, run and (unless a scan child) print the report for one configuration. */
static int session(const args *a, report *rep) {
    held h = {0};
    measured r = {0};
    int rc = run_session(a, &r, &h);
    *rep = (report){.ok = rc == 0,
                    .batch = a->opt.batch,
                    .exit_code = rc,
                    .lat = r.lat,
                    .load_ms = r.load_ms,
                    .throughput = r.throughput,
                    .rss_mb = r.rss_mb,
                    .joules_per_sample = r.have_energy ? r.joules / ((double)r.samples * r.lat.n) : NAN};
    if (rc) snprintf(rep->error, sizeof rep->error, "%s", failure);
    if (rc == 0 && !a->child) {
        if (a->json)
            print_json(a, &h, &r);
        else
            print_text(a, &h, &r);
    }
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

/* One batch size in a child process, so that its peak RSS is its own. */
static void scan_point(const args *a, int batch, report *rep) {
    int fd[2];
    memset(rep, 0, sizeof *rep);
    rep->batch = batch;
    rep->exit_code = EXIT_ERROR;
    if (pipe(fd) != 0) {
        snprintf(rep->error, sizeof rep->error, "pipe failed: %s", strerror(errno));
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(rep->error, sizeof rep->error, "fork failed: %s", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return;
    }
    if (pid == 0) {
        close(fd[0]);
        args child = *a;
        child.opt.batch = batch;
        child.batch_given = true;
        child.child = true;
        scan_child = true;
        report r;
        session(&child, &r);
        ssize_t w = write(fd[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    report got;
    ssize_t n = read(fd[0], &got, sizeof got);
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    if (n == (ssize_t)sizeof got && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        *rep = got;
    } else {
        snprintf(rep->error, sizeof rep->error, "the measuring process %s",
                 WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "ended without a report");
    }
    rep->batch = batch; /* the row is the batch it was started for, whatever came back */
}

static int scan(const args *a) {
    report reps[32];
    int done = 0;
    for (int i = 0; i < a->n_scan; i++, done++) {
        report *r = &reps[i];
        scan_point(a, a->scan[i], r);
        if (!r->ok) {
            fprintf(stderr, "nnrun: batch %d: %s\n", r->batch, r->error);
            /* a device or an option that is wrong for one batch is wrong for all: stop */
            if (r->exit_code == EXIT_USAGE) return EXIT_USAGE;
        } else if (a->progress) {
            fprintf(stderr, "nnrun: [%d/%d] batch %d: median %.3f ms, %.2f samples/s\n", i + 1, a->n_scan, r->batch,
                    r->lat.median, r->throughput);
        }
    }
    int best = -1, fits = -1;
    for (int i = 0; i < done; i++) {
        if (!reps[i].ok) continue;
        if (best < 0 || reps[i].throughput > reps[best].throughput) best = i;
        if (a->latency_budget > 0 && reps[i].lat.p99 <= a->latency_budget &&
            (fits < 0 || reps[i].batch > reps[fits].batch))
            fits = i;
    }
    print_scan(a, reps, done, best, fits);
    return best >= 0 ? 0 : EXIT_ERROR;
}

int main(int argc, char **argv) {
    args a = {0};
    int rc = parse_args(argc, argv, &a) ? EXIT_USAGE : 0;
    if (!rc && a.latency_budget > 0 && !a.n_scan) {
        fprintf(stderr, "nnrun: --latency-budget needs --scan-batch\n");
        rc = EXIT_USAGE;
    }
    if (!rc && a.n_scan && (a.n_input_files || a.save_dir)) {
        fprintf(stderr,
                "nnrun: --scan-batch feeds random inputs; it does not combine with --input or --save-outputs\n");
        rc = EXIT_USAGE;
    }
    if (!rc && a.ensemble && (a.n_scan || a.n_input_files || a.save_dir || a.duration > 0)) {
        fprintf(stderr, "nnrun: --ensemble feeds random inputs for --iters runs; it takes no --scan-batch, "
                        "--input, --save-outputs or --duration\n");
        rc = EXIT_USAGE;
    }
    if (!rc && a.ensemble) {
        rc = nnrun_ensemble(a.models, a.n_models, a.ensemble, &a.opt, a.warmup, a.iters > 0 ? a.iters : 20);
    } else if (!rc) {
        report r;
        rc = a.n_scan ? scan(&a) : session(&a, &r);
    }
    for (int i = 0; i < a.n_input_files; i++)
        free((char *)a.input_name[i]);
    return rc;
}
