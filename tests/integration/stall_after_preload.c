/* Preloaded into a kiln process by the cache tests to stop it, for good,
   right after it has flushed the file named by KILN_TEST_STALL_AFTER into
   the cache's tmp/ directory, so that a test can kill the writer there. The
   hook lives here, not in the store: production code has no test seams. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int stalls_here(int fd) {
  const char* file = getenv("KILN_TEST_STALL_AFTER");
  if (!file || !*file) return 0;
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  const char* base = strrchr(path, '/');
  return base && strstr(path, "/tmp/") && strcmp(base + 1, file) == 0;
}

__attribute__((visibility("default"))) int fsync(int fd) { /* the project builds hidden by default */
  static int (*real_fsync)(int);
  if (!real_fsync) real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  const int result = real_fsync(fd);
  if (result == 0 && stalls_here(fd))
    for (;;) pause();
  return result;
}
