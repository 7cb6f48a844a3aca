/* ISA selection (isa.h). */
#include "isa.h"

#include <stdlib.h>
#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif
#include <string.h>

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

bool nn_isa_has(nn_isa_ext ext) {
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
#endif
    default: return false;
    }
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
