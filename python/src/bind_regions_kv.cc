// meshpool._meshpool: regions (named, striped, replicated memory) and the
// KV-cache calls (block keys, prefix match, pins, counters).
#include <pybind11/stl.h>

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "meshpool/kv_cache.h"
#include "meshpool/region.h"
#include "py_client.h"

namespace meshpool::python {
namespace {

using PyRegion = ClientBound<Region>;

py::object Described(const RegionDescription& d) {
  py::object ns = py::module_::import("types").attr("SimpleNamespace");
  return ns(
      py::arg("name") = d.name, py::arg("size") = d.size,
      py::arg("stripe_bytes") = d.stripe_bytes,
      py::arg("replicas") = d.replicas, py::arg("nodes") = d.nodes,
      py::arg("created") = absl::ToDoubleSeconds(d.created - absl::UnixEpoch()),
      py::arg("health") = HealthObject(d.health));
}

absl::Duration Ttl(const py::object& ttl, bool none_is_hard) {
  if (ttl.is_none()) return none_is_hard ? kHardPin : absl::ZeroDuration();
  double s = ttl.cast<double>();
  if (std::isinf(s) && s > 0) return kHardPin;
  if (!(s > 0)) {
    Raise(absl::InvalidArgumentError(
        "a pin ttl must be seconds > 0, or meshpool.HARD_PIN"));
  }
  return absl::Seconds(s);
}

py::list StatusList(const std::vector<absl::Status>& statuses) {
  py::list out;
  for (const absl::Status& s : statuses) {
    out.append(s.ok() ? py::object(py::none()) : ErrorFor(s));
  }
  return out;
}

BlockKeyOptions KeyOptions(const std::string& model, uint32_t tp_rank,
                           uint32_t tp_size, uint32_t pp_rank, uint32_t pp_size,
                           const std::string& salt, uint32_t block_tokens) {
  BlockKeyOptions o;
  o.model = model;
  o.tp_rank = tp_rank;
  o.tp_size = tp_size;
  o.pp_rank = pp_rank;
  o.pp_size = pp_size;
  o.salt = salt;
  o.block_tokens = block_tokens;
  return o;
}

// Tokens as int32: a Python sequence of ints or a 1-D integer array.
std::vector<int32_t> Tokens(const py::handle& tokens) {
  std::vector<int32_t> out;
  for (py::handle t : py::iter(tokens)) {
    long long v = t.cast<long long>();
    if (v < INT32_MIN || v > INT32_MAX) {
      Raise(absl::InvalidArgumentError(
          absl::StrCat("token ", v, " does not fit in 32 bits")));
    }
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

void BindRegionClass(py::module_& m) {
  py::class_<PyRegion>(
      m, "Region",
      "A named region of pooled memory, striped across nodes (and "
      "replicated when created so). Offsets are bytes from its start.")
      .def_property_readonly("name", [](PyRegion& r) { return r.get().name(); })
      .def_property_readonly("size", [](PyRegion& r) { return r.get().size(); })
      .def_property_readonly("stripe_bytes",
                             [](PyRegion& r) { return r.get().stripe_bytes(); })
      .def_property_readonly("replicas",
                             [](PyRegion& r) { return r.get().replicas(); })
      .def(
          "read_into",
          [](PyRegion& r, uint64_t offset, const py::handle& buffer) {
            PyMemory out = PyMemory::From(buffer, true, "buffer");
            if (out.raw()) {
              Raise(absl::InvalidArgumentError(
                  "read_into takes a buffer object, not an (address, "
                  "length) pair"));
            }
            ThrowIfError(
                r.Call([&](Region& g) { return g.Read(offset, out.span()); }));
          },
          py::arg("offset"), py::arg("buffer"),
          "Fills `buffer` (writable) with the region's bytes from `offset`.")
      .def(
          "read",
          [](PyRegion& r, uint64_t offset, size_t length) {
            std::string out(length, '\0');
            ThrowIfError(r.Call([&](Region& g) {
              return g.Read(offset, absl::MakeSpan(out));
            }));
            BindingCopiedBytes() += length;
            return py::bytes(out);
          },
          py::arg("offset"), py::arg("length"),
          "`length` bytes from `offset`, as bytes.")
      .def(
          "write",
          [](PyRegion& r, uint64_t offset, const py::handle& data) {
            PyMemory in = PyMemory::From(data, false, "data");
            if (in.raw()) {
              Raise(absl::InvalidArgumentError(
                  "write takes a buffer object, not an (address, length) "
                  "pair"));
            }
            ThrowIfError(r.Call([&](Region& g) {
              return g.Write(offset, absl::MakeConstSpan(in.data(), in.size()));
            }));
          },
          py::arg("offset"), py::arg("data"),
          "Writes `data` at `offset` (to every copy of a replicated region).")
      .def(
          "verify",
          [](PyRegion& r, uint64_t offset, const py::handle& data) {
            PyMemory in = PyMemory::From(data, false, "data");
            ThrowIfError(r.Call([&](Region& g) {
              return g.Verify(offset,
                              absl::MakeConstSpan(in.data(), in.size()));
            }));
          },
          py::arg("offset"), py::arg("data"),
          "Checks, on the nodes, that every copy holds `data` at `offset`; "
          "raises DataLoss when one differs.")
      .def(
          "compare_and_swap",
          [](PyRegion& r, uint64_t offset, uint64_t expected,
             uint64_t desired) {
            return ValueOrRaise(r.Call([&](Region& g) {
              return g.CompareAndSwap(offset, expected, desired);
            }));
          },
          py::arg("offset"), py::arg("expected"), py::arg("desired"),
          "Atomic 64-bit compare-and-swap at an 8-byte-aligned offset; "
          "returns the value found (== expected when it swapped).")
      .def(
          "fetch_add",
          [](PyRegion& r, uint64_t offset, uint64_t delta) {
            return ValueOrRaise(
                r.Call([&](Region& g) { return g.FetchAdd(offset, delta); }));
          },
          py::arg("offset"), py::arg("delta"),
          "Atomic 64-bit fetch-and-add; returns the value before.");
}

void BindRegionCalls(py::class_<PyClient, std::shared_ptr<PyClient>>& c) {
  c.def(
       "create_region",
       [](std::shared_ptr<PyClient> self, const std::string& name,
          uint64_t size, uint64_t stripe_bytes, uint32_t replicas) {
         RegionOptions o;
         o.stripe_bytes = stripe_bytes;
         o.replicas = replicas;
         auto region = ValueOrRaise(self->Call(
             [&](Client& cl) { return CreateRegion(cl, name, size, o); }));
         return std::make_unique<PyRegion>(self, std::move(region));
       },
       py::arg("name"), py::arg("size"), py::kw_only(),
       py::arg("stripe_bytes") = 0, py::arg("replicas") = 1,
       "Creates a region of `size` bytes (zeroed). AlreadyExists when the "
       "name is taken; ResourceExhausted when the pool lacks the memory.")
      .def(
          "open_region",
          [](std::shared_ptr<PyClient> self, const std::string& name) {
            auto region = ValueOrRaise(
                self->Call([&](Client& cl) { return OpenRegion(cl, name); }));
            return std::make_unique<PyRegion>(self, std::move(region));
          },
          py::arg("name"), "Opens a region by name. NotFound when absent.")
      .def(
          "delete_region",
          [](PyClient& self, const std::string& name) {
            ThrowIfError(
                self.Call([&](Client& cl) { return DeleteRegion(cl, name); }));
          },
          py::arg("name"), "Deletes a region and frees its memory.")
      .def(
          "rename_region",
          [](PyClient& self, const std::string& from, const std::string& to,
             bool replace) {
            ThrowIfError(self.Call([&](Client& cl) {
              return RenameRegion(cl, from, to, replace);
            }));
          },
          py::arg("src"), py::arg("dst"), py::kw_only(),
          py::arg("replace") = false,
          "Renames a region atomically; with replace=True an existing `dst` "
          "is deleted in the same step.")
      .def(
          "list_regions",
          [](PyClient& self, const std::string& prefix) {
            auto regions = ValueOrRaise(
                self.Call([&](Client& cl) { return ListRegions(cl, prefix); }));
            py::list out;
            for (const RegionDescription& d : regions) out.append(Described(d));
            return out;
          },
          py::arg("prefix") = "",
          "Regions whose names start with `prefix`: objects with name, "
          "size, stripe_bytes, replicas, nodes, created (Unix seconds).");
}

void BindKvCacheCalls(py::class_<PyClient, std::shared_ptr<PyClient>>& c) {
  c.def(
       "prefix_match",
       [](PyClient& self, const py::handle& keys, const py::object& pin_ttl) {
         std::vector<std::string> k = KeysFrom(keys);
         absl::Duration ttl = Ttl(pin_ttl, /*none_is_hard=*/false);
         return ValueOrRaise(self.Call(
             [&](Client& cl) { return PrefixMatch(cl, Views(k), ttl); }));
       },
       py::arg("keys"), py::arg("pin_ttl") = py::none(),
       "How many leading keys the pool holds. With pin_ttl (seconds, or "
       "HARD_PIN) the matched keys are pinned in the same call.")
      .def(
          "pin",
          [](PyClient& self, const py::handle& keys, const py::object& ttl) {
            std::vector<std::string> k = KeysFrom(keys);
            absl::Duration d = Ttl(ttl, /*none_is_hard=*/true);
            return StatusList(
                self.Call([&](Client& cl) { return Pin(cl, Views(k), d); }));
          },
          py::arg("keys"), py::arg("ttl") = py::none(),
          "Pins each key's value against eviction for `ttl` seconds (None "
          "or HARD_PIN: until unpin or this client ends). One entry per "
          "key: None, or its meshpool.Error.")
      .def(
          "unpin",
          [](PyClient& self, const py::handle& keys) {
            std::vector<std::string> k = KeysFrom(keys);
            return StatusList(
                self.Call([&](Client& cl) { return Unpin(cl, Views(k)); }));
          },
          py::arg("keys"),
          "Drops this client's pins of `keys`; NotFound for a key it had "
          "not pinned.")
      .def(
          "kv_statistics",
          [](PyClient& self) {
            KvCounters counters =
                self.Call([](Client& cl) { return KvStatistics(cl); });
            py::dict per_node;
            for (const auto& [node, stats] : counters.per_node) {
              per_node[py::str(node)] = stats;
            }
            py::object ns =
                py::module_::import("types").attr("SimpleNamespace");
            return ns(py::arg("total") = counters.total,
                      py::arg("per_node") = per_node);
          },
          "What this client counted: .total and .per_node (KvStats).");
}

}  // namespace

void BindRegions(py::module_& m) {
  BindRegionClass(m);
  auto client =
      py::reinterpret_borrow<py::class_<PyClient, std::shared_ptr<PyClient>>>(
          m.attr("_Client"));
  BindRegionCalls(client);
  BindKvCacheCalls(client);
}

namespace {

void BindBlockKeyChain(py::module_& m) {
  py::class_<BlockKeyChain>(
      m, "BlockKeyChain",
      "Keys for a token sequence's KV blocks, one per full block: each "
      "key names the block and every block before it, so equal prefixes "
      "give equal keys across engines.")
      .def(py::init([](const std::string& model, uint32_t tp_rank,
                       uint32_t tp_size, uint32_t pp_rank, uint32_t pp_size,
                       const std::string& salt, uint32_t block_tokens) {
             return ValueOrRaise(BlockKeyChain::Create(
                 KeyOptions(model, tp_rank, tp_size, pp_rank, pp_size, salt,
                            block_tokens)));
           }),
           py::arg("model"), py::kw_only(), py::arg("tp_rank") = 0,
           py::arg("tp_size") = 1, py::arg("pp_rank") = 0,
           py::arg("pp_size") = 1, py::arg("salt") = "",
           py::arg("block_tokens") = 16)
      .def(
          "append",
          [](BlockKeyChain& chain, const py::handle& tokens) {
            return chain.Append(Tokens(tokens));
          },
          py::arg("tokens"),
          "Adds tokens; returns the keys of the blocks they completed.")
      .def_property_readonly("keys", &BlockKeyChain::keys,
                             "Every completed block's key, in order.")
      .def_property_readonly("pending_tokens", &BlockKeyChain::pending_tokens,
                             "Tokens waiting for their block to fill.");
}

}  // namespace

void BindKvCache(py::module_& m) {
  m.attr("HARD_PIN") = py::float_(INFINITY);
  BindBlockKeyChain(m);
  m.def(
      "block_keys",
      [](const py::handle& tokens, const std::string& model, uint32_t tp_rank,
         uint32_t tp_size, uint32_t pp_rank, uint32_t pp_size,
         const std::string& salt, uint32_t block_tokens) {
        return ValueOrRaise(
            BlockKeys(KeyOptions(model, tp_rank, tp_size, pp_rank, pp_size,
                                 salt, block_tokens),
                      Tokens(tokens)));
      },
      py::arg("tokens"), py::kw_only(), py::arg("model"),
      py::arg("tp_rank") = 0, py::arg("tp_size") = 1, py::arg("pp_rank") = 0,
      py::arg("pp_size") = 1, py::arg("salt") = "",
      py::arg("block_tokens") = 16,
      "The keys of every full block of `tokens` (BlockKeyChain in one call).");
}

}  // namespace meshpool::python
