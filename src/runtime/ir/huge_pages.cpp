#include "runtime/ir/huge_pages.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include <sys/mman.h>

namespace kiln::ir {

size_t buffer_alignment(size_t bytes) { return bytes >= kHugePageBytes ? kHugePageBytes : 64; }

void advise_huge_pages(void* p, size_t bytes) {
  const uintptr_t begin = (uintptr_t(p) + kHugePageBytes - 1) & ~uintptr_t(kHugePageBytes - 1);
  const uintptr_t end = (uintptr_t(p) + bytes) & ~uintptr_t(kHugePageBytes - 1);
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

void* allocate_buffer(size_t bytes) {
  const size_t align = buffer_alignment(bytes);
  // aligned_alloc wants a multiple of the alignment, which is ours: a tail
  // that fills more than half a huge page gets a whole one.
  const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p) advise_huge_pages(p, rounded - bytes < kHugePageBytes / 2 ? rounded : bytes);
  return p;
}

}  // namespace kiln::ir
