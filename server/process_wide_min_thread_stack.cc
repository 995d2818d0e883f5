// Process-wide: this file raises the stack of every thread the process starts (any library's, not
// only the metrics exporter's) to at least 1 MiB, by interposing libc's pthread_attr_setstacksize.

#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cstddef>

// civetweb (prometheus-cpp's HTTP server, Debian's libcivetweb) gives its threads 100 KiB stacks,
// and glibc carves every thread's share of the process's static TLS out of the stack it is given.
// Linked with CUDA (cudart_static's TLS), the scrape threads overflow their stacks inside
// vsnprintf. This definition interposes libc's (the executable exports it, see
// server/CMakeLists.txt) and raises any requested stack below 1 MiB to 1 MiB, for civetweb's
// threads and any other library's. It forwards everything else unchanged.
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t stack_size) {
  using SetStackSize = int (*)(pthread_attr_t*, size_t);
  static const auto libc_setstacksize =
      reinterpret_cast<SetStackSize>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  constexpr size_t kMinThreadStackBytes = size_t{1} << 20;
  return libc_setstacksize(attr, std::max(stack_size, kMinThreadStackBytes));
}
