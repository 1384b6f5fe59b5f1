// meshpool._meshpool: model weights (<meshpool/weights.h>). The Python
// face — load() with a progress bar, safe_open() shaped like safetensors' —
// is meshpool/weights.py; this is what it calls.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "meshpool/weights.h"
#include "py_client.h"

namespace meshpool::python {
namespace {

using PyWeightStore = ClientBound<WeightStore>;

py::object Namespace() {
  return py::module_::import("types").attr("SimpleNamespace");
}

py::object TensorObject(const TensorInfo& t) {
  return Namespace()(py::arg("name") = t.name,
                     py::arg("dtype") = std::string(DTypeName(t.dtype)),
                     py::arg("shape") = t.shape, py::arg("length") = t.length,
                     py::arg("row_bytes") = t.row_bytes());
}

py::object ModelObject(const ModelInfo& m) {
  return Namespace()(
      py::arg("name") = m.name, py::arg("region") = m.region,
      py::arg("tensors") = m.tensors, py::arg("tensor_bytes") = m.tensor_bytes,
      py::arg("files") = m.files,
      py::arg("loaded") = absl::ToDoubleSeconds(m.loaded - absl::UnixEpoch()),
      py::arg("health") = HealthObject(m.health));
}

PyMemory Writable(const py::handle& buffer) {
  PyMemory out = PyMemory::From(buffer, true, "buffer");
  if (out.raw()) {
    Raise(absl::InvalidArgumentError(
        "weights reads take a buffer object (NumPy array, tensor, "
        "bytearray), not an (address, length) pair"));
  }
  return out;
}

}  // namespace

namespace {

void BindWeightStore(py::module_& m) {
  py::class_<PyWeightStore>(m, "_WeightStore")
      .def_static(
          "open",
          [](std::shared_ptr<PyClient> client, const std::string& model) {
            auto store = ValueOrRaise(client->Call(
                [&](Client& c) { return WeightStore::Open(c, model); }));
            return std::make_unique<PyWeightStore>(client, std::move(store));
          },
          py::arg("client"), py::arg("model"))
      .def_property_readonly(
          "info", [](PyWeightStore& s) { return ModelObject(s.get().info()); })
      .def("tensors",
           [](PyWeightStore& s) {
             py::list out;
             for (const TensorInfo& t : s.get().Tensors()) {
               out.append(TensorObject(t));
             }
             return out;
           })
      .def(
          "tensor",
          [](PyWeightStore& s, const std::string& name) {
            return TensorObject(*ValueOrRaise(s.get().Find(name)));
          },
          py::arg("name"))
      .def(
          "read_into",
          [](PyWeightStore& s, const std::string& name,
             const py::handle& buffer, bool verify) {
            PyMemory out = Writable(buffer);
            ReadOptions o;
            o.verify = verify;
            return ValueOrRaise(s.Call([&](WeightStore& w) {
              return w.ReadTensor(name, out.span(), o);
            }));
          },
          py::arg("name"), py::arg("buffer"), py::arg("verify") = false)
      .def(
          "read_rows_into",
          [](PyWeightStore& s, const std::string& name, uint64_t begin,
             uint64_t end, const py::handle& buffer, bool verify) {
            PyMemory out = Writable(buffer);
            ReadOptions o;
            o.verify = verify;
            return ValueOrRaise(s.Call([&](WeightStore& w) {
              return w.ReadTensorSlice(name, begin, end, out.span(), o);
            }));
          },
          py::arg("name"), py::arg("begin"), py::arg("end"), py::arg("buffer"),
          py::arg("verify") = false);
}

// Loading, listing and removing models.
void BindModelCalls(py::module_& m) {
  m.def(
      "_load_safetensors",
      [](std::shared_ptr<PyClient> client, const std::string& model,
         std::vector<std::string> paths, bool replace, uint64_t stripe_bytes,
         uint32_t replicas, int parallel_files, py::object progress) {
        LoadOptions o;
        o.replace = replace;
        o.region.stripe_bytes = stripe_bytes;
        o.region.replicas = replicas;
        o.parallel_files = parallel_files;
        if (!progress.is_none()) {
          // Called on loading threads while the caller waits with the GIL
          // released; an exception in it is reported, not propagated.
          o.progress = [&progress](const LoadProgress& p) {
            py::gil_scoped_acquire acquire;
            try {
              progress(p.bytes_done, p.bytes_total, p.files_done,
                       p.files_total);
            } catch (py::error_already_set& e) {
              e.discard_as_unraisable("meshpool.weights.load progress");
            }
          };
        }
        return ModelObject(ValueOrRaise(client->Call(
            [&](Client& c) { return LoadSafetensors(c, model, paths, o); })));
      },
      py::arg("client"), py::arg("model"), py::arg("paths"), py::arg("replace"),
      py::arg("stripe_bytes"), py::arg("replicas"), py::arg("parallel_files"),
      py::arg("progress"));
  m.def(
      "_list_models",
      [](std::shared_ptr<PyClient> client) {
        auto models =
            ValueOrRaise(client->Call([](Client& c) { return ListModels(c); }));
        py::list out;
        for (const ModelInfo& info : models) out.append(ModelObject(info));
        return out;
      },
      py::arg("client"));
  m.def(
      "_remove_model",
      [](std::shared_ptr<PyClient> client, const std::string& model) {
        ThrowIfError(
            client->Call([&](Client& c) { return RemoveModel(c, model); }));
      },
      py::arg("client"), py::arg("model"));
}

}  // namespace

void BindWeights(py::module_& m) {
  BindWeightStore(m);
  BindModelCalls(m);
}

}  // namespace meshpool::python
