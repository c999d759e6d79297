#include "runtime/error.h"

namespace torchtpu::runtime {

std::string_view error_code_name(PJRT_Error_Code code) {
  static constexpr std::string_view kNames[] = {
      "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
      "UNAUTHENTICATED"};
  auto i = static_cast<size_t>(code);
  return i < std::size(kNames) ? kNames[i] : "UNKNOWN";
}

void check(const PJRT_Api* api, PJRT_Error* error, std::string_view what) {
  if (error == nullptr) return;
  PJRT_Error_Message_Args msg{};
  msg.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  msg.error = error;
  api->PJRT_Error_Message(&msg);
  std::string text(msg.message, msg.message_size);

  PJRT_Error_GetCode_Args code_args{};
  code_args.struct_size = PJRT_Error_GetCode_Args_STRUCT_SIZE;
  code_args.error = error;
  PJRT_Error* code_error = api->PJRT_Error_GetCode(&code_args);
  PJRT_Error_Code code = code_error ? PJRT_Error_Code_UNKNOWN : code_args.code;

  PJRT_Error_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  destroy.error = error;
  api->PJRT_Error_Destroy(&destroy);
  if (code_error) check(api, code_error, "PJRT_Error_GetCode");

  throw PjrtError(code, std::string(what) + " failed (" + std::string(error_code_name(code)) +
                            "): " + text);
}

}  // namespace torchtpu::runtime
