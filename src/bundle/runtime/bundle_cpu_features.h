/* The CPU features a bundle's create checks before any code compiled for its
 * target runs: the instruction-set extensions LLVM's code generator may use
 * on its own, from plain code. The freezer records those of them its target
 * has (by LLVM's feature name); bundle_runtime.c reads the CPU and names the
 * ones it lacks. Extensions that only intrinsics reach (AES, SHA, CRC32,
 * PREFETCHW, SSE4A, AMX, ...) are left out: the portable kernels use no
 * intrinsics, and listing them would refuse CPUs that run the code well (an
 * AMD-built bundle on an Intel CPU, for SSE4A). Not checked either: AVX10 and
 * APX on x86-64 (no CPU LLVM 19 targets by name has them); on AArch64,
 * LSE2 (no instructions of its own: 128-bit loads become atomic, which the
 * bundles do not need), SME (only streaming functions use it; the bundles
 * have none) and the base architectures beyond v8.0 (Linux reports no HWCAP
 * for them).
 *
 * X(name, word, mask, os_state): the feature is there when every bit of
 * `mask` is set in `word`, and (x86-64) every bit of `os_state` in XCR0,
 * i.e. the OS saves the registers it uses. */
#ifndef KILN_BUNDLE_CPU_FEATURES_H
#define KILN_BUNDLE_CPU_FEATURES_H

/* x86-64 words: CPUID leaf 1 ECX, leaf 7 sub-leaf 0 EBX/ECX/EDX, leaf 7
 * sub-leaf 1 EAX/EDX, leaf 0x80000001 ECX. */
#define KILN_CPU_X86_1_ECX 0
#define KILN_CPU_X86_7_EBX 1
#define KILN_CPU_X86_7_ECX 2
#define KILN_CPU_X86_7_EDX 3
#define KILN_CPU_X86_7_1_EAX 4
#define KILN_CPU_X86_7_1_EDX 5
#define KILN_CPU_X86_EXT_ECX 6
#define KILN_CPU_X86_WORDS 7
/* XCR0: SSE and AVX state; with AVX-512's opmask and upper ZMM state. */
#define KILN_CPU_XCR0_AVX 0x6u
#define KILN_CPU_XCR0_AVX512 0xe6u

#define KILN_BUNDLE_X86_FEATURES(X)                                        \
  X("sse3", KILN_CPU_X86_1_ECX, 1u << 0, 0)                                \
  X("ssse3", KILN_CPU_X86_1_ECX, 1u << 9, 0)                               \
  X("fma", KILN_CPU_X86_1_ECX, 1u << 12, KILN_CPU_XCR0_AVX)                \
  X("cx16", KILN_CPU_X86_1_ECX, 1u << 13, 0)                               \
  X("sse4.1", KILN_CPU_X86_1_ECX, 1u << 19, 0)                             \
  X("sse4.2", KILN_CPU_X86_1_ECX, 1u << 20, 0)                             \
  X("movbe", KILN_CPU_X86_1_ECX, 1u << 22, 0)                              \
  X("popcnt", KILN_CPU_X86_1_ECX, 1u << 23, 0)                             \
  X("avx", KILN_CPU_X86_1_ECX, 1u << 28, KILN_CPU_XCR0_AVX)                \
  X("f16c", KILN_CPU_X86_1_ECX, 1u << 29, KILN_CPU_XCR0_AVX)               \
  X("bmi", KILN_CPU_X86_7_EBX, 1u << 3, 0)                                 \
  X("avx2", KILN_CPU_X86_7_EBX, 1u << 5, KILN_CPU_XCR0_AVX)                \
  X("bmi2", KILN_CPU_X86_7_EBX, 1u << 8, 0)                                \
  X("avx512f", KILN_CPU_X86_7_EBX, 1u << 16, KILN_CPU_XCR0_AVX512)         \
  X("avx512dq", KILN_CPU_X86_7_EBX, 1u << 17, KILN_CPU_XCR0_AVX512)        \
  X("avx512ifma", KILN_CPU_X86_7_EBX, 1u << 21, KILN_CPU_XCR0_AVX512)      \
  X("avx512cd", KILN_CPU_X86_7_EBX, 1u << 28, KILN_CPU_XCR0_AVX512)        \
  X("avx512bw", KILN_CPU_X86_7_EBX, 1u << 30, KILN_CPU_XCR0_AVX512)        \
  X("avx512vl", KILN_CPU_X86_7_EBX, 1u << 31, KILN_CPU_XCR0_AVX512)        \
  X("avx512vbmi", KILN_CPU_X86_7_ECX, 1u << 1, KILN_CPU_XCR0_AVX512)       \
  X("avx512vbmi2", KILN_CPU_X86_7_ECX, 1u << 6, KILN_CPU_XCR0_AVX512)      \
  X("gfni", KILN_CPU_X86_7_ECX, 1u << 8, 0)                                \
  X("avx512vnni", KILN_CPU_X86_7_ECX, 1u << 11, KILN_CPU_XCR0_AVX512)      \
  X("avx512bitalg", KILN_CPU_X86_7_ECX, 1u << 12, KILN_CPU_XCR0_AVX512)    \
  X("avx512vpopcntdq", KILN_CPU_X86_7_ECX, 1u << 14, KILN_CPU_XCR0_AVX512) \
  X("avx512fp16", KILN_CPU_X86_7_EDX, 1u << 23, KILN_CPU_XCR0_AVX512)      \
  X("avxvnni", KILN_CPU_X86_7_1_EAX, 1u << 4, KILN_CPU_XCR0_AVX)           \
  X("avx512bf16", KILN_CPU_X86_7_1_EAX, 1u << 5, KILN_CPU_XCR0_AVX512)     \
  X("avxifma", KILN_CPU_X86_7_1_EAX, 1u << 23, KILN_CPU_XCR0_AVX)          \
  X("avxvnniint8", KILN_CPU_X86_7_1_EDX, 1u << 4, KILN_CPU_XCR0_AVX)       \
  X("avxneconvert", KILN_CPU_X86_7_1_EDX, 1u << 5, KILN_CPU_XCR0_AVX)      \
  X("avxvnniint16", KILN_CPU_X86_7_1_EDX, 1u << 10, KILN_CPU_XCR0_AVX)     \
  X("sahf", KILN_CPU_X86_EXT_ECX, 1u << 0, 0)                              \
  X("lzcnt", KILN_CPU_X86_EXT_ECX, 1u << 5, 0)                             \
  X("xop", KILN_CPU_X86_EXT_ECX, 1u << 11, KILN_CPU_XCR0_AVX)              \
  X("fma4", KILN_CPU_X86_EXT_ECX, 1u << 16, KILN_CPU_XCR0_AVX)             \
  X("tbm", KILN_CPU_X86_EXT_ECX, 1u << 21, 0)

/* AArch64 words: getauxval(AT_HWCAP), getauxval(AT_HWCAP2); the bits are
 * Linux's HWCAP_* and HWCAP2_* (arch/arm64/include/uapi/asm/hwcap.h),
 * spelled out because glibc 2.36 lacks the newer ones. */
#define KILN_CPU_ARM_HWCAP 0
#define KILN_CPU_ARM_HWCAP2 1
#define KILN_CPU_ARM_WORDS 2

#define KILN_BUNDLE_AARCH64_FEATURES(X)                                 \
  X("fp-armv8", KILN_CPU_ARM_HWCAP, 1ull << 0, 0)   /* FP */            \
  X("neon", KILN_CPU_ARM_HWCAP, 1ull << 1, 0)       /* ASIMD */         \
  X("lse", KILN_CPU_ARM_HWCAP, 1ull << 8, 0)        /* ATOMICS */       \
  X("fullfp16", KILN_CPU_ARM_HWCAP, 3ull << 9, 0)   /* FPHP, ASIMDHP */ \
  X("rdm", KILN_CPU_ARM_HWCAP, 1ull << 12, 0)       /* ASIMDRDM */      \
  X("complxnum", KILN_CPU_ARM_HWCAP, 1ull << 14, 0) /* FCMA */          \
  X("rcpc", KILN_CPU_ARM_HWCAP, 1ull << 15, 0)      /* LRCPC */         \
  X("dotprod", KILN_CPU_ARM_HWCAP, 1ull << 20, 0)   /* ASIMDDP */       \
  X("sve", KILN_CPU_ARM_HWCAP, 1ull << 22, 0)       /* SVE */           \
  X("fp16fml", KILN_CPU_ARM_HWCAP, 1ull << 23, 0)   /* ASIMDFHM */      \
  X("rcpc-immo", KILN_CPU_ARM_HWCAP, 1ull << 26, 0) /* ILRCPC */        \
  X("sve2", KILN_CPU_ARM_HWCAP2, 1ull << 1, 0)      /* SVE2 */          \
  X("fptoint", KILN_CPU_ARM_HWCAP2, 1ull << 8, 0)   /* FRINT */         \
  X("f32mm", KILN_CPU_ARM_HWCAP2, 1ull << 10, 0)    /* SVEF32MM */      \
  X("f64mm", KILN_CPU_ARM_HWCAP2, 1ull << 11, 0)    /* SVEF64MM */      \
  X("i8mm", KILN_CPU_ARM_HWCAP2, 1ull << 13, 0)     /* I8MM */          \
  X("bf16", KILN_CPU_ARM_HWCAP2, 1ull << 14, 0)     /* BF16 */          \
  X("cssc", KILN_CPU_ARM_HWCAP2, 1ull << 34, 0)     /* CSSC */          \
  X("mops", KILN_CPU_ARM_HWCAP2, 1ull << 43, 0)     /* MOPS */

#endif /* KILN_BUNDLE_CPU_FEATURES_H */
