/* nnrun's parts: the measuring (nnrun.c) and the reports (nnrun_report.c). */
#ifndef NNRUN_H
#define NNRUN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "nn.h"
#include "nnrun_stats.h"

enum { EXIT_ERROR = 1, EXIT_USAGE = 2, MAX_INPUT_FILES = 64, MAX_WARNINGS = 8 };

typedef struct args {
    const char *model;
    nn_options opt;
    bool batch_given;
    int warmup, iters;                                                     /* iters 0: not given */
    double duration;                                                       /* seconds; 0: not given */
    const char *input_name[MAX_INPUT_FILES], *input_file[MAX_INPUT_FILES]; /* name NULL: the only input */
    int n_input_files;
    const char *save_dir;
    bool json;
    int scan[32], n_scan;  /* --scan-batch sizes */
    double latency_budget; /* ms, 0 = none */
    bool child;            /* a --scan-batch child: measure, send the report to the parent */
    bool quiet, verbose, progress;
    const char *ensemble; /* --ensemble mean|concat: the models below, `model` first */
    const char *models[8];
    int n_models;
} args;

/* What one measurement found; scan children send it to the parent. */
typedef struct report {
    int ok, batch, exit_code;
    lat_stats lat;
    double load_ms, throughput, rss_mb;
    double joules_per_sample; /* NAN: no reading */
    char error[480];          /* why it failed */
} report;

/* What a session holds: released on every way out of it. */
typedef struct held {
    nn_tensor files[MAX_INPUT_FILES]; /* data not yet handed to `in` */
    nn_model *m;
    nn_tensor *in, *out;
    int n_in, n_out;
    double *lat;
} held;

/* What the timed runs measured, for the reports. */
typedef struct measured {
    nn_model_stats stats;
    lat_stats lat;
    int64_t samples; /* per run */
    double load_ms, first_result_ms, timed_s, throughput, rss_mb;
    bool have_energy;
    double joules;
    char energy_reason[512];
} measured;

/* warnings of this run, for the JSON report */
extern char warnings[MAX_WARNINGS][320];
extern int n_warnings;

void shape_str(const nn_tensor *t, char *buf, size_t size);
void json_str(const char *s);
void print_text(const args *a, const held *h, const measured *r);
void print_json(const args *a, const held *h, const measured *r);
/* the --scan-batch table (or JSON) of n points; best and fits index them, -1: none */
void print_scan(const args *a, const report *reps, int n, int best, int fits);

#endif
