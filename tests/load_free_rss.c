/* Load and free one model many times: resident memory must stay flat.
 * A leak valgrind cannot see (memory still referenced from a global, a
 * cache that only grows) shows up here as growth.
 *   load_free_rss [--model PATH] [--loads N] [--max-growth-kb K]
 * One model thread and no plan cache, so every load parses, optimizes and
 * plans from scratch.  Not run under valgrind (far too slow for N loads) nor
 * ASan (its quarantine holds freed memory on purpose). */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "nn.h"

/* Resident set after handing malloc's free pages back to the OS: without the
 * trim, RSS swings by +-8 MB from load to load with where glibc's free lists
 * happen to sit, hiding (or faking) a leak of a few kB per load. */
static long resident_kb(void) {
    malloc_trim(0);
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = -1;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
        fclose(f);
    }
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Load and free `times` times; false (and a failed check) at the first load that fails */
static bool load_free(const char *path, int times) {
    nn_options opt = nn_options_default();
    opt.threads = 1;
    opt.cache = 0;
    nn_status st = NN_OK;
    int i = 0;
    for (; i < times && st == NN_OK; i++) {
        nn_model *m = NULL;
        st = nn_load(path, &opt, &m);
        nn_free(m);
    }
    return CHECK(st == NN_OK, "load %d of %d of %s: expected OK, got %s: %s", i, times, path, nn_strerror(st),
                 nn_last_error());
}

int main(int argc, char **argv) {
    const char *path = "models/mobilenetv2.onnx";
    int loads = 1000, warmup = 20;
    long max_growth_kb = 1024;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            path = argv[i + 1];
        else if (!strcmp(argv[i], "--loads"))
            loads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-growth-kb"))
            max_growth_kb = atol(argv[i + 1]);
        else
            break;
    }
    if (argc % 2 == 0 || loads < 1) {
        fprintf(stderr, "usage: load_free_rss [--model PATH] [--loads N] [--max-growth-kb K]\n");
        return 2;
    }
    /* warm-up: the allocator's arenas, libomp's and OpenBLAS's one-time state */
    if (!load_free(path, warmup)) return check_summary();
    long before = resident_kb();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!load_free(path, loads)) return check_summary();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long after = resident_kb();
    struct mallinfo2 heap = mallinfo2();
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (!CHECK(before >= 0 && after >= 0, "resident memory: expected readable from /proc/self/statm, was not"))
        return check_summary();
    printf("%d loads of %s in %.1f s (%.1f ms each): resident %ld kB -> %ld kB, growth %ld kB (limit %ld kB); "
           "malloc holds %zu kB\n",
           loads, path, secs, secs * 1e3 / loads, before, after, after - before, max_growth_kb,
           (heap.uordblks + heap.hblkhd) / 1024);
    CHECK(after - before < max_growth_kb, "resident memory after %d loads: expected growth below %ld kB, got %ld kB",
          loads, max_growth_kb, after - before);
    return check_summary();
}
