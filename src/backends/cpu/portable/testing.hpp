// Internal entry points that take the target configuration as an argument
// instead of reading kiln_pk_vector_bytes / kiln_pk_vector_registers, so
// that one host test binary can run every micro-kernel variant. The public
// functions of kernels.h call these with target_config().
#ifndef KILN_PORTABLE_TESTING_HPP
#define KILN_PORTABLE_TESTING_HPP

#include "backends/cpu/portable/config.hpp"
#include "backends/cpu/portable/kernels.h"

namespace kiln::pk {

void gemm_with_config(Config cfg, const kiln_pk_threads* threads, int64_t batch, int64_t m, int64_t n, int64_t k, const float* a,
                      int64_t lda, int64_t stride_a, int32_t trans_a, const float* b, int64_t ldb, int64_t stride_b,
                      int32_t trans_b, float* c, int64_t ldc, int64_t stride_c, float alpha, const float* bias, int64_t bias_rs,
                      int64_t bias_cs, float beta, const float* residual, int32_t act, float act_alpha, float act_beta,
                      void* scratch);

void conv2d_with_config(Config cfg, const kiln_pk_threads* threads, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                        int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_t,
                        int64_t pad_l, int64_t dilation_h, int64_t dilation_w, int64_t group, const float* x,
                        const float* weights, const float* bias, const float* residual, float* y, int32_t act, float act_alpha,
                        float act_beta, int32_t split, void* scratch);

void qconv2d_with_config(Config cfg, const kiln_pk_threads* threads, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                         int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_t,
                         int64_t pad_l, int64_t dilation_h, int64_t dilation_w, int64_t group, int32_t x_type, const void* x,
                         const void* x_zero, const int8_t* weights, const int32_t* bias, const float* scales, int64_t scale_count,
                         int32_t y_type, const void* y_zero, void* y, void* scratch);

void qmatmul_with_config(Config cfg, const kiln_pk_threads* threads, int64_t m, int64_t n, int64_t k, int32_t a_type,
                         const void* a, const void* a_zero, const int8_t* b, const float* scales, int64_t scale_count,
                         int32_t y_type, const void* y_zero, void* y, void* scratch);

}  // namespace kiln::pk

#endif
