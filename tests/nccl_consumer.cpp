// A program built the way a user builds one: plain C++ (the C++ compiler, not nvcc) linked
// against the tutti::nccl CMake target. One rank, one all_reduce on device memory; exit 77
// (ctest: skipped) where there is no GPU.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include <tutti/transport/nccl.hpp>
#include <tutti/tutti.hpp>

int main() {
  if (tutti::nccl::local_gpus() == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  // A rank of its own (spawn forks it), so this parent never initialises CUDA.
  return tutti::spawn(1, [] {
    auto comm = tutti::communicator<tutti::nccl>::from_env();
    const std::vector<float> host = {1.0f, 2.0f, 3.0f, 4.0f};
    float* dev = nullptr;
    if (cudaMalloc(&dev, host.size() * sizeof(float)) != cudaSuccess) return 1;
    cudaMemcpy(dev, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
    comm.all_reduce(tutti::device_span<float>(dev, host.size()), tutti::sum);
    std::vector<float> got(host.size());
    cudaMemcpy(got.data(), dev, got.size() * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(dev);
    // One rank: the sum is the input itself.
    const bool ok = got == host && comm.size() == 1;
    std::printf("nccl_consumer: all_reduce of %zu floats on GPU %d: %s\n", got.size(),
                comm.transport().device(), ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
  });
}
