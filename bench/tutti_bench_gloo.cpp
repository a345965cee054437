// tutti-bench over tutti::gloo: processes meeting over TCP through Gloo's transport (the ranks
// tutti-bench spawns meet on loopback).
#include <tutti/transport/gloo.hpp>

#include "tb/tutti_backend.hpp"

int tutti_bench::run_gloo(const options& o) { return run_processes<tutti::gloo>(o, "gloo"); }
