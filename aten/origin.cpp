#include "aten/origin.h"

#include <Python.h>
#include <frameobject.h>
#include <opcode.h>

#include <string_view>
#include <unordered_map>

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

// Opcodes that test a value's truth (their names vary between Python versions).
bool tests_truth(int op) {
#ifdef POP_JUMP_FORWARD_IF_FALSE  // 3.11
  if (op == POP_JUMP_FORWARD_IF_FALSE || op == POP_JUMP_FORWARD_IF_TRUE || op == POP_JUMP_BACKWARD_IF_FALSE ||
      op == POP_JUMP_BACKWARD_IF_TRUE)
    return true;
#endif
#ifdef POP_JUMP_IF_FALSE  // 3.12+
  if (op == POP_JUMP_IF_FALSE || op == POP_JUMP_IF_TRUE) return true;
#endif
#ifdef JUMP_IF_FALSE_OR_POP  // up to 3.11
  if (op == JUMP_IF_FALSE_OR_POP || op == JUMP_IF_TRUE_OR_POP) return true;
#endif
#ifdef TO_BOOL  // 3.13+
  if (op == TO_BOOL) return true;
#endif
  return op == UNARY_NOT;
}

// True when the frame is evaluating a conditional jump: a tensor used as `if t:` / `while t:`.
bool at_branch(PyFrameObject* frame) {
  PyCodeObject* code = PyFrame_GetCode(frame);
  PyObject* bytes = PyCode_GetCode(code);
  int offset = PyFrame_GetLasti(frame);
  bool branch = false;
  if (bytes && offset >= 0 && offset < PyBytes_Size(bytes)) {
    branch = tests_truth(static_cast<unsigned char>(PyBytes_AsString(bytes)[offset]));
  }
  Py_XDECREF(bytes);
  Py_DECREF(code);
  return branch;
}

// "file:line" of the frame's current instruction. Computing a line number walks the code's line
// table (microseconds), so it is done once per (code object, instruction) and remembered; the
// cache keeps its code objects alive so their addresses are not reused. Called with the GIL held.
std::string location_of(PyFrameObject* frame, std::string_view file) {
  using Site = std::pair<PyCodeObject*, int>;
  struct SiteHash {
    size_t operator()(const Site& s) const { return std::hash<void*>()(s.first) ^ (size_t(s.second) << 1); }
  };
  static auto* known = new std::unordered_map<Site, std::string, SiteHash>;
  PyCodeObject* code = PyFrame_GetCode(frame);
  Site site{code, PyFrame_GetLasti(frame)};
  auto it = known->find(site);
  if (it != known->end()) {
    Py_DECREF(code);
    return it->second;
  }
  if (known->size() >= (1 << 16)) {
    for (auto& [s, loc] : *known) Py_DECREF(s.first);
    known->clear();
  }
  std::string location = std::string(file) + ":" + std::to_string(PyFrame_GetLineNumber(frame));
  known->emplace(site, location);  // keeps the reference PyFrame_GetCode returned
  return location;
}

bool is_named(PyFrameObject* frame, const char* name) {
  PyCodeObject* code = PyFrame_GetCode(frame);
  bool same = PyUnicode_CompareWithASCIIString(code->co_name, name) == 0;
  Py_DECREF(code);
  return same;
}

// The user's line on a thread waiting in autograd's backward() (or grad()): the innermost frame
// outside torch on a stack that passes through _engine_run_backward. "" when none waits.
std::string backward_caller() {
  if (!Py_IsInitialized()) return "";
  PyGILState_STATE gil = PyGILState_Ensure();
  std::string caller;
  for (PyThreadState* t = PyInterpreterState_ThreadHead(PyInterpreterState_Get()); t && caller.empty();
       t = PyThreadState_Next(t)) {
    std::string user;
    bool in_backward = false;
    PyFrameObject* frame = PyThreadState_GetFrame(t);
    while (frame) {
      std::string_view file = filename_of(frame);
      if (user.empty() && !file.empty() && !is_internal(file)) user = location_of(frame, file);
      in_backward = in_backward || is_named(frame, "_engine_run_backward");
      PyFrameObject* back = PyFrame_GetBack(frame);
      Py_DECREF(frame);
      frame = back;
    }
    if (in_backward) caller = user;
  }
  PyGILState_Release(gil);
  return caller;
}

}  // namespace

std::shared_ptr<const graph::Origin> origin_of(const std::string& op) {
  auto origin = std::make_shared<graph::Origin>();
  origin->op = op;
  walk_python_stack([&](PyFrameObject* frame) {
    std::string_view file = filename_of(frame);
    if (file.empty() || is_internal(file)) return false;
    origin->location = location_of(frame, file);
    return true;
  });
  // The autograd engine runs backward ops on a thread of its own, with no user frame. A profiler
  // names the backward() call that caused them; finding it takes the GIL, so only then.
  if (origin->location.empty() && exec::tracing()) origin->location = backward_caller();
  return origin;
}

TracedLine::TracedLine(const std::string& op) {
  if (!exec::tracing()) return;
  origin_ = origin_of(op);
  cause_.emplace(origin_.get());
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
