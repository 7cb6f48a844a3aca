/* Latency statistics and powercap energy readings (nnrun_stats.h). */
#include "nnrun_stats.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(const double *sorted, int n, double p) {
    double pos = p / 100.0 * (n - 1);
    int lo = (int)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

void lat_stats_compute(double *lat, int n, lat_stats *s) {
    memset(s, 0, sizeof *s);
    if (n < 1) return;
    qsort(lat, (size_t)n, sizeof *lat, cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += lat[i];
    double mean = sum / n, sq = 0;
    for (int i = 0; i < n; i++)
        sq += (lat[i] - mean) * (lat[i] - mean);
    *s = (lat_stats){.n = n,
                     .min = lat[0],
                     .mean = mean,
                     .median = percentile(lat, n, 50),
                     .p90 = percentile(lat, n, 90),
                     .p95 = percentile(lat, n, 95),
                     .p99 = percentile(lat, n, 99),
                     .max = lat[n - 1],
                     .stddev = n > 1 ? sqrt(sq / (n - 1)) : 0};
}

bool lat_stats_noisy(const lat_stats *s) { return s->n > 1 && s->p90 > 1.5 * s->median; }

/* One unsigned decimal from a sysfs file: 0, or -1 with the reason. */
static int read_u64(const char *dir, const char *file, uint64_t *out, char *reason, size_t size) {
    char path[600], buf[64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(reason, size, "%.300s: %.60s%s", path, strerror(errno),
                 errno == EACCES ? " (the counters are readable by root only since Linux 5.10)" : "");
        return -1;
    }
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (end == buf || errno || (*end && *end != '\n') || buf[0] == '-') {
        snprintf(reason, size, "%.400s: not a counter ('%.20s')", path, buf);
        return -1;
    }
    *out = v;
    return 0;
}

int energy_start(energy_meter *e, const char *root) {
    memset(e, 0, sizeof *e);
    if (!root || !root[0]) root = "/sys/class/powercap";
    DIR *d = opendir(root);
    if (!d) {
        snprintf(e->reason, sizeof e->reason, "%s: %s (no Linux powercap here)", root, strerror(errno));
        return -1;
    }
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d)) && rc == 0) {
        unsigned zone;
        char tail;
        /* intel-rapl:N exactly: intel-rapl:N:M are its subzones (cores, DRAM) */
        if (sscanf(de->d_name, "intel-rapl:%u%c", &zone, &tail) != 1) continue;
        if (e->n_zones == ENERGY_MAX_ZONES) break;
        int z = e->n_zones;
        snprintf(e->path[z], sizeof e->path[z], "%s/%s", root, de->d_name);
        if (read_u64(e->path[z], "max_energy_range_uj", &e->range_uj[z], e->reason, sizeof e->reason) ||
            read_u64(e->path[z], "energy_uj", &e->start_uj[z], e->reason, sizeof e->reason))
            rc = -1;
        else
            e->n_zones++;
    }
    closedir(d);
    if (rc == 0 && !e->n_zones) {
        snprintf(e->reason, sizeof e->reason, "%s: no intel-rapl zone (no RAPL energy counter on this machine)", root);
        rc = -1;
    }
    return rc;
}

int energy_stop(energy_meter *e, double *joules) {
    double uj = 0;
    for (int z = 0; z < e->n_zones; z++) {
        uint64_t now;
        if (read_u64(e->path[z], "energy_uj", &now, e->reason, sizeof e->reason)) return -1;
        /* a counter that passed its range started again from 0 */
        uint64_t delta = now >= e->start_uj[z] ? now - e->start_uj[z] : e->range_uj[z] - e->start_uj[z] + now;
        uj += (double)delta;
    }
    if (!(uj > 0)) {
        snprintf(e->reason, sizeof e->reason, "the powercap counters under %.400s did not advance during the run",
                 e->n_zones ? e->path[0] : "(none)");
        return -1;
    }
    *joules = uj / 1e6;
    return 0;
}
