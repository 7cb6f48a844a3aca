/* The engine's parallel for (ops/par.h): persistent workers that take tasks
 * on demand.
 *
 * A call publishes its job in one of SLOTS slots.  A slot's `word` packs a
 * generation (24 bits), the seats taken by workers (8 bits) and the tasks
 * not yet claimed (32 bits); every claim is one compare-and-swap on it, so
 * a worker that read a stale job (another generation, or none left) claims
 * nothing, and a claim that succeeds sees the job's fields stable: the
 * caller reuses the slot only once every claimed task reported done.  The
 * caller therefore never waits for a worker that has not claimed a task.
 *
 * Idle workers spin a while (NN_PAR_SPIN_US, default SPIN_US_DEFAULT) on
 * an epoch counter that every publication bumps, then sleep on it as a
 * futex.  They spin with sched_yield, not pause: on a machine with more
 * runnable threads than cores a pausing spinner takes the time slices the
 * caller needs (docs/perf-notes.md, "Batch 1: tasks taken on demand");
 * NN_PAR_SPIN_YIELD=0 pauses instead.  A caller whose last tasks are
 * still running on workers spins, then sleeps on the slot's `done`
 * counter. */
#include "par.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define SLOTS 64
#define SPIN_US_DEFAULT 200
/* Spin iterations of a caller waiting for workers' last tasks before it sleeps. */
#define DONE_SPINS 20000

typedef struct slot {
    _Atomic uint64_t word;
    _Atomic uint32_t done;    /* tasks finished */
    _Atomic uint32_t waiting; /* the caller sleeps on done */
    _Atomic int cap;          /* seats workers may take */
    _Atomic int busy;         /* a caller owns the slot */
    nn_par_fn fn;             /* written before word is published, read after a claim */
    void *ctx;
    int64_t ntasks;
} __attribute__((aligned(64))) slot;

static slot slots[SLOTS];
static _Atomic uint64_t active;  /* bit i: slot i has a published job */
static _Atomic uint32_t epoch;   /* bumped by every publication; workers sleep on it */
static _Atomic int sleepers;     /* workers asleep on epoch */
static _Atomic int n_workers;
static pthread_mutex_t grow_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int in_task; /* this thread runs a task (or is a worker) */

static inline uint32_t w_gen(uint64_t w) { return (uint32_t)(w >> 40); }
static inline uint32_t w_seats(uint64_t w) { return (uint32_t)(w >> 32) & 0xff; }
static inline uint32_t w_rem(uint64_t w) { return (uint32_t)w; }

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val) {
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
#else
    if (atomic_load(addr) == val) sched_yield();
#endif
}

static void futex_wake(_Atomic uint32_t *addr, int n) {
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
#else
    (void)addr;
    (void)n;
#endif
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- settings, read once */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static int use_pool = 1;
static int64_t spin_ns = SPIN_US_DEFAULT * 1000;
static int spin_yield = 1;

static void read_env(void) {
    const char *m = getenv("NN_PAR");
    if (m && strcmp(m, "omp") == 0) use_pool = 0;
    const char *y = getenv("NN_PAR_SPIN_YIELD");
    if (y && strcmp(y, "0") == 0) spin_yield = 0;
    const char *s = getenv("NN_PAR_SPIN_US");
    if (s && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (*end == '\0' && v >= 0 && v <= 1000000) spin_ns = (int64_t)v * 1000;
    }
}

int nn_par_uses_pool(void) {
    pthread_once(&env_once, read_env);
    return use_pool;
}

int nn_par_workers(void) { return atomic_load(&n_workers); }

int64_t nn_par_tasks(int64_t n, int64_t min_items, int threads) {
    if (threads <= 1 || n <= 0) return n > 0 ? 1 : 0;
    if (min_items < 1) min_items = 1;
    int64_t by_size = n / min_items, want = (int64_t)threads * 4;
    int64_t t = by_size < want ? by_size : want;
    return t < 1 ? 1 : t;
}

typedef struct ranges {
    nn_par_range_fn fn;
    void *ctx;
    int64_t n, tasks;
} ranges;

static void range_task(void *ctx, int64_t t, int seat) {
    const ranges *r = ctx;
    int64_t lo, hi;
    nn_par_range(r->n, r->tasks, t, &lo, &hi);
    r->fn(r->ctx, lo, hi, seat);
}

void nn_par_for_range(int threads, int64_t n, int64_t min_items, nn_par_range_fn fn, void *ctx) {
    ranges r = {.fn = fn, .ctx = ctx, .n = n, .tasks = nn_par_tasks(n, min_items, threads)};
    nn_par_for(threads, r.tasks, range_task, &r);
}

/* ---- claiming */

/* Claim a task of generation gen: its index, or -1 when none is left. */
static int64_t claim(slot *s, uint32_t gen) {
    uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
    for (;;) {
        if (w_gen(w) != gen || w_rem(w) == 0) return -1;
        if (atomic_compare_exchange_weak_explicit(&s->word, &w, w - 1, memory_order_acq_rel, memory_order_acquire))
            return s->ntasks - (int64_t)w_rem(w);
    }
}

static void finish(slot *s) {
    uint32_t n = (uint32_t)s->ntasks; /* read before done lets the caller reuse the slot */
    if (atomic_fetch_add(&s->done, 1) + 1 == n && atomic_load(&s->waiting)) futex_wake(&s->done, 1);
}

/* A worker takes a seat in slot s's job and runs tasks until none is left;
 * false when the job is full or has none left. */
static bool join(slot *s) {
    uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
    for (;;) {
        if (w_rem(w) == 0 || (int)w_seats(w) >= atomic_load_explicit(&s->cap, memory_order_relaxed)) return false;
        uint64_t nw = w - 1 + ((uint64_t)1 << 32);
        if (atomic_compare_exchange_weak_explicit(&s->word, &w, nw, memory_order_acq_rel, memory_order_acquire))
            break;
    }
    uint32_t gen = w_gen(w);
    int seat = (int)w_seats(w) + 1;
    nn_par_fn fn = s->fn;
    void *ctx = s->ctx;
    int64_t t = s->ntasks - (int64_t)w_rem(w);
    do { /* fn and ctx stay this generation's while it has tasks to claim */
        fn(ctx, t, seat);
        finish(s);
    } while ((t = claim(s, gen)) >= 0);
    return true;
}

static bool scan(void) {
    bool found = false;
    uint64_t m = atomic_load_explicit(&active, memory_order_acquire);
    while (m) {
        int i = __builtin_ctzll(m);
        m &= m - 1;
        found |= join(&slots[i]);
    }
    return found;
}

static void *worker_main(void *arg) {
    (void)arg;
    in_task = 1; /* a task that calls nn_par_for runs it here */
    for (;;) {
        uint32_t seen = atomic_load(&epoch);
        if (scan()) continue;
        int64_t until = now_ns() + spin_ns;
        bool woke = false;
        for (int i = 0; !woke; i++) {
            if (atomic_load_explicit(&epoch, memory_order_relaxed) != seen) woke = true;
            else if ((i & 63) == 63 && now_ns() >= until) break;
            else if (spin_yield) sched_yield();
            else cpu_relax();
        }
        if (woke) continue;
        atomic_fetch_add(&sleepers, 1);
        if (atomic_load(&epoch) == seen) futex_wait(&epoch, seen);
        atomic_fetch_sub(&sleepers, 1);
    }
    return NULL;
}

/* Start workers until there are `want` (fewer if the system refuses). */
static void grow(int want) {
    pthread_mutex_lock(&grow_lock);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* workers take no signals: the application's threads do */
    while (atomic_load(&n_workers) < want) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker_main, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        atomic_fetch_add(&n_workers, 1);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_mutex_unlock(&grow_lock);
}

static void run_serial(int64_t ntasks, nn_par_fn fn, void *ctx) {
    int outer = in_task;
    in_task = 1;
    for (int64_t t = 0; t < ntasks; t++)
        fn(ctx, t, 0);
    in_task = outer;
}

static void run_omp(int threads, int64_t ntasks, nn_par_fn fn, void *ctx) {
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int64_t t = 0; t < ntasks; t++)
        fn(ctx, t, omp_get_thread_num());
}

static slot *take_slot(void) {
    static _Atomic unsigned next;
    unsigned start = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed);
    for (unsigned k = 0; k < SLOTS; k++) {
        slot *s = &slots[(start + k) % SLOTS];
        int free_ = 0;
        if (atomic_load_explicit(&s->busy, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_strong_explicit(&s->busy, &free_, 1, memory_order_acquire, memory_order_relaxed))
            return s;
    }
    return NULL;
}

void nn_par_for(int threads, int64_t ntasks, nn_par_fn fn, void *ctx) {
    if (ntasks <= 0) return;
    if (threads > NN_PAR_MAX_THREADS) threads = NN_PAR_MAX_THREADS;
    if (threads > ntasks) threads = (int)ntasks;
    if (threads <= 1 || in_task || ntasks > (int64_t)INT32_MAX) {
        run_serial(ntasks, fn, ctx);
        return;
    }
    if (!nn_par_uses_pool()) {
        run_omp(threads, ntasks, fn, ctx);
        return;
    }
    int helpers = threads - 1;
    if (atomic_load_explicit(&n_workers, memory_order_relaxed) < helpers) grow(helpers);
    slot *s = take_slot();
    if (!s) { /* more concurrent calls than slots: this one runs alone */
        run_serial(ntasks, fn, ctx);
        return;
    }
    s->fn = fn;
    s->ctx = ctx;
    s->ntasks = ntasks;
    atomic_store_explicit(&s->done, 0, memory_order_relaxed);
    atomic_store_explicit(&s->waiting, 0, memory_order_relaxed);
    atomic_store_explicit(&s->cap, helpers, memory_order_relaxed);
    uint32_t gen = (w_gen(atomic_load_explicit(&s->word, memory_order_relaxed)) + 1) & 0xffffff;
    atomic_store_explicit(&s->word, (uint64_t)gen << 40 | (uint64_t)ntasks, memory_order_release);
    uint64_t bit = (uint64_t)1 << (s - slots);
    atomic_fetch_or(&active, bit);
    atomic_fetch_add(&epoch, 1);
    if (atomic_load(&sleepers) > 0) futex_wake(&epoch, helpers);

    in_task = 1;
    for (int64_t t; (t = claim(s, gen)) >= 0;) {
        fn(ctx, t, 0);
        finish(s);
    }
    in_task = 0;
    atomic_fetch_and(&active, ~bit);
    uint32_t n = (uint32_t)ntasks, d;
    for (int spins = 0; (d = atomic_load_explicit(&s->done, memory_order_acquire)) != n;) {
        if (++spins < DONE_SPINS) {
            cpu_relax();
            continue;
        }
        atomic_store(&s->waiting, 1);
        if (atomic_load(&s->done) == d) futex_wait(&s->done, d);
    }
    atomic_store_explicit(&s->busy, 0, memory_order_release);
}
