/* The AVX-512 VNNI tile of the int8 GEMM (qgemm_kernel.h), compiled for
 * that extension with a target attribute; a non-x86 target compiles none
 * of this.  VPDPBUSD, not VPDPBUSDS: the saturating form would clamp a sum
 * that the portable kernel wraps, and the zero-point correction after the
 * kernel relies on arithmetic modulo 2^32. */
#include "qgemm_kernel.h"

#if NN_HAVE_X86
#include <immintrin.h>
#include <string.h>

__attribute__((target("avx512f,avx512bw,avx512vnni"))) void nn_qg_tile_vnni512(const uint8_t *a, const int8_t *b,
                                                                                int64_t groups, int32_t *acc) {
    __m512i c[QG_MR][2];
    for (int i = 0; i < QG_MR; i++)
        c[i][0] = c[i][1] = _mm512_setzero_si512();
    for (int64_t q = 0; q < groups; q++, a += QG_MR * 4, b += QG_NR * 4) {
        __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 64);
        for (int i = 0; i < QG_MR; i++) {
            int32_t w;
            memcpy(&w, a + 4 * i, 4);
            __m512i ai = _mm512_set1_epi32(w);
            c[i][0] = _mm512_dpbusd_epi32(c[i][0], ai, b0);
            c[i][1] = _mm512_dpbusd_epi32(c[i][1], ai, b1);
        }
    }
    for (int i = 0; i < QG_MR; i++) {
        _mm512_storeu_si512(acc + i * QG_NR, c[i][0]);
        _mm512_storeu_si512(acc + i * QG_NR + 16, c[i][1]);
    }
}
#endif
