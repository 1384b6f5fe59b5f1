// meshpool._meshpool._Client: KV calls, batches, registered buffers,
// asynchronous batches and cluster status. meshpool/client.py subclasses
// it (environment fallback, context manager); docstrings here are what
// help() shows.
#include <pybind11/stl.h>

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "py_client.h"

namespace meshpool::python {
namespace {

absl::Duration Seconds(double s, const char* what) {
  if (std::isinf(s) && s > 0) return absl::InfiniteDuration();
  if (!(s >= 0) || std::isnan(s)) {
    Raise(absl::InvalidArgumentError(
        absl::StrCat(what, " must be a number of seconds >= 0")));
  }
  return absl::Seconds(s);
}

std::vector<PyMemory> MemoryFrom(const py::handle& buffers, bool writable,
                                 size_t expected) {
  if (PyBytes_Check(buffers.ptr()) || PyByteArray_Check(buffers.ptr())) {
    Raise(absl::InvalidArgumentError(
        "buffers must be a sequence with one buffer per key, not one bytes "
        "object"));
  }
  std::vector<PyMemory> out;
  for (py::handle b : py::iter(buffers)) {
    out.push_back(
        PyMemory::From(b, writable, absl::StrCat("buffer ", out.size())));
  }
  if (out.size() != expected) {
    Raise(absl::InvalidArgumentError(
        absl::StrCat(expected, " keys but ", out.size(),
                     " buffers: pass one buffer per key")));
  }
  return out;
}

py::list PutResults(const std::vector<absl::Status>& statuses) {
  py::list out;
  for (const absl::Status& s : statuses) {
    out.append(s.ok() ? py::object(py::none()) : ErrorFor(s));
  }
  return out;
}

template <typename T>
py::list ValueResults(const std::vector<absl::StatusOr<T>>& results) {
  py::list out;
  for (const absl::StatusOr<T>& r : results) {
    out.append(r.ok() ? py::cast(*r) : ErrorFor(r.status()));
  }
  return out;
}

std::unique_ptr<AsyncBatch> MakeBatch(PyClient& c, const py::handle& keys,
                                      const py::handle& buffers, bool get) {
  auto b = std::make_unique<AsyncBatch>();
  b->get = get;
  b->keys = KeysFrom(keys);
  b->memory = MemoryFrom(buffers, /*writable=*/get, b->keys.size());
  c.CheckRaw(b->memory);
  for (const PyMemory& m : b->memory) {
    if (get) {
      b->outs.push_back(m.span());
    } else {
      b->values.push_back(m.view());
    }
  }
  return b;
}

void BindStatusTypes(py::module_& m) {
  py::class_<KvStats>(m, "KvStats",
                      "KV counters: what a client counted against the nodes.")
      .def_readonly("hits", &KvStats::hits)
      .def_readonly("misses", &KvStats::misses)
      .def_readonly("puts", &KvStats::puts)
      .def_readonly("bytes_in", &KvStats::bytes_in)
      .def_readonly("bytes_out", &KvStats::bytes_out)
      .def_readonly("pins", &KvStats::pins)
      .def("__repr__", [](const KvStats& s) {
        return absl::StrCat("KvStats(hits=", s.hits, ", misses=", s.misses,
                            ", puts=", s.puts, ", bytes_in=", s.bytes_in,
                            ", bytes_out=", s.bytes_out, ", pins=", s.pins,
                            ")");
      });
  py::class_<SessionStatus>(m, "SessionStatus",
                            "One client's session on a node.")
      .def_readonly("client_id", &SessionStatus::client_id)
      .def_readonly("stats", &SessionStatus::stats)
      .def_readonly("pinned_objects", &SessionStatus::pinned_objects)
      .def_readonly("pinned_bytes", &SessionStatus::pinned_bytes);
  py::class_<NodeStatus>(m, "NodeStatus", "One memory node, as reported.")
      .def_readonly("node_id", &NodeStatus::node_id)
      .def_readonly("alive", &NodeStatus::alive)
      .def_readonly("control_address", &NodeStatus::control_address)
      .def_readonly("transport_address", &NodeStatus::transport_address)
      .def_readonly("capacity_bytes", &NodeStatus::capacity_bytes)
      .def_readonly("used_bytes", &NodeStatus::used_bytes)
      .def_readonly("objects", &NodeStatus::objects)
      .def_readonly("slabs_total", &NodeStatus::slabs_total)
      .def_readonly("slabs_free", &NodeStatus::slabs_free)
      .def_readonly("slabs_reclaimed", &NodeStatus::slabs_reclaimed)
      .def_readonly("slabs_region", &NodeStatus::slabs_region)
      .def_readonly("slabs_evicted", &NodeStatus::slabs_evicted)
      .def_readonly("objects_evicted", &NodeStatus::objects_evicted)
      .def_readonly("pinned_objects", &NodeStatus::pinned_objects)
      .def_readonly("pinned_bytes", &NodeStatus::pinned_bytes)
      .def_readonly("clients", &NodeStatus::clients)
      .def_readonly("sessions", &NodeStatus::sessions)
      .def_readonly("error", &NodeStatus::error);
  py::class_<ClusterStatus>(m, "ClusterStatus",
                            "The cluster map's epoch and every node.")
      .def_readonly("epoch", &ClusterStatus::epoch)
      .def_readonly("nodes", &ClusterStatus::nodes);
}

void BindRegistration(py::module_& m) {
  py::class_<PyRegistration, std::shared_ptr<PyRegistration>>(
      m, "RegisteredBuffer",
      "Memory registered with a client (Client.register_buffer). Batched "
      "puts and gets whose buffers lie inside it move values with no "
      "staging copy. Holds the object's buffer (a bytearray cannot be "
      "resized meanwhile). close() or the client's close() unregisters it.")
      .def_property_readonly("address", &PyRegistration::address,
                             "Start address of the registered memory.")
      .def_property_readonly("length", &PyRegistration::length,
                             "Length in bytes.")
      .def_property_readonly("closed", &PyRegistration::closed)
      .def("close", &PyRegistration::Close,
           "Unregisters the memory (idempotent).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyRegistration& r, py::args) { r.Close(); });
}

using ClientClass = py::class_<PyClient, std::shared_ptr<PyClient>>;

// Single-key calls and buffer registration.
void BindKvCalls(ClientClass& c) {
  c.def(
       "put",
       [](PyClient& c, const py::handle& key, const py::handle& value) {
         std::string k = KeyFrom(key);
         std::vector<PyMemory> one;
         one.push_back(PyMemory::From(value, false, "value"));
         c.CheckRaw(one);
         ThrowIfError(
             c.Call([&](Client& cl) { return cl.Put(k, one[0].view()); }));
       },
       py::arg("key"), py::arg("value"),
       "Stores `value` (any bytes-like object or CPU tensor) under `key` "
       "(str or bytes), replacing what was there.")
      .def(
          "get",
          [](PyClient& c, const py::handle& key) {
            std::string k = KeyFrom(key);
            absl::StatusOr<std::string> v =
                c.Call([&](Client& cl) { return cl.Get(k); });
            if (!v.ok()) Raise(v.status());
            BindingCopiedBytes() += v->size();
            return py::bytes(*v);
          },
          py::arg("key"),
          "The value of `key` as bytes. NotFound (also a KeyError) when "
          "absent. get_into avoids the copy into a new bytes object.")
      .def(
          "get_into",
          [](PyClient& c, const py::handle& key, const py::handle& buffer) {
            std::string k = KeyFrom(key);
            PyMemory out = PyMemory::From(buffer, true, "buffer");
            std::vector<PyMemory> one;
            one.push_back(std::move(out));
            c.CheckRaw(one);
            return ValueOrRaise(
                c.Call([&](Client& cl) { return cl.Get(k, one[0].span()); }));
          },
          py::arg("key"), py::arg("buffer"),
          "Reads the value of `key` into `buffer` (writable, C-contiguous) "
          "and returns its length. OutOfRange when the buffer is too small "
          "(the message names the size needed).")
      .def(
          "delete",
          [](PyClient& c, const py::handle& key) {
            std::string k = KeyFrom(key);
            ThrowIfError(c.Call([&](Client& cl) { return cl.Delete(k); }));
          },
          py::arg("key"), "Removes `key`. NotFound when it was absent.")
      .def(
          "exists",
          [](PyClient& c, const py::handle& key) {
            std::string k = KeyFrom(key);
            return ValueOrRaise(
                c.Call([&](Client& cl) { return cl.Exists(k); }));
          },
          py::arg("key"), "Whether `key` holds a value.")
      .def("register_buffer", &PyClient::Register, py::arg("obj"),
           "Registers a writable C-contiguous buffer (bytearray, mmap, NumPy "
           "array, CPU torch.Tensor) for zero-copy batches; returns a "
           "RegisteredBuffer. Registered ranges must not overlap.");
}

// Batched and asynchronous calls, and the completion fd.
void BindBatchCalls(ClientClass& c) {
  c.def(
       "batch_put_from",
       [](PyClient& c, const py::handle& keys, const py::handle& buffers) {
         std::vector<std::string> k = KeysFrom(keys);
         std::vector<PyMemory> mem = MemoryFrom(buffers, false, k.size());
         c.CheckRaw(mem);
         std::vector<absl::string_view> values;
         for (const PyMemory& m : mem) values.push_back(m.view());
         return PutResults(
             c.Call([&](Client& cl) { return cl.BatchPut(Views(k), values); }));
       },
       py::arg("keys"), py::arg("buffers"),
       "Stores buffers[i] under keys[i]. Buffers are buffer objects or "
       "(address, length) pairs inside registered memory. Returns one "
       "entry per key: None, or the meshpool.Error for that key.")
      .def(
          "batch_get_into",
          [](PyClient& c, const py::handle& keys, const py::handle& buffers) {
            std::vector<std::string> k = KeysFrom(keys);
            std::vector<PyMemory> mem = MemoryFrom(buffers, true, k.size());
            c.CheckRaw(mem);
            std::vector<absl::Span<char>> outs;
            for (const PyMemory& m : mem) outs.push_back(m.span());
            return ValueResults(c.Call(
                [&](Client& cl) { return cl.BatchGet(Views(k), outs); }));
          },
          py::arg("keys"), py::arg("buffers"),
          "Reads keys[i] into buffers[i] (writable). Returns one entry per "
          "key: the value's length, or the meshpool.Error for that key "
          "(NotFound for a miss).")
      .def(
          "batch_exists",
          [](PyClient& c, const py::handle& keys) {
            std::vector<std::string> k = KeysFrom(keys);
            return ValueResults(
                c.Call([&](Client& cl) { return cl.BatchExists(Views(k)); }));
          },
          py::arg("keys"),
          "One entry per key: True, False, or the meshpool.Error for it.")
      .def(
          "batch_put_from_async",
          [](PyClient& c, const py::handle& keys, const py::handle& buffers) {
            return c.Submit(MakeBatch(c, keys, buffers, /*get=*/false));
          },
          py::arg("keys"), py::arg("buffers"),
          "batch_put_from, returning at once a concurrent.futures.Future of "
          "its result list. The buffers must not change until it is done.")
      .def(
          "batch_get_into_async",
          [](PyClient& c, const py::handle& keys, const py::handle& buffers) {
            return c.Submit(MakeBatch(c, keys, buffers, /*get=*/true));
          },
          py::arg("keys"), py::arg("buffers"),
          "batch_get_into, returning at once a concurrent.futures.Future of "
          "its result list. Do not touch the buffers until it is done.")
      .def_property_readonly(
          "event_fd", &PyClient::event_fd,
          "A file descriptor that becomes readable when asynchronous batches "
          "completed since the last drain_completions() (for an engine's "
          "own event loop).")
      .def("drain_completions", &PyClient::DrainCompletions,
           "The Futures of batches completed since the last drain, oldest "
           "first (each already has its result); clears event_fd.");
}

// The cluster's status.
void BindStatusCalls(ClientClass& c) {
  c.def(
       "status",
       [](PyClient& c) {
         return ValueOrRaise(c.Call([](Client& cl) { return cl.Status(); }));
       },
       "The cluster map with fresh per-node statistics (a control-plane "
       "call per node: for tools, not the data path).")
      .def_property_readonly(
          "map_epoch",
          [](PyClient& c) {
            return c.Call([](Client& cl) { return cl.map_epoch(); });
          },
          "Epoch of the cluster map this client uses.");
}

}  // namespace

void BindClient(py::module_& m) {
  BindStatusTypes(m);
  BindRegistration(m);
  m.def(
      "_binding_copied_bytes", [] { return BindingCopiedBytes().load(); },
      "Bytes the binding itself copied between Python objects and the "
      "client (for tests proving the zero-copy calls add none).");

  py::class_<PyClient, std::shared_ptr<PyClient>> client(m, "_Client");
  client
      .def(py::init([](const std::string& coordinator, double op_timeout,
                       double connect_timeout, int batch_threads,
                       int max_verify_retries,
                       std::vector<std::string> rdma_devices, int gid_index,
                       uint32_t pins_per_node, double busy_poll) {
             ClientOptions o;
             o.coordinator = coordinator;
             o.op_timeout = Seconds(op_timeout, "op_timeout");
             o.connect_timeout = Seconds(connect_timeout, "connect_timeout");
             o.batch_threads = batch_threads;
             o.max_verify_retries = max_verify_retries;
             o.rdma.devices = std::move(rdma_devices);
             o.rdma.gid_index = gid_index;
             o.pins_per_node = pins_per_node;
             o.rdma.busy_poll = Seconds(busy_poll, "busy_poll");
             return PyClient::Connect(std::move(o));
           }),
           py::arg("coordinator"), py::kw_only(), py::arg("op_timeout") = 5.0,
           py::arg("connect_timeout") = 3.0, py::arg("batch_threads") = 4,
           py::arg("max_verify_retries") = 16,
           py::arg("rdma_devices") = std::vector<std::string>{},
           py::arg("gid_index") = -1, py::arg("pins_per_node") = 0,
           py::arg("busy_poll") = absl::ToDoubleSeconds(kDefaultBusyPoll))
      .def("close", &PyClient::Close,
           "Waits for asynchronous batches, unregisters every buffer and "
           "disconnects. Idempotent; later calls raise FailedPrecondition.")
      .def_property_readonly("closed", &PyClient::closed);
  BindKvCalls(client);
  BindBatchCalls(client);
  BindStatusCalls(client);
}

}  // namespace meshpool::python
