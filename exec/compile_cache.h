// The compile cache every mode shares (and torch.compile later): loaded executables in memory
// (a bounded LRU), a persistent directory (TORCHTPU_CACHE_DIR, default ~/.cache/torchtpu), and a
// directory many hosts share (TORCHTPU_SHARED_CACHE_DIR).
//
// In-memory keys are the callers' compact structural keys, so a hit builds no program text. The
// persistent key is the SHA-256 of the program text, the compile options, the platform, the
// plugin's xla_version and torchtpu's version.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/executable.h"

namespace torchtpu::exec {

struct CacheStats {
  int64_t requests = 0;
  std::map<std::string, int64_t> hits;  // "memory", "disk", "shared"
  int64_t misses = 0;                   // compiled
  int64_t quick_compiles = 0;           // of those, compiled quickly (Tier::kQuick)
  int64_t promotions = 0;               // quick programs compiled again, optimized, in the background
  int64_t background_pending = 0;      // queued or compiling, and deferred
  int64_t deferred = 0;                 // of those, waiting to be asked for a second time
  int64_t skipped_background = 0;       // background compiles not started: their window kept changing shape
  int64_t prefetched = 0;               // disk hits loaded ahead of need (exec/prefetch.h)
  int64_t started_ahead = 0;            // compiles (or loads) started ahead of the op that needs them
  struct Compile {
    std::string what;  // the op or window, with the user's line
    double seconds;
    int64_t temp_bytes;  // one run's intermediates as XLA planned them (-1: not reported)
  };
  std::vector<Compile> compiles;  // the most recent ones
};

using ProgramText = std::function<std::string()>;

// `what` names the op or window (errors, metrics) and `identity` what counts as "the same op" for
// recompile tracking (the op and its user line). Like the program text, they are made only on a
// miss: a hit builds no strings.
struct ProgramNames {
  std::string what;
  std::string identity;
};
using NameProgram = std::function<ProgramNames()>;

// How a program that a caller waits for is compiled when no cache tier has it.
//  - kQuick: quickly first (on the XLA CPU plugin: LLVM's optimizations off, 2-3x less compile
//    time, up to 2.5x the run time); once it has run TORCHTPU_PROMOTE_AFTER times (16) it is
//    compiled again, optimized, in the background, and replaces itself. A shape met once (a new
//    sequence length) costs a third; what runs often ends up optimized. Off where the plugin has
//    no such options, or with TORCHTPU_QUICK_COMPILE=0.
//  - kOptimized: optimized at once (torch.compile graphs: there, compiling is what was asked).
// Both tiers persist on disk under keys of their own.
enum class Tier { kQuick, kOptimized };

// The executable for `key`, from the first tier that has it, else compiled now (on a thread of
// its own: Ctrl-C during the wait throws Interrupted, see exec/interrupt.h).
std::shared_ptr<runtime::Executable> cached_executable(const std::string& key, const ProgramText& program,
                                                       const NameProgram& names, Tier first = Tier::kQuick);

// The same without waiting for a compile: null while the program compiles, optimized, on a
// background thread (started by the first call for `key`); later calls return it once it is ready.
// With `skip_many_variants` (fused windows), null without compiling once the program's op or
// window has had more than 8 keys: a new shape each time, so the compile would likely be wasted.
// With `until_asked_twice`, the compile starts at the second call for `key` (or when the
// background compiles are waited for): a program run once is never compiled.
std::shared_ptr<runtime::Executable> cached_executable_or_compile_async(const std::string& key,
                                                                        const ProgramText& program,
                                                                        const NameProgram& names,
                                                                        bool skip_many_variants = false,
                                                                        bool until_asked_twice = false);

// The executable for `key` if it is loaded in memory (counted as a hit), else null, counting
// nothing: the caller then goes the long way (cached_executable).
std::shared_ptr<runtime::Executable> loaded_executable(const std::string& key);

// Starts compiling `key`'s program (loading it from disk, if there) on a thread of its own, as
// cached_executable would, for a caller that will ask for it soon (strict mode's ops waiting for
// their programs): two compile side by side. Returns false, starting nothing, while two compiles
// ahead run; true when the program is loaded, being compiled, or now started.
bool compile_ahead(const std::string& key, const ProgramText& program, const NameProgram& names);

// Starts loading, on background threads, the executables this command used when it last ran
// (exec/prefetch.h). Once per process; the client calls it when it starts.
void start_prefetching();

// Blocks until no background compile is running.
void wait_for_background_compiles();
// At exit: drop the queued background compiles, then wait while compiles run (the plugin's static
// state must not be destroyed under a compiling thread).
void drop_queued_compiles();
int running_compiles();

CacheStats cache_stats();
void reset_cache_stats();
// Drops loaded executables and the persistent directory's entries (the shared directory belongs to
// every host and is left alone).
void clear_cache();
// Whether XLA may keep low-precision intermediates in higher precision (faster, but results then
// differ from PyTorch's rounding). Off by default (TORCHTPU_ALLOW_EXCESS_PRECISION=1 turns it on);
// a change drops the loaded executables, whose persistent keys include the setting.
bool allow_excess_precision();
void set_allow_excess_precision(bool allow);
// The directories in use ("" when a tier is off).
std::string cache_dir();
std::string shared_cache_dir();

}  // namespace torchtpu::exec
