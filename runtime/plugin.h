// PJRT plugin discovery and loading.
//
// A plugin is a shared library exporting GetPjrtApi(). Each path is loaded at most once per
// process and never unloaded: PJRT objects created from it may outlive any owner we could name.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "pjrt_c_api.h"

namespace torchtpu::runtime {

class Plugin {
 public:
  // Loads (or returns the already loaded) plugin at `path`. Throws std::runtime_error naming the
  // path when it cannot be opened, has no GetPjrtApi, or speaks an incompatible API version.
  static const Plugin& load(const std::string& path);

  // The plugin this process should use (see find_plugin_path()).
  static const Plugin& discover();

  const PJRT_Api* api() const { return api_; }
  const std::string& path() const { return path_; }
  int api_major() const { return api_->pjrt_api_version.major_version; }
  int api_minor() const { return api_->pjrt_api_version.minor_version; }

  // Attributes the plugin reports about itself, as text ("xla_version" -> "...",
  // "stablehlo_current_version" -> "1.13.2").
  const std::map<std::string, std::string>& attributes() const { return attributes_; }
  std::string attribute(const std::string& name) const;

 private:
  Plugin(std::string path, const PJRT_Api* api);
  std::string path_;
  const PJRT_Api* api_;
  std::map<std::string, std::string> attributes_;
};

// Why the file at `path` cannot be a loadable PJRT plugin ("" when it can): missing, not a whole
// 64-bit ELF shared object, or no GetPjrtApi export. Reads headers only; loads nothing.
std::string plugin_file_problem(const std::string& path);

// Where plugins are searched for: the colon-separated TORCHTPU_PLUGIN_DIRS (the Python package sets
// it to its site-packages folders), then the folders baked in at build time.
std::vector<std::string> plugin_search_dirs();

// The plugin path to use, in order: TORCHTPU_PJRT_PLUGIN; libtpu when installed and a TPU is
// present; the XLA CUDA plugin when installed and a GPU is visible; the XLA CPU plugin.
// Throws std::runtime_error listing every place searched when nothing is found.
std::string find_plugin_path(const std::vector<std::string>& search_dirs);
inline std::string find_plugin_path() { return find_plugin_path(plugin_search_dirs()); }

}  // namespace torchtpu::runtime
