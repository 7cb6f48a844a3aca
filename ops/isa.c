/* ISA selection (isa.h). */
#include "isa.h"

#include <stdlib.h>
#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif
#include <string.h>
#if defined(__linux__) && (defined(__x86_64__) || defined(_M_X64))
#include <sys/syscall.h>
#include <unistd.h>
#endif

static const char *const names[NN_ISA_COUNT] = {
    [NN_ISA_SCALAR] = "scalar", [NN_ISA_AVX2] = "avx2", [NN_ISA_AVX512] = "avx512"};

static int active = -1; /* accessed atomically: the first callers may race to set it (to the same value) */

const char *nn_isa_name(nn_isa isa) { return (unsigned)isa < NN_ISA_COUNT ? names[isa] : "unknown"; }

bool nn_isa_supported(nn_isa isa) {
    switch (isa) {
    case NN_ISA_SCALAR: return true;
#if NN_HAVE_X86
    case NN_ISA_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case NN_ISA_AVX512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
#endif
    default: return false;
    }
}

#if NN_HAVE_X86
/* AMX: the processor's AMX-TILE and AMX-BF16 (CPUID leaf 7 subleaf 0, EDX
 * bits 24 and 22), the OS's tile state in XCR0 (bits 17 and 18), and, on
 * Linux, the process's permission to use it: tile data is 8 KiB of state
 * the kernel saves only for processes that ask (ARCH_REQ_XCOMP_PERM for
 * XFEATURE_XTILEDATA).  Asked once; the answer is kept. */
static bool amx_probe(void) {
    const char *env = getenv("NN_AMX");
    if (env && !strcmp(env, "0")) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx >> 24 & 1u) || !(edx >> 22 & 1u)) return false;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx >> 27 & 1u)) return false; /* OSXSAVE: xgetbv works */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return false;
#if defined(__linux__)
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
    return false; /* no way known here to ask the OS for the tile state */
#endif
}
#endif

static bool probe(nn_isa_ext ext) {
    switch (ext) {
#if NN_HAVE_X86
    case NN_ISA_EXT_AVX512_VNNI:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vnni");
    case NN_ISA_EXT_AVX512_VBMI:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vbmi");
    case NN_ISA_EXT_AVX512_BF16: {
        /* CPUID leaf 7 subleaf 1, EAX bit 5 (not every compiler's
         * __builtin_cpu_supports knows it); the OS's AVX-512 state comes with avx512f */
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax >> 5 & 1u);
    }
    case NN_ISA_EXT_AMX_BF16: return nn_isa_supported(NN_ISA_AVX512) && amx_probe();
#endif
    default: return false;
    }
}

/* Each answer asked once (CPUID exits to the hypervisor in a VM: microseconds,
 * and the kernels' choices ask per product): -1 unknown, else 0 or 1. */
static int known[NN_ISA_EXT_COUNT] = {-1, -1, -1, -1}; /* accessed atomically */
_Static_assert(NN_ISA_EXT_COUNT == 4, "one -1 per extension above");

bool nn_isa_has(nn_isa_ext ext) {
    if ((unsigned)ext >= NN_ISA_EXT_COUNT) return false;
    int k = __atomic_load_n(&known[ext], __ATOMIC_RELAXED);
    if (k < 0) {
        k = probe(ext);
        __atomic_store_n(&known[ext], k, __ATOMIC_RELAXED);
    }
    return k == 1;
}

bool nn_isa_ext_at(nn_isa isa, nn_isa_ext ext) {
    return isa >= NN_ISA_AVX512 && nn_isa_supported(NN_ISA_AVX512) && nn_isa_has(ext);
}

bool nn_isa_parse(const char *name, nn_isa *isa) {
    for (int i = 0; name && i < NN_ISA_COUNT; i++)
        if (!strcmp(name, names[i])) {
            *isa = (nn_isa)i;
            return true;
        }
    return false;
}

nn_isa nn_isa_active(void) {
    int k = __atomic_load_n(&active, __ATOMIC_RELAXED);
    if (k >= 0) return (nn_isa)k;
    nn_isa want = NN_ISA_COUNT - 1;
    const char *env = getenv("NN_ISA");
    if (env && *env) nn_isa_parse(env, &want); /* an unknown name leaves the best */
    while (want > NN_ISA_SCALAR && !nn_isa_supported(want))
        want--;
    __atomic_store_n(&active, (int)want, __ATOMIC_RELAXED);
    return want;
}

bool nn_isa_select(nn_isa isa) {
    if (!nn_isa_supported(isa)) return false;
    __atomic_store_n(&active, (int)isa, __ATOMIC_RELAXED);
    return true;
}
