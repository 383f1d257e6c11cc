#include "backends/cpu/winograd_weights.hpp"

#include <cstring>

namespace kiln::cpu {
namespace {

// U = G g G^T turns a 3x3 kernel g into an alpha x alpha tile. oneDNN's f32
// kernels use F(2x2, 3x3) (alpha 4) and F(4x4, 3x3) (alpha 6) with its own
// choice of interpolation points and scaling; the input and output
// transforms inside its kernels assume exactly these G.
constexpr float kG2x3[4][3] = {{1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}};
constexpr float kG4x3[6][3] = {{256.f / 225, 0, 0},
                               {-2048.f / 2975, -256.f / 595, -32.f / 119},
                               {-2048.f / 2975, 256.f / 595, -32.f / 119},
                               {128.f / 1071, 64.f / 357, 32.f / 119},
                               {128.f / 1071, -64.f / 357, 32.f / 119},
                               {0, 0, 1}};

// One weight's transform: its shape, G, and where each run of oc_block
// output channels goes.
struct Plan {
  const float* oihw;
  float* out;
  const float* G;
  bool tile2;
  int64_t out_channels, in_channels, alpha, ocb, icb, oc2, ic2;

  // How far apart tile elements are: element (a, b) of a run is
  // (a * alpha + b) * tile_stride() after element (0, 0).
  int64_t tile_stride() const { return tile2 ? out_channels * in_channels : in_channels * oc2 * ocb; }
  // Where element (0, 0) of the run of oc_block output channels of block `ob`
  // for input channel `ic` is: oneDNN's aaOBiOo (and aaOio) and OBaaIBOIio.
  int64_t run_start(int64_t ic, int64_t ob) const {
    const int64_t i = ic % icb, outer = ob / oc2, inner = ob % oc2;
    if (tile2) return ((outer * (in_channels / icb) + ic / icb) * icb + i) * oc2 * ocb + inner * ocb;
    return outer * alpha * alpha * tile_stride() + (((ic / (icb * ic2) * oc2 + inner) * ic2 + ic / icb % ic2) * icb + i) * ocb;
  }
};

// oneDNN has these layouts only on AVX-512 CPUs, in 16-channel blocks,
// which this computes 16 lanes wide.
[[gnu::target("avx512f")]] void transform(const Plan& p) {
  constexpr int64_t ocb = 16;
  const int64_t alpha = p.alpha, stride = p.tile_stride();
  // Per (block, input channel): the kernels of the block's output channels
  // side by side, so that every loop below runs over those channels.
  float g[9 * ocb], half[3 * 6 * ocb], tile[ocb];
  for (int64_t ob = 0; ob < p.out_channels / ocb; ++ob)
    for (int64_t ic = 0; ic < p.in_channels; ++ic) {
      float* run = p.out + p.run_start(ic, ob);
      for (int64_t o = 0; o < ocb; ++o) {
        const float* k = p.oihw + ((ob * ocb + o) * p.in_channels + ic) * 9;
        for (int e = 0; e < 9; ++e) g[e * ocb + o] = k[e];
      }
      // half[kh][b] = sum over kw of g[kh][kw] G[b][kw]
      for (int64_t kh = 0; kh < 3; ++kh)
        for (int64_t b = 0; b < alpha; ++b) {
          float* h = &half[(kh * alpha + b) * ocb];
          for (int64_t o = 0; o < ocb; ++o) h[o] = 0;
          for (int64_t kw = 0; kw < 3; ++kw) {
            const float c = p.G[b * 3 + kw];
            const float* src = &g[(kh * 3 + kw) * ocb];
            for (int64_t o = 0; o < ocb; ++o) h[o] += src[o] * c;
          }
        }
      // U[a][b] = sum over kh of G[a][kh] half[kh][b]
      for (int64_t a = 0; a < alpha; ++a)
        for (int64_t b = 0; b < alpha; ++b) {
          for (int64_t o = 0; o < ocb; ++o) tile[o] = 0;
          for (int64_t kh = 0; kh < 3; ++kh) {
            const float c = p.G[a * 3 + kh];
            const float* h = &half[(kh * alpha + b) * ocb];
            for (int64_t o = 0; o < ocb; ++o) tile[o] += c * h[o];
          }
          std::memcpy(run + (a * alpha + b) * stride, tile, size_t(ocb) * sizeof(float));
        }
    }
}

}  // namespace

bool winograd_weights(const float* oihw, int64_t out_channels, int64_t in_channels, const dnnl::memory& dst) {
  const dnnl::memory::desc desc = dst.get_desc();
  const dnnl_memory_desc_t& md = desc.data;
  if (md.format_kind != dnnl_format_kind_wino || md.data_type != dnnl_f32) return false;
  const dnnl_wino_desc_t& w = md.format_desc.wino_desc;
  // aaOio is aaOBiOo with blocks of one output block.
  const bool aaOio = w.wino_format == dnnl_wino_wei_aaOio;
  const bool tile2 = aaOio || w.wino_format == dnnl_wino_wei_aaOBiOo, tile4 = w.wino_format == dnnl_wino_wei_OBaaIBOIio;
  const Plan p{oihw,
               static_cast<float*>(dst.get_data_handle()),
               tile2 ? &kG2x3[0][0] : &kG4x3[0][0],
               tile2,
               out_channels,
               in_channels,
               w.alpha,
               w.oc_block,
               w.ic_block,
               aaOio ? 1 : w.oc2_block,
               tile4 ? w.ic2_block : 1};
  // Padded channels, and any layout not described here, are left to oneDNN.
  if (!(tile2 || tile4) || w.r != 3 || p.alpha != (tile2 ? 4 : 6) || w.oc != out_channels || w.ic != in_channels || p.ocb != 16 ||
      p.icb <= 0 || p.oc2 <= 0 || p.ic2 <= 0 || out_channels % (p.ocb * p.oc2) != 0 || in_channels % (p.icb * p.ic2) != 0 ||
      desc.get_size() != size_t(p.alpha * p.alpha * out_channels * in_channels) * sizeof(float) ||
      !__builtin_cpu_supports("avx512f"))
    return false;
  transform(p);
  return true;
}

}  // namespace kiln::cpu
