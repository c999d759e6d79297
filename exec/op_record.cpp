#include "exec/op_record.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_set>
#include <vector>

#include "exec/compile_cache.h"
#include "exec/executor.h"
#include "exec/padded_view.h"
#include "exec/runtime_offset.h"
#include "exec/view_program.h"
#include "graph/key_text.h"

namespace torchtpu::exec {
namespace {

// A storage the op touches: one flat input (unless fully overwritten) and, if written, one
// flat output.
struct Slot {
  BufferRef* storage;
  DType flat_dtype;
  int64_t flat_length;
  bool read = false;     // the program needs the current contents
  bool written = false;  // the program produces new contents
};

// A padded result may be written whole through a transposed view too (exec/padded_view.h).
bool overwrites_all(const Operand& o) {
  return (o.view.is_contiguous() || (o.padding && o.view.is_dense())) && o.view.offset == 0 &&
         static_cast<size_t>(o.view.numel()) * element_size(o.view.dtype) == o.storage->nbytes();
}

struct SlotPlan {
  std::vector<Slot> slots;
  std::vector<size_t> input_slot, output_slot;  // per operand

  explicit SlotPlan(const OpCall& call) {
    slots.reserve(call.inputs.size() + call.outputs.size());
    input_slot.reserve(call.inputs.size());
    output_slot.reserve(call.outputs.size());
    for (const Operand& in : call.inputs) {
      input_slot.push_back(slot_for(in, false));
      slots[input_slot.back()].read = true;
    }
    for (const Operand& out : call.outputs) {
      bool whole = overwrites_all(out);
      size_t before = slots.size();
      output_slot.push_back(slot_for(out, whole));
      Slot& s = slots[output_slot.back()];
      if (!whole) s.read = true;
      s.written = true;
      // A padded result written whole keeps the box's elements: its capacity (exec/padded_view.h).
      if (whole && out.padding && slots.size() > before) s.flat_length = box_elements(*out.padding);
    }
  }

  static int64_t box_elements(const Padding& p) {
    int64_t n = 1;
    for (int64_t d : p.box) n *= d;
    return n;
  }

  size_t slot_for(const Operand& o, bool full_overwrite) {
    for (size_t i = 0; i < slots.size(); ++i)
      if (slots[i].storage == o.storage) return i;
    // A storage being replaced whole takes the writer's dtype; otherwise keep what it holds.
    // A padded value may hold more elements than the storage's bytes (its capacity).
    const graph::ValuePtr& v = o.storage->value();
    bool keep = v && !full_overwrite;
    DType dtype = keep ? v->dtype() : o.view.dtype;
    int64_t length = keep ? v->length() : static_cast<int64_t>(o.storage->nbytes() / element_size(dtype));
    slots.push_back({o.storage, dtype, length});
    return slots.size() - 1;
  }

  std::string key(const OpCall& call) const {
    size_t room = slots.size() * kSlotRoom;
    for (const Operand& o : call.inputs) room += kOperandRoom + o.view.key_room();
    for (const Operand& o : call.outputs) room += kOperandRoom + o.view.key_room();
    std::string key;
    if (call.sizes_to_lowering) room += 7;
    key.reserve(call.key.size() + room);  // one allocation: the writers below stay inside it
    key = call.key;
    if (call.sizes_to_lowering) key += "|sizes";
    {
      graph::KeyWriter w(key, slots.size() * kSlotRoom);
      for (const Slot& s : slots) {
        w << (s.read ? "|read " : "|write ") << dtype_name(s.flat_dtype) << '[';
        w.number(s.flat_length) << ']';
      }
    }
    for (size_t i = 0; i < call.inputs.size(); ++i) append_operand(key, 'i', input_slot[i], call.inputs[i]);
    for (size_t i = 0; i < call.outputs.size(); ++i) append_operand(key, 'o', output_slot[i], call.outputs[i]);
    return key;
  }

  static constexpr size_t kSlotRoom = sizeof("|write []") + sizeof("complex<f64>") + graph::KeyWriter::kNumberRoom;
  static constexpr size_t kOperandRoom = 2 + graph::KeyWriter::kNumberRoom;

  static void append_operand(std::string& key, char kind, size_t slot, const Operand& o) {
    {
      graph::KeyWriter w(key, kOperandRoom);
      w << '|' << kind;
      w.number(static_cast<int64_t>(slot));
    }
    if (o.padding) append_padded_key(key, o.view, *o.padding);
    else o.view.append_key(key, /*with_offset=*/o.offset_at < 0);
  }
};

// An input's exact sizes as an s64[rank] value: from the geometry when padded, else constants.
hlo::Value exact_sizes(hlo::Builder& b, const std::optional<hlo::Value>& geometry, const Operand& o) {
  if (o.padding) return padded_sizes(b, *geometry, o.view, *o.padding);
  int64_t rank = static_cast<int64_t>(o.view.sizes.size());
  return b.constant_bytes(o.view.sizes.data(), {DType::kS64, {rank}});
}

// An operand's run-time offset, a 0-d s64 value from the call's geometry input.
hlo::Value offset(hlo::Builder& b, const hlo::Value& geometry, const Operand& o) {
  return b.reshape(b.slice(geometry, {o.offset_at}, {o.offset_at + 1}, {1}), {});
}

// The node's program fragment: flat values of the read slots in, flat values of the written
// slots out. Owns everything it needs (the call's operands, moved in: their views), since it may
// run after the call returned; it keeps no storages.
struct Fragment {
  Lowering lower;
  std::vector<Slot> slots;
  std::vector<size_t> input_slot, output_slot;
  std::vector<Operand> inputs, outputs;
  bool has_geometry;  // the last input is the padded operands' geometry (exec/padded_view.h)
  bool sizes_to_lowering;

  std::vector<hlo::Value> operator()(hlo::Builder& b, const std::vector<hlo::Value>& reads) const {
    std::vector<hlo::Value> flat(slots.size());
    for (size_t i = 0, next = 0; i < slots.size(); ++i)
      if (slots[i].read) flat[i] = reads.at(next++);
    size_t n = inputs.size() - (has_geometry ? 1 : 0);
    std::optional<hlo::Value> geometry;
    if (has_geometry) geometry = read_view(b, flat[input_slot[n]], inputs[n].view);
    std::vector<hlo::Value> values;
    values.reserve(sizes_to_lowering ? 2 * n : n);
    for (size_t i = 0; i < n; ++i) {
      const Operand& in = inputs[i];
      const hlo::Value& from = flat[input_slot[i]];
      if (in.padding) values.push_back(read_padded(b, from, *geometry, in.view, *in.padding));
      else if (in.offset_at >= 0) values.push_back(read_at_offset(b, from, offset(b, *geometry, in), in.view));
      else values.push_back(read_view(b, from, in.view));
    }
    if (sizes_to_lowering)
      for (size_t i = 0; i < n; ++i) values.push_back(exact_sizes(b, geometry, inputs[i]));
    std::vector<hlo::Value> results = lower(b, values);
    if (results.size() != outputs.size())
      throw std::logic_error("a lowering returned " + std::to_string(results.size()) + " results for " +
                             std::to_string(outputs.size()) + " outputs");
    for (size_t i = 0; i < results.size(); ++i) {
      const Slot& s = slots[output_slot[i]];
      const Operand& out = outputs[i];
      hlo::Value& target = flat[output_slot[i]];
      if (out.padding)
        target = write_padded(b, s.read ? std::optional<hlo::Value>(target) : std::nullopt, s.flat_length, *geometry,
                              out.view, *out.padding, results[i]);
      else if (out.offset_at >= 0 && s.read)  // unread: written whole, so its offset is 0
        target = write_at_offset(b, target, offset(b, *geometry, out), out.view, results[i]);
      else
        target = s.read ? write_view(b, target, out.view, results[i]) : b.reshape(results[i], {s.flat_length});
    }
    std::vector<hlo::Value> written;
    for (size_t i = 0; i < slots.size(); ++i)
      if (slots[i].written) written.push_back(flat[i]);
    return written;
  }
};

// The storage's current value, creating zeros for a never-written one.
graph::ValuePtr current_value(BufferRef& storage, DType dtype) {
  if (!storage.value()) {
    std::vector<char> zeros(storage.nbytes(), 0);
    upload(storage, zeros.data(), dtype);
  }
  return storage.value();
}

// The storages' device; throws when they are on different ones.
int device_of(const OpCall& call, const SlotPlan& plan) {
  int device = plan.slots.empty() ? 0 : plan.slots[0].storage->device();
  for (const Slot& s : plan.slots)
    if (s.storage->device() != device)
      throw std::invalid_argument(call.key.substr(0, call.key.find('|')) + ": operands are on different devices (tpu:" +
                                  std::to_string(device) + " and tpu:" + std::to_string(s.storage->device()) + ")");
  return device;
}

// New values for the written slots, carrying `inherited`, swapped into their storages and
// appended to `results` (shared or weak pointers).
template <typename Results>
void swap_in_results(const SlotPlan& plan, int device, const std::vector<graph::CheckPtr>& inherited, Results& results) {
  results.reserve(plan.output_slot.size());
  for (const Slot& s : plan.slots)
    if (s.written) {
      auto value = std::make_shared<graph::DeviceValue>(device, s.flat_dtype, s.flat_length);
      value->inherit(inherited);
      results.push_back(value);
      s.storage->swap(std::move(value));
    }
}

}  // namespace

// Linear in the checks (a chain of checked ops between two host syncs carries one more per op):
// one value's checks are distinct already, so only those of a later input are looked up.
std::vector<graph::CheckPtr> unsettled_checks(const std::vector<graph::ValuePtr>& inputs) {
  std::vector<graph::CheckPtr> checks;
  std::unordered_set<const graph::DeviceCheck*> seen;
  for (const graph::ValuePtr& v : inputs) {
    raise_if_failed(*v);
    if (v->checks().empty()) continue;
    bool first = checks.empty();
    if (!first && seen.empty())
      for (const graph::CheckPtr& c : checks) seen.insert(c.get());
    for (const graph::CheckPtr& c : v->checks())
      if (c->state != graph::DeviceCheck::kPassed && (first || seen.insert(c.get()).second)) checks.push_back(c);
  }
  return checks;
}

graph::NodePtr record_op(OpCall&& call) {
  SlotPlan plan(call);
  auto node = std::make_shared<graph::Node>();
  node->key = plan.key(call);
  node->origin = call.origin;
  node->zero_bytes = call.zero_bytes && plan.slots.size() == 1 && !plan.slots[0].read;
  int device = device_of(call, plan);
  node->inputs.reserve(plan.slots.size());
  for (const Slot& s : plan.slots)
    if (s.read) node->inputs.push_back(current_value(*s.storage, s.flat_dtype));
  swap_in_results(plan, device, unsettled_checks(node->inputs), node->outputs);
  for (Slot& s : plan.slots) s.storage = nullptr;  // the fragment must not reach storages later
  node->emit = Fragment{std::move(call.lower),     std::move(plan.slots),   std::move(plan.input_slot),
                        std::move(plan.output_slot), std::move(call.inputs),  std::move(call.outputs),
                        call.geometry != nullptr,    call.sizes_to_lowering};
  return node;
}

std::optional<BoundOp> bind_loaded(const OpCall& call) {
  SlotPlan plan(call);
  int device = device_of(call, plan);
  std::vector<graph::ValuePtr> inputs, parameters;
  inputs.reserve(plan.slots.size());
  parameters.reserve(plan.slots.size());
  for (const Slot& s : plan.slots)
    if (s.read) {
      inputs.push_back(current_value(*s.storage, s.flat_dtype));
      if (!inputs.back()->is_materialized()) return std::nullopt;  // the long way says what went wrong
    }
  // The key graph::Window gives this op's node alone (Keep::kAlive: every output is held).
  std::string node_key = plan.key(call), key;
  {
    constexpr size_t kNumber = graph::KeyWriter::kNumberRoom;
    graph::KeyWriter w(key, node_key.size() + kNumber + 5 + (inputs.size() + plan.slots.size()) * (kNumber + 3));
    w.number(node_key.size()) << ':' << node_key << '<';
    for (const graph::ValuePtr& in : inputs) {
      size_t p = in->is_scalar() ? parameters.size()  // as graph::Window numbers them
                                 : std::find(parameters.begin(), parameters.end(), in) - parameters.begin();
      if (p == parameters.size()) parameters.push_back(in);
      w << 'p';
      w.number(p) << ',';
    }
    w << ">=>";
    int64_t written = 0;
    for (const Slot& s : plan.slots)
      if (s.written) {
        w << "0.";
        w.number(written++) << ',';
      }
  }
  std::shared_ptr<runtime::Executable> exe = loaded_executable(key);
  if (!exe) return std::nullopt;
  std::vector<graph::ValuePtr> results;
  swap_in_results(plan, device, unsettled_checks(inputs), results);
  return BoundOp{std::move(exe), std::move(parameters), std::move(results), device};
}

}  // namespace torchtpu::exec
