#include "proto/proto.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace meshpool {

absl::Status FromGrpc(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  auto code = static_cast<absl::StatusCode>(status.error_code());
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    code = absl::StatusCode::kUnavailable;
  }
  return absl::Status(code, absl::StrCat(what, ": ", status.error_message()));
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

}  // namespace meshpool
