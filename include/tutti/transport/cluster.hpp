#pragma once
/// \file
/// tutti::cluster: ranks on several hosts, shared memory inside each host and Gloo's TCP
/// between hosts (tutti::layered<shm, gloo>). Needs the tutti::gloo CMake component.
///
///   auto comm = tutti::communicator<tutti::cluster>::from_env();   // under torchrun --nnodes=N
///   comm.all_reduce(std::span<float>(grad), tutti::sum);           // hierarchical where it pays

#include "tutti/transport/gloo.hpp"
#include "tutti/transport/layered.hpp"
#include "tutti/transport/shm.hpp"

namespace tutti::inline v0 {

using cluster = layered<shm, gloo>;

}  // namespace tutti::inline v0
