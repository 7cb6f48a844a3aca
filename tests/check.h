/* Assertions for the C tests, one style for all of them.
 *
 *   CHECK(cond, fmt, ...)                  counts a pass, or prints one FAIL line; returns cond
 *   CHECK_AT(line, cond, fmt, ...)         the same in a helper, with its caller's __LINE__
 *   CHECK_EQ_INT(what, expected, actual)   integers, both printed on failure
 *   CHECK_CLOSE(what, got, want, n, atol, rtol)
 *                                          float arrays: |got - want| <= atol + rtol * |want| everywhere
 *   CHECK_REL_L2(what, got, want, n, tol)  float arrays: ||got - want|| / ||want|| <= tol
 *   check_set_case(fmt, ...)               names what is under test in every later FAIL line
 *   check_failures()                       failures so far
 *   return check_summary();                from main: prints "N passed, N failed", 0 when none failed
 *
 * A failure reads "FAIL [case] file:line: message"; messages say what was
 * expected and what came instead.  The counters are atomic and the case is
 * per thread, so checks may run on several threads (tests/concurrency.c). */
#ifndef NN_TEST_CHECK_H
#define NN_TEST_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

static atomic_int check_passed, check_failed;
static _Thread_local char check_case_name[256];

__attribute__((format(printf, 1, 2))) static inline void check_set_case(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(check_case_name, sizeof check_case_name, fmt, ap);
    va_end(ap);
}

static inline bool check_pass(void) {
    atomic_fetch_add(&check_passed, 1);
    return true;
}

/* One printf per failure, so that lines from several threads do not
 * interleave. */
__attribute__((format(printf, 3, 4))) static inline bool check_fail_at(const char *file, int line, const char *fmt,
                                                                       ...) {
    atomic_fetch_add(&check_failed, 1);
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("FAIL %s%s%s%s:%d: %s\n", check_case_name[0] ? "[" : "", check_case_name, check_case_name[0] ? "] " : "",
           file, line, msg);
    fflush(stdout);
    return false;
}

/* The condition is evaluated first and the message's arguments only on
 * failure: they may read what the condition computed. */
#define CHECK(cond, ...) ((cond) ? check_pass() : check_fail_at(__FILE__, __LINE__, __VA_ARGS__))
/* The same from a helper, reporting its caller's line */
#define CHECK_AT(line, cond, ...) ((cond) ? check_pass() : check_fail_at(__FILE__, line, __VA_ARGS__))

static inline bool check_eq_int_at(const char *what, long long expected, long long actual, const char *file, int line) {
    return expected == actual ? check_pass()
                              : check_fail_at(file, line, "%s: expected %lld, got %lld", what, expected, actual);
}
#define CHECK_EQ_INT(what, expected, actual)                                                                           \
    check_eq_int_at(what, (long long)(expected), (long long)(actual), __FILE__, __LINE__)

/* NaN matches only NaN and an infinity only itself; the message gives the
 * number of elements off and the worst of them. */
static inline bool check_close_at(const char *what, const float *got, const float *want, int64_t n, double atol,
                                  double rtol, const char *file, int line) {
    int64_t worst = -1, bad = 0;
    double worst_excess = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double excess = fabs((double)got[i] - want[i]) - (atol + rtol * fabs((double)want[i]));
        bool both_nan = isnan(got[i]) && isnan(want[i]), same_inf = isinf(want[i]) && got[i] == want[i];
        if (both_nan || same_inf || excess <= 0.0) continue;
        bad++;
        if (worst < 0 || excess > worst_excess || isnan(excess)) {
            worst = i;
            worst_excess = excess;
        }
    }
    if (bad == 0) return check_pass();
    return check_fail_at(
        file, line, "%s: %lld of %lld elements off (atol %g, rtol %g); the worst, element %lld, is %.9g, expected %.9g",
        what, (long long)bad, (long long)n, atol, rtol, (long long)worst, worst >= 0 ? got[worst] : 0.0,
        worst >= 0 ? want[worst] : 0.0);
}
#define CHECK_CLOSE(what, got, want, n, atol, rtol) check_close_at(what, got, want, n, atol, rtol, __FILE__, __LINE__)

/* Relative to ||want|| (absolute when want is all zeros); a NaN fails. */
static inline bool check_rel_l2_at(const char *what, const float *got, const float *want, int64_t n, double tol,
                                   const char *file, int line) {
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        diff += d * d;
        norm += (double)want[i] * want[i];
    }
    double err = norm > 0 ? sqrt(diff / norm) : sqrt(diff);
    if (err <= tol) return check_pass();
    return check_fail_at(file, line, "%s: relative L2 error %.3g, expected <= %g", what, err, tol);
}
#define CHECK_REL_L2(what, got, want, n, tol) check_rel_l2_at(what, got, want, n, tol, __FILE__, __LINE__)

/* Failures so far, for a test's own progress lines */
static inline int check_failures(void) { return atomic_load(&check_failed); }

/* The closing line; a test that checked nothing fails too. */
static inline int check_summary(void) {
    int passed = atomic_load(&check_passed), failed = atomic_load(&check_failed);
    if (passed + failed == 0) {
        printf("FAIL: no checks ran\n");
        failed = 1;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif
