// Links tutti::nccl and asks NCCL its version: needs no GPU. Checks that the library linked is
// the one whose nccl.h was compiled against, and that tutti::nccl defined TUTTI_HAVE_NCCL.
#include <nccl.h>

#include <cstdio>

#include <tutti/tutti.hpp>

#if !defined(TUTTI_HAVE_NCCL)
#error "tutti::nccl should define TUTTI_HAVE_NCCL"
#endif

int main() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) {
    std::printf("ncclGetVersion failed\n");
    return 1;
  }
  std::printf("tutti %d.%d.%d with NCCL %d (nccl.h: %d)\n", tutti::version_major,
              tutti::version_minor, tutti::version_patch, version, NCCL_VERSION_CODE);
  return version == NCCL_VERSION_CODE ? 0 : 1;
}
