// PJRT errors as C++ exceptions that keep the PJRT error code.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "pjrt_c_api.h"

namespace torchtpu::runtime {

// Error codes follow absl::StatusCode, which PJRT_Error_Code mirrors.
class PjrtError : public std::runtime_error {
 public:
  PjrtError(PJRT_Error_Code code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  PJRT_Error_Code code() const { return code_; }

 private:
  PJRT_Error_Code code_;
};

// Name of a PJRT error code ("INVALID_ARGUMENT").
std::string_view error_code_name(PJRT_Error_Code code);

// Turns a PJRT_Error into a PjrtError (and frees it); does nothing for nullptr.
// `what` names the call that failed so the message says where it happened.
void check(const PJRT_Api* api, PJRT_Error* error, std::string_view what);

}  // namespace torchtpu::runtime
