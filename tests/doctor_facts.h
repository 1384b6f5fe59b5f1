// Fabricated `meshpool doctor` facts and report helpers shared by the
// doctor tests (Linux and macOS).
#ifndef MESHPOOL_TESTS_DOCTOR_FACTS_H_
#define MESHPOOL_TESTS_DOCTOR_FACTS_H_

#include <string>
#include <vector>

#include "tools/doctor.h"

namespace meshpool::testing {

// A pool of the default size registered on `device`.
inline tools::RegistrationFacts Registered(const std::string& device) {
  tools::RegistrationFacts reg;
  reg.device = device;
  reg.ok = true;
  reg.bytes = tools::kDefaultDoctorPoolBytes;
  reg.seconds = 0.125;
  reg.page_kind = "transparent huge pages";
  return reg;
}

// The findings of `report` with `severity`, in order.
inline std::vector<tools::Finding> WithSeverity(
    const tools::DoctorReport& report, tools::Severity severity) {
  std::vector<tools::Finding> out;
  for (const tools::Finding& f : report.findings) {
    if (f.severity == severity) out.push_back(f);
  }
  return out;
}

}  // namespace meshpool::testing

#endif  // MESHPOOL_TESTS_DOCTOR_FACTS_H_
