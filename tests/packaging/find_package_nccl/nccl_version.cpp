// Links tutti::nccl as a user's program does: checks that the NCCL linked is the one whose nccl.h
// was compiled against and that tutti::nccl defined TUTTI_HAVE_NCCL, then runs a world of one
// rank through tutti/transport/nccl.hpp. Without a GPU the communicator must refuse with a clear
// tutti::error ("no CUDA device"), which is what this machine-independent test checks there.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>

#include <tutti/transport/nccl.hpp>
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
  if (version != NCCL_VERSION_CODE) return 1;

  const std::string url = "file:///tmp/tutti-nccl-consumer-" + std::to_string(::getpid());
  int devices = 0;
  const bool have_gpu = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  try {
    auto comm = tutti::communicator<tutti::nccl>::from_url(url, 0, 1);
    std::array<float, 4> host{1.0F, 2.0F, 3.0F, 4.0F};
    float* dev = nullptr;
    if (cudaMalloc(&dev, sizeof host) != cudaSuccess) return 1;
    if (cudaMemcpy(dev, host.data(), sizeof host, cudaMemcpyHostToDevice) != cudaSuccess) return 1;
    comm.all_reduce(tutti::device_span<float>(dev, host.size()), tutti::avg);
    std::array<float, 4> back{};
    if (cudaMemcpy(back.data(), dev, sizeof back, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
    (void)cudaFree(dev);
    (void)::unlink(url.c_str() + 7);
    if (back != host) {
      std::printf("WRONG: avg over one rank changed the data\n");
      return 1;
    }
    std::printf("all_reduce(avg) on GPU %d over a world of one: ok\n", comm.transport().device());
    return 0;
  } catch (const tutti::error& e) {
    (void)::unlink(url.c_str() + 7);
    std::printf("%s: %s\n", have_gpu ? "FAILED" : "no GPU here, refused as expected", e.what());
    return !have_gpu && std::string(e.what()).find("no CUDA device") != std::string::npos ? 0 : 1;
  }
}
