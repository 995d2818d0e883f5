#pragma once

// Process-wide: gives the allocator's free memory back to the operating system.

namespace sluice::server {

// tcmalloc's MallocExtension_ReleaseFreeMemory where tcmalloc is loaded (the servers link it:
// freed pages otherwise stay in its page heap, and the process's RSS with them), glibc's
// malloc_trim(0) otherwise. A few milliseconds for hundreds of MiB; call it after something
// large was freed, not per request. Thread-safe.
void ReleaseFreeMemory();

}  // namespace sluice::server
