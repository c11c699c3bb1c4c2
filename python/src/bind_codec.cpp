// HybridEP's shared + residual expert compression (nn/sr_codec.h) for the torch executor: the
// same encoder and decoder `moecomm train` moves experts with, on numpy arrays.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "bindings.h"
#include "core/error.h"
#include "nn/sr_codec.h"

namespace py = pybind11;

namespace moecomm::python {

namespace {

using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;
using Bytes = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

std::span<const float> floats_of(const Floats& a, const char* what) {
  if (a.ndim() != 1) throw Error(what, "must be one-dimensional");
  return {a.data(), size_t(a.size())};
}

Bytes encode(const Floats& weights, const Floats& shared, int64_t k) {
  const std::span<const float> w = floats_of(weights, "weights");
  const std::span<const float> s = floats_of(shared, "shared");
  Bytes out(py::ssize_t(nn::sr_encoded_bytes(k)));
  const std::span<std::byte> bytes(reinterpret_cast<std::byte*>(out.mutable_data()),
                                   size_t(out.size()));
  py::gil_scoped_release release;
  nn::sr_encode(w, s, k, bytes);
  return out;
}

Floats decode(const Bytes& encoded, const Floats& shared, int64_t numel) {
  if (encoded.ndim() != 1) throw Error("encoded", "must be one-dimensional");
  if (numel < 1) throw Error("numel", "must be at least 1, got " + std::to_string(numel));
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(encoded.data()),
                                         size_t(encoded.size()));
  const std::span<const float> s = floats_of(shared, "shared");
  Floats out(py::ssize_t{numel});
  const std::span<float> w(out.mutable_data(), size_t(numel));
  py::gil_scoped_release release;
  nn::sr_decode(bytes, s, w);
  return out;
}

}  // namespace

void bind_codec(py::module_& m) {
  m.def("sr_kept", &nn::sr_kept, py::arg("numel"), py::arg("compression"),
        "entries HybridEP's SR keeps of numel values at a compression ratio");
  m.def("sr_encode", &encode, py::arg("weights"), py::arg("shared"), py::arg("k"),
        "the k largest |w - s| as k fp32 values then k int32 indices (bytes); shared may be "
        "empty (s = 0)");
  m.def("sr_decode", &decode, py::arg("encoded"), py::arg("shared"), py::arg("numel"),
        "s with the encoded residual entries added back");
}

}  // namespace moecomm::python
