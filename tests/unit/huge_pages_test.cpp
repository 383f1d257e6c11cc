// Large buffers ask the kernel for transparent huge pages, and only over
// whole huge pages inside them.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "runtime/ir/huge_pages.hpp"
#include "runtime/ir/tensor.hpp"

namespace {

using kiln::ir::kHugePageBytes;

// The VmFlags of the mapping that holds `p` ("" if none is found).
std::string vm_flags(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 && line.find(':') > line.find(' ')) {
      inside = at >= begin && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line.substr(8) + " ";
    }
  }
  return "";
}

bool advised(const void* p) { return vm_flags(p).find(" hg ") != std::string::npos; }

bool thp_configured() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  return std::getline(f, mode) && mode.find("[never]") == std::string::npos;
}

}  // namespace

TEST(HugePages, LargeBuffersAreAdvisedUpToTheirLastWholeHugePage) {
  if (!thp_configured()) GTEST_SKIP() << "this kernel offers no transparent huge pages";
  EXPECT_EQ(kiln::ir::buffer_alignment(kHugePageBytes - 1), 64u);
  EXPECT_EQ(kiln::ir::buffer_alignment(kHugePageBytes), kHugePageBytes);

  const size_t bytes = 2 * kHugePageBytes + kHugePageBytes / 2;
  std::unique_ptr<char, decltype(&std::free)> big(static_cast<char*>(kiln::ir::allocate_buffer(bytes)), &std::free);
  ASSERT_TRUE(big);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.get()) % kHugePageBytes, 0u);
  EXPECT_TRUE(advised(big.get())) << vm_flags(big.get());
  EXPECT_TRUE(advised(big.get() + 2 * kHugePageBytes - 1));
  // The tail is half a huge page: a huge page there would cost memory the
  // buffer does not use.
  EXPECT_FALSE(advised(big.get() + 2 * kHugePageBytes)) << vm_flags(big.get() + 2 * kHugePageBytes);
  // A tail that fills most of one gets the whole huge page.
  const size_t most = 2 * kHugePageBytes + kHugePageBytes * 3 / 4;
  std::unique_ptr<char, decltype(&std::free)> bigger(static_cast<char*>(kiln::ir::allocate_buffer(most)), &std::free);
  ASSERT_TRUE(bigger);
  EXPECT_TRUE(advised(bigger.get() + most - 1)) << vm_flags(bigger.get() + most - 1);

  std::unique_ptr<char, decltype(&std::free)> small(static_cast<char*>(kiln::ir::allocate_buffer(100)), &std::free);
  ASSERT_TRUE(small);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.get()) % 64, 0u);

  // Tensors come from TBB's allocator; a large one is advised the same way.
  kiln::ir::Tensor t(kiln::ir::DType::Float32, {int64_t(kHugePageBytes / 2)});  // 4 MiB
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % kHugePageBytes, 0u);
  EXPECT_TRUE(advised(t.raw()));
  EXPECT_TRUE(advised(static_cast<char*>(t.raw()) + t.nbytes() - 1));
}
