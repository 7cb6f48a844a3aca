/* nnrun's measurements: latency statistics and energy from Linux powercap.
 * Kept apart from nnrun.c so that tests/test_nnrun_stats.c checks them on
 * known data and on a fake sysfs tree. */
#ifndef NNRUN_STATS_H
#define NNRUN_STATS_H

#include <stdbool.h>
#include <stdint.h>

/* Latencies in ms.  Percentiles interpolate linearly between the two
 * nearest ranks (numpy's default); stddev is the sample standard deviation
 * (n - 1 in the denominator, 0 for one run). */
typedef struct lat_stats {
    int n;
    double min, mean, median, p90, p95, p99, max, stddev;
} lat_stats;

/* Sorts lat[0..n) in place and fills *s; n >= 1. */
void lat_stats_compute(double *lat, int n, lat_stats *s);
/* The runs vary too much to trust one figure: p90 above 1.5x the median. */
bool lat_stats_noisy(const lat_stats *s);

/* Energy counters of Linux powercap (RAPL): the top-level zones under
 * root (default /sys/class/powercap, or $NN_POWERCAP_ROOT), named
 * intel-rapl:N (one per CPU package; their subzones are inside them and
 * are not added again).  Each counts microjoules and wraps at
 * max_energy_range_uj. */
enum { ENERGY_MAX_ZONES = 16 };
typedef struct energy_meter {
    int n_zones;
    char path[ENERGY_MAX_ZONES][512]; /* the zone's folder */
    uint64_t start_uj[ENERGY_MAX_ZONES], range_uj[ENERGY_MAX_ZONES];
    char reason[512]; /* why there is no reading, when energy_start or energy_stop fail */
} energy_meter;

/* Read every zone's counter now: 0, or -1 with e->reason set. */
int energy_start(energy_meter *e, const char *root);
/* Joules used by the zones since energy_start: 0, or -1 with e->reason set
 * (a counter unreadable now, or none advanced). */
int energy_stop(energy_meter *e, double *joules);

#endif
