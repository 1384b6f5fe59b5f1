// The `meshpool._meshpool` extension module. The package (meshpool/) wraps
// it; the sections live in bind_*.cc.
#include "absl/synchronization/mutex.h"
#include "py_client.h"

PYBIND11_MODULE(_meshpool, m) {
  m.doc() =
      "meshpool's C++ client, bound for Python. Use the `meshpool` package; "
      "this module is its implementation.";
  // Debian's abseil checks every Mutex acquisition for lock-order cycles
  // (about 1,500 instructions of a 4 KiB GET); the meshpool binary turns
  // that off (tools/main.cc), and so does this module for the processes
  // that import it. absl::SetMutexDeadlockDetectionMode is process-wide.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  meshpool::python::BindClient(m);
  meshpool::python::BindRegions(m);
  meshpool::python::BindKvCache(m);
  meshpool::python::BindWeights(m);
}
