// PyClient: the connection, registrations, and the completion thread that
// hands asynchronous batches back to Python.
//
// An asynchronous batch's callback runs on one of the C++ client's threads
// and never touches Python: it copies the results into the batch and
// queues its id. The completion thread takes the GIL, sets the batch's
// Future (running its done-callbacks there, not on a client thread), drops
// the batch's Python references, and makes the event fd readable.
#include "py_client.h"

#ifdef __linux__
#include <sys/eventfd.h>
#endif
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace meshpool::python {

// ---- PyRegistration
// ----------------------------------------------------------

PyRegistration::PyRegistration(
    std::weak_ptr<PyClient> client, PyMemory memory,
    std::unique_ptr<Client::RegisteredBuffer> registered)
    : client_(std::move(client)),
      memory_(std::move(memory)),
      registered_(std::move(registered)) {}

PyRegistration::~PyRegistration() { registered_.reset(); }

uintptr_t PyRegistration::address() const {
  return reinterpret_cast<uintptr_t>(memory_.data());
}
size_t PyRegistration::length() const { return memory_.size(); }
bool PyRegistration::closed() const { return registered_ == nullptr; }

void PyRegistration::Close() {
  if (registered_ == nullptr) return;
  // Deregistering waits on the transport: no GIL needed, none held.
  std::unique_ptr<Client::RegisteredBuffer> r = std::move(registered_);
  py::gil_scoped_release release;
  r.reset();
}

bool PyRegistration::Contains(uintptr_t addr, size_t len) const {
  uintptr_t begin = address();
  return registered_ != nullptr && addr >= begin && len <= length() &&
         addr - begin <= length() - len;
}

// ---- PyClient
// ----------------------------------------------------------------

std::shared_ptr<PyClient> PyClient::Connect(ClientOptions options) {
  absl::StatusOr<std::unique_ptr<Client>> client;
  {
    py::gil_scoped_release release;
    client = Client::Connect(std::move(options));
  }
  if (!client.ok()) Raise(client.status());
  // The completion signal: one event counter fd on Linux; elsewhere a pipe
  // whose read end is the fd Python polls. Both take 8-byte writes and drain by
  // reading until EAGAIN.
  int fds[2] = {-1, -1};
#ifdef __linux__
  fds[0] = fds[1] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const bool made = fds[0] >= 0;
#else
  // (python/ links only the client's public API, so not common/posix.h.)
  bool made = ::pipe(fds) == 0;
  for (int fd : fds) {
    made = made && ::fcntl(fd, F_SETFD, FD_CLOEXEC) == 0 &&
           ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) == 0;
  }
#endif
  if (!made) {
    const int err = errno;
    if (fds[0] >= 0) close(fds[0]);
    if (fds[1] >= 0 && fds[1] != fds[0]) close(fds[1]);
    Raise(absl::ResourceExhaustedError(
        absl::StrCat("cannot make the completion fd (", std::strerror(err),
                     "); raise the process's open-file limit (ulimit -n)")));
  }
  std::shared_ptr<PyClient> c(new PyClient(*std::move(client), fds[0], fds[1]));
  c->completer_ = std::thread([raw = c.get()] { raw->CompletionLoop(); });
  return c;
}

PyClient::PyClient(std::unique_ptr<Client> client, int event_fd, int signal_fd)
    : client_(std::move(client)), event_fd_(event_fd), signal_fd_(signal_fd) {}

PyClient::~PyClient() {
  // pybind11 drops its last reference with the GIL held.
  Close();
  close(event_fd_);
  if (signal_fd_ != event_fd_) close(signal_fd_);
}

void PyClient::RaiseClosed() {
  Raise(absl::FailedPreconditionError(
      "the client is closed; create a new meshpool.Client"));
}

bool PyClient::LockOpen() {
  // Readers get mu_ at once unless Close() holds or waits for it.
  while (!closing_.load(std::memory_order_acquire)) {
    if (mu_.ReaderTryLock()) {
      if (client_ != nullptr) return true;
      mu_.ReaderUnlock();
      return false;
    }
    absl::SleepFor(absl::Microseconds(100));
  }
  return false;
}

bool PyClient::closed() { return closing_.load(std::memory_order_acquire); }

void PyClient::Close() {
  if (std::this_thread::get_id() == completer_.get_id()) {
    // It would wait for the batch whose callback is calling it.
    Raise(absl::FailedPreconditionError(
        "close() called from an async batch's done-callback; close the "
        "client from another thread"));
  }
  if (closing_.exchange(true)) return;  // closed, or closing on another thread
  {
    py::gil_scoped_release release;
    mu_.WriterLock();  // waits for calls in flight; new ones see closing_
  }
  {
    // Batches in flight still use registered memory and their buffers: let
    // them finish (the completion thread needs the GIL to hand them over).
    py::gil_scoped_release release;
    absl::MutexLock lock(&done_mu_);
    done_mu_.Await(absl::Condition(
        +[](size_t* pending) { return *pending == 0; }, &pending_));
    stopping_ = true;
  }
  {
    py::gil_scoped_release release;
    completer_.join();
  }
  for (const std::weak_ptr<PyRegistration>& w : registrations_) {
    if (std::shared_ptr<PyRegistration> r = w.lock()) r->Close();
  }
  registrations_.clear();
  std::unique_ptr<Client> client = std::move(client_);
  {
    py::gil_scoped_release release;
    client.reset();
    mu_.WriterUnlock();
  }
}

std::shared_ptr<PyRegistration> PyClient::Register(const py::handle& obj) {
  PyMemory memory = PyMemory::From(obj, /*writable=*/true, "register_buffer");
  if (memory.raw()) {
    Raise(absl::InvalidArgumentError(
        "register_buffer takes a buffer object (bytearray, mmap, NumPy "
        "array, CPU torch.Tensor), not an (address, length) pair: the "
        "client must hold the memory's owner"));
  }
  uintptr_t begin = reinterpret_cast<uintptr_t>(memory.data());
  for (const std::weak_ptr<PyRegistration>& w : registrations_) {
    std::shared_ptr<PyRegistration> r = w.lock();
    if (r == nullptr || r->closed()) continue;
    if (begin < r->address() + r->length() &&
        r->address() < begin + memory.size()) {
      Raise(absl::InvalidArgumentError(absl::StrCat(
          "the buffer overlaps one already registered at ", r->address(), " (",
          r->length(),
          " bytes); register each memory range once, or close the old one")));
    }
  }
  absl::StatusOr<std::unique_ptr<Client::RegisteredBuffer>> registered =
      Call([&](Client& c) {
        return c.RegisterBuffer(memory.data(), memory.size());
      });
  if (!registered.ok()) Raise(registered.status());
  auto r = std::make_shared<PyRegistration>(weak_from_this(), std::move(memory),
                                            *std::move(registered));
  // Forget registrations that are gone.
  std::erase_if(registrations_, [](const std::weak_ptr<PyRegistration>& w) {
    std::shared_ptr<PyRegistration> live = w.lock();
    return live == nullptr || live->closed();
  });
  registrations_.push_back(r);
  return r;
}

void PyClient::CheckRaw(const std::vector<PyMemory>& memory) {
  for (size_t i = 0; i < memory.size(); ++i) {
    if (!memory[i].raw()) continue;
    uintptr_t addr = reinterpret_cast<uintptr_t>(memory[i].data());
    bool inside = false;
    for (const std::weak_ptr<PyRegistration>& w : registrations_) {
      std::shared_ptr<PyRegistration> r = w.lock();
      if (r != nullptr && r->Contains(addr, memory[i].size())) {
        inside = true;
        break;
      }
    }
    if (!inside) {
      Raise(absl::InvalidArgumentError(absl::StrCat(
          "buffer ", i, ": (", addr, ", ", memory[i].size(),
          ") is not inside memory registered with this client; register "
          "the memory first (client.register_buffer(obj)) or pass the "
          "buffer object itself")));
    }
  }
}

// ---- Asynchronous batches
// ------------------------------------------------------

py::object PyClient::Submit(std::unique_ptr<AsyncBatch> batch) {
  py::object future =
      py::module_::import("concurrent.futures").attr("Future")();
  future.attr("set_running_or_notify_cancel")();
  batch->future = future;
  AsyncBatch* b = batch.get();
  uint64_t id;
  {
    absl::MutexLock lock(&done_mu_);
    id = next_id_++;
    in_flight_.emplace(id, std::move(batch));
    ++pending_;
  }
  auto on_done = [this, id](const BatchHandle& h) {
    absl::MutexLock lock(&done_mu_);
    AsyncBatch& done = *in_flight_.at(id);
    done.statuses = h.statuses();
    done.lengths = h.lengths();
    finished_.push_back(id);
  };
  bool open = true;
  {
    py::gil_scoped_release release;
    if (!LockOpen()) {
      open = false;
    } else {
      ReaderRelease unlock{mu_};
      if (b->get) {
        client_->BatchGetAsync(Views(b->keys), b->outs, on_done);
      } else {
        client_->BatchPutAsync(Views(b->keys), b->values, on_done);
      }
    }
  }
  if (!open) {
    absl::MutexLock lock(&done_mu_);
    in_flight_.erase(id);
    --pending_;
    RaiseClosed();
  }
  return future;
}

void PyClient::CompletionLoop() {
  while (true) {
    std::unique_ptr<AsyncBatch> batch;
    {
      absl::MutexLock lock(&done_mu_);
      done_mu_.Await(absl::Condition(
          +[](PyClient* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->done_mu_) {
            return !c->finished_.empty() || c->stopping_;
          },
          this));
      if (finished_.empty()) return;  // stopping, nothing left
      uint64_t id = finished_.front();
      finished_.pop_front();
      auto it = in_flight_.find(id);
      batch = std::move(it->second);
      in_flight_.erase(it);
    }
    {
      py::gil_scoped_acquire acquire;
      Complete(std::move(batch));
    }
    absl::MutexLock lock(&done_mu_);
    --pending_;
  }
}

void PyClient::Complete(std::unique_ptr<AsyncBatch> batch) {
  py::list results;
  for (size_t i = 0; i < batch->statuses.size(); ++i) {
    const absl::Status& s = batch->statuses[i];
    if (!s.ok()) {
      results.append(ErrorFor(s));
    } else if (batch->get) {
      results.append(py::int_(batch->lengths[i]));
    } else {
      results.append(py::none());
    }
  }
  py::object future = std::move(batch->future);
  batch.reset();  // releases the buffers before the caller sees the result
  try {
    future.attr("set_result")(results);
  } catch (py::error_already_set& e) {
    // A done-callback that raised: concurrent.futures logs those itself;
    // anything else must not end the completion thread.
    e.discard_as_unraisable("meshpool: completing an async batch");
  }
  drained_.push_back(std::move(future));
  uint64_t one = 1;
  ssize_t n = write(signal_fd_, &one, sizeof(one));
  (void)n;  // EAGAIN: the fd is readable already
}

py::list PyClient::DrainCompletions() {
  uint64_t count[8];
  while (read(event_fd_, count, sizeof(count)) > 0) {
    // A counter fd empties in one read, a pipe may need several.
  }
  py::list out;
  for (py::object& f : drained_) out.append(std::move(f));
  drained_.clear();
  return out;
}

}  // namespace meshpool::python
