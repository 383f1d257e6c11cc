// pthreadpool's API over the host's parallel_for: see thread_pool.hpp.
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <array>
#include <cstring>

// The functions defined below are exported (the plugin's other symbols are
// hidden): libXNNPACK binds to them.
#pragma GCC visibility push(default)
#include <pthreadpool.h>
#pragma GCC visibility pop

#include <xnnpack.h>

#include "thread_pool.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace {

// PTHREADPOOL_FLAG_DISABLE_DENORMALS, as pthreadpool does it: XNNPACK asks
// for it on every operation (denormals would slow its kernels down).
class Denormals {
 public:
  explicit Denormals(uint32_t flags) {
#if defined(__x86_64__) || defined(__i386__)
    if (flags & PTHREADPOOL_FLAG_DISABLE_DENORMALS) {
      saved_ = _mm_getcsr();
      _mm_setcsr(saved_ | 0x8040);  // flush to zero, denormals are zero
      set_ = true;
    }
#else
    (void)flags;  // elsewhere the kernels run with the thread's own mode
#endif
  }
  ~Denormals() {
#if defined(__x86_64__) || defined(__i386__)
    if (set_) _mm_setcsr(saved_);
#endif
  }
  Denormals(const Denormals&) = delete;
  Denormals& operator=(const Denormals&) = delete;

 private:
  unsigned saved_ = 0;
  bool set_ = false;
};

template <size_t D>
using Index = std::array<size_t, D>;

// Calls body(start, size) for every tile of a D-dimensional range, the
// tiles numbered row-major and handed out in pieces by the host.
template <size_t D, typename Body>
void loop(pthreadpool_t pool, uint32_t flags, Index<D> range, Index<D> tile, Body body) {
  Index<D> tiles;
  size_t total = 1;
  for (size_t i = 0; i < D; ++i) {
    if (range[i] == 0) return;
    tile[i] = std::max<size_t>(tile[i], 1);
    tiles[i] = (range[i] + tile[i] - 1) / tile[i];
    total *= tiles[i];
  }
  auto piece = [&](size_t begin, size_t end) {
    Denormals mode(flags);
    Index<D> at;
    for (size_t i = D, rest = begin; i-- > 0; rest /= tiles[i]) at[i] = rest % tiles[i];
    for (size_t t = begin; t < end; ++t) {
      Index<D> start, size;
      for (size_t i = 0; i < D; ++i) {
        start[i] = at[i] * tile[i];
        size[i] = std::min(tile[i], range[i] - start[i]);
      }
      body(start, size);
      for (size_t i = D; i-- > 0;) {
        if (++at[i] < tiles[i]) break;
        at[i] = 0;
      }
    }
  };
  const kiln_backend_threads* threads = pool ? pool->threads : nullptr;
  if (!threads || threads->count < 2 || !threads->parallel_for || total < 2) return piece(0, total);
  threads->parallel_for(
      threads->context, int64_t(total),
      [](void* arg, int64_t begin, int64_t end) { (*static_cast<decltype(piece)*>(arg))(size_t(begin), size_t(end)); }, &piece);
}

constexpr const char* kFunctions[] = {
    "pthreadpool_get_threads_count",
    "pthreadpool_parallelize_1d",
    "pthreadpool_parallelize_1d_with_uarch",
    "pthreadpool_parallelize_1d_tile_1d",
    "pthreadpool_parallelize_2d",
    "pthreadpool_parallelize_2d_tile_1d",
    "pthreadpool_parallelize_2d_tile_2d",
    "pthreadpool_parallelize_2d_tile_2d_with_uarch",
    "pthreadpool_parallelize_3d",
    "pthreadpool_parallelize_3d_tile_1d",
    "pthreadpool_parallelize_3d_tile_2d",
    "pthreadpool_parallelize_3d_tile_2d_with_uarch",
    "pthreadpool_parallelize_4d",
    "pthreadpool_parallelize_4d_tile_1d",
    "pthreadpool_parallelize_4d_tile_2d",
    "pthreadpool_parallelize_4d_tile_2d_with_uarch",
    "pthreadpool_parallelize_5d",
    "pthreadpool_parallelize_5d_tile_1d",
    "pthreadpool_parallelize_5d_tile_2d",
    "pthreadpool_parallelize_6d",
    "pthreadpool_parallelize_6d_tile_1d",
    "pthreadpool_parallelize_6d_tile_2d",
};

// The position of the loaded object holding `address` in the process's load order, -1 if none.
int load_position(const void* address) {
  Dl_info info{};
  if (!dladdr(address, &info) || !info.dli_fname) return -1;
  struct Search {
    const char* name;
    int at = 0, found = -1;
  } search{info.dli_fname};
  dl_iterate_phdr(
      [](dl_phdr_info* object, size_t, void* arg) {
        auto* s = static_cast<Search*>(arg);
        if (s->found < 0 && object->dlpi_name && std::strcmp(object->dlpi_name, s->name) == 0) s->found = s->at;
        ++s->at;
        return 0;
      },
      &search);
  return search.found;
}

}  // namespace

namespace kiln_xnnpack {

bool pool_reached(std::string* why) {
  Dl_info self{};
  if (!dladdr(reinterpret_cast<const void*>(&pool_reached), &self)) {
    *why = "this plugin cannot find itself among the loaded objects";
    return false;
  }
  for (const char* name : kFunctions) {
    Dl_info found{};
    void* f = dlsym(RTLD_DEFAULT, name);
    if (!f || !dladdr(f, &found) || found.dli_fbase != self.dli_fbase) {
      *why = std::string(name) + " resolves to " + (found.dli_fname ? found.dli_fname : "nothing") + ", not to this plugin";
      return false;
    }
  }
  // A libXNNPACK loaded before this plugin bound its calls without it.
  const int xnnpack = load_position(reinterpret_cast<const void*>(&xnn_initialize));
  const int plugin = load_position(reinterpret_cast<const void*>(&pool_reached));
  if (xnnpack < 0 || plugin < 0 || xnnpack < plugin) {
    *why = "libXNNPACK was loaded before this plugin";
    return false;
  }
  return true;
}

}  // namespace kiln_xnnpack

extern "C" {

size_t pthreadpool_get_threads_count(pthreadpool_t pool) {
  const kiln_backend_threads* t = pool ? pool->threads : nullptr;
  return t && t->count > 1 ? size_t(t->count) : 1;
}

void pthreadpool_parallelize_1d(pthreadpool_t pool, pthreadpool_task_1d_t f, void* c, size_t r0, uint32_t flags) {
  loop<1>(pool, flags, {r0}, {1}, [&](const Index<1>& s, const Index<1>&) { f(c, s[0]); });
}

void pthreadpool_parallelize_1d_with_uarch(pthreadpool_t pool, pthreadpool_task_1d_with_id_t f, void* c, uint32_t uarch, uint32_t,
                                           size_t r0, uint32_t flags) {
  loop<1>(pool, flags, {r0}, {1}, [&](const Index<1>& s, const Index<1>&) { f(c, uarch, s[0]); });
}

void pthreadpool_parallelize_1d_tile_1d(pthreadpool_t pool, pthreadpool_task_1d_tile_1d_t f, void* c, size_t r0, size_t t0,
                                        uint32_t flags) {
  loop<1>(pool, flags, {r0}, {t0}, [&](const Index<1>& s, const Index<1>& z) { f(c, s[0], z[0]); });
}

void pthreadpool_parallelize_2d(pthreadpool_t pool, pthreadpool_task_2d_t f, void* c, size_t r0, size_t r1, uint32_t flags) {
  loop<2>(pool, flags, {r0, r1}, {1, 1}, [&](const Index<2>& s, const Index<2>&) { f(c, s[0], s[1]); });
}

void pthreadpool_parallelize_2d_tile_1d(pthreadpool_t pool, pthreadpool_task_2d_tile_1d_t f, void* c, size_t r0, size_t r1,
                                        size_t t1, uint32_t flags) {
  loop<2>(pool, flags, {r0, r1}, {1, t1}, [&](const Index<2>& s, const Index<2>& z) { f(c, s[0], s[1], z[1]); });
}

void pthreadpool_parallelize_2d_tile_2d(pthreadpool_t pool, pthreadpool_task_2d_tile_2d_t f, void* c, size_t r0, size_t r1,
                                        size_t t0, size_t t1, uint32_t flags) {
  loop<2>(pool, flags, {r0, r1}, {t0, t1}, [&](const Index<2>& s, const Index<2>& z) { f(c, s[0], s[1], z[0], z[1]); });
}

void pthreadpool_parallelize_2d_tile_2d_with_uarch(pthreadpool_t pool, pthreadpool_task_2d_tile_2d_with_id_t f, void* c,
                                                   uint32_t uarch, uint32_t, size_t r0, size_t r1, size_t t0, size_t t1,
                                                   uint32_t flags) {
  loop<2>(pool, flags, {r0, r1}, {t0, t1}, [&](const Index<2>& s, const Index<2>& z) { f(c, uarch, s[0], s[1], z[0], z[1]); });
}

void pthreadpool_parallelize_3d(pthreadpool_t pool, pthreadpool_task_3d_t f, void* c, size_t r0, size_t r1, size_t r2,
                                uint32_t flags) {
  loop<3>(pool, flags, {r0, r1, r2}, {1, 1, 1}, [&](const Index<3>& s, const Index<3>&) { f(c, s[0], s[1], s[2]); });
}

void pthreadpool_parallelize_3d_tile_1d(pthreadpool_t pool, pthreadpool_task_3d_tile_1d_t f, void* c, size_t r0, size_t r1,
                                        size_t r2, size_t t2, uint32_t flags) {
  loop<3>(pool, flags, {r0, r1, r2}, {1, 1, t2}, [&](const Index<3>& s, const Index<3>& z) { f(c, s[0], s[1], s[2], z[2]); });
}

void pthreadpool_parallelize_3d_tile_2d(pthreadpool_t pool, pthreadpool_task_3d_tile_2d_t f, void* c, size_t r0, size_t r1,
                                        size_t r2, size_t t1, size_t t2, uint32_t flags) {
  loop<3>(pool, flags, {r0, r1, r2}, {1, t1, t2},
          [&](const Index<3>& s, const Index<3>& z) { f(c, s[0], s[1], s[2], z[1], z[2]); });
}

void pthreadpool_parallelize_3d_tile_2d_with_uarch(pthreadpool_t pool, pthreadpool_task_3d_tile_2d_with_id_t f, void* c,
                                                   uint32_t uarch, uint32_t, size_t r0, size_t r1, size_t r2, size_t t1,
                                                   size_t t2, uint32_t flags) {
  loop<3>(pool, flags, {r0, r1, r2}, {1, t1, t2},
          [&](const Index<3>& s, const Index<3>& z) { f(c, uarch, s[0], s[1], s[2], z[1], z[2]); });
}

void pthreadpool_parallelize_4d(pthreadpool_t pool, pthreadpool_task_4d_t f, void* c, size_t r0, size_t r1, size_t r2, size_t r3,
                                uint32_t flags) {
  loop<4>(pool, flags, {r0, r1, r2, r3}, {1, 1, 1, 1}, [&](const Index<4>& s, const Index<4>&) { f(c, s[0], s[1], s[2], s[3]); });
}

void pthreadpool_parallelize_4d_tile_1d(pthreadpool_t pool, pthreadpool_task_4d_tile_1d_t f, void* c, size_t r0, size_t r1,
                                        size_t r2, size_t r3, size_t t3, uint32_t flags) {
  loop<4>(pool, flags, {r0, r1, r2, r3}, {1, 1, 1, t3},
          [&](const Index<4>& s, const Index<4>& z) { f(c, s[0], s[1], s[2], s[3], z[3]); });
}

void pthreadpool_parallelize_4d_tile_2d(pthreadpool_t pool, pthreadpool_task_4d_tile_2d_t f, void* c, size_t r0, size_t r1,
                                        size_t r2, size_t r3, size_t t2, size_t t3, uint32_t flags) {
  loop<4>(pool, flags, {r0, r1, r2, r3}, {1, 1, t2, t3},
          [&](const Index<4>& s, const Index<4>& z) { f(c, s[0], s[1], s[2], s[3], z[2], z[3]); });
}

void pthreadpool_parallelize_4d_tile_2d_with_uarch(pthreadpool_t pool, pthreadpool_task_4d_tile_2d_with_id_t f, void* c,
                                                   uint32_t uarch, uint32_t, size_t r0, size_t r1, size_t r2, size_t r3,
                                                   size_t t2, size_t t3, uint32_t flags) {
  loop<4>(pool, flags, {r0, r1, r2, r3}, {1, 1, t2, t3},
          [&](const Index<4>& s, const Index<4>& z) { f(c, uarch, s[0], s[1], s[2], s[3], z[2], z[3]); });
}

void pthreadpool_parallelize_5d(pthreadpool_t pool, pthreadpool_task_5d_t f, void* c, size_t r0, size_t r1, size_t r2, size_t r3,
                                size_t r4, uint32_t flags) {
  loop<5>(pool, flags, {r0, r1, r2, r3, r4}, {1, 1, 1, 1, 1},
          [&](const Index<5>& s, const Index<5>&) { f(c, s[0], s[1], s[2], s[3], s[4]); });
}

void pthreadpool_parallelize_5d_tile_1d(pthreadpool_t pool, pthreadpool_task_5d_tile_1d_t f, void* c, size_t r0, size_t r1,
                                        size_t r2, size_t r3, size_t r4, size_t t4, uint32_t flags) {
  loop<5>(pool, flags, {r0, r1, r2, r3, r4}, {1, 1, 1, 1, t4},
          [&](const Index<5>& s, const Index<5>& z) { f(c, s[0], s[1], s[2], s[3], s[4], z[4]); });
}

void pthreadpool_parallelize_5d_tile_2d(pthreadpool_t pool, pthreadpool_task_5d_tile_2d_t f, void* c, size_t r0, size_t r1,
                                        size_t r2, size_t r3, size_t r4, size_t t3, size_t t4, uint32_t flags) {
  loop<5>(pool, flags, {r0, r1, r2, r3, r4}, {1, 1, 1, t3, t4},
          [&](const Index<5>& s, const Index<5>& z) { f(c, s[0], s[1], s[2], s[3], s[4], z[3], z[4]); });
}

void pthreadpool_parallelize_6d(pthreadpool_t pool, pthreadpool_task_6d_t f, void* c, size_t r0, size_t r1, size_t r2, size_t r3,
                                size_t r4, size_t r5, uint32_t flags) {
  loop<6>(pool, flags, {r0, r1, r2, r3, r4, r5}, {1, 1, 1, 1, 1, 1},
          [&](const Index<6>& s, const Index<6>&) { f(c, s[0], s[1], s[2], s[3], s[4], s[5]); });
}

void pthreadpool_parallelize_6d_tile_1d(pthreadpool_t pool, pthreadpool_task_6d_tile_1d_t f, void* c, size_t r0, size_t r1,
                                        size_t r2, size_t r3, size_t r4, size_t r5, size_t t5, uint32_t flags) {
  loop<6>(pool, flags, {r0, r1, r2, r3, r4, r5}, {1, 1, 1, 1, 1, t5},
          [&](const Index<6>& s, const Index<6>& z) { f(c, s[0], s[1], s[2], s[3], s[4], s[5], z[5]); });
}

void pthreadpool_parallelize_6d_tile_2d(pthreadpool_t pool, pthreadpool_task_6d_tile_2d_t f, void* c, size_t r0, size_t r1,
                                        size_t r2, size_t r3, size_t r4, size_t r5, size_t t4, size_t t5, uint32_t flags) {
  loop<6>(pool, flags, {r0, r1, r2, r3, r4, r5}, {1, 1, 1, 1, t4, t5},
          [&](const Index<6>& s, const Index<6>& z) { f(c, s[0], s[1], s[2], s[3], s[4], s[5], z[4], z[5]); });
}

}  // extern "C"
