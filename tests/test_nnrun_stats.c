/* nnrun's statistics against numpy's definitions, and its powercap reader
 * against a fake sysfs tree (counters advancing, wrapping, unreadable). */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tools/nnrun_stats.c"
#include "check.h"

#define OK(cond) CHECK(cond, "%s", #cond)
#define NEAR(got, want, tol)                                                                                           \
    CHECK(fabs((got) - (want)) <= (tol), "%s = %.12g, want %.12g", #got, (double)(got), (double)(want))

static void write_file(const char *dir, const char *name, const char *text) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    OK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void test_stats(void) {
    /* the squares of 1..20 in a shuffled order; expected values from numpy 1.24:
     * np.percentile(d, [50, 90, 95, 99]) (linear), d.mean(), d.std(ddof=1) */
    double d[20];
    for (int i = 0; i < 20; i++)
        d[i] = (double)(((i * 7) % 20 + 1) * ((i * 7) % 20 + 1));
    lat_stats s;
    lat_stats_compute(d, 20, &s);
    OK(s.n == 20);
    NEAR(s.min, 1.0, 1e-12);
    NEAR(s.max, 400.0, 1e-12);
    NEAR(s.median, 110.5, 1e-9);
    NEAR(s.p90, 327.7, 1e-9);
    NEAR(s.p95, 362.95, 1e-9);
    NEAR(s.p99, 392.59, 1e-9);
    NEAR(s.mean, 143.5, 1e-9);
    NEAR(s.stddev, 127.90230646864818, 1e-9);
    OK(lat_stats_noisy(&s)); /* p90 is 3x the median */

    double one = 4.25;
    lat_stats_compute(&one, 1, &s);
    OK(s.median == 4.25 && s.p99 == 4.25 && s.stddev == 0 && !lat_stats_noisy(&s));

    /* p90 = 15.55 against a median of 10: noisy; at 14.9 it is not */
    double q[10] = {10, 10, 10, 10, 10, 10, 10, 10, 15.5, 16};
    lat_stats_compute(q, 10, &s);
    NEAR(s.p90, 15.55, 1e-9);
    OK(lat_stats_noisy(&s));
    double r[10] = {10, 10, 10, 10, 10, 10, 10, 10, 14.9, 14.9};
    lat_stats_compute(r, 10, &s);
    OK(!lat_stats_noisy(&s));
}

static void test_powercap(void) {
    char root[] = "/tmp/nnrun-powercap.XXXXXX";
    OK(mkdtemp(root) != NULL);
    char zone0[600], zone1[600], sub[700];
    snprintf(zone0, sizeof zone0, "%s/intel-rapl:0", root);
    snprintf(zone1, sizeof zone1, "%s/intel-rapl:1", root);
    snprintf(sub, sizeof sub, "%s/intel-rapl:0:0", root); /* a subzone as sysfs also lists it: not added */
    mkdir(zone0, 0755);
    mkdir(zone1, 0755);
    mkdir(sub, 0755);
    write_file(zone0, "max_energy_range_uj", "262143328850\n");
    write_file(zone1, "max_energy_range_uj", "1000000000\n");
    write_file(sub, "max_energy_range_uj", "1000\n");
    write_file(zone0, "energy_uj", "1000\n");
    write_file(zone1, "energy_uj", "999000000\n"); /* 1 J before it wraps */
    write_file(sub, "energy_uj", "5\n");

    energy_meter e;
    OK(energy_start(&e, root) == 0);
    OK(e.n_zones == 2);
    write_file(zone0, "energy_uj", "3001000\n"); /* +3 J */
    write_file(zone1, "energy_uj", "500000\n");  /* wrapped: +1 J + 0.5 J */
    write_file(sub, "energy_uj", "999\n");
    double j = 0;
    OK(energy_stop(&e, &j) == 0);
    NEAR(j, 4.5, 1e-9);

    /* a counter that did not move is no reading */
    OK(energy_start(&e, root) == 0);
    OK(energy_stop(&e, &j) == -1);
    OK(strstr(e.reason, "did not advance") != NULL);

    /* garbage in a counter is named */
    write_file(zone1, "energy_uj", "lots\n");
    OK(energy_start(&e, root) == -1);
    OK(strstr(e.reason, "intel-rapl:1/energy_uj: not a counter") != NULL);

    /* no tree at all */
    OK(energy_start(&e, "/nonexistent/powercap") == -1);
    OK(strstr(e.reason, "/nonexistent/powercap: No such file or directory") != NULL);

    /* a tree without RAPL zones */
    char empty[700];
    snprintf(empty, sizeof empty, "%s/empty", root);
    mkdir(empty, 0755);
    OK(energy_start(&e, empty) == -1);
    OK(strstr(e.reason, "no intel-rapl zone") != NULL);

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    OK(system(cmd) == 0);
}

int main(void) {
    test_stats();
    test_powercap();
    return check_summary();
}
