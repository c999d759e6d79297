// Cold-start prefetching: keys load in order on background threads, a caller waits for the one a
// worker has in hand and loads the ones no worker reached itself, and the manifest of used keys
// round-trips through its file (private to the user), ignoring damaged lines.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "exec/prefetch.h"

namespace torchtpu::exec {
namespace {

using IntPrefetcher = Prefetcher<std::shared_ptr<int>>;

std::string key(int i) { return std::string(63, '0') + std::to_string(i); }

void wait_for(const std::atomic<int>& n, int value) {
  while (n.load() < value) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST(Prefetcher, HandsOutWhatItLoaded) {
  IntPrefetcher p;
  std::atomic<int> loads{0};
  p.start({"a", "b", "c"}, [&](const std::string& k) {
    loads++;
    return k == "b" ? nullptr : std::make_shared<int>(k[0]);
  }, 2);
  wait_for(loads, 3);
  p.stop();
  auto a = p.take("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(*a, 'a');
  EXPECT_EQ(p.take("a"), nullptr);  // handed out once
  EXPECT_EQ(p.take("b"), nullptr);  // did not load: the caller loads it (and sees why)
  EXPECT_EQ(p.take("unknown"), nullptr);
  EXPECT_EQ(p.taken_early(), 0u);
}

TEST(Prefetcher, WaitsForTheKeyInHandAndSkipsTheOnesNotReached) {
  IntPrefetcher p;
  std::atomic<int> started{0}, loads{0};
  std::atomic<bool> release{false};
  p.start({"slow", "x", "y"}, [&](const std::string& k) {
    started++;
    if (k == "slow")
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    loads++;
    return std::make_shared<int>(1);
  }, 1);
  wait_for(started, 1);              // the only worker is busy with "slow"
  EXPECT_EQ(p.take("y"), nullptr);   // so "y" is the caller's to load
  EXPECT_EQ(p.taken_early(), 1u);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    release = true;
  });
  EXPECT_NE(p.take("slow"), nullptr);  // waits for the worker
  releaser.join();
  wait_for(loads, 2);
  EXPECT_NE(p.take("x"), nullptr);
  p.stop();
  EXPECT_EQ(loads.load(), 2);  // "y" was never loaded by the worker
}

TEST(Prefetcher, StopsWithKeysLeft) {
  IntPrefetcher p;
  std::vector<std::string> keys;
  for (int i = 0; i < 1000; ++i) keys.push_back(key(i));
  std::atomic<int> loads{0};
  p.start(keys, [&](const std::string&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    loads++;
    return std::make_shared<int>(0);
  }, 2);
  p.stop();  // returns after the loads in hand, not after all 1000
  EXPECT_LT(loads.load(), 1000);
}

TEST(Manifest, RoundTripsAndIgnoresDamagedLines) {
  auto dir = std::filesystem::temp_directory_path() / ("torchtpu_manifest_" + std::to_string(getpid()));
  std::string path = workload_manifest_path(dir.string(), "fingerprint");
  EXPECT_NE(path, workload_manifest_path(dir.string(), "another plugin"));
  EXPECT_TRUE(read_manifest(path).empty());
  ASSERT_TRUE(write_manifest(path, {key(1), key(2)}));
  EXPECT_EQ(read_manifest(path), (std::vector<std::string>{key(1), key(2)}));
  std::ofstream(path, std::ios::app) << "../../etc/passwd\n" << key(3) << "\n";
  EXPECT_EQ(read_manifest(path), (std::vector<std::string>{key(1), key(2), key(3)}));
  std::filesystem::remove_all(dir);
}

TEST(Manifest, IsPrivateToTheUser) {
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path() / ("torchtpu_manifest_perms_" + std::to_string(getpid()));
  std::string path = workload_manifest_path(dir.string(), "fingerprint");
  ASSERT_TRUE(write_manifest(path, {key(1)}));
  auto others = fs::perms::group_all | fs::perms::others_all;
  EXPECT_EQ(fs::status(fs::path(path).parent_path()).permissions() & others, fs::perms::none);
  EXPECT_EQ(fs::status(path).permissions() & others, fs::perms::none);
  fs::remove_all(dir);
}

TEST(UsedKeys, KeepsFirstUseOrderOnce) {
  UsedKeys used;
  for (const char* k : {"b", "a", "b", "c", "a"}) used.note(k);
  EXPECT_EQ(used.keys(), (std::vector<std::string>{"b", "a", "c"}));
}

}  // namespace
}  // namespace torchtpu::exec
