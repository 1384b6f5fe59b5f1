// Errors, keys and borrowed memory: how Python values become what the C++
// client takes, and C++ statuses become Python exceptions.
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "py_client.h"

namespace meshpool::python {

std::atomic<uint64_t>& BindingCopiedBytes() {
  static std::atomic<uint64_t> bytes{0};
  return bytes;
}

// ---- Errors
// ------------------------------------------------------------------

py::object ErrorFor(const absl::Status& status) {
  // meshpool/errors.py owns the classes; it is imported once and kept for
  // the life of the process (never destroyed: no Python call at exit).
  static py::object* error_for = new py::object(
      py::module_::import("meshpool.errors").attr("error_for_code"));
  return (*error_for)(static_cast<int>(status.code()),
                      std::string(status.message()));
}

void Raise(const absl::Status& status) {
  py::object error = ErrorFor(status);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())),
                  error.ptr());
  throw py::error_already_set();
}

namespace {

[[noreturn]] void RaiseInvalid(std::string message) {
  Raise(absl::InvalidArgumentError(std::move(message)));
}

}  // namespace

// ---- Keys
// --------------------------------------------------------------------

std::string KeyFrom(const py::handle& key) {
  if (PyUnicode_Check(key.ptr())) {
    Py_ssize_t n = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(key.ptr(), &n);
    if (utf8 == nullptr) throw py::error_already_set();
    return std::string(utf8, n);
  }
  if (PyObject_CheckBuffer(key.ptr())) {
    Py_buffer view;
    if (PyObject_GetBuffer(key.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
      PyErr_Clear();
      RaiseInvalid("a key must be str or contiguous bytes");
    }
    std::string out(static_cast<const char*>(view.buf), view.len);
    PyBuffer_Release(&view);
    return out;
  }
  RaiseInvalid(absl::StrCat("a key must be str or bytes, not ",
                            Py_TYPE(key.ptr())->tp_name));
}

std::vector<std::string> KeysFrom(const py::handle& keys) {
  if (PyUnicode_Check(keys.ptr()) || PyBytes_Check(keys.ptr())) {
    RaiseInvalid("keys must be a sequence of keys, not one str or bytes");
  }
  std::vector<std::string> out;
  for (py::handle k : py::iter(keys)) out.push_back(KeyFrom(k));
  return out;
}

py::object HealthObject(const RegionHealth& health) {
  return py::module_::import("types").attr("SimpleNamespace")(
      py::arg("state") = std::string(RegionHealthName(health.state)),
      py::arg("stripes_degraded") = health.stripes_degraded,
      py::arg("stripes_lost") = health.stripes_lost,
      py::arg("repair_bytes_total") = health.repair_bytes_total,
      py::arg("repair_bytes_done") = health.repair_bytes_done,
      py::arg("repair_error") = health.repair_error);
}

std::vector<absl::string_view> Views(const std::vector<std::string>& keys) {
  return std::vector<absl::string_view>(keys.begin(), keys.end());
}

// ---- Borrowed memory
// ---------------------------------------------------------

namespace {

// A CPU torch.Tensor lends its memory through data_ptr(): tensors do not
// implement the buffer protocol.
bool IsTorchTensor(const py::handle& obj) {
  return py::hasattr(obj, "data_ptr") && py::hasattr(obj, "is_contiguous") &&
         py::hasattr(obj, "element_size") && py::hasattr(obj, "device");
}

}  // namespace

PyMemory PyMemory::From(const py::handle& obj, bool writable,
                        const std::string& what) {
  PyMemory m;
  m.owner_ = py::reinterpret_borrow<py::object>(obj);
  if (py::isinstance<py::tuple>(obj) && py::len(obj) == 2) {
    py::tuple pair = py::reinterpret_borrow<py::tuple>(obj);
    if (!py::isinstance<py::int_>(pair[0]) ||
        !py::isinstance<py::int_>(pair[1])) {
      RaiseInvalid(absl::StrCat(what,
                                ": an (address, length) pair must be two "
                                "ints"));
    }
    m.data_ = reinterpret_cast<char*>(pair[0].cast<uintptr_t>());
    m.size_ = pair[1].cast<size_t>();
    m.raw_ = true;
    return m;
  }
  if (IsTorchTensor(obj)) {
    if (obj.attr("device").attr("type").cast<std::string>() != "cpu") {
      RaiseInvalid(absl::StrCat(
          what,
          ": a tensor must be in CPU memory; copy it with .cpu() first "
          "(or pass a pinned host buffer)"));
    }
    if (!obj.attr("is_contiguous")().cast<bool>()) {
      RaiseInvalid(absl::StrCat(
          what, ": the tensor is not contiguous; pass tensor.contiguous()"));
    }
    m.data_ = reinterpret_cast<char*>(obj.attr("data_ptr")().cast<uintptr_t>());
    m.size_ = obj.attr("numel")().cast<size_t>() *
              obj.attr("element_size")().cast<size_t>();
    return m;
  }
  int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
  if (!PyObject_CheckBuffer(obj.ptr())) {
    RaiseInvalid(absl::StrCat(
        what,
        ": expected a buffer (bytes, bytearray, memoryview, mmap, NumPy "
        "array), a CPU torch.Tensor or an (address, length) pair, not ",
        Py_TYPE(obj.ptr())->tp_name));
  }
  if (PyObject_GetBuffer(obj.ptr(), &m.buffer_, flags) != 0) {
    PyErr_Clear();
    // Tell read-only from non-contiguous.
    Py_buffer probe;
    bool contiguous =
        PyObject_GetBuffer(obj.ptr(), &probe, PyBUF_C_CONTIGUOUS) == 0;
    if (contiguous) PyBuffer_Release(&probe);
    PyErr_Clear();
    RaiseInvalid(absl::StrCat(
        what, contiguous ? ": the buffer is read-only; pass a writable one (a "
                           "bytearray, or a NumPy array that owns its memory)"
                         : ": the buffer is not C-contiguous; pass "
                           "numpy.ascontiguousarray(x) or a contiguous copy"));
  }
  m.has_buffer_ = true;
  m.data_ = static_cast<char*>(m.buffer_.buf);
  m.size_ = static_cast<size_t>(m.buffer_.len);
  return m;
}

PyMemory::PyMemory(PyMemory&& o) noexcept
    : owner_(std::move(o.owner_)),
      buffer_(o.buffer_),
      has_buffer_(std::exchange(o.has_buffer_, false)),
      raw_(o.raw_),
      data_(o.data_),
      size_(o.size_) {}

PyMemory& PyMemory::operator=(PyMemory&& o) noexcept {
  if (this != &o) {
    if (has_buffer_) PyBuffer_Release(&buffer_);
    owner_ = std::move(o.owner_);
    buffer_ = o.buffer_;
    has_buffer_ = std::exchange(o.has_buffer_, false);
    raw_ = o.raw_;
    data_ = o.data_;
    size_ = o.size_;
  }
  return *this;
}

PyMemory::~PyMemory() {
  if (has_buffer_) PyBuffer_Release(&buffer_);
}

}  // namespace meshpool::python
