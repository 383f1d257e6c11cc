// The host build's answer to config.hpp: what the compiler was told it may
// use. The bitcode never contains this file; the code generator defines the
// constants for its target instead.
#include "backends/cpu/portable/config.hpp"

#if defined(__AVX512F__)
extern "C" const int32_t kiln_pk_vector_bytes = 64;
extern "C" const int32_t kiln_pk_vector_registers = 32;
#elif defined(__AVX2__) || defined(__AVX__)
extern "C" const int32_t kiln_pk_vector_bytes = 32;
extern "C" const int32_t kiln_pk_vector_registers = 16;
#elif defined(__ARM_NEON) || defined(__aarch64__)
extern "C" const int32_t kiln_pk_vector_bytes = 16;
extern "C" const int32_t kiln_pk_vector_registers = 32;
#else
extern "C" const int32_t kiln_pk_vector_bytes = 16;
extern "C" const int32_t kiln_pk_vector_registers = 16;
#endif
