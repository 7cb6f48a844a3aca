/* The engine's parallel for: tasks taken on demand by whoever is free.
 *
 * nn_par_for(threads, ntasks, fn, ctx) runs fn(ctx, task, seat) once for
 * every task in [0, ntasks), on the calling thread and up to threads - 1
 * of the engine's persistent workers.  The tasks are cut into contiguous
 * shares, one per seat (nn_par_share); each thread claims the tasks of its
 * own share front first, one compare-and-swap each, then takes the others'
 * from their backs.  With every thread running, seat s therefore runs the
 * same share of every call: an operator that cuts its work the same way as
 * the one before it (the same rows of an image) reads what the same core
 * wrote.  The caller waits only for tasks a worker has already claimed: a
 * worker the OS has not scheduled yet claims nothing, so the caller runs
 * its share instead of waiting at a barrier for it.  `seat` is in
 * [0, threads), the caller's is 0, and no two tasks running at once have
 * the same one (index per-thread scratch by it).
 *
 * There is one set of workers in the process, shared by every caller;
 * thread counts are per call, never process-wide, so models with different
 * counts run side by side.  A call made from inside a task runs its tasks
 * on the calling thread.  NN_PAR=omp in the environment (read once) runs
 * every call as an OpenMP `parallel for schedule(static, 1)` instead, the
 * engine's older way, for A/B measurements (docs/perf-notes.md). */
#ifndef NN_PAR_H
#define NN_PAR_H

#include <stdint.h>

typedef void (*nn_par_fn)(void *ctx, int64_t task, int seat);

/* Most threads one call uses; more are clamped. */
#define NN_PAR_MAX_THREADS 256

void nn_par_for(int threads, int64_t ntasks, nn_par_fn fn, void *ctx);

/* Seats with a share of their own; a call's further seats only take others'. */
#define NN_PAR_SHARE_SEATS 32

/* Seat `seat`'s share of a call of ntasks (< 2^20) tasks on `threads`:
 * tasks [*lo, *hi), empty past NN_PAR_SHARE_SEATS. */
void nn_par_share(int64_t ntasks, int threads, int seat, int64_t *lo, int64_t *hi);

/* How many tasks to cut `n` items into for `threads` threads: several per
 * thread, so that a late thread's share goes to the others, each at least
 * `min_items` (a claim costs tens of nanoseconds); 1 when threads <= 1. */
int64_t nn_par_tasks(int64_t n, int64_t min_items, int threads);

/* Items [*lo, *hi) of task t when n items are cut into ntasks tasks. */
static inline void nn_par_range(int64_t n, int64_t ntasks, int64_t t, int64_t *lo, int64_t *hi) {
    *lo = n / ntasks * t + (t < n % ntasks ? t : n % ntasks);
    *hi = *lo + n / ntasks + (t < n % ntasks ? 1 : 0);
}

/* nn_par_for over items [0, n) cut into nn_par_tasks(n, min_items,
 * threads) ranges: fn(ctx, lo, hi, seat) for each. */
typedef void (*nn_par_range_fn)(void *ctx, int64_t lo, int64_t hi, int seat);
void nn_par_for_range(int threads, int64_t n, int64_t min_items, nn_par_range_fn fn, void *ctx);

/* Whether calls run on the engine's workers (false: NN_PAR=omp). */
int nn_par_uses_pool(void);

/* Workers started so far (tests: the process's threads are its callers and
 * these, with no OpenMP team beside them). */
int nn_par_workers(void);

#endif
