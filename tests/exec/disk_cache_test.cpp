// The persistent cache directory: round trips, damaged entries dropped, unwritable directories
// reported, and the SHA-256 the keys and checksums use.
#include <gtest/gtest.h>
#include <unistd.h>


#include <filesystem>
#include <fstream>

#include "exec/diagnostics.h"
#include "exec/disk_cache.h"
#include "exec/sha256.h"

namespace torchtpu::exec {
namespace {

namespace fs = std::filesystem;

class DiskCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("torchtpu-cache-test-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    set_warning_handler([this](const std::string& m) { warnings_.push_back(m); });
  }
  void TearDown() override {
    fs::remove_all(dir_);
    set_warning_handler([](const std::string&) {});
  }
  fs::path entry_file() {
    for (const auto& e : fs::directory_iterator(dir_)) return e.path();
    return {};
  }
  fs::path dir_;
  std::vector<std::string> warnings_;
};

const std::string kKey = sha256_hex("program");

TEST_F(DiskCacheTest, StoresAndLoads) {
  DiskCache cache(dir_.string());
  EXPECT_FALSE(cache.load(kKey).has_value());
  ASSERT_TRUE(cache.store(kKey, std::string("exe\0bytes", 9)));
  EXPECT_EQ(cache.load(kKey), std::string("exe\0bytes", 9));
  EXPECT_TRUE(warnings_.empty());
}

TEST_F(DiskCacheTest, TruncatedEntryIsDroppedWithAWarning) {
  DiskCache cache(dir_.string());
  cache.store(kKey, std::string(1000, 'x'));
  fs::resize_file(entry_file(), fs::file_size(entry_file()) - 10);
  EXPECT_FALSE(cache.load(kKey).has_value());
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("truncated"), std::string::npos);
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(DiskCacheTest, CorruptEntryIsDroppedWithAWarning) {
  DiskCache cache(dir_.string());
  cache.store(kKey, std::string(1000, 'x'));
  {
    std::fstream f(entry_file(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('y');
  }
  EXPECT_FALSE(cache.load(kKey).has_value());
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("checksum"), std::string::npos);
}

TEST_F(DiskCacheTest, UnwritableDirectoryWarnsOnceAndKeepsWorking) {
  // A directory below a regular file can be neither created nor written, even by root (for whom
  // a read-only mode bit means nothing).
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  DiskCache cache((dir_ / "file" / "cache").string());
  EXPECT_FALSE(cache.store(kKey, "a"));
  EXPECT_FALSE(cache.store(sha256_hex("other"), "b"));
  EXPECT_EQ(warnings_.size(), 1u);
  EXPECT_FALSE(cache.load(kKey).has_value());
}

TEST(Sha256, MatchesTheStandardTestVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

}  // namespace
}  // namespace torchtpu::exec
