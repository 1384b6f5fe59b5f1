// The Python binding's model of a client (the `_meshpool` extension).
//
// PyClient owns one meshpool::Client and everything Python hands it that
// must outlive a call: registered buffers, and the buffers and futures of
// asynchronous batches. It is what `meshpool.Client` wraps.
//
// Thread-safety: every method may be called from any Python thread. Calls
// that wait on the network run with the GIL released and hold `mu_` shared;
// Close() takes it exclusively, so it waits for running calls and later
// calls fail FailedPrecondition ("client is closed").
#ifndef MESHPOOL_PYTHON_SRC_PY_CLIENT_H_
#define MESHPOOL_PYTHON_SRC_PY_CLIENT_H_

#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "meshpool/client.h"
#include "meshpool/region.h"

namespace meshpool::python {

namespace py = pybind11;

// ---- Errors ----------------------------------------------------------------

// The meshpool.errors exception instance for `status` (REQUIRES: !ok(), the
// GIL).
py::object ErrorFor(const absl::Status& status);
// Raises ErrorFor(status) as a Python exception (throws
// py::error_already_set). REQUIRES: !ok(), the GIL.
[[noreturn]] void Raise(const absl::Status& status);
inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}
template <typename T>
T ValueOrRaise(absl::StatusOr<T> v) {
  if (!v.ok()) Raise(v.status());
  return *std::move(v);
}

// Bytes the binding itself copied between Python objects and C++ buffers
// (get() and Region.read() building their bytes objects).
// The zero-copy calls never add to it; tests read it to prove that.
std::atomic<uint64_t>& BindingCopiedBytes();

// A region's health as a types.SimpleNamespace: state ("healthy",
// "degraded", "lost", "unknown"), stripes_degraded, stripes_lost,
// repair_bytes_total, repair_bytes_done, repair_error. REQUIRES: the GIL.
py::object HealthObject(const RegionHealth& health);

// ---- Keys and buffers
// --------------------------------------------------------

// A key from a Python str (UTF-8) or bytes-like object. InvalidArgument
// (raised) for any other type.
std::string KeyFrom(const py::handle& key);
std::vector<std::string> KeysFrom(const py::handle& keys);
std::vector<absl::string_view> Views(const std::vector<std::string>& keys);

// A contiguous memory range Python lent the binding: a buffer-protocol
// object (bytes, bytearray, memoryview, mmap, NumPy array), a CPU
// torch.Tensor, or an (address, length) pair inside memory registered with
// the client. Holds the object (and its buffer export) until destroyed.
// REQUIRES: destroyed with the GIL held.
class PyMemory {
 public:
  // `writable`: the binding will write into it (get_into); read-only and
  // non-contiguous objects are refused with InvalidArgument naming `what`
  // ("buffer 3") and the fix.
  static PyMemory From(const py::handle& obj, bool writable,
                       const std::string& what);
  PyMemory(PyMemory&&) noexcept;
  PyMemory& operator=(PyMemory&&) noexcept;
  ~PyMemory();

  char* data() const { return data_; }
  size_t size() const { return size_; }
  absl::Span<char> span() const { return {data_, size_}; }
  absl::string_view view() const { return {data_, size_}; }
  // Set for (address, length) pairs: checked later against registrations.
  bool raw() const { return raw_; }

 private:
  PyMemory() = default;
  py::object owner_;
  Py_buffer buffer_{};
  bool has_buffer_ = false;
  bool raw_ = false;
  char* data_ = nullptr;
  size_t size_ = 0;
};

// ---- The client ----------------------------------------------------------

class PyClient;

// A buffer registered with a client (register_buffer): the client moves
// values between it and the nodes with no staging copy. Holds the Python
// object's buffer export, so a bytearray cannot be resized under it.
class PyRegistration {
 public:
  PyRegistration(std::weak_ptr<PyClient> client, PyMemory memory,
                 std::unique_ptr<Client::RegisteredBuffer> registered);
  ~PyRegistration();
  uintptr_t address() const;
  size_t length() const;
  bool closed() const;
  // Unregisters (idempotent). REQUIRES: the GIL.
  void Close();
  // Whether [addr, addr+len) lies inside this registration.
  bool Contains(uintptr_t addr, size_t len) const;

 private:
  friend class PyClient;
  std::weak_ptr<PyClient> client_;
  PyMemory memory_;
  std::unique_ptr<Client::RegisteredBuffer> registered_;
};

// One asynchronous batch: what must live until it completes, and its
// concurrent.futures.Future. Touched only with the GIL held.
struct AsyncBatch {
  bool get = false;  // batch_get_into (results are lengths) or a put
  std::vector<std::string> keys;
  std::vector<PyMemory> memory;
  std::vector<absl::string_view> values;  // put
  std::vector<absl::Span<char>> outs;     // get
  py::object future;
  // Copied from the BatchHandle in its callback.
  std::vector<absl::Status> statuses;
  std::vector<size_t> lengths;
};

class PyClient : public std::enable_shared_from_this<PyClient> {
 public:
  // Connects (GIL released while connecting). Raises on failure.
  static std::shared_ptr<PyClient> Connect(ClientOptions options);
  ~PyClient();

  // Runs `fn(Client&)` with the GIL released and the client held open;
  // raises FailedPrecondition when the client is closed. `fn` must not
  // touch Python objects. REQUIRES: the GIL (released inside).
  template <typename F>
  auto Call(F&& fn) {
    using R = decltype(fn(std::declval<Client&>()));
    if constexpr (std::is_void_v<R>) {
      bool open = false;
      {
        py::gil_scoped_release release;
        if (LockOpen()) {
          ReaderRelease unlock{mu_};
          open = true;
          fn(*client_);
        }
      }
      if (!open) RaiseClosed();
    } else {
      std::optional<R> result;
      {
        py::gil_scoped_release release;
        if (LockOpen()) {
          ReaderRelease unlock{mu_};
          result.emplace(fn(*client_));
        }
      }
      if (!result.has_value()) RaiseClosed();
      return *std::move(result);
    }
  }

  // Unregisters every buffer, waits for every asynchronous batch, stops
  // the completion thread and disconnects. Idempotent. FailedPrecondition
  // (raised) when called from a Future's done-callback (they run on the
  // completion thread). REQUIRES: the GIL, and that a done-callback never
  // drops the last reference to its client.
  // (The destructor closes too, and would then wait on itself.)
  void Close();
  bool closed();

  std::shared_ptr<PyRegistration> Register(const py::handle& obj);
  // Resolves raw (address, length) pairs in `memory` against this client's
  // registrations; InvalidArgument (raised) for a pair outside all of them.
  void CheckRaw(const std::vector<PyMemory>& memory);

  // Starts an asynchronous batch and returns its Future; `batch` holds
  // keys and memory. REQUIRES: the GIL.
  py::object Submit(std::unique_ptr<AsyncBatch> batch);
  // The file descriptor that becomes readable when batches completed since
  // the last DrainCompletions (an event counter fd on Linux, a pipe's read end
  // elsewhere).
  int event_fd() const { return event_fd_; }
  // The Futures completed since the last drain, oldest first; clears the
  // fd's readiness. REQUIRES: the GIL.
  py::list DrainCompletions();

  [[noreturn]] static void RaiseClosed();

 private:
  // Takes mu_ shared and returns true while the client is open; false (not
  // holding it) once Close() has begun. Never blocks behind Close(): a
  // done-callback calling the client while Close() waits for its batch gets
  // "closed" instead of a deadlock.
  bool LockOpen() ABSL_SHARED_TRYLOCK_FUNCTION(true, mu_);
  // Releases a shared hold LockOpen took, however the scope ends.
  struct ReaderRelease {
    absl::Mutex& mu;
    ~ReaderRelease() { mu.ReaderUnlock(); }
  };
  // Owns both fds (the same one on Linux).
  PyClient(std::unique_ptr<Client> client, int event_fd, int signal_fd);
  void CompletionLoop();
  // Sets the future of a finished batch. REQUIRES: the GIL.
  void Complete(std::unique_ptr<AsyncBatch> batch);

  absl::Mutex mu_;  // shared: a call in flight; exclusive: Close()
  std::atomic<bool> closing_{false};  // set first thing in Close()
  std::unique_ptr<Client> client_ ABSL_GUARDED_BY(mu_);
  const int event_fd_;   // polled by Python, drained by DrainCompletions
  const int signal_fd_;  // written per completion; event_fd_ on Linux

  // Registrations and batches are touched with the GIL held.
  std::vector<std::weak_ptr<PyRegistration>> registrations_;

  absl::Mutex done_mu_;
  // Batches submitted and not yet completed (by id), and the finished ones
  // waiting for the completion thread.
  uint64_t next_id_ ABSL_GUARDED_BY(done_mu_) = 0;
  std::map<uint64_t, std::unique_ptr<AsyncBatch>> in_flight_
      ABSL_GUARDED_BY(done_mu_);
  std::deque<uint64_t> finished_ ABSL_GUARDED_BY(done_mu_);
  // Submitted and not yet handed to Python (its Future not yet set).
  size_t pending_ ABSL_GUARDED_BY(done_mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(done_mu_) = false;
  std::vector<py::object> drained_;  // completed futures; GIL
  std::thread completer_;
};

// Something opened through a client (a Region, a WeightStore): keeps the
// client object alive, and calls through PyClient::Call, so a closed client
// makes every call raise FailedPrecondition. T's handle may outlive the C++
// client (it holds the client's shared core). REQUIRES: destroyed with the
// GIL held (released while T goes).
template <typename T>
class ClientBound {
 public:
  ClientBound(std::shared_ptr<PyClient> client, std::unique_ptr<T> object)
      : client_(std::move(client)), object_(std::move(object)) {}
  ~ClientBound() {
    py::gil_scoped_release release;
    object_.reset();
  }
  const T& get() const { return *object_; }
  // Runs fn(T&) as PyClient::Call runs its function.
  template <typename F>
  auto Call(F&& fn) {
    return client_->Call([&](Client&) { return fn(*object_); });
  }

 private:
  std::shared_ptr<PyClient> client_;
  std::unique_ptr<T> object_;
};

// Module sections, each in its own file.
void BindClient(py::module_& m);
void BindRegions(py::module_& m);
void BindKvCache(py::module_& m);
void BindWeights(py::module_& m);

}  // namespace meshpool::python

#endif  // MESHPOOL_PYTHON_SRC_PY_CLIENT_H_
