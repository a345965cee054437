// tutti-bench over tutti::inproc: the ranks are threads of this process.
#include <cstdio>

#include "tb/tutti_backend.hpp"

int tutti_bench::run_inproc(const options& o) {
  return with_algorithm(o.algo, [&]<class Algorithm>() -> int {
    if constexpr (!measurable<Algorithm, tutti::inproc>) {
      std::fprintf(stderr, "tutti-bench: --algo %s has no collectives on inproc\n",
                   Algorithm::name);
      return 2;
    } else {
      int rc = 0;
      tutti::inproc::run<Algorithm>(o.np != 0 ? o.np : 2, [&](auto& comm) {
        tutti_backend<std::remove_reference_t<decltype(comm)>> b(comm, "inproc");
        const int mine = run(b, o, "tutti-bench");
        if (comm.rank() == 0) rc = mine;
      });
      return rc;
    }
  });
}
