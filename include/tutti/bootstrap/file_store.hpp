#pragma once
/// \file
/// tutti::bootstrap::file_store: a store kept in one file on a file system every rank sees
/// (the role of torch.distributed's FileStore).
///
/// File format, integers little-endian: the 8-byte magic "TUTTIKV1", then records
///   [u32 key length][u32 value length][key][value]
/// appended in order; the last record of a key holds its value. Writers append under an
/// exclusive flock(), readers parse new records under a shared one, so every process sees
/// each set or add whole or not at all. A record left half-written by a writer that died is
/// ignored by readers and cut off by the next writer.

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <tutti/bootstrap/store.hpp>
#include <tutti/core/error.hpp>
#include <tutti/detail/unique_fd.hpp>

namespace tutti::inline v0::detail {

inline constexpr char file_store_magic[8] = {'T', 'U', 'T', 'T', 'I', 'K', 'V', '1'};
inline constexpr std::size_t file_store_header = sizeof file_store_magic;

/// Holds a flock() on an open file for one scope.
class file_store_lock {
 public:
  file_store_lock(int fd, int op, const std::string& name) : fd_(fd) {
    while (::flock(fd_, op) != 0)
      if (errno != EINTR)
        store_fail(errc::transport_failure, name + ": flock: " + store_errno(errno));
  }
  file_store_lock(const file_store_lock&) = delete;
  file_store_lock& operator=(const file_store_lock&) = delete;
  ~file_store_lock() { (void)::flock(fd_, LOCK_UN); }

 private:
  int fd_;
};

[[nodiscard]] inline std::uint32_t file_store_u32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint32_t>(p[i]);
  return v;
}

inline void file_store_put_u32(std::vector<std::byte>& out, std::size_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(std::byte((v >> (8 * i)) & 0xff));
}

}  // namespace tutti::inline v0::detail

namespace tutti::inline v0::bootstrap {

/// A store kept in the file `path` on a file system shared by every rank (local disk for one
/// node; NFS and Lustre work where flock() does). Safe across processes and threads; waiting
/// (get, wait) polls the file every 1 to 10 ms.
///
/// Cleanup: the file outlives the store objects, so that a late rank still finds what earlier
/// ones wrote. Once every rank is done with it (e.g. after a barrier), one process calls
/// remove(), or the job's launcher deletes the file. Use a fresh path per job: a stale file
/// still holds the keys of the run that wrote it.
///
/// After fork() the child may keep using an inherited object: it reopens the file, because
/// flock() does not exclude holders of one inherited open file.
class file_store final : public store {
 public:
  /// Opens `path`, creating it with mode 0600 if missing (the directory must exist). Raises
  /// errc::transport_failure when it cannot be opened or is not a tutti file store.
  /// `timeout` is kept for callers that need one (see timeout()); get and wait take their own.
  explicit file_store(std::string path, std::chrono::milliseconds timeout = default_timeout())
      : path_(std::move(path)), timeout_(timeout) {
    if (path_.empty()) detail::store_fail(errc::invalid_argument, "file_store: empty path");
    std::lock_guard lock(mu_);
    open_file();
    const detail::file_store_lock held(fd_.get(), LOCK_SH, name());
    refresh();
  }

  /// The file this store is kept in.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// The constructor's timeout.
  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept { return timeout_; }

  /// Deletes the file (a missing file is fine). Processes that have it open keep working on
  /// the deleted file; a store opened on `path` afterwards starts empty.
  void remove() {
    if (::unlink(path_.c_str()) != 0 && errno != ENOENT)
      detail::store_fail(errc::transport_failure,
                         name() + ": cannot remove the file: " + detail::store_errno(errno));
  }

  void set(std::string_view key, std::span<const std::byte> value) override {
    detail::check_store_key(name(), key);
    detail::check_store_value(name(), key, value.size());
    std::lock_guard lock(mu_);
    reopen_after_fork();
    const detail::file_store_lock held(fd_.get(), LOCK_EX, name());
    append(key, value);
  }

  [[nodiscard]] std::vector<std::byte> get(std::string_view key,
                                           std::chrono::milliseconds timeout) override {
    detail::check_store_key(name(), key);
    std::vector<std::byte> value;
    poll_until(timeout, "get of key " + detail::store_quote(key), [&] {
      const auto it = data_.find(key);
      if (it == data_.end()) return false;
      value = it->second;
      return true;
    });
    return value;
  }

  std::int64_t add(std::string_view key, std::int64_t delta) override {
    detail::check_store_key(name(), key);
    std::lock_guard lock(mu_);
    reopen_after_fork();
    const detail::file_store_lock held(fd_.get(), LOCK_EX, name());
    refresh();
    const auto it = data_.find(key);
    std::int64_t sum = 0;
    std::string why;
    if (!detail::store_add_counter(it == data_.end() ? nullptr : &it->second, delta, sum, why))
      detail::store_fail(errc::invalid_argument,
                         name() + ": add to key " + detail::store_quote(key) + ": " + why);
    append(key, detail::store_counter_bytes(sum));
    return sum;
  }

  void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) override {
    for (const auto& k : keys) detail::check_store_key(name(), k);
    poll_until(timeout, "wait for " + detail::store_quote_keys(keys), [&] {
      return std::all_of(keys.begin(), keys.end(),
                         [&](const auto& k) { return data_.contains(k); });
    });
  }

 private:
  [[nodiscard]] std::string name() const { return "file_store " + path_; }

  void open_file() {
    int fd = -1;
    do {
      fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    } while (fd < 0 && errno == EINTR);
    fd_.reset(fd);
    if (!fd_)
      detail::store_fail(errc::transport_failure,
                         name() + ": cannot open the file: " + detail::store_errno(errno));
    pid_ = ::getpid();
  }

  void reopen_after_fork() {
    if (::getpid() != pid_) open_file();  // the records parsed so far stay valid: append-only
  }

  [[nodiscard]] std::uint64_t file_size() const {
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0)
      detail::store_fail(errc::transport_failure,
                         name() + ": fstat: " + detail::store_errno(errno));
    return static_cast<std::uint64_t>(st.st_size);
  }

  void read_at(std::uint64_t offset, std::span<std::byte> buf) const {
    while (!buf.empty()) {
      const ssize_t n = ::pread(fd_.get(), buf.data(), buf.size(), static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        detail::store_fail(
            errc::transport_failure,
            name() + ": read: " + (n == 0 ? "the file shrank" : detail::store_errno(errno)));
      buf = buf.subspan(static_cast<std::size_t>(n));
      offset += static_cast<std::uint64_t>(n);
    }
  }

  [[noreturn]] void corrupt(const std::string& why) const {
    detail::store_fail(errc::transport_failure,
                       name() + ": not a valid tutti file store (" + why + ")");
  }

  /// Parses the records appended since the last call. Caller holds mu_ and a flock; returns
  /// the file size seen.
  std::uint64_t refresh() {
    const std::uint64_t size = file_size();
    if (size < detail::file_store_header) return size;  // empty, or a writer died writing it
    if (size < parsed_) corrupt("the file shrank from " + std::to_string(parsed_) + " bytes");
    if (parsed_ == 0) {
      std::byte magic[detail::file_store_header];
      read_at(0, magic);
      if (std::memcmp(magic, detail::file_store_magic, sizeof magic) != 0) corrupt("bad magic");
      parsed_ = detail::file_store_header;
    }
    if (size == parsed_) return size;
    std::vector<std::byte> buf(static_cast<std::size_t>(size - parsed_));
    read_at(parsed_, buf);
    std::size_t pos = 0;
    while (buf.size() - pos >= 8) {
      const std::size_t klen = detail::file_store_u32(buf.data() + pos);
      const std::size_t vlen = detail::file_store_u32(buf.data() + pos + 4);
      if (klen == 0 || klen > max_key_bytes || vlen > max_value_bytes)
        corrupt("bad record at offset " + std::to_string(parsed_ + pos));
      if (buf.size() - pos - 8 < klen + vlen) break;  // half-written: ignore it
      const auto* k = reinterpret_cast<const char*>(buf.data() + pos + 8);
      const auto v = std::span(buf).subspan(pos + 8 + klen, vlen);
      data_.insert_or_assign(std::string(k, klen), std::vector<std::byte>(v.begin(), v.end()));
      pos += 8 + klen + vlen;
    }
    parsed_ += pos;
    return size;
  }

  /// Appends one record. Caller holds mu_ and the exclusive flock.
  void append(std::string_view key, std::span<const std::byte> value) {
    const std::uint64_t size = refresh();
    std::vector<std::byte> rec;
    rec.reserve(detail::file_store_header + 8 + key.size() + value.size());
    if (parsed_ == 0) {  // a new file (or one whose first writer died): write the magic
      const auto* m = reinterpret_cast<const std::byte*>(detail::file_store_magic);
      rec.assign(m, m + detail::file_store_header);
    }
    if (size != parsed_) truncate_to(parsed_);  // drop what a writer that died left behind
    detail::file_store_put_u32(rec, key.size());
    detail::file_store_put_u32(rec, value.size());
    const auto kb = detail::store_bytes(key);
    rec.insert(rec.end(), kb.begin(), kb.end());
    rec.insert(rec.end(), value.begin(), value.end());
    for (std::span<const std::byte> left(rec); !left.empty();) {
      const ssize_t n = ::write(fd_.get(), left.data(), left.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int e = n < 0 ? errno : EIO;
        truncate_to(parsed_);
        detail::store_fail(errc::transport_failure, name() + ": write: " + detail::store_errno(e));
      }
      left = left.subspan(static_cast<std::size_t>(n));
    }
    parsed_ += rec.size();
    data_.insert_or_assign(std::string(key), std::vector<std::byte>(value.begin(), value.end()));
  }

  void truncate_to(std::uint64_t size) const {
    while (::ftruncate(fd_.get(), static_cast<off_t>(size)) != 0)
      if (errno != EINTR)
        detail::store_fail(errc::transport_failure,
                           name() + ": ftruncate: " + detail::store_errno(errno));
  }

  /// Re-reads the file until `ready()` (called with mu_ held) or the timeout passes.
  template <class Ready>
  void poll_until(std::chrono::milliseconds timeout, const std::string& what, Ready ready) {
    const auto deadline = detail::store_deadline(timeout);
    std::chrono::milliseconds pause{1};
    for (;;) {
      {
        std::lock_guard lock(mu_);
        reopen_after_fork();
        if (file_size() != parsed_) {  // unchanged size: nothing new to parse
          const detail::file_store_lock held(fd_.get(), LOCK_SH, name());
          refresh();
        }
        if (ready()) return;
      }
      const auto now = detail::store_clock::now();
      if (now >= deadline)
        detail::store_fail(errc::timeout,
                           name() + ": " + what + " timed out after " + detail::store_ms(timeout));
      std::this_thread::sleep_for(std::min<detail::store_clock::duration>(pause, deadline - now));
      pause = std::min(pause * 2, std::chrono::milliseconds{10});
    }
  }

  std::string path_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;  // flock() does not exclude threads sharing one open file: this does
  detail::unique_fd fd_;
  pid_t pid_ = 0;
  std::uint64_t parsed_ = 0;  // file offset up to which records are parsed into data_
  std::map<std::string, std::vector<std::byte>, std::less<>> data_;
};

/// $TMPDIR/tutti-<uid> (or /tmp/...), mode 0700, owned by this user: made if missing, refused
/// (errc::transport_failure) if anyone else could read or replace it. Local rendezvous files
/// (shm's and gloo's, when no MASTER_ADDR store can be used) live here.
[[nodiscard]] inline std::string private_dir() {
  const char* env = std::getenv("TMPDIR");
  const std::string base = env != nullptr && *env != '\0' ? env : "/tmp";
  std::string dir = base + "/tutti-" + std::to_string(::geteuid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    detail::store_fail(errc::transport_failure, "mkdir " + dir + ": " + detail::store_errno(errno));
  struct stat info {};
  if (::lstat(dir.c_str(), &info) != 0)
    detail::store_fail(errc::transport_failure, "lstat " + dir + ": " + detail::store_errno(errno));
  if (!S_ISDIR(info.st_mode) || info.st_uid != ::geteuid() || (info.st_mode & 077) != 0)
    detail::store_fail(errc::transport_failure,
                       dir +
                           " is not a directory private to this user: refusing to rendezvous "
                           "through it (remove it, or set TMPDIR)");
  return dir;
}

}  // namespace tutti::inline v0::bootstrap
