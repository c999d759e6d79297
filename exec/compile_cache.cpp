#include "exec/compile_cache.h"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "exec/byte_size.h"
#include "exec/diagnostics.h"
#include "exec/disk_cache.h"
#include "exec/memory_tier.h"
#include "exec/interrupt.h"
#include "exec/metrics.h"
#include "exec/prefetch.h"
#include "exec/quick_compile.h"
#include "exec/runtime_context.h"
#include "exec/sha256.h"
#include "exec/trace.h"
#include "graph/key_change.h"
#include "runtime/compile_options.h"

#ifndef TORCHTPU_VERSION
#define TORCHTPU_VERSION "dev"
#endif

namespace torchtpu::exec {
namespace {

using ExecutablePtr = std::shared_ptr<runtime::Executable>;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : fallback;
}

// XLA may otherwise drop the f32 -> bf16 -> f32 round trips PyTorch performs (its "excess
// precision" simplification), so by default programs round exactly as PyTorch does.
std::atomic<bool> excess_precision{env_or("TORCHTPU_ALLOW_EXCESS_PRECISION", "0") == "1"};

// Whether this process is one of several local ranks (torchrun's LOCAL_WORLD_SIZE) with fewer than
// two cores each. XLA CPU's matrix products then run on the calling thread: a pool of worker
// threads per rank, each spinning while it waits for work, takes the cores the other ranks compute
// on (TorchTitan's tensor-parallel step over two ranks on two cores: 42 s with the pools, 22 without).
bool ranks_share_cores() {
  static const bool shared = [] {
    int64_t ranks = std::strtoll(env_or("LOCAL_WORLD_SIZE", "1").c_str(), nullptr, 10);
    return ranks > 1 && std::thread::hardware_concurrency() < 2 * ranks;
  }();
  return shared;
}

// Programs that read and write at most this many bytes a run (TORCHTPU_LIGHT_PROGRAM_BYTES, 1 MiB)
// are compiled without XLA CPU's fusion emitters, in every tier: the emitters' vectorized loops
// pay off on large tensors, but cost 20-30% more compile time, and a small program's run is
// mostly launch overhead (docs/design.md, "Tiered compiles"). Not programs with types the CPU
// emulates, which the older emitters get wrong (a float8 conversion's rounding) or cannot compile
// (a complex comparison).
bool light(const std::string& program) {
  static const int64_t limit = [] {
    std::string setting = env_or("TORCHTPU_LIGHT_PROGRAM_BYTES", "1MiB");
    std::optional<int64_t> parsed = parse_byte_size(setting);
    if (!parsed) throw std::invalid_argument("TORCHTPU_LIGHT_PROGRAM_BYTES='" + setting + "' is not a byte size (1MiB, 0)");
    return *parsed;
  }();
  return limit > 0 && bytes_per_run(program) <= limit && !has_emulated_types(program);
}

// A light program computing at most this many bytes a run (a decode step's, a short prompt's) is
// compiled as the quick tier compiles, once, never promoted: LLVM's optimizations cost 2-3x the
// compile time, and on a few thousand elements they save microseconds a run (a first `generate`
// compiles ~100 such programs). Larger results keep them: a small model's training step at
// [8, 64, 128] ran 1.7x slower with every light program unoptimized. So do element-wise
// multiply-adds (exec/quick_compile.h), whose fused multiply-adds match PyTorch's CPU bits.
constexpr int64_t kSmallResultBytes = 64 << 10;

// What in a program's text changes how XLA CPU compiles it: a function of the text alone, so that
// a program always gets the same bits.
struct CodegenHints {
  bool light = false;          // no fusion emitters (above)
  bool small = false;          // light, with small results: compiled quickly, in every tier (above)
  bool matrix_vector = false;  // no fusion pass: its dot stays a library call (exec/quick_compile.h)
};

CodegenHints hints_for(const std::string& program) {
  bool is_light = light(program);
  bool small = is_light && result_bytes(program) <= kSmallResultBytes && !only_multiply_adds(program);
  return {is_light, small, matrix_vector_without_reductions(program)};
}

runtime::CompileOptions compile_options(Tier tier, CodegenHints hints) {
  runtime::CompileOptions options;
  options.portable = true;  // one executable serves every device
  options.xla_flags["xla_allow_excess_precision"] = excess_precision.load();
  bool cpu = client().platform_name() == "cpu";
  if (cpu && ranks_share_cores()) options.xla_flags["xla_cpu_multi_thread_eigen"] = false;
  // XLA CPU's options: LLVM's optimizations and the fusion emitters off.
  if (tier == Tier::kQuick || (cpu && hints.small)) {
    options.xla_int_flags["xla_backend_optimization_level"] = 0;
    options.xla_flags["xla_llvm_disable_expensive_passes"] = true;
    options.xla_flags["xla_cpu_use_fusion_emitters"] = false;
  }
  if (cpu && hints.light) options.xla_flags["xla_cpu_use_fusion_emitters"] = false;
  if (cpu && hints.matrix_vector) options.xla_string_flags["xla_disable_hlo_passes"] = "fusion";
  return options;
}

// Which programs a waiting caller gets compiled quickly first (TORCHTPU_QUICK_COMPILE): "exact"
// (the default where the options exist, the XLA CPU plugin) those whose bits cannot depend on
// it (exec/quick_compile.h), "all" every one (a first-seen float program may then differ from its
// promoted successor in the last bit), "0" none.
bool compile_quickly(const std::string& program) {
  enum class Policy { kNone, kExact, kAll };
  static const Policy policy = [] {
    std::string setting = env_or("TORCHTPU_QUICK_COMPILE", client().platform_name() == "cpu" ? "exact" : "0");
    if (setting == "all") return Policy::kAll;
    if (setting == "exact") return Policy::kExact;
    if (setting == "0") return Policy::kNone;
    throw std::invalid_argument("TORCHTPU_QUICK_COMPILE='" + setting + "' is not one of exact, all, 0");
  }();
  return policy == Policy::kAll || (policy == Policy::kExact && same_bits_however_compiled(program));
}

// A fused window (nobody waits for it: its ops run one by one meanwhile) is not compiled in the
// background once its first op's line has had this many keys: each new length of a growing cache
// or sequence makes a new window, which would run once or a few times. Its ops still run, each
// from its own program; a variant compiled earlier still runs whole. (Zero fills, the other
// programs nobody waits for, are always compiled: without the program, zeros are uploaded.) A
// window asked for twice in a row is compiled all the same: it has settled.
constexpr int64_t kBackgroundVariants = 8;

// Programs compiled only once asked for a second time wait, deferred, at most this many; the
// oldest go. Waiting for the background compiles compiles the deferred ones too.
constexpr size_t kMostDeferredWindows = 64;

// The background worker's nice value: the lowest priority.
constexpr int kBackgroundNice = 19;

// Compiles started ahead of a caller's request at once (compile_ahead): the caller waits for the
// first while the second compiles. XLA spreads a large program's code generation over the cores
// beyond two.
constexpr size_t kCompilesAhead = 2;

// How often a quickly compiled program runs, and how many bytes its runs read and write, before it
// is compiled again, optimized. An optimized compile costs tens of milliseconds of a core (a padded
// cat's 100-200); it pays back only where a program moves enough data for unoptimized code to be
// slow: about 64 MiB at the ~1 GB/s of XLA CPU's unoptimized loops. A decode step's programs on a
// few kilobytes never get there: promoting them made a first `generate` 10-17% slower
// (docs/design.md, "Promotions that pay back").
int64_t promote_after() {
  static const int64_t runs = std::stoll(env_or("TORCHTPU_PROMOTE_AFTER", "16"));
  return runs;
}

int64_t promote_after_bytes() {
  static const int64_t bytes = [] {
    std::string setting = env_or("TORCHTPU_PROMOTE_AFTER_BYTES", "64MiB");
    std::optional<int64_t> parsed = parse_byte_size(setting);
    if (!parsed) throw std::invalid_argument("TORCHTPU_PROMOTE_AFTER_BYTES='" + setting + "' is not a byte size (64MiB, 0)");
    return *parsed;
  }();
  return bytes;
}

// What besides the program decides the compiled bytes.
std::string environment_fingerprint(Tier tier, CodegenHints hints = {}) {
  // The client first: starting it starts prefetching, which asks for this fingerprint.
  const runtime::Client& c = client();
  static const std::string platform = [&c] {
    return c.platform_name() + '\0' + c.platform_version() + '\0' + c.plugin().attribute("xla_version") +
           '\0' + TORCHTPU_VERSION;
  }();
  return compile_options(tier, hints).encode() + '\0' + platform;
}

// The local tier is private to the user; both tiers are bounded and share the optional key that
// authenticates entries.
DiskCacheOptions tier_options(bool local) {
  DiskCacheOptions options;
  options.private_to_user = local;
  options.auth_key = env_or("TORCHTPU_CACHE_KEY", "");
  std::string max = env_or("TORCHTPU_CACHE_MAX_BYTES", "5GB");
  std::optional<int64_t> bytes = parse_byte_size(max);
  if (!bytes) throw std::invalid_argument("TORCHTPU_CACHE_MAX_BYTES='" + max + "' is not a byte size (5GB, 512MiB, 0 for no bound)");
  options.max_bytes = *bytes;
  return options;
}

// A digest of the whole program text and everything else that decides the compiled bytes, so a
// key names one program's entry only.
std::string persistent_key(const std::string& text, Tier tier) {
  return sha256_hex(text + '\0' + environment_fingerprint(tier, hints_for(text)));
}

// XLA's compiler frees what it allocated (LLVM modules, passes' state), but glibc keeps freed
// pages in the arena of the thread that freed them, so a process's resident memory grows with its
// compiles on worker threads unless they are trimmed (docs/benchmarks.md, "malloc_trim"). A trim
// costs milliseconds, so it follows the compiles of large programs (windows, compiled graphs),
// which free the most, not every small op's.
constexpr double kTrimAfterCompileSeconds = 0.1;

void return_freed_heap_to_the_system() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

int64_t temp_bytes(const runtime::Executable& exe) {
  std::optional<runtime::ProgramMemory> stats = exe.planned_memory();
  return stats ? stats->temp_bytes : -1;
}

class Cache {
 public:
  Cache()
      : memory_(std::stoul(env_or("TORCHTPU_CACHE_CAPACITY", "4096"))),
        local_(env_or("TORCHTPU_CACHE_DIR", env_or("HOME", "/tmp") + "/.cache/torchtpu"), tier_options(true)),
        shared_(env_or("TORCHTPU_SHARED_CACHE_DIR", ""), tier_options(false)) {}

  ExecutablePtr get(const std::string& key, const ProgramText& program, const NameProgram& names, bool wait,
                    Tier first, bool skip_many_variants = false, bool until_asked_twice = false) {
    std::unique_lock<std::mutex> lock(mu_);
    stats_.requests++;
    if (ExecutablePtr exe = memory_.find(key)) {
      if (!counted_ahead_.erase(key)) memory_hits_++;  // a compile ahead counted its miss (or disk hit)
      if (!quick_.empty()) note_run(exe);
      return exe;
    }
    if (compiling_.count(key)) {  // the background worker has it: the caller decides
      if (!wait) undefer(key);     // a second sighting
      return nullptr;
    }
    if (auto it = ahead_.find(key); it != ahead_.end()) {  // compiling ahead of this request
      if (!wait) return nullptr;
      std::shared_ptr<Outcome> ahead = it->second;
      wait_interruptibly(lock, compiled_, [&] { return ahead->done; });
      if (ahead->error) std::rethrow_exception(ahead->error);
      return ahead->exe;
    }
    ProgramNames name = names();
    Variants variants = note_recompile(key, name.what, name.identity);
    // Nobody waits for this program, and its op or window keeps changing shape (a growing cache,
    // a new length each step): compiling one more variant in the background would likely be wasted.
    // One asked for twice in a row has settled (padded lengths of a bucket, once every line knows
    // its sizes vary): it is compiled, however many variants came before it.
    if (!wait && skip_many_variants && variants.count > kBackgroundVariants && !variants.repeated) {
      stats_.skipped_background++;
      return nullptr;
    }
    lock.unlock();
    std::string text = program();
    std::string pkey = persistent_key(text, Tier::kOptimized);
    used_.note(pkey);
    Job job{key, std::move(text), pkey, std::move(name.what)};
    if (tracing()) {
      job.location = TraceCause::location();
      job.correlation = trace_correlation();
    }
    if (ExecutablePtr exe = load(job)) return remember(key, exe);
    if (!wait) {
      lock.lock();
      compiling_.insert(key);
      stats_.background_pending++;
      if (until_asked_twice) {
        defer(std::move(job));
        return nullptr;
      }
      // A fused window goes first: the workload runs it now, while the variants queued before it
      // (a first length's exact window) may not recur.
      if (skip_many_variants) queue_.push_front(std::move(job));
      else queue_.push_back(std::move(job));
      ensure_worker();
      wakeup_.notify_one();
      return nullptr;
    }
    return compile_for_caller(std::move(job), first, /*here=*/false);
  }

  // compile_ahead (exec/compile_cache.h): the miss path of a caller that waits, on a thread of its
  // own; the caller's request then waits for it (get).
  bool compile_ahead(const std::string& key, const ProgramText& program, const NameProgram& names) {
    std::unique_lock<std::mutex> lock(mu_);
    auto known = [&] { return memory_.contains(key) || compiling_.count(key) || ahead_.count(key); };
    if (known()) return true;
    if (ahead_.size() >= kCompilesAhead) return false;
    lock.unlock();
    // What may throw (a lowering's error, a client that does not start) comes before anything is
    // registered.
    ProgramNames name = names();
    std::string text = program();
    std::string pkey = persistent_key(text, Tier::kOptimized);
    Job job{key, std::move(text), pkey, name.what};
    lock.lock();
    if (known()) return true;
    note_recompile(key, name.what, name.identity);
    auto outcome = std::make_shared<Outcome>();
    ahead_[key] = outcome;
    stats_.started_ahead++;
    auto work = [this, job = std::move(job)]() mutable {
      ExecutablePtr exe = load(job);
      return exe ? remember(job.key, exe) : compile_for_caller(std::move(job), Tier::kQuick, /*here=*/true);
    };
    on_a_thread(outcome, std::move(work), [this, key, outcome] {
      ahead_.erase(key);
      if (outcome->exe) counted_ahead_.insert(key);
    });
    lock.unlock();
    used_.note(pkey);
    return true;
  }

  ExecutablePtr loaded(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    ExecutablePtr exe = memory_.find(key);
    if (exe) {
      stats_.requests++;
      memory_hits_++;
      if (!quick_.empty()) note_run(exe);
    }
    return exe;
  }

  void wait_for_background() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!deferred_.empty()) undefer(deferred_.front().key);
    wait_interruptibly(lock, idle_, [&] { return queue_.empty() && !worker_busy_ && waited_compiles_ == 0; });
  }

  void drop_queued() {
    std::lock_guard<std::mutex> lock(mu_);
    for (std::deque<Job>* jobs : {&queue_, &deferred_}) {
      for (const Job& job : *jobs) compiling_.erase(job.key);
      stats_.background_pending -= static_cast<int64_t>(jobs->size());
      jobs->clear();
    }
  }

  int running() {
    std::lock_guard<std::mutex> lock(mu_);
    return (worker_busy_ ? 1 : 0) + waited_compiles_;
  }

  // The last word at exit(): compiles started after Python's exit handlers (a process group's
  // shutdown, say) still run on their threads, and the plugin's static state must outlive them.
  void finish_at_exit() {
    drop_queued();
    prefetch_.stop();
    {
      std::unique_lock<std::mutex> lock(mu_);
      idle_.wait(lock, [&] { return !worker_busy_ && waited_compiles_ == 0; });
    }
    if (manifest_path_.empty() || prefetch_.started_by() != getpid()) return;  // off, or a forked child
    std::vector<std::string> stored;  // what the next run can load (not what a full disk refused)
    for (const std::string& key : used_.keys())
      if (local_.contains(key)) stored.push_back(key);
    if (!stored.empty() && stored != manifest_) write_manifest(manifest_path_, stored);
  }

  CacheStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    CacheStats s = stats_;
    if (memory_hits_) s.hits["memory"] = memory_hits_;
    s.prefetched = prefetched_;
    s.deferred = static_cast<int64_t>(deferred_.size());
    return s;
  }
  void reset_stats() {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t pending = stats_.background_pending;
    memory_hits_ = 0;
    prefetched_ = 0;
    counted_ahead_.clear();
    stats_ = {};
    stats_.background_pending = pending;
  }
  void clear() {
    forget_loaded();
    std::lock_guard<std::mutex> lock(mu_);
    if (!local_.dir().empty()) local_.clear();
  }
  // Drops the loaded executables (compile options changed); the persistent tiers keep theirs.
  void forget_loaded() {
    drop_queued();
    wait_for_background();
    std::lock_guard<std::mutex> lock(mu_);
    memory_.clear();
    quick_.clear();
    last_key_.clear();
    variants_.clear();
  }
  const std::string& dir() const { return local_.dir(); }
  // The executables this command used when it last ran, loaded from the persistent directory
  // on background threads (exec/prefetch.h).
  void start_prefetching() { std::call_once(prefetch_started_, [this] { start_prefetch(); }); }
  const std::string& shared_dir() const { return shared_.dir(); }

 private:
  struct Job {
    std::string key, text, pkey, what;
    std::string location = "";  // the user's line that needed the program, for a profiler,
    int64_t correlation = 0;    // and the host op
    Tier tier = Tier::kOptimized;
    bool promotion = false;     // a quick program's optimized successor
  };

  // A compile on a thread of its own, for a caller that waits (or will: ahead_).
  struct Outcome {
    ExecutablePtr exe;
    std::exception_ptr error;
    bool done = false;
  };

  // A quickly compiled program in memory: how to compile it optimized, and how often it ran. Held
  // (`exe`) so that its address, quick_'s key, is not reused while the entry lives.
  struct QuickProgram {
    ExecutablePtr exe;
    Job optimized;
    int64_t bytes_per_run = 0;
    int64_t runs = 0, bytes = 0;
  };

  // A program no tier has, for a caller that waits: quickly first where `first` and the program
  // allow it, else optimized. `here`: on this thread (one compiling ahead), else on a thread of
  // its own.
  ExecutablePtr compile_for_caller(Job job, Tier first, bool here) {
    // (A small program's optimized tier is compiled quickly already: nothing to promote.)
    if (first == Tier::kQuick && compile_quickly(job.text) && !hints_for(job.text).small)
      return get_quick(std::move(job), here);
    return compile_now(std::move(job), here);
  }

  ExecutablePtr compile_now(Job job, bool here) {
    if (!here) return compile_on_a_thread(std::move(job));
    ExecutablePtr exe = compile_and_store(job, /*background=*/false);
    return remember(job.key, exe);
  }

  // The quick tier of `job` (an optimized program no tier has): loaded from disk or compiled now,
  // and remembered for promotion.
  ExecutablePtr get_quick(Job job, bool here) {
    Job quick = job;
    quick.tier = Tier::kQuick;
    quick.pkey = persistent_key(job.text, Tier::kQuick);
    used_.note(quick.pkey);
    job.promotion = true;
    ExecutablePtr exe = load(quick);
    exe = exe ? remember(quick.key, exe) : compile_now(std::move(quick), here);
    std::lock_guard<std::mutex> lock(mu_);
    forget_evicted_quick_programs();
    int64_t bytes = bytes_per_run(job.text);
    quick_[exe.get()] = QuickProgram{exe, std::move(job), bytes};
    return exe;
  }

  // One more run of `exe` (with mu_ held): a quick program that ran often enough, on enough bytes,
  // is queued for its optimized compile. Keyed by address: a hash of a pointer, not of the key, on
  // every op's path.
  void note_run(const ExecutablePtr& exe) {
    auto it = quick_.find(exe.get());
    if (it == quick_.end()) return;
    QuickProgram& quick = it->second;
    quick.bytes += quick.bytes_per_run;
    if (++quick.runs < promote_after() || quick.bytes < promote_after_bytes()) return;
    compiling_.insert(quick.optimized.key);
    stats_.background_pending++;
    queue_.push_back(std::move(quick.optimized));
    quick_.erase(it);
    ensure_worker();
    wakeup_.notify_one();
  }

  // Quick programs the memory tier evicted are not promoted (with mu_ held; bounds quick_).
  void forget_evicted_quick_programs() {
    if (quick_.size() < 2 * memory_.size() + 64) return;
    for (auto it = quick_.begin(); it != quick_.end();)
      it = memory_.contains(it->second.optimized.key) ? std::next(it) : quick_.erase(it);
  }

  // Tells a profiler what the cache did for `job` from `start_ns` until now.
  static void trace(TraceEvent::Kind kind, const Job& job, int64_t start_ns, const char* cache, const char* how) {
    TraceEvent e(kind, kind == TraceEvent::Kind::kCompile ? "compile" : "load compiled program");
    e.start_ns = start_ns;
    e.end_ns = trace_clock_ns();
    e.location = job.location;
    e.correlation = job.correlation;
    e.text = {{"cache", cache}, {"program", job.what}};
    if (how) e.text.emplace_back("how", how);
    emit(std::move(e));
  }

  // How many keys a program's identity has had, and whether `key` is the one it had last.
  struct Variants {
    int64_t count;
    bool repeated;
  };
  // A different key for an identity seen before is a recompilation: record what changed.
  Variants note_recompile(const std::string& key, const std::string& what, const std::string& identity) {
    if (identity.empty()) return {1, false};
    auto [it, fresh] = last_key_.emplace(identity, key);
    int64_t& variants = variants_[identity];
    if (fresh) return {variants = 1, false};
    if (it->second == key) return {variants, true};
    record_recompile(what + ": " + graph::describe_change(it->second, key));
    it->second = key;
    return {++variants, false};
  }

  ExecutablePtr remember(const std::string& key, ExecutablePtr exe) {
    std::lock_guard<std::mutex> lock(mu_);
    memory_.insert(key, exe);
    return exe;
  }

  void start_prefetch() {
    if (local_.dir().empty() || env_or("TORCHTPU_CACHE_PREFETCH", "1") == "0") return;
    manifest_path_ = workload_manifest_path(local_.dir(), environment_fingerprint(Tier::kOptimized));
    manifest_ = read_manifest(manifest_path_);
    int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency() / 2, 1u, 4u));
    prefetch_.start(manifest_, [this](const std::string& pkey) -> ExecutablePtr {
      std::optional<std::string> bytes = local_.load(pkey);
      return bytes ? std::make_shared<runtime::Executable>(client().deserialize(*bytes)) : nullptr;
    }, threads);
  }

  // Prefetched, else from the persistent directory, else the shared one (copied into the
  // persistent one).
  ExecutablePtr load(const Job& job) {
    const std::string& pkey = job.pkey;
    if (ExecutablePtr exe = prefetch_.take(pkey)) {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.hits["disk"]++;
      prefetched_++;
      return exe;
    }
    for (DiskCache* tier : {&local_, &shared_}) {
      if (tier->dir().empty()) continue;
      int64_t start = tracing() ? trace_clock_ns() : 0;
      std::optional<std::string> bytes = tier->load(pkey);
      if (!bytes) continue;
      try {
        auto exe = std::make_shared<runtime::Executable>(client().deserialize(*bytes));
        const char* name = tier == &local_ ? "disk" : "shared";
        {
          std::lock_guard<std::mutex> lock(mu_);
          stats_.hits[name]++;
        }
        if (tier == &shared_) store(pkey, *bytes, /*shared_too=*/false);
        if (start) trace(TraceEvent::Kind::kCacheLoad, job, start, name, nullptr);
        return exe;
      } catch (const std::exception& e) {
        warn("compile cache entry " + pkey + " in " + tier->dir() + " does not load (" + e.what() + "); recompiling");
      }
    }
    return nullptr;
  }

  void store(const std::string& pkey, const std::string& bytes, bool shared_too) {
    std::lock_guard<std::mutex> lock(store_mu_);
    if (!local_.dir().empty()) local_.store(pkey, bytes);
    if (shared_too && !shared_.dir().empty()) shared_.store(pkey, bytes);
  }

  // `background`: nobody waits for it (else the caller does), which a profiler is told too.
  ExecutablePtr compile_and_store(const Job& job, bool background) {
    const char* how = background ? "background" : "caller waits";
    const std::string &text = job.text, &pkey = job.pkey, &what = job.what;
    if (const char* dump = std::getenv("TORCHTPU_DUMP_PROGRAMS"); dump && *dump) {
      std::error_code ignored;
      std::filesystem::create_directories(dump, ignored);
      std::ofstream(std::string(dump) + "/" + pkey + ".mlir") << "// " << what << "\n" << text;
    }
    int64_t traced_start = tracing() ? trace_clock_ns() : 0;
    auto start = std::chrono::steady_clock::now();
    runtime::CompileOptions options = compile_options(job.tier, hints_for(text));
    // XLA CPU spreads a program's code generation over threads that do not share the worker's
    // low priority: a compile nobody waits for keeps to one. (What the program computes does not
    // change, and the option is not part of the persistent key.)
    if (background && client().platform_name() == "cpu")
      options.xla_int_flags["xla_cpu_parallel_codegen_split_count"] = 1;
    auto exe = std::make_shared<runtime::Executable>(client().compile(text, options));
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (traced_start) trace(TraceEvent::Kind::kCompile, job, traced_start, job.promotion ? "promotion" : "miss", how);
    if (!job.promotion) record_compile(static_cast<int64_t>(seconds * 1e9));  // nobody waited for a promotion
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (job.promotion) {
        stats_.promotions++;
      } else {
        stats_.misses++;
        if (job.tier == Tier::kQuick) stats_.quick_compiles++;
      }
      stats_.compiles.push_back({what, seconds, temp_bytes(*exe)});
      if (stats_.compiles.size() > 1000) stats_.compiles.erase(stats_.compiles.begin());
    }
    if (!local_.dir().empty() || !shared_.dir().empty()) store(pkey, exe->serialize(), /*shared_too=*/true);
    if (seconds >= kTrimAfterCompileSeconds) return_freed_heap_to_the_system();
    return exe;
  }

  // Compiles on a thread of its own while the caller waits, so that Ctrl-C interrupts the wait;
  // an abandoned compile still finishes and lands in the memory tier.
  ExecutablePtr compile_on_a_thread(Job job) {
    auto outcome = std::make_shared<Outcome>();
    std::unique_lock<std::mutex> lock(mu_);
    on_a_thread(outcome, [this, job = std::move(job)] { return remember(job.key, compile_and_store(job, /*background=*/false)); });
    wait_interruptibly(lock, compiled_, [&] { return outcome->done; });
    if (outcome->error) std::rethrow_exception(outcome->error);
    return outcome->exe;
  }

  // With mu_ held: runs `work` on a thread of its own, counted among the running compiles (exit
  // waits for them); when it ends, `outcome` is set and `finish` runs, with mu_ held.
  void on_a_thread(std::shared_ptr<Outcome> outcome, std::function<ExecutablePtr()> work,
                   std::function<void()> finish = [] {}) {
    waited_compiles_++;
    std::thread([this, outcome, work = std::move(work), finish = std::move(finish)] {
      never_interrupt_this_thread();  // nobody waits on this thread: Ctrl-C stops the caller's wait
      ExecutablePtr exe;
      std::exception_ptr error;
      try {
        exe = work();
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      *outcome = {exe, error, true};
      finish();
      waited_compiles_--;
      compiled_.notify_all();
      idle_.notify_all();
    }).detach();  // waited for at exit (running()), like the background worker
  }

  // With mu_ held: a program asked for once waits for its second request.
  void defer(Job job) {
    deferred_.push_back(std::move(job));
    if (deferred_.size() <= kMostDeferredWindows) return;
    compiling_.erase(deferred_.front().key);
    stats_.background_pending--;
    deferred_.pop_front();
  }

  // With mu_ held: a deferred program is queued first (the workload runs it now, while the
  // programs queued before it may not recur); nothing where `key` is not deferred.
  void undefer(const std::string& key) {
    auto it = std::find_if(deferred_.begin(), deferred_.end(), [&](const Job& job) { return job.key == key; });
    if (it == deferred_.end()) return;
    queue_.push_front(std::move(*it));
    deferred_.erase(it);
    ensure_worker();
    wakeup_.notify_one();
  }

  void ensure_worker() {  // with mu_ held
    if (worker_started_) return;
    worker_started_ = true;
    std::thread([this] { work(); }).detach();  // lives as long as the process, like the cache
  }

  void work() {
    // Nobody waits for these compiles, and the caller's own (single ops it runs now) compete with
    // them for the cores: they yield (Linux's per-thread nice value).
    setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), kBackgroundNice);
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wakeup_.wait(lock, [&] { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
        worker_busy_ = true;
      }
      ExecutablePtr exe;
      try {
        exe = compile_and_store(job, /*background=*/true);
      } catch (const std::exception& e) {
        // The op-by-op path keeps working; the failure shows when the window runs synchronously.
        warn("background compile of " + job.what + " failed: " + e.what());
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (exe) memory_.replace(job.key, exe);  // a promotion replaces the quick program
      compiling_.erase(job.key);
      stats_.background_pending--;
      worker_busy_ = false;
      if (queue_.empty()) idle_.notify_all();
    }
  }

  std::mutex mu_, store_mu_;
  MemoryTier<ExecutablePtr> memory_;
  DiskCache local_, shared_;  // an empty dir() means the tier is off
  CacheStats stats_;
  int64_t memory_hits_ = 0;  // counted apart from stats_.hits: no map look-up per hit
  std::unordered_map<std::string, std::string> last_key_;  // identity -> key last compiled
  std::unordered_map<std::string, int64_t> variants_;      // identity -> keys it has had
  std::unordered_set<std::string> compiling_;
  std::unordered_map<std::string, std::shared_ptr<Outcome>> ahead_;  // compile_ahead's, until done
  // Compiled (or loaded) ahead and not yet asked for: its first request is no memory hit, so that
  // every request counts one hit or miss.
  std::unordered_set<std::string> counted_ahead_;
  std::unordered_map<const runtime::Executable*, QuickProgram> quick_;  // until its promotion is queued
  std::deque<Job> queue_, deferred_;  // deferred_: fused windows seen once, oldest first
  std::condition_variable wakeup_, idle_, compiled_;
  bool worker_started_ = false, worker_busy_ = false;
  int waited_compiles_ = 0;
  std::once_flag prefetch_started_;
  Prefetcher<ExecutablePtr> prefetch_;
  int64_t prefetched_ = 0;              // disk hits a prefetching thread had loaded
  std::string manifest_path_;           // "" while prefetching is off
  std::vector<std::string> manifest_;   // what the last run of this command used
  UsedKeys used_;                       // what this run uses
};

Cache& cache() {
  static auto* c = [] {
    auto* created = new Cache;  // never destroyed: the background worker may still use it at exit
    // Registered after the plugin was loaded, so it runs before the plugin's static destructors.
    std::atexit([] { cache().finish_at_exit(); });
    return created;
  }();
  return *c;
}

}  // namespace

std::shared_ptr<runtime::Executable> cached_executable(const std::string& key, const ProgramText& program,
                                                       const NameProgram& names, Tier first) {
  ExecutablePtr exe = cache().get(key, program, names, /*wait=*/true, first);
  if (exe) return exe;
  // Being compiled in the background: wait for it rather than compiling twice.
  wait_for_background_compiles();
  return cache().get(key, program, names, /*wait=*/true, first);
}

std::shared_ptr<runtime::Executable> cached_executable_or_compile_async(const std::string& key,
                                                                        const ProgramText& program,
                                                                        const NameProgram& names,
                                                                        bool skip_many_variants,
                                                                        bool until_asked_twice) {
  return cache().get(key, program, names, /*wait=*/false, Tier::kOptimized, skip_many_variants, until_asked_twice);
}

std::shared_ptr<runtime::Executable> loaded_executable(const std::string& key) { return cache().loaded(key); }

bool compile_ahead(const std::string& key, const ProgramText& program, const NameProgram& names) {
  return cache().compile_ahead(key, program, names);
}

void start_prefetching() { cache().start_prefetching(); }
void wait_for_background_compiles() { cache().wait_for_background(); }
void drop_queued_compiles() { cache().drop_queued(); }
int running_compiles() { return cache().running(); }
CacheStats cache_stats() { return cache().stats(); }
void reset_cache_stats() { cache().reset_stats(); }
void clear_cache() { cache().clear(); }
bool allow_excess_precision() { return excess_precision.load(); }
void set_allow_excess_precision(bool allow) {
  if (excess_precision.exchange(allow) != allow) cache().forget_loaded();
}
std::string cache_dir() { return cache().dir(); }
std::string shared_cache_dir() { return cache().shared_dir(); }

}  // namespace torchtpu::exec
