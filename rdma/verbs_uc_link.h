// meshpool/rdma internal: the uc backend's link over UC queue pairs: what
// Apple's RDMA over Thunderbolt 5 offers (SEND/RECV on UC QPs, no hardware
// acknowledgements, no error completion for a dead peer; ../shared/DESIGN.md
// §3), and what Soft-RoCE offers too, so the same code runs under test.
//
// VerbsUcLinks owns the opened devices; every link is one UC QP with its
// own CQ and completion channel, its send and receive frames in one
// registration on the device that reaches its peer (the device matrix), and
// receives posted ahead for the peer's whole window. Connection set-up is
// the verbs handshake (rdma/verbs_handshake.h) carried by the node's
// Handshake RPC; the handshake's region list stays empty (the responder
// checks every request instead).
//
// No verbs type appears here: only rdma/verbs_* include the verbs header.
//
// Liveness: an error completion (the QP failed: the device went away or was
// reset) breaks a link for good; a link that cannot be made while the
// devices were gone makes the next one open them again, so a process
// outlives a pulled cable and reconnects once the device is back.
//
// Thread-safety: VerbsUcLinks is thread-safe; a link is used by one thread
// at a time and may outlive the VerbsUcLinks that made it.
#ifndef MESHPOOL_RDMA_VERBS_UC_LINK_H_
#define MESHPOOL_RDMA_VERBS_UC_LINK_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rdma/rdma.h"
#include "rdma/uc.h"
#include "rdma/uc_link.h"
#include "rdma/verbs.h"
#include "rdma/verbs_handshake.h"

namespace meshpool::rdma::internal {

class VerbsUcLinks {
 public:
  // Opens UcOptions.verbs's devices. A self_name left empty becomes the
  // host name. Errors: as CreateVerbsTransport (NotFound: no such device
  // or none active; FailedPrecondition: a port down, no usable GID);
  // InvalidArgument for a bad self_name.
  static absl::StatusOr<std::shared_ptr<VerbsUcLinks>> Open(UcOptions options);
  ~VerbsUcLinks();

  // The name peers know this host by (a node's address is
  // uc://NAME/INSTANCE).
  const std::string& self_name() const;

  // Client: a link to the node named `peer`, set up through `handshake`.
  // Errors: ResourceExhausted when the device that reaches `peer` has all
  // the QPs the profile allows in use; what `handshake` returned; verbs
  // errors from creating or connecting the QP.
  absl::StatusOr<std::unique_ptr<UcLink>> Connect(absl::string_view peer,
                                                  const Handshake& handshake);

  // Node: a link for a client's handshake `request`, and the reply that
  // completes the client's side. InvalidArgument for a malformed request;
  // ResourceExhausted as Connect (the message names the device and the
  // limit).
  struct Accepted {
    std::unique_ptr<UcLink> link;
    std::string reply;
  };
  absl::StatusOr<Accepted> Accept(absl::string_view request);

  struct State;  // the devices and their budgets (verbs_uc_link.cc)

 private:
  explicit VerbsUcLinks(std::shared_ptr<State> state);
  // A link in INIT to the peer named `peer` and its QP as the peer needs
  // it. When making it fails other than for the budget, the devices may
  // have gone and come back (a cable pulled, a controller reset): they are
  // opened again, once, and the link made on them.
  absl::StatusOr<std::unique_ptr<UcLink>> NewLink(absl::string_view peer,
                                                  QpInfo* local);

  const std::string self_name_;
  mutable absl::Mutex mu_;
  // Replaced when the devices are opened again; links keep theirs alive.
  std::shared_ptr<State> state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_VERBS_UC_LINK_H_
