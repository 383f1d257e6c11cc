// Target description read by the portable kernels. Whoever links the library
// defines the two constants: the code generator as constants in the module
// (so that after inlining only the variant for the real target remains),
// host_config.cpp for the host build.
#ifndef KILN_PORTABLE_CONFIG_HPP
#define KILN_PORTABLE_CONFIG_HPP

#include <stdint.h>

extern "C" const int32_t kiln_pk_vector_bytes;      // widest vector register: 16 (SSE2, NEON), 32 (AVX2), 64 (AVX-512)
extern "C" const int32_t kiln_pk_vector_registers;  // 16 (SSE/AVX2), 32 (AVX-512, NEON)

namespace kiln::pk {

// Passed through the internal entry points so that tests can run every
// micro-kernel variant in one host binary; the public kiln_pk_* functions
// pass the two constants. By value, never by reference: interprocedural
// constant propagation then carries the constants into every callee of the
// linked module, and the variants not taken fold away.
struct Config {
  int32_t vector_bytes;
  int32_t vector_registers;
};

inline Config target_config() { return Config{kiln_pk_vector_bytes, kiln_pk_vector_registers}; }

}  // namespace kiln::pk

#endif
