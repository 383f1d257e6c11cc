#pragma once
// libkiln is built for baseline x86-64 (4-wide vectors, no FMA). A host
// kernel's vector code marked KILN_VECTOR_CLONES is also compiled for AVX2
// and AVX-512, and the loader picks the version the CPU runs (GCC's and
// clang's target_clones, an ELF ifunc). The same source in every version.
// Not under ThreadSanitizer: it instruments the ifunc resolver, which the
// loader runs before TSan is set up (a TSan build of libkiln died on load).
#if defined(__x86_64__) && defined(__ELF__) && !defined(__SANITIZE_THREAD__)
#define KILN_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default")))
#else
#define KILN_VECTOR_CLONES
#endif
