/* Which instruction set the CPU kernels use: chosen once, read everywhere.
 *
 * Every kernel family (GEMM tiles, depthwise and direct convs, pooling,
 * Winograd) asks nn_isa_active() instead of probing the processor itself, so
 * one switch moves all of them together: the tests run each family that this
 * CPU can execute, and the plan cache keys packed weights by the name. */
#ifndef NN_ISA_H
#define NN_ISA_H

#include <stdbool.h>

/* Ordered: a higher value needs everything a lower one does. */
typedef enum nn_isa {
    NN_ISA_SCALAR, /* plain C: any processor, any compiler target */
    NN_ISA_AVX2,   /* x86-64 with AVX2 and FMA */
    NN_ISA_AVX512, /* x86-64 with AVX-512 F and DQ */
    NN_ISA_COUNT
} nn_isa;

/* The x86 kernels are compiled only for an x86-64 target; elsewhere the
 * portable ones are the only family. */
#if defined(__x86_64__) || defined(_M_X64)
#define NN_HAVE_X86 1
#else
#define NN_HAVE_X86 0
#endif

/* The ISA in use.  The first call picks the best this CPU runs, or the one
 * the environment variable NN_ISA names (avx512, avx2 or scalar; one this
 * CPU lacks gives the best it has below it), and every later call returns
 * the same until nn_isa_select. */
nn_isa nn_isa_active(void);
/* The variant of a loop compiled once per ISA (the library's baseline is
 * SSE2: only code with a target attribute gets wider vectors) that the
 * active ISA runs: NAME##_avx512, NAME##_avx2 (x86 only) or NAME##_portable. */
#if NN_HAVE_X86
#define NN_ISA_PICK(NAME)                                                                                              \
    (nn_isa_active() == NN_ISA_AVX512 ? NAME##_avx512 : nn_isa_active() == NN_ISA_AVX2 ? NAME##_avx2 : NAME##_portable)
#else
#define NN_ISA_PICK(NAME) (NAME##_portable)
#endif
/* "avx512", "avx2", "scalar". */
const char *nn_isa_name(nn_isa isa);
/* Whether this build and this CPU can run `isa`'s kernels. */
bool nn_isa_supported(nn_isa isa);
/* The ISA a name means; false for an unknown name. */
bool nn_isa_parse(const char *name, nn_isa *isa);
/* Instruction-set extensions that some kernels use within a level when
 * the processor has them (the int8 GEMM's dot products): asked of the
 * processor once, independent of the level chosen. */
typedef enum nn_isa_ext {
    NN_ISA_EXT_AVX512_VNNI, /* VPDPBUSD on 512-bit vectors (with AVX-512 F and BW) */
    NN_ISA_EXT_AVX512_BF16, /* VDPBF16PS, VCVTNEPS2BF16 on 512-bit vectors (with AVX-512 F and BW) */
    NN_ISA_EXT_AVX512_VBMI, /* VPERMI2B: 64 table lookups of bytes an instruction (with AVX-512 F and BW) */
    /* AMX-TILE and AMX-BF16 (TDPBF16PS on 16 x 16 fp32 tiles), the OS's tile
     * state enabled and granted to this process (Linux: arch_prctl
     * ARCH_REQ_XCOMP_PERM, asked once); NN_AMX=0 in the environment hides it. */
    NN_ISA_EXT_AMX_BF16,
    NN_ISA_EXT_COUNT
} nn_isa_ext;
/* Whether this build and this CPU have `ext`. */
bool nn_isa_has(nn_isa_ext ext);
/* Whether kernels running at level `isa` may use `ext`: each extension above
 * widens AVX-512, so the level must be AVX-512 (and run here) and the CPU
 * must have the extension.  Ask with nn_isa_active() unless choosing for a
 * given level. */
bool nn_isa_ext_at(nn_isa isa, nn_isa_ext ext);
/* For tests and benchmarks: switch every kernel family to `isa` (false, and
 * nothing changes, when unsupported).  Not safe while kernels run. */
bool nn_isa_select(nn_isa isa);

#endif
