/* ONNX backend conformance: runs every test in Debian's libonnx-testdata
 * whose operators and dtypes the engine supports, and compares outputs
 * (floats: |got - want| <= atol + rtol * |want|; integers and bools exactly).
 *
 * usage: conformance [-v] [--cache-dir DIR] [--device DEV] [FILTER...]   (FILTER: substring of the test name;
 *        --cache-dir: run each test twice, building its plan, then loading it from the cache;
 *        --device: run on DEV, e.g. gpu0, instead of the CPU)
 * Each test runs in a child process so that a crash is a reported failure,
 * not the end of the run. */
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nn.h"

#define DATA_ROOT "/usr/share/libonnx-testdata/data"
static const char *const suites[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};
static const double RTOL = 1e-3, ATOL = 1e-5;

/* Tests left out on purpose: randomized training-mode dropout has no
 * reproducible expected output. */
static const char *const excluded[] = {"test_training_dropout"};

typedef struct result {
    int passed, failed;
    int skipped; /* 1 when the model is not supported */
    char reason[200];
} result;

static int verbose;

static bool file_exists(const char *p) {
    struct stat s;
    return stat(p, &s) == 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static double value_at(const nn_tensor *t, int64_t i) {
    switch (t->dtype) {
    case NN_DTYPE_FLOAT: return ((const float *)t->data)[i];
    case NN_DTYPE_INT64: return (double)((const int64_t *)t->data)[i];
    case NN_DTYPE_INT32: return ((const int32_t *)t->data)[i];
    case NN_DTYPE_INT8: return ((const int8_t *)t->data)[i];
    default: return ((const uint8_t *)t->data)[i];
    }
}

/* true when got matches want; describes the worst mismatch in msg */
static bool compare(const nn_tensor *got, const nn_tensor *want, char *msg, size_t msg_size) {
    if (got->dtype != want->dtype) {
        snprintf(msg, msg_size, "dtype %s, expected %s", nn_dtype_name(got->dtype), nn_dtype_name(want->dtype));
        return false;
    }
    bool same_shape = got->ndim == want->ndim;
    for (int d = 0; same_shape && d < got->ndim; d++)
        same_shape = got->dims[d] == want->dims[d];
    if (!same_shape) {
        int len = snprintf(msg, msg_size, "shape (");
        for (int d = 0; d < got->ndim; d++)
            len += snprintf(msg + len, msg_size - (size_t)len, "%lld,", (long long)got->dims[d]);
        len += snprintf(msg + len, msg_size - (size_t)len, "), expected (");
        for (int d = 0; d < want->ndim; d++)
            len += snprintf(msg + len, msg_size - (size_t)len, "%lld,", (long long)want->dims[d]);
        snprintf(msg + len, msg_size - (size_t)len, ")");
        return false;
    }
    int64_t n = nn_tensor_elements(want), worst = -1, bad = 0;
    double worst_excess = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = value_at(got, i), w = value_at(want, i);
        bool ok;
        double excess = 0;
        if (want->dtype == NN_DTYPE_FLOAT) {
            if (isnan(w) || isnan(g))
                ok = isnan(w) && isnan(g);
            else if (isinf(w) || isinf(g))
                ok = g == w;
            else {
                excess = fabs(g - w) - (ATOL + RTOL * fabs(w));
                ok = excess <= 0;
            }
            if (!ok && !(excess > 0)) excess = INFINITY;
        } else {
            ok = g == w;
            excess = fabs(g - w);
        }
        if (!ok) {
            bad++;
            if (worst < 0 || excess > worst_excess) {
                worst = i;
                worst_excess = excess;
            }
        }
    }
    if (!bad) return true;
    snprintf(msg, msg_size, "%lld of %lld values differ; largest error %.6g at element %lld (got %.8g, expected %.8g)",
             (long long)bad, (long long)n, fabs(value_at(got, worst) - value_at(want, worst)), (long long)worst,
             value_at(got, worst), value_at(want, worst));
    return false;
}

/* Load input_*.pb or output_*.pb of a data set; returns the count or -1. */
static int load_set(const char *dir, const char *kind, nn_tensor *ts, int cap) {
    int n = 0;
    for (; n < cap; n++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s_%d.pb", dir, kind, n);
        if (!file_exists(p)) break;
        if (nn_tensor_load(p, &ts[n]) != NN_OK) {
            for (int i = 0; i < n; i++)
                nn_tensor_release(&ts[i]);
            return -1;
        }
    }
    return n;
}

enum { MAX_IO = 32 };

/* --cache-dir DIR: every test runs twice, first building and writing its
 * plan (a miss), then from the cache (which must be a hit). */
static const char *cache_dir;
/* --device DEV: nn_options.device (NULL: the CPU) */
static const char *device;

static void run_test(const char *name, const char *dir, bool from_cache, result *r) {
    char model_path[4200];
    snprintf(model_path, sizeof model_path, "%s/model.onnx", dir);
    /* data sets, sorted */
    DIR *dd = opendir(dir);
    char *sets[64];
    int n_sets = 0;
    struct dirent *e;
    while (dd && (e = readdir(dd)) && n_sets < 64)
        if (!strncmp(e->d_name, "test_data_set_", 14)) sets[n_sets++] = strdup(e->d_name);
    if (dd) closedir(dd);
    qsort(sets, (size_t)n_sets, sizeof *sets, cmp_str);

    nn_model *m = NULL;
    for (int s = 0; s < n_sets; s++) {
        char set_dir[4400];
        snprintf(set_dir, sizeof set_dir, "%s/%s", dir, sets[s]);
        nn_tensor in[MAX_IO] = {0}, want[MAX_IO] = {0}, got[MAX_IO] = {0};
        int n_in = load_set(set_dir, "input", in, MAX_IO);
        int n_want = load_set(set_dir, "output", want, MAX_IO);
        if (n_in < 0 || n_want < 0) {
            /* test data in a dtype we cannot even hold */
            snprintf(r->reason, sizeof r->reason, "%s", nn_last_error());
            r->skipped = 1;
            goto next;
        }
        if (!m) {
            nn_options opt = nn_options_default();
            opt.cache = cache_dir != NULL;
            opt.cache_dir = cache_dir;
            if (device) opt.device = device;
            /* bind a symbolic batch dimension to the data's */
            if (n_in > 0 && in[0].ndim > 0 && in[0].dims[0] > 0) opt.batch = (int)in[0].dims[0];
            nn_status st = nn_load(model_path, &opt, &m);
            if (st == NN_ERR_UNSUPPORTED) {
                snprintf(r->reason, sizeof r->reason, "%s", nn_last_error());
                r->skipped = 1;
                goto next;
            }
            if (st != NN_OK) {
                printf("FAIL %s: load%s: %s\n", name, from_cache ? " from the cache" : "", nn_last_error());
                r->failed++;
                goto next;
            }
            nn_model_stats stats;
            nn_model_get_stats(m, &stats);
            if (from_cache && stats.cache != NN_CACHE_HIT) {
                printf("FAIL %s: second load was not a cache hit (%s)\n", name,
                       stats.cache_warning ? stats.cache_warning : "no warning");
                r->failed++;
                goto next;
            }
        }
        if (n_want != nn_output_count(m)) {
            printf("FAIL %s/%s: model has %d outputs, test data %d\n", name, sets[s], nn_output_count(m), n_want);
            r->failed++;
            goto next;
        }
        nn_status st = nn_predict(m, in, n_in, got, n_want);
        if (st == NN_ERR_UNSUPPORTED) {
            snprintf(r->reason, sizeof r->reason, "%s", nn_last_error());
            r->skipped = 1;
            goto next;
        }
        if (st != NN_OK) {
            printf("FAIL %s/%s: predict%s: %s\n", name, sets[s], from_cache ? " from the cache" : "", nn_last_error());
            r->failed++;
            goto next;
        }
        bool ok = true;
        for (int k = 0; k < n_want; k++) {
            char msg[300];
            if (!compare(&got[k], &want[k], msg, sizeof msg)) {
                const char *oname = "";
                nn_output_info(m, k, &oname, NULL);
                printf("FAIL %s/%s%s: output '%s': %s\n", name, sets[s], from_cache ? " (cache hit)" : "", oname, msg);
                ok = false;
            }
        }
        if (ok)
            r->passed++;
        else
            r->failed++;
    next:
        for (int k = 0; k < MAX_IO; k++) {
            nn_tensor_release(&in[k]);
            nn_tensor_release(&want[k]);
            nn_tensor_release(&got[k]);
        }
        if (r->skipped) break;
    }
    nn_free(m);
    for (int s = 0; s < n_sets; s++)
        free(sets[s]);
}

/* Run one test in a child; a crash becomes a failure. */
static void run_isolated(const char *name, const char *dir, result *r) {
    int fd[2];
    memset(r, 0, sizeof *r);
    if (pipe(fd) != 0) {
        perror("pipe");
        exit(2);
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        result cr = {0};
        run_test(name, dir, false, &cr);
        if (cache_dir && !cr.skipped) run_test(name, dir, true, &cr);
        fflush(stdout);
        ssize_t w = write(fd[1], &cr, sizeof cr);
        _exit(w == (ssize_t)sizeof cr ? 0 : 3);
    }
    close(fd[1]);
    ssize_t got = read(fd[0], r, sizeof *r);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != (ssize_t)sizeof *r || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("FAIL %s: crashed (%s %d)\n", name, WIFSIGNALED(status) ? "signal" : "exit",
               WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        memset(r, 0, sizeof *r);
        r->failed = 1;
    }
}

int main(int argc, char **argv) {
    int n_filters = 0;
    char **filters = calloc((size_t)argc, sizeof *filters);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v"))
            verbose = 1;
        else if (!strcmp(argv[i], "--cache-dir") && i + 1 < argc)
            cache_dir = argv[++i];
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else
            filters[n_filters++] = argv[i];
    }
    if (!file_exists(DATA_ROOT)) {
        fprintf(stderr, "conformance: %s not found (install Debian's libonnx-testdata)\n", DATA_ROOT);
        return 2;
    }
    int passed = 0, failed = 0, skipped = 0, excluded_count = 0;
    for (size_t s = 0; s < sizeof suites / sizeof *suites; s++) {
        char root[512];
        snprintf(root, sizeof root, "%s/%s", DATA_ROOT, suites[s]);
        DIR *d = opendir(root);
        if (!d) continue;
        char *names[2048];
        int n = 0;
        struct dirent *e;
        while ((e = readdir(d)) && n < 2048)
            if (!strncmp(e->d_name, "test_", 5)) names[n++] = strdup(e->d_name);
        closedir(d);
        qsort(names, (size_t)n, sizeof *names, cmp_str);
        for (int i = 0; i < n; i++) {
            bool want = n_filters == 0;
            for (int f = 0; f < n_filters; f++)
                want |= strstr(names[i], filters[f]) != NULL;
            bool skip_on_purpose = false;
            for (size_t x = 0; x < sizeof excluded / sizeof *excluded; x++)
                skip_on_purpose |= !strncmp(names[i], excluded[x], strlen(excluded[x]));
            if (want && skip_on_purpose) excluded_count++;
            char dir[1024];
            snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
            if (want && !skip_on_purpose && file_exists(dir)) {
                result r;
                run_isolated(names[i], dir, &r);
                passed += r.passed;
                failed += r.failed;
                skipped += r.skipped;
                if (r.skipped && verbose) printf("skip %s/%s: %s\n", suites[s], names[i], r.reason);
            }
            free(names[i]);
        }
    }
    printf("conformance: %d tests skipped as unsupported, %d excluded (randomized training dropout)\n", skipped,
           excluded_count);
    printf("%d passed, %d failed\n", passed, failed);
    free(filters);
    return failed ? 1 : 0;
}
