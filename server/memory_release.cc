#include "server/memory_release.h"

#include <dlfcn.h>
#include <malloc.h>

namespace sluice::server {

void ReleaseFreeMemory() {
  using Release = void (*)();
  // Looked up rather than linked, as the metrics exporter's heap gauges are: the same code runs
  // on tcmalloc, glibc malloc and the sanitizers' allocators.
  static const Release tcmalloc_release =
      reinterpret_cast<Release>(dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory"));
  if (tcmalloc_release != nullptr) {
    tcmalloc_release();
  } else {
    malloc_trim(0);
  }
}

}  // namespace sluice::server
