// tutti-bench over tutti::shm: processes on this host, through POSIX shared memory.
#include "tb/tutti_backend.hpp"

int tutti_bench::run_shm(const options& o) { return run_processes<tutti::shm>(o, "shm"); }
