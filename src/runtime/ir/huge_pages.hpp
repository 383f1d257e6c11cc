#pragma once
// Large buffers (arenas, weights, big tensors) in transparent huge pages.
//
// On the 2-vCPU KVM guests we measure on, first touching fresh memory costs
// about 1.5 us per 4 KiB page: 55 ms for 100 MB, 2.7 ms for a 6 MB arena.
// In 2 MiB pages the same memory costs 16 ms and 0.5 ms. Debian's default
// THP mode is "madvise", so a buffer only gets them when asked.
#include <cstddef>

namespace kiln::ir {

inline constexpr size_t kHugePageBytes = size_t(1) << 21;

// The alignment to allocate `bytes` with: 64 (every vector width) below one
// huge page, a huge page from there on, so that all of the buffer but its
// tail can be backed by huge pages.
size_t buffer_alignment(size_t bytes);

// Asks for huge pages over the whole huge pages inside [p, p + bytes), not
// past its end: a partly used huge page would cost up to 2 MiB of memory
// the buffer does not need. Best effort: nothing happens where the kernel
// has no THP or refuses.
void advise_huge_pages(void* p, size_t bytes);

// Memory for `bytes` (at least one byte), aligned and advised as above, not
// cleared; free it with std::free. Null when there is no memory. Its size is
// rounded up to whole huge pages, so a tail that fills more than half of one
// is advised too: mobilenet_v2's 5.75 MiB arena took 450 faults of 4 KiB
// pages in its first run (0.7 ms here) for the last 1.75 MiB.
void* allocate_buffer(size_t bytes);

}  // namespace kiln::ir
