// The `meshpool._meshpool` extension module. The package (meshpool/) wraps
// it; the sections live in bind_*.cc.
#include "py_client.h"

PYBIND11_MODULE(_meshpool, m) {
  m.doc() =
      "meshpool's C++ client, bound for Python. Use the `meshpool` package; "
      "this module is its implementation.";
  meshpool::python::BindClient(m);
  meshpool::python::BindRegions(m);
  meshpool::python::BindKvCache(m);
  meshpool::python::BindWeights(m);
}
