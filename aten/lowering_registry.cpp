#include "aten/lowering_registry.h"

#include <algorithm>
#include <set>

namespace torchtpu::aten {
namespace {

std::unordered_map<std::string, LoweringEntry>& registry() {
  static std::unordered_map<std::string, LoweringEntry> r;
  return r;
}

// How often each name was registered, and whether every registration only guessed it (the in-place
// and out= spellings register_with_variants tries, which PyTorch may not define).
struct Registration {
  int count = 0;
  bool guessed = true;
};
std::unordered_map<std::string, Registration>& registrations() {
  static std::unordered_map<std::string, Registration> r;
  return r;
}

std::optional<PaddingRule>& family_padding() {
  static std::optional<PaddingRule> rule;  // registration runs once, on one thread
  return rule;
}

void add_to_registry(const std::string& op, const Lowering& fn, LoweringOptions options, bool guessed) {
  std::string name = "aten::" + op;
  Registration& r = registrations()[name];
  r.count++;
  r.guessed = r.guessed && guessed;
  if (!options.padding) options.padding = family_padding();
  registry()[name] = {fn, std::move(options)};
}

std::unordered_map<std::string, std::vector<CpuRefusal>>& declared_refusals() {
  static std::unordered_map<std::string, std::vector<CpuRefusal>> d;  // by the op's name, "abs"
  return d;
}

// "aten::abs_.out" -> "abs" (not __lshift__'s underscores).
std::string base_name(const std::string& registered) {
  std::string name = registered.substr(registered.find("::") + 2);
  name = name.substr(0, name.find('.'));
  if (name.size() > 1 && name.back() == '_' && name[name.size() - 2] != '_') name.pop_back();
  return name;
}

std::vector<std::function<void()>>& derivers() {
  static std::vector<std::function<void()>> d;
  return d;
}

}  // namespace

void register_lowering(std::initializer_list<const char*> ops, Lowering fn,
                       LoweringOptions options) {
  for (const char* op : ops) add_to_registry(op, fn, options, /*guessed=*/false);
}

void register_with_variants(const char* name, std::initializer_list<const char*> overloads,
                            Lowering fn, LoweringOptions options) {
  std::set<std::string> named, guessed;  // one registration per name, though overloads guess alike
  for (std::string ov : overloads) {
    std::string suffix = ov.empty() ? "" : "." + ov;
    named.insert(name + suffix);
    guessed.insert(std::string(name) + "_" + suffix);
    if (ov.empty() || ov == "Tensor") {
      // The Tensor form's out= and the in-place form are spelled either way (add.out, eq.Tensor_out;
      // add_.Tensor, floor_divide_.Tensor for a functional floor_divide with no overload name).
      for (const char* form : {".out", ".Tensor_out", "_.Tensor", ".OutTensor"}) guessed.insert(name + std::string(form));
    } else {  // div.Scalar_mode_out, div.out_mode (of div.Tensor_mode), xlogy.OutScalar_Other
      guessed.insert(std::string(name) + "." + ov + "_out");
      if (ov.rfind("Tensor_", 0) == 0) guessed.insert(std::string(name) + ".out_" + ov.substr(7));
      guessed.insert(std::string(name) + ".Out" + ov);
    }
  }
  for (const std::string& op : named) add_to_registry(op, fn, options, /*guessed=*/false);
  for (const std::string& op : guessed)
    if (!named.count(op)) add_to_registry(op, fn, options, /*guessed=*/true);
}

const LoweringEntry* find_lowering(const std::string& op) {
  auto it = registry().find("aten::" + op);
  return it == registry().end() ? nullptr : &it->second;
}

PaddingRule padding_of_args(std::vector<size_t> args, exec::Fill fill) {
  return {fill, [args](const std::vector<c10::IValue>&, size_t arg, int64_t) {
            return std::find(args.begin(), args.end(), arg) != args.end();
          }};
}

PaddedFamily::PaddedFamily(PaddingRule rule) { family_padding() = std::move(rule); }
PaddedFamily::~PaddedFamily() { family_padding().reset(); }

void refuse_on_cpu(const char* name, CpuRefusal refusal) { declared_refusals()[name].push_back(refusal); }

void attach_cpu_refusals() {
  for (auto& [name, entry] : registry()) {
    auto declared = declared_refusals().find(base_name(name));
    if (declared != declared_refusals().end()) entry.options.cpu_refusals = declared->second;
  }
}

void register_derived_lowerings(std::function<void()> derive) { derivers().push_back(std::move(derive)); }

void run_derivers() {
  for (const auto& derive : derivers()) derive();
}

const std::unordered_map<std::string, LoweringEntry>& lowering_registry() { return registry(); }

std::optional<c10::OperatorHandle> find_op(const std::string& name) {
  size_t dot = name.find('.');
  return c10::Dispatcher::singleton().findSchema(
      {dot == std::string::npos ? name : name.substr(0, dot), dot == std::string::npos ? "" : name.substr(dot + 1)});
}

std::vector<std::string> registration_problems() {
  std::vector<std::string> problems;
  for (const auto& [name, entry] : registry()) {
    const Registration& r = registrations().at(name);
    if (!find_op(name)) {
      if (!r.guessed && !entry.options.not_in_every_release) problems.push_back(name + " is no ATen op here");
    } else if (r.count > 1) {
      problems.push_back(name + " is registered " + std::to_string(r.count) + " times");
    }
  }
  std::set<std::string> lowered;
  for (const auto& [name, entry] : registry()) lowered.insert(base_name(name));
  for (const auto& [name, refusals] : declared_refusals())
    if (!lowered.count(name)) problems.push_back("refuse_on_cpu(\"" + name + "\") names no lowered op");
  std::sort(problems.begin(), problems.end());
  return problems;
}

}  // namespace torchtpu::aten
