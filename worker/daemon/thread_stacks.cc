// Workaround linked into ppworker only. civetweb (the HTTP server under prometheus-cpp's Exposer)
// creates its threads with a fixed 100 KiB stack, and glibc carves every thread's static TLS out
// of its stack. cuBLASLt alone brings ~92 KiB of static TLS, so in a CUDA build pthread_create
// fails with EINVAL and /metrics cannot start ("null context when constructing CivetServer").
// Interposing pthread_attr_setstacksize raises such tiny stacks to 1 MiB. The real fix is to load
// the CUDA libraries lazily (dlopen) in kernels/cuda; this file can go once that is done.
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cstddef>

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using Fn = int (*)(pthread_attr_t*, size_t);
  static const Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  constexpr size_t kMinimum = size_t{1} << 20;
  return real(attr, std::max(size, kMinimum));
}
