// Plugin discovery, versions, client and device enumeration.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "runtime/plugin.h"
#include "tests/runtime/test_util.h"

namespace torchtpu {
namespace {

TEST(Plugin, DiscoversAndReportsVersions) {
  const runtime::Plugin& p = runtime::Plugin::discover();
  EXPECT_EQ(p.api_major(), PJRT_API_MAJOR);
  EXPECT_GT(p.api_minor(), 0);
  EXPECT_FALSE(p.attribute("xla_version").empty());
  // StableHLO versions are "major.minor.patch".
  EXPECT_NE(p.attribute("stablehlo_current_version").find('.'), std::string::npos);
  EXPECT_NE(p.attribute("stablehlo_minimum_version").find('.'), std::string::npos);
}

TEST(Plugin, LoadsOncePerPath) {
  const runtime::Plugin& a = runtime::Plugin::discover();
  const runtime::Plugin& b = runtime::Plugin::load(a.path());
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(a.api(), b.api());
}

// Sets an environment variable for one scope, restoring the previous value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(Plugin, ExplicitPathWins) {
  ScopedEnv forced("TORCHTPU_PJRT_PLUGIN", "/nonexistent/plugin.so");
  EXPECT_EQ(runtime::find_plugin_path(), "/nonexistent/plugin.so");
}

TEST(Plugin, MissingPathIsAnError) {
  try {
    runtime::Plugin::load("/nonexistent/libnothing.so");
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/libnothing.so"), std::string::npos);
  }
}

TEST(Plugin, NotAPluginIsAnError) {
  // libc is a shared library but exports no GetPjrtApi.
  try {
    runtime::Plugin::load("/lib/x86_64-linux-gnu/libc.so.6");
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("GetPjrtApi"), std::string::npos);
  }
}

// The availability check reads headers only: the real plugin passes, libc lacks the export.
TEST(Plugin, FileProblemIsFoundWithoutLoading) {
  EXPECT_EQ(runtime::plugin_file_problem(runtime::find_plugin_path()), "");
  EXPECT_NE(runtime::plugin_file_problem("/lib/x86_64-linux-gnu/libc.so.6").find("GetPjrtApi"), std::string::npos);
  EXPECT_EQ(runtime::plugin_file_problem("/nonexistent/plugin.so"), "not found");
  EXPECT_EQ(runtime::plugin_file_problem("/etc/passwd"), "not an ELF file");
}

// A cut-off copy of the real plugin: dlopen would map it and fault past its end.
TEST(Plugin, TruncatedPluginIsAnErrorNotACrash) {
  std::string real = runtime::Plugin::discover().path();
  std::string cut = "/tmp/torchtpu-truncated-plugin-" + std::to_string(getpid()) + ".so";
  {
    std::ifstream in(real, std::ios::binary);
    std::string head(1 << 20, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(cut, std::ios::binary).write(head.data(), in.gcount());
  }
  try {
    runtime::Plugin::load(cut);
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  std::remove(cut.c_str());
}

TEST(Plugin, NothingFoundListsWhatWasSearched) {
  ScopedEnv no_forced("TORCHTPU_PJRT_PLUGIN", nullptr);
  try {
    runtime::find_plugin_path({"/tmp/torchtpu-empty-dir"});
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("no PJRT plugin found"), std::string::npos);
    EXPECT_NE(msg.find("/tmp/torchtpu-empty-dir/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so"),
              std::string::npos);
    EXPECT_NE(msg.find("TORCHTPU_PJRT_PLUGIN"), std::string::npos);
  }
}

TEST(Plugin, SearchDirsComeFromTheEnvironmentFirst) {
  ScopedEnv dirs_env("TORCHTPU_PLUGIN_DIRS", "/a:/b");
  std::vector<std::string> dirs = runtime::plugin_search_dirs();
  ASSERT_GE(dirs.size(), 2u);
  EXPECT_EQ(dirs[0], "/a");
  EXPECT_EQ(dirs[1], "/b");
}

TEST(Client, EnumeratesDevicesAndMemories) {
  runtime::Client& c = testing::client();
  EXPECT_FALSE(c.platform_name().empty());
  EXPECT_FALSE(c.platform_version().empty());
  ASSERT_GE(c.devices().size(), 1u);
  if (c.platform_name() == "cpu") {
    EXPECT_EQ(c.devices().size(), 4u);  // TORCHTPU_NUM_CPU_DEVICES
  }
  for (size_t i = 0; i < c.devices().size(); ++i) {
    EXPECT_FALSE(c.device(i).kind().empty());
    EXPECT_FALSE(c.device(i).description().empty());
  }
  EXPECT_THROW(c.device(c.devices().size()), std::out_of_range);
  EXPECT_FALSE(c.memories().empty());
}

}  // namespace
}  // namespace torchtpu
