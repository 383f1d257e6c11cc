#pragma once
// Convolution weights transformed into oneDNN's Winograd domain. oneDNN 2.6's
// own reorder into its Winograd layouts takes 85-250 ms for one 512-channel
// 3x3 weight (resnet50's layer4): a compile would spend most of its time
// there. This one writes the same layouts from the same transform in a few
// milliseconds.
#include <dnnl.hpp>

namespace kiln::cpu {

// Writes the plain OIHW f32 weights of a 3x3 convolution (`oihw`, of
// `out_channels` x `in_channels` x 3 x 3) into `dst`, whose descriptor is in
// one of oneDNN's f32 Winograd layouts. False, with `dst` untouched, for a
// descriptor it does not know (another layout, padded channels, a CPU
// without AVX-512): the caller reorders with oneDNN then.
bool winograd_weights(const float* oihw, int64_t out_channels, int64_t in_channels, const dnnl::memory& dst);

}  // namespace kiln::cpu
