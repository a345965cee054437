// tutti-bench over tutti::cluster (layered<shm, gloo>): processes on one or more hosts, shared
// memory inside each host and Gloo's TCP between them; with --algo hierarchical, or automatic,
// which weighs hierarchical against the flat policies. Across hosts, start it as a multi-host
// launcher would (RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT: bench/netns/).
#include <tutti/algorithm/hierarchical.hpp>
#include <tutti/transport/cluster.hpp>

#include "tb/tutti_backend.hpp"

int tutti_bench::run_cluster(const options& o) {
  return run_processes<tutti::cluster>(o, "cluster");
}
