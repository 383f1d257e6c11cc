/* The portable kernel library: plain C++ compiled twice, to LLVM bitcode
 * (embedded in libkiln, linked into every specialization built with
 * portable kernels, inlined and specialised on constant shapes) and to host
 * code (scratch sizes at lowering time, unit tests).
 *
 * Contract, for every kernel:
 * - float32 (the quantized models' kernels: the types they name), dense
 *   row-major tensors unless a stride says otherwise;
 * - no allocation, no threads, no libstdc++: what a kernel needs beyond its
 *   operands is `scratch`, of at least the bytes its *_scratch_bytes function
 *   returns for the same shape (64-byte aligned; a pure function of the
 *   shape, never of the thread count or target);
 * - parallel work goes through `threads` (NULL, or a NULL parallel_for, is
 *   serial); the result does not depend on how the host splits the range;
 * - the only external symbols the bitcode may reference are memcpy, memset,
 *   memmove and libm functions.
 *
 * Changing a signature or a layout here changes compiled objects: bump the
 * cpu backend's version with it. */
#ifndef KILN_PORTABLE_KERNELS_H
#define KILN_PORTABLE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs fn(task, begin, end) over disjoint ranges that cover [0, n), possibly
 * at the same time on several threads, and returns when all are done. */
typedef void (*kiln_pk_task_fn)(void* task, int64_t begin, int64_t end);
typedef void (*kiln_pk_parallel_for_fn)(void* host, int64_t n, kiln_pk_task_fn fn, void* task);
typedef struct kiln_pk_threads {
  kiln_pk_parallel_for_fn parallel_for; /* NULL: serial */
  void* host;                           /* passed back to parallel_for */
} kiln_pk_threads;

/* Activation applied last in an epilogue (after bias and residual). */
enum {
  KILN_PK_ACT_NONE = 0,
  KILN_PK_ACT_RELU = 1,
  KILN_PK_ACT_CLIP = 2,       /* min(max(x, alpha), beta) */
  KILN_PK_ACT_LEAKY_RELU = 3, /* x >= 0 ? x : alpha * x */
  KILN_PK_ACT_SIGMOID = 4,
  KILN_PK_ACT_TANH = 5,
  KILN_PK_ACT_HARD_SIGMOID = 6, /* max(0, min(1, alpha * x + beta)) */
  KILN_PK_ACT_HARD_SWISH = 7,   /* x * max(0, min(1, x / 6 + 1/2)) */
  KILN_PK_ACT_SILU = 8,         /* x * sigmoid(x) */
  KILN_PK_ACT_GELU_ERF = 9      /* 0.5 x (1 + erf(x / sqrt 2)) */
};

/* Batched matrix product with an epilogue:
 *   C[b](m, n) = act(alpha * sum_k A[b](m, k) B[b](k, n)
 *                    + beta * bias(m * bias_rs + n * bias_cs)
 *                    + (residual ? residual[b * stride_c + m * ldc + n] : 0))
 * A[b](m, k) is a[b * stride_a + m * lda + k], or a[b * stride_a + k * lda + m]
 * when trans_a; B likewise with trans_b. A batch stride of 0 broadcasts the
 * operand over the batch. bias may be NULL (then beta is ignored); a bias
 * stride of 0 broadcasts it along that dimension. The residual has C's
 * layout (it may alias C). */
void kiln_pk_gemm(const kiln_pk_threads* threads, int64_t batch, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  int64_t stride_a, int32_t trans_a, const float* b, int64_t ldb, int64_t stride_b, int32_t trans_b, float* c,
                  int64_t ldc, int64_t stride_c, float alpha, const float* bias, int64_t bias_rs, int64_t bias_cs, float beta,
                  const float* residual, int32_t act, float act_alpha, float act_beta, void* scratch);
size_t kiln_pk_gemm_scratch_bytes(int64_t batch, int64_t m, int64_t n, int64_t k);

/* How a convolution spreads its outputs over the threads. SPLIT_CHANNELS:
 * each task a range of output channels, for a consumer that reads whole
 * channels (a depthwise convolution), so that what a thread wrote is in its
 * cache when it reads it (with a host that gives a thread the same share of
 * every loop). SPLIT_ANY: the kernel's choice. */
enum { KILN_PK_SPLIT_ANY = 0, KILN_PK_SPLIT_CHANNELS = 1 };

/* 2-D convolution (ONNX Conv on NCHW; a 1-D conv is h = kh = 1), grouped and
 * depthwise included. x: [n, c, h, w]; w: [k, c / group, kh, kw];
 * bias: [k] or NULL; residual: NULL or y's shape (may alias y);
 * y: [n, k, oh, ow] = act(conv + bias + residual). pad_t / pad_l are the
 * leading pads; trailing pads follow from oh / ow. `split`, a
 * KILN_PK_SPLIT_* hint, changes no result. */
void kiln_pk_conv2d(const kiln_pk_threads* threads, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t oh, int64_t ow,
                    int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_t, int64_t pad_l, int64_t dilation_h,
                    int64_t dilation_w, int64_t group, const float* x, const float* weights, const float* bias,
                    const float* residual, float* y, int32_t act, float act_alpha, float act_beta, int32_t split, void* scratch);
size_t kiln_pk_conv2d_scratch_bytes(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t oh, int64_t ow, int64_t kh,
                                    int64_t kw, int64_t stride_h, int64_t stride_w, int64_t dilation_h, int64_t dilation_w,
                                    int64_t group);

/* Pooling over `planes` independent h x w planes (n * c for NCHW); window
 * positions outside the input are skipped (max) or, for average, counted
 * only when count_include_pad. */
void kiln_pk_max_pool2d(const kiln_pk_threads* threads, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t kh,
                        int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_t, int64_t pad_l, int64_t dilation_h,
                        int64_t dilation_w, const float* x, float* y);
void kiln_pk_avg_pool2d(const kiln_pk_threads* threads, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t kh,
                        int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_t, int64_t pad_l, int32_t count_include_pad,
                        const float* x, float* y);
/* y[p] = mean (or max) of x[p * size .. p * size + size). */
void kiln_pk_global_pool(const kiln_pk_threads* threads, int64_t planes, int64_t size, int32_t is_max, const float* x, float* y);

/* Quantized models. Element types of 8-bit and integer operands: */
enum { KILN_PK_UINT8 = 0, KILN_PK_INT8 = 1, KILN_PK_INT32 = 2, KILN_PK_FLOAT32 = 3 /* a product's output only */ };
/* A zero point is a pointer to one value of its operand's type (per
 * channel: one per channel), or NULL for 0. Sums of products are exact in
 * int32. A requantized output is saturate(round_half_even(v) + y_zero) in
 * y_type (UINT8 or INT8), v the sum (plus bias) times its scale, in float;
 * y_type INT32 keeps the sums (no scales then). */

/* kiln_pk_conv2d's convolution of 8-bit x (x_type) less its zero point by
 * int8 weights symmetric about 0 ([k, c / group, kh, kw]), plus an int32
 * bias ([k] or NULL); scales: 1 or k floats (scale_count), the input's
 * scale times the weights' over the output's. */
void kiln_pk_qconv2d(const kiln_pk_threads* threads, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t oh,
                     int64_t ow, int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_t, int64_t pad_l,
                     int64_t dilation_h, int64_t dilation_w, int64_t group, int32_t x_type, const void* x, const void* x_zero,
                     const int8_t* weights, const int32_t* bias, const float* scales, int64_t scale_count, int32_t y_type,
                     const void* y_zero, void* y, void* scratch);
size_t kiln_pk_qconv2d_scratch_bytes(int64_t c, int64_t k, int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t group);

/* y[m x n] from (a[m x k] (a_type) - a_zero) times int8 b[k x n] (zero
 * point 0); scales: 1 or n floats (one per column). */
void kiln_pk_qmatmul(const kiln_pk_threads* threads, int64_t m, int64_t n, int64_t k, int32_t a_type, const void* a,
                     const void* a_zero, const int8_t* b, const float* scales, int64_t scale_count, int32_t y_type,
                     const void* y_zero, void* y, void* scratch);
size_t kiln_pk_qmatmul_scratch_bytes(int64_t m, int64_t n, int64_t k);
/* com.microsoft QGemm: kiln_pk_qmatmul with A stored [k x m] where trans_a,
 * an int32 bias(i, j) = bias[i * bias_rs + j * bias_cs] (or NULL) added to
 * the sums before they are scaled, and y_type FLOAT32 too (the scaled sums
 * as floats, no zero point). Scratch: kiln_pk_qmatmul_scratch_bytes. */
void kiln_pk_qgemm(const kiln_pk_threads* threads, int64_t m, int64_t n, int64_t k, int32_t trans_a, int32_t a_type,
                   const void* a, const void* a_zero, const int8_t* b, const int32_t* bias, int64_t bias_rs, int64_t bias_cs,
                   const float* scales, int64_t scale_count, int32_t y_type, const void* y_zero, void* y, void* scratch);

/* QuantizeLinear of x viewed as [outer, channels, inner]: y =
 * saturate(round_half_even(x / scale[c]) + zero[c]) (a NaN gives the
 * lowest value); DequantizeLinear: y = (x - zero[c]) * scale[c], x_type
 * UINT8, INT8 or INT32, scale NULL for 1 (a Cast to float). */
void kiln_pk_quantize(const kiln_pk_threads* threads, int64_t outer, int64_t channels, int64_t inner, const float* x,
                      const float* scale, const void* zero, int32_t y_type, void* y);
void kiln_pk_dequantize(const kiln_pk_threads* threads, int64_t outer, int64_t channels, int64_t inner, int32_t x_type,
                        const void* x, const float* scale, const void* zero, float* y);
/* DynamicQuantizeLinear: uint8 y, its scale and zero point from the range
 * of x (widened to include 0). */
void kiln_pk_dynamic_quantize(const kiln_pk_threads* threads, int64_t count, const float* x, uint8_t* y, float* y_scale,
                              uint8_t* y_zero);
/* com.microsoft QLinearAdd:
 * saturate(round_half_even((a_scale (a - a_zero) + b_scale (b - b_zero)) / y_scale) + y_zero), in double,
 * y dense of `rank` dims (1 to KILN_PK_QADD_MAX_RANK), a and b read at
 * their element strides along them (0 where they broadcast). */
#define KILN_PK_QADD_MAX_RANK 6
void kiln_pk_qadd(const kiln_pk_threads* threads, int64_t rank, const int64_t* dims, const int64_t* a_strides,
                  const int64_t* b_strides, int32_t a_type, const void* a, float a_scale, const void* a_zero, int32_t b_type,
                  const void* b, float b_scale, const void* b_zero, float y_scale, int32_t y_type, const void* y_zero, void* y);
/* kiln_pk_max_pool2d of UINT8 or INT8 planes. */
void kiln_pk_max_pool2d_8bit(const kiln_pk_threads* threads, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                             int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_t, int64_t pad_l,
                             int64_t dilation_h, int64_t dilation_w, int32_t type, const void* x, void* y);

/* Reductions of x viewed as [outer, len, inner] over the middle axis, into
 * y: [outer, inner]. */
enum {
  KILN_PK_REDUCE_SUM = 0,
  KILN_PK_REDUCE_MEAN = 1,
  KILN_PK_REDUCE_MAX = 2,
  KILN_PK_REDUCE_MIN = 3,
  KILN_PK_REDUCE_PROD = 4,
  KILN_PK_REDUCE_SUM_SQUARE = 5,
  KILN_PK_REDUCE_L1 = 6,
  KILN_PK_REDUCE_L2 = 7,
  KILN_PK_REDUCE_LOG_SUM_EXP = 8
};
void kiln_pk_reduce(const kiln_pk_threads* threads, int64_t outer, int64_t len, int64_t inner, int32_t op, const float* x,
                    float* y);

/* Softmax (or LogSoftmax when is_log) of x viewed as [outer, len, inner]
 * along the middle axis; numerically stable (max subtracted). */
void kiln_pk_softmax(const kiln_pk_threads* threads, int64_t outer, int64_t len, int64_t inner, int32_t is_log, const float* x,
                     float* y);

/* Trilu of `matrices` matrices of rows x cols elements of elem_bytes each:
 * the upper triangle (upper: columns j >= i + k) or the lower one
 * (j <= i + k) of x, zeros elsewhere; k is *k, or 0 when k is NULL. */
void kiln_pk_trilu(const kiln_pk_threads* threads, int64_t matrices, int64_t rows, int64_t cols, int64_t elem_bytes,
                   int32_t upper, const int64_t* k, const void* x, void* y);

/* ArgMax (is_max) or ArgMin of x viewed as [outer, len, inner] along the
 * middle axis, into y: [outer, inner] int64 indices. Ties go to the first
 * index, or the last when select_last; a NaN wins over any number (the
 * first NaN), as numpy's. */
void kiln_pk_arg_extreme(const kiln_pk_threads* threads, int64_t outer, int64_t len, int64_t inner, int32_t is_max,
                         int32_t select_last, const float* x, int64_t* y);

/* Hardmax of x viewed as [outer, len, inner] along the middle axis: 1 at
 * the first largest value of each [outer, inner] position, 0 elsewhere. */
void kiln_pk_hardmax(const kiln_pk_threads* threads, int64_t outer, int64_t len, int64_t inner, const float* x, float* y);

/* NegativeLogLikelihoodLoss of log-probabilities logp [n, c, d] against
 * integer targets [n, d] (int32, or int64 when target_is_64), each class
 * weighted by weight[class] (1 when weight is NULL); a target equal to
 * ignore_index (if has_ignore) counts neither loss nor weight. With scores
 * (SoftmaxCrossEntropyLoss), logp is first written as their LogSoftmax over
 * c. out: the loss per [n, d] (KILN_PK_LOSS_NONE), its sum, or the sum over
 * the weights' sum (KILN_PK_LOSS_MEAN), summed in double. Returns 0, or 1 +
 * the position of the first target out of [0, c) (out is then unspecified). */
enum { KILN_PK_LOSS_NONE = 0, KILN_PK_LOSS_SUM = 1, KILN_PK_LOSS_MEAN = 2 };
int64_t kiln_pk_nll_loss(const kiln_pk_threads* threads, int64_t n, int64_t c, int64_t d, const float* scores, float* logp,
                         int32_t target_is_64, const void* target, const float* weight, int32_t has_ignore, int64_t ignore_index,
                         int32_t reduction, float* out);

/* Layer normalisation of each of `rows` rows of `cols` values:
 * y = (x - mean) / sqrt(var + epsilon) * scale + bias; scale and bias have
 * `cols` values, either may be NULL (1 and 0). Each row's mean and
 * 1 / sqrt(var + epsilon) go to `mean` and `inv_std_dev` (`rows` values),
 * unless NULL. */
void kiln_pk_layer_norm(const kiln_pk_threads* threads, int64_t rows, int64_t cols, float epsilon, const float* x,
                        const float* scale, const float* bias, float* y, float* mean, float* inv_std_dev);

/* Copies a strided view of any element size densely into dst:
 * dst[i0, ..., i(rank-1)] = src[offset + sum i_d * src_strides[d]], with
 * dims, strides and offset in elements (strides may be negative or 0).
 * rank <= 8. Transpose, Slice, Expand. */
void kiln_pk_strided_copy(const kiln_pk_threads* threads, int32_t rank, const int64_t* dims, const int64_t* src_strides,
                          int64_t offset, int64_t element_size, const void* src, void* dst);

/* rows x row_bytes from src (rows src_stride bytes apart) to dst (rows
 * dst_stride bytes apart): one input of a Concat, a plain copy (rows = 1). */
void kiln_pk_copy_rows(const kiln_pk_threads* threads, int64_t rows, int64_t row_bytes, const void* src, int64_t src_stride,
                       void* dst, int64_t dst_stride);

/* Elementwise comparison and logic with broadcasting: out[i] (one byte, 0
 * or 1) = a[i] op b[i] over `rank` (at most KILN_PK_COMPARE_MAX_RANK) dims,
 * a and b read with element strides per dim (0 where they broadcast). */
enum {
  KILN_PK_COMPARE_EQUAL = 0,
  KILN_PK_COMPARE_LESS = 1,
  KILN_PK_COMPARE_LESS_EQUAL = 2,
  KILN_PK_COMPARE_GREATER = 3,
  KILN_PK_COMPARE_GREATER_EQUAL = 4,
  KILN_PK_COMPARE_AND = 5, /* bool operands */
  KILN_PK_COMPARE_OR = 6,
  KILN_PK_COMPARE_XOR = 7
};
enum { KILN_PK_ELEMENT_F32 = 0, KILN_PK_ELEMENT_I64 = 1, KILN_PK_ELEMENT_I32 = 2, KILN_PK_ELEMENT_U8 = 3 };
#define KILN_PK_COMPARE_MAX_RANK 6
void kiln_pk_compare(const kiln_pk_threads* threads, int32_t op, int32_t element, int64_t rank, const int64_t* dims,
                     const int64_t* a_strides, const int64_t* b_strides, const void* a, const void* b, uint8_t* out);

/* Gather along an axis: data viewed as [outer, axis_dim, inner_bytes],
 * indices (int32, or int64 when index_is_64) counted from the end when
 * negative; dst: [outer, num_indices, inner_bytes]. Returns 0, or 1 + the
 * position of the first index out of [-axis_dim, axis_dim) (dst is then
 * unspecified). */
int64_t kiln_pk_gather(const kiln_pk_threads* threads, int64_t outer, int64_t axis_dim, int64_t inner_bytes, int64_t num_indices,
                       int32_t index_is_64, const void* indices, const void* data, void* dst);

/* GatherElements: dst has the indices' `rank` (<= 8) dims; dst[i] = data at
 * i with its `axis` coordinate replaced by the index at i (counted from the
 * end when negative). data_strides: per dim, in elements of element_size
 * bytes. Returns 0, or 1 + the position of the first index out of
 * [-axis_dim, axis_dim) (dst is then unspecified). */
int64_t kiln_pk_gather_elements(const kiln_pk_threads* threads, int32_t rank, const int64_t* dims, const int64_t* data_strides,
                                int32_t axis, int64_t axis_dim, int64_t element_size, int32_t index_is_64, const void* indices,
                                const void* data, void* dst);

/* ONNX RNN, GRU and LSTM (cell KILN_PK_CELL_*), float32, over x [seq,
 * batch, input] (batch_major: [batch, seq, input]). w, r, b, p, initial_h,
 * initial_c, y, y_h, y_c as ONNX lays them out for that layout; b, p, the
 * initial states and sequence_lens (int32, or int64 when lens_int64) may be
 * NULL, and so may any output. `activations`: per direction, per function of
 * the cell (f; f, g; f, g, h), {KILN_PK_RNN_*, alpha's bits, beta's bits}.
 * A bidirectional layer (directions 2) runs its second direction backwards,
 * as `reverse` runs the only one. Returns 0, or 1 + the first batch row
 * whose sequence length is outside [0, seq] (nothing is written then). */
enum { KILN_PK_CELL_RNN = 0, KILN_PK_CELL_GRU = 1, KILN_PK_CELL_LSTM = 2 };
enum {
  KILN_PK_RNN_SIGMOID = 0,
  KILN_PK_RNN_TANH,
  KILN_PK_RNN_RELU,
  KILN_PK_RNN_AFFINE,
  KILN_PK_RNN_LEAKY_RELU,
  KILN_PK_RNN_THRESHOLDED_RELU,
  KILN_PK_RNN_SCALED_TANH,
  KILN_PK_RNN_HARD_SIGMOID,
  KILN_PK_RNN_ELU,
  KILN_PK_RNN_SOFTSIGN,
  KILN_PK_RNN_SOFTPLUS
};
int64_t kiln_pk_recurrent(const kiln_pk_threads* threads, int32_t cell, int64_t seq, int64_t batch, int64_t input, int64_t hidden,
                          int64_t directions, int32_t reverse, int32_t batch_major, int32_t linear_before_reset,
                          int32_t input_forget, float clip, const int64_t* activations, const float* x, const float* w,
                          const float* r, const float* b, const void* sequence_lens, int32_t lens_int64, const float* initial_h,
                          const float* initial_c, const float* p, float* y, float* y_h, float* y_c, void* scratch);
size_t kiln_pk_recurrent_scratch_bytes(int32_t cell, int64_t seq, int64_t batch, int64_t input, int64_t hidden,
                                       int64_t directions);

#ifdef __cplusplus
}
#endif

#endif /* KILN_PORTABLE_KERNELS_H */
