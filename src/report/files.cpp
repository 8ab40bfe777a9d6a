// Files of a run: atomic writes, directories, the metrics log.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "pipetrain/error.hpp"
#include "pipetrain/report.hpp"

namespace pt {

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

void make_dirs(const std::string& path) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (mkdir(cur.c_str(), 0777) != 0 && errno != EEXIST)
      fail(Exit::io, cur + ": cannot create directory: " + std::strerror(errno));
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail(Exit::io, path + ": not a directory");
}

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail(Exit::io, tmp + ": cannot create: " + std::strerror(errno));
  size_t done = 0;
  while (done < content.size()) {
    ssize_t w = ::write(fd, content.data() + done, content.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(Exit::io, tmp + ": write failed: " + std::strerror(e));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail(Exit::io, tmp + ": fsync/close failed: " + std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail(Exit::io, path + ": rename failed: " + std::strerror(errno));
}

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path) {
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!f_) fail(Exit::io, path + ": cannot create: " + std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::append(const std::string& line) {
  if (!f_) return;
  if (std::fputs(line.c_str(), f_) < 0 || std::fputc('\n', f_) < 0 || std::fflush(f_) != 0)
    fail(Exit::io, path_ + ": write failed: " + std::strerror(errno));
}

}  // namespace pt
