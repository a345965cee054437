// all_reduce across GPUs through NCCL (tutti::nccl), one process per GPU. One binary, any
// launcher:
//
//   ./nccl_all_reduce                                              forks one rank per GPU
//   torchrun --no-python --nproc_per_node=<GPUs> ./nccl_all_reduce  PyTorch's launcher
//   mpirun -np <GPUs> ./nccl_all_reduce                            Open MPI
//
// Rank r fills 2^20 floats on its GPU with r + 1 and all-reduces them, so every element becomes
// 1 + 2 + ... + n. Build: configure tutti with -DTUTTI_WITH_NCCL=ON and link tutti::nccl.
// Exits 77 (skipped) where there is no GPU.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include <tutti/transport/nccl.hpp>
#include <tutti/tutti.hpp>

int main() {
  const int gpus = tutti::nccl::local_gpus();
  if (gpus == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  return tutti::spawn(gpus, [] {
    // Rank, world size and GPU (LOCAL_RANK) from the launcher's environment.
    auto comm = tutti::communicator<tutti::nccl>::from_env();
    const std::size_t n = std::size_t{1} << 20;
    std::vector<float> host(n, static_cast<float>(comm.rank() + 1));

    float* dev = nullptr;
    if (cudaMalloc(&dev, n * sizeof(float)) != cudaSuccess) return 1;
    cudaMemcpy(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);

    comm.all_reduce(tutti::device_span<float>(dev, n), tutti::sum);  // returns when done

    cudaMemcpy(host.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(dev);
    const float size = static_cast<float>(comm.size()), want = size * (size + 1) / 2;
    bool ok = true;
    for (const float x : host) ok = ok && x == want;
    if (comm.rank() == 0 || !ok)
      std::printf("rank %d (GPU %d): all_reduce of %zu floats on %d GPUs: %s\n", comm.rank(),
                  comm.transport().device(), n, comm.size(), ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
  });
}
