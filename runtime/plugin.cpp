#include "runtime/plugin.h"

#include <dlfcn.h>
#include <elf.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "runtime/error.h"

namespace torchtpu::runtime {
namespace fs = std::filesystem;
namespace {

// The last PJRT_Api entry this runtime calls; a plugin whose table ends earlier is too old.
constexpr size_t kRequiredApiSize =
    offsetof(PJRT_Api, PJRT_Executable_OutputDimensions) + sizeof(void*);

std::string named_value_text(const PJRT_NamedValue& v) {
  switch (v.type) {
    case PJRT_NamedValue_kString:
      return std::string(v.string_value, v.value_size);
    case PJRT_NamedValue_kInt64:
      return std::to_string(v.int64_value);
    case PJRT_NamedValue_kInt64List: {
      std::string out;
      for (size_t i = 0; i < v.value_size; ++i)
        out += (i ? "." : "") + std::to_string(v.int64_array_value[i]);
      return out;
    }
    case PJRT_NamedValue_kFloat:
      return std::to_string(v.float_value);
    case PJRT_NamedValue_kBool:
      return v.bool_value ? "true" : "false";
  }
  return "";
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, sep);)
    if (!part.empty()) parts.push_back(part);
  return parts;
}

bool tpu_present() { return fs::exists("/dev/accel0") || fs::exists("/dev/vfio/0"); }

bool gpu_visible() {
  std::string visible = env("CUDA_VISIBLE_DEVICES");
  if (visible == "-1" || (std::getenv("CUDA_VISIBLE_DEVICES") && visible.empty())) return false;
  return fs::exists("/dev/nvidiactl") || fs::exists("/proc/driver/nvidia/version");
}

// One class of plugin: its relative locations under a search folder, and whether it applies here.
struct PluginKind {
  const char* name;
  std::vector<const char*> relative_paths;
  bool (*usable)();
};

const std::vector<PluginKind>& plugin_kinds() {
  static const std::vector<PluginKind> kinds = {
      {"libtpu", {"libtpu/libtpu.so"}, tpu_present},
      {"XLA CUDA",
       {"jax_plugins/xla_cuda13/xla_cuda_plugin.so", "xla_plugins/xla_cuda13_pjrt/xla_gpu_pjrt.so",
        "jax_plugins/xla_cuda12/xla_cuda_plugin.so", "xla_plugins/xla_cuda12_pjrt/xla_gpu_pjrt.so"},
       gpu_visible},
      {"XLA CPU", {"xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so"}, [] { return true; }},
  };
  return kinds;
}

}  // namespace

Plugin::Plugin(std::string path, const PJRT_Api* api) : path_(std::move(path)), api_(api) {
  if (api_->pjrt_api_version.major_version != PJRT_API_MAJOR)
    throw std::runtime_error("PJRT plugin " + path_ + " speaks PJRT C API " +
                             std::to_string(api_major()) + "." + std::to_string(api_minor()) +
                             "; torchtpu was built for major version " +
                             std::to_string(PJRT_API_MAJOR));
  if (api_->struct_size < kRequiredApiSize)
    throw std::runtime_error("PJRT plugin " + path_ + " (API " + std::to_string(api_major()) + "." +
                             std::to_string(api_minor()) +
                             ") is too old: it lacks functions torchtpu calls");

  PJRT_Plugin_Initialize_Args init{};
  init.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
  check(api_, api_->PJRT_Plugin_Initialize(&init), "PJRT_Plugin_Initialize");

  PJRT_Plugin_Attributes_Args attrs{};
  attrs.struct_size = PJRT_Plugin_Attributes_Args_STRUCT_SIZE;
  check(api_, api_->PJRT_Plugin_Attributes(&attrs), "PJRT_Plugin_Attributes");
  for (size_t i = 0; i < attrs.num_attributes; ++i) {
    const PJRT_NamedValue& v = attrs.attributes[i];
    attributes_[std::string(v.name, v.name_size)] = named_value_text(v);
  }
}

std::string Plugin::attribute(const std::string& name) const {
  auto it = attributes_.find(name);
  return it == attributes_.end() ? "" : it->second;
}

namespace {

// Why `path` is not a whole 64-bit ELF shared object, or "". dlopen maps a truncated library
// and then faults (SIGBUS) reading past its end, so a cut-off download must be caught before.
std::string elf_problem(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  Elf64_Ehdr header{};
  if (!f.read(reinterpret_cast<char*>(&header), sizeof(header)) || std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0)
    return "not an ELF file";
  if (header.e_ident[EI_CLASS] != ELFCLASS64) return "not a 64-bit ELF file";
  uint64_t size = fs::file_size(path);
  uint64_t tables_end = std::max<uint64_t>(header.e_phoff + uint64_t(header.e_phnum) * header.e_phentsize,
                                           header.e_shoff + uint64_t(header.e_shnum) * header.e_shentsize);
  if (tables_end > size) return "truncated (its headers end past its " + std::to_string(size) + " bytes)";
  for (int i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr segment{};
    f.seekg(static_cast<std::streamoff>(header.e_phoff + uint64_t(i) * header.e_phentsize));
    if (!f.read(reinterpret_cast<char*>(&segment), sizeof(segment))) return "unreadable program headers";
    if (segment.p_offset + segment.p_filesz > size)
      return "truncated (" + std::to_string(size) + " bytes; a segment ends at byte " +
             std::to_string(segment.p_offset + segment.p_filesz) + ")";
  }
  return "";
}

// Whether the ELF file defines `name` in its dynamic symbol table (what dlsym would find).
bool exports_symbol(const std::string& path, const std::string& name) {
  std::ifstream f(path, std::ios::binary);
  Elf64_Ehdr header{};
  f.read(reinterpret_cast<char*>(&header), sizeof(header));
  auto section = [&](uint64_t index) {
    Elf64_Shdr s{};
    f.seekg(static_cast<std::streamoff>(header.e_shoff + index * header.e_shentsize));
    f.read(reinterpret_cast<char*>(&s), sizeof(s));
    return s;
  };
  for (uint64_t i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr symbols = section(i);
    if (symbols.sh_type != SHT_DYNSYM || symbols.sh_link >= header.e_shnum) continue;
    Elf64_Shdr names = section(symbols.sh_link);
    std::string table(names.sh_size, '\0');
    f.seekg(static_cast<std::streamoff>(names.sh_offset));
    f.read(table.data(), static_cast<std::streamsize>(table.size()));
    for (uint64_t k = 0; k < symbols.sh_size / sizeof(Elf64_Sym); ++k) {
      Elf64_Sym sym{};
      f.seekg(static_cast<std::streamoff>(symbols.sh_offset + k * sizeof(Elf64_Sym)));
      if (!f.read(reinterpret_cast<char*>(&sym), sizeof(sym))) return false;
      if (sym.st_shndx != SHN_UNDEF && sym.st_name < table.size() && name == table.c_str() + sym.st_name)
        return true;
    }
  }
  return false;
}

}  // namespace

std::string plugin_file_problem(const std::string& path) {
  if (!fs::exists(path)) return "not found";
  if (std::string problem = elf_problem(path); !problem.empty()) return problem;
  if (!exports_symbol(path, "GetPjrtApi")) return "not a PJRT plugin: it has no GetPjrtApi";
  return "";
}

const Plugin& Plugin::load(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Plugin>> loaded;  // never unloaded
  std::lock_guard<std::mutex> lock(mu);
  std::string key = fs::weakly_canonical(path).string();
  if (auto it = loaded.find(key); it != loaded.end()) return *it->second;

  if (!fs::exists(path)) throw std::runtime_error("PJRT plugin not found: " + path);
  if (std::string problem = elf_problem(path); !problem.empty())
    throw std::runtime_error("cannot load PJRT plugin " + path + ": " + problem);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    throw std::runtime_error("cannot load PJRT plugin " + path + ": " + std::string(dlerror()));
  using GetPjrtApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetPjrtApiFn>(dlsym(handle, "GetPjrtApi"));
  if (!get_api) throw std::runtime_error(path + " is not a PJRT plugin: it has no GetPjrtApi");
  auto plugin = std::unique_ptr<Plugin>(new Plugin(path, get_api()));
  return *loaded.emplace(key, std::move(plugin)).first->second;
}

const Plugin& Plugin::discover() { return load(find_plugin_path()); }

std::vector<std::string> plugin_search_dirs() {
  std::vector<std::string> dirs = split(env("TORCHTPU_PLUGIN_DIRS"), ':');
#ifdef TORCHTPU_DEFAULT_PLUGIN_DIRS
  for (auto& d : split(TORCHTPU_DEFAULT_PLUGIN_DIRS, ':')) dirs.push_back(d);
#endif
  return dirs;
}

std::string find_plugin_path(const std::vector<std::string>& search_dirs) {
  if (std::string forced = env("TORCHTPU_PJRT_PLUGIN"); !forced.empty()) return forced;
  std::vector<std::string> searched;
  for (const PluginKind& kind : plugin_kinds()) {
    std::vector<std::string> candidates;
    if (std::string(kind.name) == "libtpu" && !env("TPU_LIBRARY_PATH").empty())
      candidates.push_back(env("TPU_LIBRARY_PATH"));
    for (const std::string& dir : search_dirs)
      for (const char* rel : kind.relative_paths) candidates.push_back(dir + "/" + rel);
    bool usable = kind.usable();
    for (const std::string& c : candidates) {
      if (usable && fs::exists(c)) return c;
      searched.push_back(std::string(kind.name) + ": " + c +
                         (usable ? "" : " (skipped: no such device here)"));
    }
  }
  std::string msg =
      "no PJRT plugin found. Install one (pip install xla-cpu-pjrt) or set TORCHTPU_PJRT_PLUGIN "
      "to a plugin path. Searched:";
  for (const auto& s : searched) msg += "\n  " + s;
  if (searched.empty()) msg += " nothing (TORCHTPU_PLUGIN_DIRS is empty)";
  throw std::runtime_error(msg);
}

}  // namespace torchtpu::runtime
