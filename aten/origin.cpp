#include "aten/origin.h"

#include <Python.h>
#include <frameobject.h>
#include <opcode.h>

#include <string_view>

namespace torchtpu::aten {
namespace {

// Frames of PyTorch, torchtpu and the standard library are not "user" frames.
bool is_internal(std::string_view file) {
  auto has = [&](std::string_view part) { return file.find(part) != std::string_view::npos; };
  if (has("/torch/") || has("/torchtpu/") || file.rfind("<frozen", 0) == 0) return true;
  return has("/lib/python3.") && !has("-packages/");
}

std::string_view filename_of(PyFrameObject* frame) {
  PyCodeObject* code = PyFrame_GetCode(frame);
  Py_ssize_t size = 0;
  const char* name = PyUnicode_AsUTF8AndSize(code->co_filename, &size);
  Py_DECREF(code);
  return name ? std::string_view(name, size) : std::string_view();
}

// Calls `visit(frame)` from the innermost frame outwards until it returns true. Only on threads
// that run Python (the autograd engine's device threads have no user frames).
template <typename Visit>
void walk_python_stack(Visit visit) {
  if (!Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyFrameObject* frame = PyThreadState_GetFrame(PyThreadState_Get());
  while (frame) {
    bool done = visit(frame);
    PyFrameObject* back = done ? nullptr : PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  PyGILState_Release(gil);
}

// True when the frame is evaluating a conditional jump: a tensor used as `if t:` / `while t:`.
bool at_branch(PyFrameObject* frame) {
  PyCodeObject* code = PyFrame_GetCode(frame);
  PyObject* bytes = PyCode_GetCode(code);
  int offset = PyFrame_GetLasti(frame);
  bool branch = false;
  if (bytes && offset >= 0 && offset < PyBytes_Size(bytes)) {
    int op = static_cast<unsigned char>(PyBytes_AsString(bytes)[offset]);
    branch = op == POP_JUMP_FORWARD_IF_FALSE || op == POP_JUMP_FORWARD_IF_TRUE ||
             op == POP_JUMP_BACKWARD_IF_FALSE || op == POP_JUMP_BACKWARD_IF_TRUE ||
             op == JUMP_IF_FALSE_OR_POP || op == JUMP_IF_TRUE_OR_POP || op == UNARY_NOT;
  }
  Py_XDECREF(bytes);
  Py_DECREF(code);
  return branch;
}

}  // namespace

std::shared_ptr<const graph::Origin> origin_of(const std::string& op) {
  auto origin = std::make_shared<graph::Origin>();
  origin->op = op;
  walk_python_stack([&](PyFrameObject* frame) {
    std::string_view file = filename_of(frame);
    if (file.empty() || is_internal(file)) return false;
    origin->location = std::string(file) + ":" + std::to_string(PyFrame_GetLineNumber(frame));
    return true;
  });
  return origin;
}

std::string sync_reason(const char* kind) {
  std::string reason = kind;
  walk_python_stack([&](PyFrameObject* frame) {
    std::string_view file = filename_of(frame);
    if (file.find("torch/_tensor_str.py") != std::string_view::npos) {
      reason = "print";
      return true;
    }
    if (file.empty() || is_internal(file)) return false;
    if (at_branch(frame)) reason = "control flow";
    return true;
  });
  return reason;
}

}  // namespace torchtpu::aten
