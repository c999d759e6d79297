// The persistent cache directory: round trips, damaged entries dropped, unwritable directories
// reported, private directories and authenticated entries, the size bound, and the SHA-256 and
// HMAC the keys, checksums and tags use.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
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

DiskCacheOptions options(bool private_to_user, std::string auth_key = "", int64_t max_bytes = 0,
                         uid_t owner = geteuid()) {
  return {private_to_user, std::move(auth_key), max_bytes, owner};
}

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

TEST_F(DiskCacheTest, PrivateDirectoryAndEntriesAreTheUsersAlone) {
  DiskCache cache(dir_.string(), options(true));
  ASSERT_TRUE(cache.store(kKey, "exe"));
  EXPECT_EQ(fs::status(dir_).permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(fs::status(entry_file()).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(cache.load(kKey), "exe");
}

TEST_F(DiskCacheTest, PrivateEntryOthersCanWriteIsRefusedAndReplaced) {
  DiskCache cache(dir_.string(), options(true));
  cache.store(kKey, "exe");
  fs::permissions(entry_file(), fs::perms::others_write, fs::perm_options::add);
  EXPECT_FALSE(cache.load(kKey).has_value());
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("other users can write it"), std::string::npos) << warnings_[0];
  ASSERT_TRUE(cache.store(kKey, "exe"));  // the recompiled entry replaces it
  EXPECT_EQ(cache.load(kKey), "exe");
}

TEST_F(DiskCacheTest, PrivateEntryOfAnotherUserIsRefused) {
  DiskCache mine(dir_.string(), options(true));
  mine.store(kKey, "exe");
  DiskCache someone_elses(dir_.string(), options(true, "", 0, geteuid() + 1));
  EXPECT_FALSE(someone_elses.load(kKey).has_value());
  ASSERT_FALSE(warnings_.empty());
  EXPECT_NE(warnings_[0].find("belongs to uid"), std::string::npos) << warnings_[0];
}

TEST_F(DiskCacheTest, PrivateDirectoryOthersCanWriteIsNotUsed) {
  fs::create_directories(dir_);
  fs::permissions(dir_, fs::perms::all);
  DiskCache cache(dir_.string(), options(true));
  EXPECT_FALSE(cache.store(kKey, "exe"));
  EXPECT_FALSE(cache.load(kKey).has_value());
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("writable by other users"), std::string::npos) << warnings_[0];
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(DiskCacheTest, AuthenticatedEntriesLoadOnlyUnderTheirKey) {
  DiskCache signer(dir_.string(), options(false, "secret"));
  signer.store(kKey, "exe");
  EXPECT_EQ(signer.load(kKey), "exe");
  DiskCache other_key(dir_.string(), options(false, "another secret"));
  EXPECT_FALSE(other_key.load(kKey).has_value());
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("fails authentication"), std::string::npos) << warnings_[0];
  DiskCache unsigned_writer(dir_.string());
  unsigned_writer.store(kKey, "evil");
  EXPECT_FALSE(signer.load(kKey).has_value());  // an unsigned entry is never loaded under a key
}

TEST_F(DiskCacheTest, AnEntryUnderAnotherKeysNameIsDropped) {
  DiskCache cache(dir_.string());
  cache.store(kKey, "exe");
  const std::string other = sha256_hex("another program");
  fs::rename(entry_file(), dir_ / (other + ".xlaexe"));
  EXPECT_FALSE(cache.load(other).has_value());
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("wrong key"), std::string::npos);
}

TEST_F(DiskCacheTest, SizeBoundEvictsTheLeastRecentlyUsed) {
  DiskCache cache(dir_.string(), options(false, "", 3500));
  auto key = [](int i) { return sha256_hex("program " + std::to_string(i)); };
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(cache.store(key(i), std::string(1000, 'x')));
    // Modification times are the recency order; make them distinct on coarse clocks.
    fs::last_write_time(dir_ / (key(i) + ".xlaexe"), fs::file_time_type::clock::now() - std::chrono::minutes(10 - i));
  }
  ASSERT_TRUE(cache.load(key(0)).has_value());  // entry 0 becomes the most recently used
  ASSERT_TRUE(cache.store(key(3), std::string(1000, 'x')));
  EXPECT_TRUE(cache.load(key(0)).has_value());
  EXPECT_FALSE(cache.load(key(1)).has_value());
  EXPECT_TRUE(cache.load(key(3)).has_value());
  int64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir_)) total += static_cast<int64_t>(e.file_size());
  EXPECT_LE(total, 3500);
}

TEST_F(DiskCacheTest, VanishedDirectoryIsMadeAgain) {
  DiskCache cache(dir_.string(), options(true));
  ASSERT_TRUE(cache.store(kKey, "exe"));
  fs::remove_all(dir_);
  EXPECT_FALSE(cache.load(kKey).has_value());
  EXPECT_TRUE(cache.store(kKey, "exe"));
  EXPECT_EQ(cache.load(kKey), "exe");
  EXPECT_TRUE(warnings_.empty());
}

TEST(Hmac, MatchesRfc4231) {
  EXPECT_EQ(hmac_sha256_hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hmac_sha256_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hmac_sha256_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
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
