// torch.compile's capture: the ops one thread issues between begin_capture() and end_capture() are
// recorded through the same lowerings as eager mode, not run, and become one program whose
// parameters are the graph's inputs. A CompiledGraph then runs that program on new inputs without
// dispatching a single op.
#pragma once

#include <array>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "exec/buffer_ref.h"
#include "graph/window.h"
#include "runtime/executable.h"

namespace torchtpu::exec {

// A fresh rng_bit_generator state from a random op's generator (drawn anew on every run, so
// compiled graphs advance the generator exactly as eager ops do).
using RandomDraw = std::function<std::array<uint64_t, 2>()>;

// Where a program parameter, or the new contents of a storage, comes from on each run.
struct ValueSource {
  enum class Kind { kInput, kResult, kConstant, kRandom };
  Kind kind = Kind::kConstant;
  size_t index = 0;          // kInput: input position; kResult: program result position
  graph::ValuePtr constant;  // kConstant: an immutable value made during capture (a lifted constant)
  RandomDraw draw;           // kRandom
};

// An input of the graph as the executor sees it: a storage and the dtype it is read as.
struct GraphInput {
  BufferRef* storage;
  DType dtype;
};

class CompiledGraph {
 public:
  // What a run binds and where its results go, as the capture found it.
  struct Plan {
    std::vector<ValueSource> parameters;
    std::vector<DType> result_dtypes;
    std::vector<int64_t> result_lengths;
    std::vector<std::pair<size_t, ValueSource>> writebacks;  // (input, its new contents)
    std::vector<ValueSource> outputs;
    struct Check {
      size_t result;
      std::string message;
      bool index_error;  // IndexError, or RuntimeError (graph::DeviceCheck)
    };
    std::vector<Check> checks;  // device-side checks
    std::vector<std::string> signature;                  // per input, see mismatch()
    // Parameters whose buffer the program may reuse for the input's new contents: donated on a
    // run when nothing but the input's storage still holds them.
    std::vector<size_t> donatable;
    int device = 0;
    size_t num_ops = 0;
    std::string what;
  };

  // `exe`: the program, or a compile in progress (run() waits for it, or raises its failure).
  using ExecutableFuture = std::shared_future<std::shared_ptr<runtime::Executable>>;
  CompiledGraph(ExecutableFuture exe, Plan plan) : exe_(std::move(exe)), plan_(std::move(plan)) {}

  // Why `inputs` cannot run this program ("" when they can): the capture's program assumes each
  // input's flat size, dtype and which inputs share contents.
  std::string mismatch(const std::vector<GraphInput>& inputs) const;

  // Runs on `inputs` (in capture order): the new contents of mutated inputs are swapped into
  // their storages; returns the contents of each output storage given to end_capture().
  std::vector<graph::ValuePtr> run(const std::vector<GraphInput>& inputs) const;

  size_t num_ops() const { return plan_.num_ops; }
  int device() const { return plan_.device; }
  const std::string& what() const { return plan_.what; }

 private:
  graph::ValuePtr value_of(const ValueSource& s, const std::vector<GraphInput>& inputs,
                           const std::vector<graph::ValuePtr>& results) const;

  ExecutableFuture exe_;
  Plan plan_;
};

// Starts recording this thread's ops (after executing what the eager modes left pending).
// Never-written inputs are materialized as zeros so that each input is one program parameter.
void begin_capture(const std::vector<GraphInput>& inputs);
bool capturing();

// Stops recording and compiles the recorded ops as one program (or finds it in the compile cache
// tiers), runs it for the capture's own call so that the outputs' and mutated inputs' storages
// hold real results, and returns it. Outside debug mode, the compile and that first run happen on
// a thread of their own and the storages' values arrive when it is done (graph::DeviceValue::
// arrive_later): the caller goes on (Dynamo traces the next frame) while XLA compiles. Should that
// run fail, the written inputs keep their old contents and the next host sync raises the error. `outputs` are the output storages the caller will rebuild on
// each run (those that are not inputs). `what` names the graph in errors and metrics; `identity`
// says what counts as "the same graph" for recompile tracking.
std::shared_ptr<CompiledGraph> end_capture(const std::vector<BufferRef*>& outputs, const std::string& what,
                                           const std::string& identity);

// Waits until no compiled graph's first run is in flight; then raises the failure of one that
// failed since the last call (ExecutionFailed), if any.
void wait_for_first_runs();
int first_runs_in_flight();
void raise_first_run_failure();

// Abandons the capture after an error: the recorded ops never run and the inputs get their
// contents back.
void abort_capture();

// Hooks for the recording side: a random op's generator state, and a device-side check.
void capture_random_state(const graph::ValuePtr& state, RandomDraw draw);
void capture_check(const graph::ValuePtr& ok, const std::string& message, bool index_error);
// Records a node into this thread's capture (the executor calls it instead of running the node).
void capture_node(graph::NodePtr node);

}  // namespace torchtpu::exec
