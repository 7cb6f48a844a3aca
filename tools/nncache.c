/* nncache: look into the plan cache folder and make room in it.
 *
 *   nncache [--dir DIR] list                 each plan: size, when last used, whether it can still be a hit
 *   nncache [--dir DIR] clear                remove every plan and leftover temporary file
 *   nncache [--dir DIR] prune [--max SIZE]   remove plans that can never be a hit, then the least
 *                                            recently used ones until the folder fits SIZE (default:
 *                                            $NN_CACHE_MAX, else 1 GiB)
 *
 * The folder is DIR, else $NN_CACHE_DIR, $XDG_CACHE_HOME/nn, ~/.cache/nn, as
 * for nnrun and the library.  Only *.nnplan files and writers' temporary
 * files are ever removed. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"

/* a writer's temporary file this old belongs to a process that died */
enum { TEMP_ABANDONED_S = 3600 };

static int usage(void) {
    fprintf(stderr, "usage: nncache [--dir DIR] list | clear | prune [--max SIZE]\n"
                    "  list             the plans in the cache folder, least recently used first\n"
                    "  clear            remove every plan\n"
                    "  prune            remove plans that can never be a hit (damaged, stale), then the\n"
                    "                   least recently used until the folder fits the cap\n"
                    "  --max SIZE       the cap for prune: bytes, or with K, M, G, T (binary), or none\n"
                    "                   (default: $NN_CACHE_MAX, else 1 GiB)\n"
                    "  --dir DIR        the cache folder (default: $NN_CACHE_DIR, else $XDG_CACHE_HOME/nn,\n"
                    "                   else ~/.cache/nn)\n");
    return 2;
}

static double mib(uint64_t bytes) { return (double)bytes / (1 << 20); }

static void human(uint64_t bytes, char *buf, size_t size) {
    if (bytes < (1 << 20))
        snprintf(buf, size, "%.1fK", (double)bytes / 1024);
    else if (bytes < (1u << 30))
        snprintf(buf, size, "%.1fM", mib(bytes));
    else
        snprintf(buf, size, "%.2fG", (double)bytes / (1u << 30));
}

static void age(int64_t used_ns, char *buf, size_t size) {
    double s = difftime(time(NULL), (time_t)(used_ns / 1000000000));
    if (s < 0) s = 0;
    if (s < 120)
        snprintf(buf, size, "%.0f s ago", s);
    else if (s < 7200)
        snprintf(buf, size, "%.0f min ago", s / 60);
    else if (s < 172800)
        snprintf(buf, size, "%.0f h ago", s / 3600);
    else
        snprintf(buf, size, "%.0f days ago", s / 86400);
}

static void cap_words(int64_t cap, char *buf, size_t size) {
    if (cap < 0)
        snprintf(buf, size, "no cap");
    else
        snprintf(buf, size, "cap %.1f MiB", mib((uint64_t)cap));
}

static int list(const char *dir, int64_t cap) {
    nn_cache_entry *e, *t;
    int n = nn_cache_scan(dir, false, &e);
    if (n < 0) return fprintf(stderr, "nncache: cannot read '%s': %s\n", dir, strerror(errno)), 1;
    int nt = nn_cache_scan(dir, true, &t);
    printf("%s\n", dir);
    uint64_t total = 0;
    if (n) printf("%8s  %-14s  %-32s  %s\n", "size", "last used", "status", "plan");
    for (int i = 0; i < n; i++) {
        char when[32], engine[24], status[64], sz[24];
        const char *s = nn_cache_file_status(e[i].path, engine, sizeof engine);
        if (strncmp(s, "ok", 2) && engine[0])
            snprintf(status, sizeof status, "%s, %s", s, engine);
        else
            snprintf(status, sizeof status, "%s", s);
        age(e[i].used_ns, when, sizeof when);
        human(e[i].bytes, sz, sizeof sz);
        printf("%8s  %-14s  %-32s  %s\n", sz, when, status, e[i].name);
        total += e[i].bytes;
    }
    char caps[48];
    cap_words(cap, caps, sizeof caps);
    printf("%d plan%s, %.1f MiB (%s)\n", n, n == 1 ? "" : "s", mib(total), caps);
    if (nt > 0) printf("%d temporary file%s of plans being written\n", nt, nt == 1 ? "" : "s");
    nn_cache_entries_free(e, n);
    if (nt > 0) nn_cache_entries_free(t, nt);
    return 0;
}

/* Remove plans (and temporary files) that `pick` selects; counts into *files and *bytes. */
static int remove_if(const char *dir, bool temps, bool (*pick)(const nn_cache_entry *), int *files, uint64_t *bytes) {
    nn_cache_entry *e;
    int n = nn_cache_scan(dir, temps, &e);
    if (n < 0) return fprintf(stderr, "nncache: cannot read '%s': %s\n", dir, strerror(errno)), 1;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (!pick(&e[i])) continue;
        if (unlink(e[i].path) == 0) {
            (*files)++;
            *bytes += e[i].bytes;
        } else if (errno != ENOENT) {
            fprintf(stderr, "nncache: cannot remove '%s': %s\n", e[i].path, strerror(errno));
            rc = 1;
        }
    }
    nn_cache_entries_free(e, n);
    return rc;
}

static bool any(const nn_cache_entry *e) {
    (void)e;
    return true;
}

static bool never_a_hit(const nn_cache_entry *e) {
    char engine[24];
    return strcmp(nn_cache_file_status(e->path, engine, sizeof engine), "ok") != 0;
}

static bool abandoned(const nn_cache_entry *e) {
    return difftime(time(NULL), (time_t)(e->used_ns / 1000000000)) > TEMP_ABANDONED_S;
}

int main(int argc, char **argv) {
    const char *dir_opt = NULL, *cmd = NULL, *max = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir_opt = argv[++i];
        else if (!strcmp(argv[i], "--max") && i + 1 < argc)
            max = argv[++i];
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
            return usage(), 0;
        else if (!cmd && argv[i][0] != '-')
            cmd = argv[i];
        else
            return fprintf(stderr, "nncache: unexpected argument '%s'\n", argv[i]), usage();
    }
    if (!cmd) return usage();
    if (max && strcmp(cmd, "prune")) return fprintf(stderr, "nncache: --max applies to prune only\n"), usage();
    char dir[PATH_MAX], warning[120];
    if (!nn_cache_folder(dir_opt, dir, sizeof dir))
        return fprintf(stderr, "nncache: no cache folder: set NN_CACHE_DIR, XDG_CACHE_HOME or HOME, or give --dir\n"),
               1;
    int64_t cap = nn_cache_cap(0, warning, sizeof warning);
    if (max && !nn_cache_parse_size(max, &cap))
        return fprintf(stderr, "nncache: --max '%s' is not a size (e.g. 512M, 2G or none)\n", max), 2;
    if (!max && warning[0]) fprintf(stderr, "nncache: warning: %s\n", warning);

    if (!strcmp(cmd, "list")) return list(dir, cap);
    int files = 0, rc = 0;
    uint64_t bytes = 0;
    if (!strcmp(cmd, "clear")) {
        rc = remove_if(dir, false, any, &files, &bytes);
        rc |= remove_if(dir, true, abandoned, &files, &bytes);
    } else if (!strcmp(cmd, "prune")) {
        rc = remove_if(dir, false, never_a_hit, &files, &bytes);
        rc |= remove_if(dir, true, abandoned, &files, &bytes);
        uint64_t before = 0, left = 0;
        nn_cache_entry *e;
        int n = nn_cache_scan(dir, false, &e);
        for (int i = 0; i < n; i++)
            before += e[i].bytes;
        if (n > 0) nn_cache_entries_free(e, n);
        int evicted = nn_cache_trim(dir, cap, NULL, &left);
        if (evicted < 0) return fprintf(stderr, "nncache: cannot read '%s': %s\n", dir, strerror(errno)), 1;
        files += evicted;
        bytes += before - left;
    } else {
        return fprintf(stderr, "nncache: unknown command '%s'\n", cmd), usage();
    }
    char caps[48];
    cap_words(cap, caps, sizeof caps);
    printf("removed %d file%s (%.1f MiB) from %s", files, files == 1 ? "" : "s", mib(bytes), dir);
    if (!strcmp(cmd, "prune")) printf(" (%s)", caps);
    printf("\n");
    return rc;
}
