#include "aten/origin.h"

#include <Python.h>
#include <frameobject.h>
#include <opcode.h>

#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace torchtpu::aten {
namespace {

// The folders torch and torchtpu were imported from (with a trailing '/'), or fewer while either
// is still being imported. Decided by the installed packages' locations, not by a folder's name: a
// user's project may itself sit in a folder called torchtpu. Called with the GIL held.
const std::vector<std::string>& package_dirs() {
  static std::vector<std::string> dirs;
  if (dirs.size() == 2) return dirs;
  dirs.clear();
  for (const char* name : {"torch", "torchtpu"}) {
    PyObject* key = PyUnicode_FromString(name);
    PyObject* module = PyImport_GetModule(key);  // only if imported: never imports
    Py_DECREF(key);
    PyObject* file = module ? PyObject_GetAttrString(module, "__file__") : nullptr;
    const char* path = file && PyUnicode_Check(file) ? PyUnicode_AsUTF8(file) : nullptr;
    if (path) {
      std::string dir(path);
      dirs.push_back(dir.substr(0, dir.rfind('/') + 1));
    }
    Py_XDECREF(file);
    Py_XDECREF(module);
    PyErr_Clear();
  }
  return dirs;
}

// Frames of PyTorch, torchtpu and the standard library are not "user" frames.
bool is_internal(std::string_view file) {
  if (file.rfind("<frozen", 0) == 0) return true;
  for (const std::string& dir : package_dirs())
    if (file.rfind(dir, 0) == 0) return true;
  auto has = [&](std::string_view part) { return file.find(part) != std::string_view::npos; };
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

// "file:line" of the frame's current instruction (walks the code's line table: microseconds).
std::string line_of(PyFrameObject* frame, std::string_view file) {
  return std::string(file) + ":" + std::to_string(PyFrame_GetLineNumber(frame));
}

// Whether a code object's frames are the user's, decided once per file name (the name tests
// were most of a frame's cost). The caches below keep a reference to each object they name (a
// file name here, a code object below: user code only, as Dynamo's generated code holds what it
// compiled), so that its address is not reused. They are used with the GIL held.
bool is_user_code(PyCodeObject* code) {
  static auto* known = new std::unordered_map<PyObject*, bool>;
  PyObject* file = code->co_filename;
  if (auto it = known->find(file); it != known->end()) return it->second;
  if (known->size() >= (1 << 16)) {
    for (auto& [f, user] : *known) Py_DECREF(f);
    known->clear();
  }
  Py_ssize_t size = 0;
  const char* name = PyUnicode_AsUTF8AndSize(file, &size);
  bool user = name && size > 0 && !is_internal(std::string_view(name, size));
  Py_INCREF(file);
  known->emplace(file, user);
  return user;
}

// The origin of `op` issued at the frame's current instruction: one Origin per (code object,
// instruction, op), made once and shared by every op issued there.
std::shared_ptr<const graph::Origin> origin_at(PyFrameObject* frame, PyCodeObject* code, const std::string& op) {
  struct Site {
    PyCodeObject* code;
    int instruction;
    std::string_view op;
    bool operator==(const Site& o) const { return code == o.code && instruction == o.instruction && op == o.op; }
  };
  struct SiteHash {
    size_t operator()(const Site& s) const {
      return std::hash<void*>()(s.code) ^ (size_t(s.instruction) << 1) ^ (std::hash<std::string_view>()(s.op) << 3);
    }
  };
  static auto* known = new std::unordered_map<Site, std::shared_ptr<const graph::Origin>, SiteHash>;
  Site site{code, PyFrame_GetLasti(frame), op};
  if (auto it = known->find(site); it != known->end()) return it->second;
  if (known->size() >= (1 << 16)) {
    for (auto& [s, origin] : *known) Py_DECREF(s.code);
    known->clear();
  }
  Py_ssize_t size = 0;
  const char* file = PyUnicode_AsUTF8AndSize(code->co_filename, &size);
  auto origin = std::make_shared<const graph::Origin>(graph::Origin{op, line_of(frame, std::string_view(file, size))});
  site.op = origin->op;  // the key views the origin's own copy of the name
  Py_INCREF(code);
  known->emplace(site, origin);
  return origin;
}

// The origin of an op no Python frame issued (the autograd engine's thread): one per op name.
std::shared_ptr<const graph::Origin> frameless_origin(const std::string& op) {
  static std::mutex mu;
  static auto* known = new std::unordered_map<std::string, std::shared_ptr<const graph::Origin>>;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known->find(op);
  if (it == known->end()) it = known->emplace(op, std::make_shared<const graph::Origin>(graph::Origin{op, ""})).first;
  return it->second;
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
      if (user.empty() && !file.empty() && !is_internal(file)) user = line_of(frame, file);
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
  std::shared_ptr<const graph::Origin> origin;
  walk_python_stack([&](PyFrameObject* frame) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    if (is_user_code(code)) origin = origin_at(frame, code, op);
    Py_DECREF(code);
    return origin != nullptr;
  });
  if (origin) return origin;
  // The autograd engine runs backward ops on a thread of its own, with no user frame. A profiler
  // names the backward() call that caused them; finding it takes the GIL, so only then.
  if (exec::tracing())
    if (std::string caller = backward_caller(); !caller.empty())
      return std::make_shared<const graph::Origin>(graph::Origin{op, caller});
  return frameless_origin(op);
}

std::shared_ptr<const graph::Origin> backward_origin(const std::string& op, const std::string& node) {
  static std::mutex mu;
  static auto* known = new std::map<std::pair<std::string, std::string>, std::shared_ptr<const graph::Origin>>;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, added] = known->try_emplace({op, node});
  if (added) it->second = std::make_shared<const graph::Origin>(graph::Origin{op, "backward of " + node});
  return it->second;
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
