/* The plan cache folder as a whole: its size cap, least-recently-used
 * eviction, and what nncache lists and removes.
 *
 * A plan's recency is its file's modification time: a write sets it, and a
 * hit sets it again (nn_cache_touch).  Eviction unlinks the least recently
 * used plans until the folder fits the cap.  Unlinking removes only the
 * name: a process that has the file open or mapped (every hit keeps its
 * mapping, whose weights it uses in place) reads the same bytes until it
 * unmaps them, and one that looks the name up afterwards simply misses and
 * rebuilds.  Only regular files named *.nnplan count and are removed, so
 * that a cache folder pointed at the wrong place loses nothing else. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache_int.h"

bool nn_cache_folder(const char *option_dir, char *dir, size_t size) {
    const char *env;
    int n;
    if (option_dir && option_dir[0])
        n = snprintf(dir, size, "%s", option_dir);
    else if ((env = getenv("NN_CACHE_DIR")) && env[0])
        n = snprintf(dir, size, "%s", env);
    else if ((env = getenv("XDG_CACHE_HOME")) && env[0])
        n = snprintf(dir, size, "%s/nn", env);
    else if ((env = getenv("HOME")) && env[0])
        n = snprintf(dir, size, "%s/.cache/nn", env);
    else
        return false;
    return n > 0 && (size_t)n < size;
}

bool nn_cache_parse_size(const char *s, int64_t *bytes) {
    if (!s || !*s) return false;
    if (!strcmp(s, "none") || !strcmp(s, "unlimited")) {
        *bytes = -1;
        return true;
    }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0)) return false;
    double unit = 1;
    if (*end) {
        const char *units = "KMGT", *u = strchr(units, toupper((unsigned char)*end));
        if (!u || !*u) return false;
        for (const char *k = units; k <= u; k++)
            unit *= 1024;
        end++;
        if (*end == 'i') end++;
        if (*end == 'B') end++;
        if (*end) return false;
    }
    v *= unit;
    if (v >= 9.2e18) return false;
    *bytes = (int64_t)v;
    return true;
}

int64_t nn_cache_cap(int64_t option, char *warning, size_t size) {
    if (warning && size) warning[0] = 0;
    if (option) return option < 0 ? -1 : option;
    const char *env = getenv("NN_CACHE_MAX");
    int64_t cap;
    if (!env || !env[0]) return NN_CACHE_MAX_DEFAULT;
    if (nn_cache_parse_size(env, &cap)) return cap;
    if (warning && size)
        snprintf(warning, size, "NN_CACHE_MAX='%.40s' is not a size (e.g. 512M, 2G or none); the cap is 1 GiB", env);
    return NN_CACHE_MAX_DEFAULT;
}

void nn_cache_touch(const char *path) {
    /* recency is best effort: a folder shared read-only still serves hits */
    (void)utimensat(AT_FDCWD, path, NULL, 0);
}

static bool is_plan_name(const char *name) {
    size_t n = strlen(name);
    return n > 7 && !strcmp(name + n - 7, ".nnplan");
}

/* a writer's temporary file: <plan>.nnplan.<pid>.tmp.XXXXXX (cache_write.c) */
static bool is_temp_name(const char *name) { return strstr(name, ".nnplan.") && strstr(name, ".tmp."); }

static int by_recency(const void *a, const void *b) {
    const nn_cache_entry *x = a, *y = b;
    if (x->used_ns != y->used_ns) return x->used_ns < y->used_ns ? -1 : 1;
    return strcmp(x->name, y->name);
}

int nn_cache_scan(const char *dir, bool temps, nn_cache_entry **out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : -1;
    nn_cache_entry *e = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!(temps ? is_temp_name(de->d_name) : is_plan_name(de->d_name))) continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            nn_cache_entry *grown = realloc(e, sizeof *e * (size_t)cap);
            if (!grown) break;
            e = grown;
        }
        size_t len = strlen(dir) + strlen(de->d_name) + 2;
        if (!(e[n].path = malloc(len))) break;
        snprintf(e[n].path, len, "%s/%s", dir, de->d_name);
        e[n].name = e[n].path + strlen(dir) + 1;
        e[n].bytes = (uint64_t)st.st_size;
        e[n].used_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        n++;
    }
    closedir(d);
    if (n) qsort(e, (size_t)n, sizeof *e, by_recency);
    *out = e;
    return n;
}

void nn_cache_entries_free(nn_cache_entry *e, int n) {
    for (int i = 0; i < n; i++)
        free(e[i].path);
    free(e);
}

int nn_cache_trim(const char *dir, int64_t cap, const char *keep, uint64_t *left) {
    nn_cache_entry *e;
    int n = nn_cache_scan(dir, false, &e), removed = 0;
    if (n < 0) return -1;
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += e[i].bytes;
    for (int i = 0; i < n && cap >= 0 && total > (uint64_t)cap; i++) {
        if (keep && !strcmp(e[i].path, keep)) continue;
        /* another process may have evicted it first: the bytes are gone either way */
        if (unlink(e[i].path) == 0 || errno == ENOENT) {
            total -= e[i].bytes;
            removed++;
        }
    }
    nn_cache_entries_free(e, n);
    if (left) *left = total;
    return removed;
}

const char *nn_cache_file_status(const char *path, char *engine, size_t engine_size) {
    if (engine_size) engine[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "unreadable";
    unsigned char head[HEADER_BYTES];
    struct stat st;
    ssize_t got = fstat(fd, &st) == 0 ? pread(fd, head, sizeof head, 0) : -1;
    close(fd);
    if (got != (ssize_t)sizeof head) return "damaged (shorter than a header)";
    cache_header h;
    cache_decode(&cache_header_desc, head, &h);
    if (memcmp(h.magic, CACHE_MAGIC, sizeof h.magic)) return "damaged (not a plan file)";
    if (engine_size) {
        size_t k = 0;
        for (; k < sizeof h.engine && k + 1 < engine_size && h.engine[k]; k++)
            engine[k] = (h.engine[k] >= 32 && h.engine[k] < 127) ? h.engine[k] : '?';
        engine[k] = 0;
    }
    if (h.format != CACHE_FORMAT) return "stale (older plan format)";
    if (h.file_bytes != (uint64_t)st.st_size) return "damaged (wrong size)";
    if (strncmp(h.engine, NN_VERSION_STRING, sizeof h.engine)) return "stale (another engine version)";
    return "ok";
}
