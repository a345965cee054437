/// \file
/// The Python module tutti_torch._C: the creator torch.distributed calls for the "tutti"
/// backend (registered by tutti_torch/__init__.py).

#include <pybind11/chrono.h>
#include <torch/python.h>

#include "backend.hpp"

namespace {

c10::intrusive_ptr<c10d::Backend> create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                         int size, const std::chrono::duration<float>& timeout) {
  return c10::make_intrusive<tutti_torch::backend>(
      store, rank, size, std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
}

std::string transport_of(const c10::intrusive_ptr<c10d::Backend>& b) {
  auto* t = dynamic_cast<tutti_torch::backend*>(b.get());
  TORCH_CHECK(t != nullptr, "tutti_torch: not a tutti backend: ", b->getBackendName());
  return t->transport_name();
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "tutti as a torch.distributed backend";
  // Joining waits for the other ranks: without the GIL, so other Python threads go on.
  m.def("create_backend", &create, pybind11::call_guard<pybind11::gil_scoped_release>());
  m.def("transport", &transport_of);
  m.def("shutdown_all", &tutti_torch::backend::shutdown_all,
        pybind11::call_guard<pybind11::gil_scoped_release>());
}
