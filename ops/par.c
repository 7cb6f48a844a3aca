/* The engine's parallel for (ops/par.h): persistent workers that take tasks
 * on demand, each from its own share first.
 *
 * A call publishes its job in one of SLOTS slots.  The tasks are cut into
 * one contiguous share per seat (up to NN_PAR_SHARE_SEATS seats); a share
 * is one word on a cache line of its own, packing a generation (24 bits)
 * and the share's unclaimed tasks [lo, hi) (20 bits each).  The thread on a
 * seat claims from the front of its share, one compare-and-swap on a line
 * no other thread writes while it has work; a thread whose share is empty
 * takes from the back of another's.  So when every thread runs, seat s runs
 * the same share of every call (the same rows of an image, layer after
 * layer, stay in the cache of the core that wrote them), and a late thread's
 * share is run by the others.  A claim checks the generation, so a worker
 * that read a stale job claims nothing, and a claim that succeeds sees the
 * job's fields stable: the caller reuses the slot only once every claimed
 * task reported done, each thread counting on its own seat's line.
 *
 * Why shares: on a VM whose two vCPUs sit on different core complexes,
 * reading what the other thread wrote cost ten times reading one's own
 * (docs/perf-notes.md, "Batch 1: each thread keeps its share").
 *
 * Worker w (1, 2, ... in start order) takes seat w of a job with more than
 * w threads; a worker whose seat another took, or numbered past the job's
 * threads, takes the lowest free seat below FREE_SEATS.  Seats are taken
 * by a compare-and-swap on a mask tagged with the job's generation, so a
 * worker holding a stale job takes none of the new one's.
 *
 * Idle workers spin a while (NN_PAR_SPIN_US, default SPIN_US_DEFAULT) on
 * an epoch counter that every publication bumps, then sleep on it as a
 * futex.  They spin with sched_yield, not pause: on a machine with more
 * runnable threads than cores a pausing spinner takes the time slices the
 * caller needs (docs/perf-notes.md, "Batch 1: tasks taken on demand");
 * NN_PAR_SPIN_YIELD=0 pauses instead.  A caller whose last tasks are
 * still running on workers spins, then sleeps on the slot's `wake`
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
/* Seats a worker may take other than its own (bits of `taken`). */
#define FREE_SEATS 32
/* Tasks one publication holds (lo and hi are 20 bits); more run in rounds. */
#define ROUND_TASKS (((int64_t)1 << 20) - 1)

typedef struct seat_line {
    _Atomic uint64_t range; /* gen 24 | lo 20 | hi 20: the seat's share, its unclaimed tasks */
    _Atomic uint32_t done;  /* tasks finished by the worker on this seat */
} __attribute__((aligned(64))) seat_line;

typedef struct slot {
    _Atomic uint64_t head;   /* gen 24 | threads 16 | seats with shares 16, published last */
    _Atomic uint64_t taken;  /* gen (high 32 bits) | seats below FREE_SEATS that a thread holds */
    _Atomic uint32_t done_x; /* tasks finished on seats without a share */
    _Atomic uint32_t waiting; /* the caller sleeps on wake */
    _Atomic uint32_t wake;
    _Atomic int busy;        /* a caller owns the slot */
    nn_par_fn fn;            /* written before the shares are published, read after a claim */
    void *ctx;
    int64_t base;            /* task index of the round's first task */
    seat_line seat[NN_PAR_SHARE_SEATS];
} __attribute__((aligned(64))) slot;

static slot slots[SLOTS];
static _Atomic uint64_t active;  /* bit i: slot i has a published job */
static _Atomic uint32_t epoch;   /* bumped by every publication; workers sleep on it */
static _Atomic int sleepers;     /* workers asleep on epoch */
static _Atomic int n_workers;
static pthread_mutex_t grow_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int in_task; /* this thread runs a task (or is a worker) */

#define GEN_MASK 0xffffffu
static inline uint64_t r_pack(uint32_t gen, int64_t lo, int64_t hi) {
    return (uint64_t)(gen & GEN_MASK) << 40 | (uint64_t)lo << 20 | (uint64_t)hi;
}
static inline uint32_t r_gen(uint64_t r) { return (uint32_t)(r >> 40); }
static inline int64_t r_lo(uint64_t r) { return (int64_t)(r >> 20) & 0xfffff; }
static inline int64_t r_hi(uint64_t r) { return (int64_t)r & 0xfffff; }
static inline uint32_t h_gen(uint64_t h) { return (uint32_t)(h >> 32) & GEN_MASK; }
static inline int h_threads(uint64_t h) { return (int)(h >> 16) & 0xffff; }
static inline int h_shares(uint64_t h) { return (int)h & 0xffff; }

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

static int share_seats(int threads) { return threads < NN_PAR_SHARE_SEATS ? threads : NN_PAR_SHARE_SEATS; }

void nn_par_share(int64_t ntasks, int threads, int seat, int64_t *lo, int64_t *hi) {
    *lo = *hi = 0;
    if (ntasks <= 0) return;
    if (threads > NN_PAR_MAX_THREADS) threads = NN_PAR_MAX_THREADS;
    if (threads > ntasks) threads = (int)ntasks;
    if (threads < 1) threads = 1;
    if (seat >= 0 && seat < share_seats(threads)) nn_par_range(ntasks, share_seats(threads), seat, lo, hi);
}

/* ---- claiming */


/* The first unclaimed task of seat r's share, or -1. */
static int64_t claim_front(slot *s, int r, uint32_t gen) {
    _Atomic uint64_t *w = &s->seat[r].range;
    uint64_t v = atomic_load_explicit(w, memory_order_acquire);
    for (;;) {
        if (r_gen(v) != gen || r_lo(v) >= r_hi(v)) return -1;
        if (atomic_compare_exchange_weak_explicit(w, &v, r_pack(gen, r_lo(v) + 1, r_hi(v)), memory_order_acq_rel,
                                                  memory_order_acquire))
            return r_lo(v);
    }
}

/* The last unclaimed task of seat r's share, or -1. */
static int64_t claim_back(slot *s, int r, uint32_t gen) {
    _Atomic uint64_t *w = &s->seat[r].range;
    uint64_t v = atomic_load_explicit(w, memory_order_acquire);
    for (;;) {
        if (r_gen(v) != gen || r_lo(v) >= r_hi(v)) return -1;
        if (atomic_compare_exchange_weak_explicit(w, &v, r_pack(gen, r_lo(v), r_hi(v) - 1), memory_order_acq_rel,
                                                  memory_order_acquire))
            return r_hi(v) - 1;
    }
}

/* The next task for the thread on seat `seat`: its own share's front, then
 * the back of the others' (the next seats first); -1 when none is left. */
static int64_t claim(slot *s, int seat, int shares, uint32_t gen) {
    if (seat < shares) {
        int64_t t = claim_front(s, seat, gen);
        if (t >= 0) return t;
    }
    for (int k = 1; k <= shares; k++) {
        int r = (seat + k) % shares;
        if (r == seat) continue;
        int64_t t = claim_back(s, r, gen);
        if (t >= 0) return t;
    }
    return -1;
}

static void finish(slot *s, int seat, int shares) {
    atomic_fetch_add(seat < shares ? &s->seat[seat].done : &s->done_x, 1);
    if (atomic_load(&s->waiting)) {
        atomic_fetch_add(&s->wake, 1);
        futex_wake(&s->wake, 1);
    }
}

/* Worker `me` takes a seat in slot s's job (its own, else a free one) and
 * runs tasks until none is left; false when it took no task. */
static bool join(slot *s, int me) {
    uint64_t h, tk;
    uint32_t gen;
    int threads, shares, seat;
    for (;;) { /* the seat, taken in the job the head names (a seat word of another means a new job: again) */
        h = atomic_load_explicit(&s->head, memory_order_acquire);
        gen = h_gen(h);
        threads = h_threads(h);
        shares = h_shares(h);
        if (threads < 2) return false;
        if (me < threads && me >= FREE_SEATS) {
            seat = me; /* numbered past the shared mask: no other thread holds it */
            break;
        }
        uint64_t want = me < threads ? (uint64_t)1 << me : 0, pick = 0;
        int lim = threads < FREE_SEATS ? threads : FREE_SEATS;
        tk = atomic_load_explicit(&s->taken, memory_order_acquire);
        while ((uint32_t)(tk >> 32) == gen) {
            pick = want && !(tk & want) ? want : 0;
            if (!pick) { /* the lowest free seat in [1, lim) */
                uint64_t free_ = (((uint64_t)1 << lim) - 1) & ~tk & ~(uint64_t)1;
                if (!free_) return false;
                pick = free_ & -free_;
            }
            if (atomic_compare_exchange_weak_explicit(&s->taken, &tk, tk | pick, memory_order_acq_rel,
                                                      memory_order_acquire))
                break;
            pick = 0;
        }
        if (pick) {
            seat = __builtin_ctzll(pick);
            break;
        }
    }
    int64_t t = claim(s, seat, shares, gen);
    if (t < 0) return false; /* a stale job, or nothing left: the seat stays taken, unused */
    nn_par_fn fn = s->fn;    /* stable: published before the share this claim read */
    void *ctx = s->ctx;
    int64_t base = s->base;
    do {
        fn(ctx, base + t, seat);
        finish(s, seat, shares);
    } while ((t = claim(s, seat, shares, gen)) >= 0);
    return true;
}

static bool scan(int me) {
    bool found = false;
    uint64_t m = atomic_load_explicit(&active, memory_order_acquire);
    while (m) {
        int i = __builtin_ctzll(m);
        m &= m - 1;
        found |= join(&slots[i], me);
    }
    return found;
}

static void *worker_main(void *arg) {
    int me = (int)(intptr_t)arg;
    in_task = 1; /* a task that calls nn_par_for runs it here */
    for (;;) {
        uint32_t seen = atomic_load(&epoch);
        if (scan(me)) continue;
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
        intptr_t me = atomic_load(&n_workers) + 1; /* seat 0 is the caller's */
        int rc = pthread_create(&t, &attr, worker_main, (void *)me);
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

static uint32_t done_count(slot *s, int shares) {
    uint32_t d = atomic_load_explicit(&s->done_x, memory_order_acquire);
    for (int r = 1; r < shares; r++)
        d += atomic_load_explicit(&s->seat[r].done, memory_order_acquire);
    return d;
}

/* One round on slot s: tasks [base, base + n) of fn, n <= ROUND_TASKS. */
static void run_round(slot *s, int threads, int64_t base, int64_t n, nn_par_fn fn, void *ctx) {
    int shares = share_seats(threads);
    uint32_t gen = (h_gen(atomic_load_explicit(&s->head, memory_order_relaxed)) + 1) & GEN_MASK;
    s->fn = fn;
    s->ctx = ctx;
    s->base = base;
    atomic_store_explicit(&s->done_x, 0, memory_order_relaxed);
    atomic_store_explicit(&s->waiting, 0, memory_order_relaxed);
    atomic_store_explicit(&s->taken, (uint64_t)gen << 32 | 1, memory_order_relaxed); /* seat 0: the caller */
    for (int r = 0; r < shares; r++) {
        int64_t lo, hi;
        nn_par_range(n, shares, r, &lo, &hi); /* nn_par_share's */
        atomic_store_explicit(&s->seat[r].done, 0, memory_order_relaxed);
        atomic_store_explicit(&s->seat[r].range, r_pack(gen, lo, hi), memory_order_release);
    }
    atomic_store_explicit(&s->head, (uint64_t)gen << 32 | (uint64_t)threads << 16 | (uint64_t)shares,
                          memory_order_release);
    uint64_t bit = (uint64_t)1 << (s - slots);
    atomic_fetch_or(&active, bit);
    atomic_fetch_add(&epoch, 1);
    if (atomic_load(&sleepers) > 0) futex_wake(&epoch, threads - 1);

    uint32_t mine = 0;
    for (int64_t t; (t = claim(s, 0, shares, gen)) >= 0; mine++)
        fn(ctx, base + t, 0);
    atomic_fetch_and(&active, ~bit);
    uint32_t left = (uint32_t)n - mine;
    for (int spins = 0; done_count(s, shares) != left;) {
        if (++spins < DONE_SPINS) {
            cpu_relax();
            continue;
        }
        uint32_t w = atomic_load(&s->wake);
        atomic_store(&s->waiting, 1);
        if (done_count(s, shares) != left) futex_wait(&s->wake, w);
    }
}

void nn_par_for(int threads, int64_t ntasks, nn_par_fn fn, void *ctx) {
    if (ntasks <= 0) return;
    if (threads > NN_PAR_MAX_THREADS) threads = NN_PAR_MAX_THREADS;
    if (threads > ntasks) threads = (int)ntasks;
    if (threads <= 1 || in_task) {
        run_serial(ntasks, fn, ctx);
        return;
    }
    if (!nn_par_uses_pool()) {
        run_omp(threads, ntasks, fn, ctx);
        return;
    }
    if (atomic_load_explicit(&n_workers, memory_order_relaxed) < threads - 1) grow(threads - 1);
    slot *s = take_slot();
    if (!s) { /* more concurrent calls than slots: this one runs alone */
        run_serial(ntasks, fn, ctx);
        return;
    }
    in_task = 1;
    for (int64_t base = 0; base < ntasks; base += ROUND_TASKS)
        run_round(s, threads, base, ntasks - base < ROUND_TASKS ? ntasks - base : ROUND_TASKS, fn, ctx);
    in_task = 0;
    atomic_store_explicit(&s->busy, 0, memory_order_release);
}
