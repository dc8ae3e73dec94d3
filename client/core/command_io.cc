#include "client/core/command_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/core/daemon_client.h"
#include "client/core/proto_json.h"
#include "common/unix_accounts.h"
#include "common/yaml_util.h"

namespace overlap::client {

namespace {

std::string GroupName(gid_t gid) {
  std::optional<std::string> name = LookupGroupName(gid);
  return name ? *name : absl::StrCat("gid ", gid);
}

// "(owner uid 0, group root, mode 0700)" of `path`, or "" when it cannot be read.
std::string Ownership(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  return absl::StrFormat(" (owner uid %d, group %s, mode %04o)", st.st_uid, GroupName(st.st_gid),
                         st.st_mode & 07777);
}

}  // namespace

std::string UnixSocketProblem(const std::string& path) {
  const uid_t uid = ::getuid();
  // The first directory on the way that this user may not enter: stat of the
  // socket fails there with EACCES, which is no missing socket.
  std::filesystem::path dir;
  for (const std::filesystem::path& part : std::filesystem::path(path).parent_path()) {
    dir /= part;
    if (::access(dir.c_str(), X_OK) != 0 && errno == EACCES) {
      return absl::StrCat("the socket's directory ", dir.string(), " is not open to uid ", uid,
                          Ownership(dir.string()),
                          ": ask the daemon's operator to add you to its socket group "
                          "(socket_group), or use --addr / OVERLAPD_ADDR for another daemon");
    }
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return absl::StrCat("no socket at ", path,
                        ": is overlapd running? (systemctl status overlapd; or --addr / "
                        "OVERLAPD_ADDR for another one)");
  }
  if (::access(path.c_str(), W_OK) != 0 && errno == EACCES) {
    return absl::StrCat("the socket ", path, " is not open to uid ", uid, Ownership(path),
                        ": ask the daemon's operator to add you to its socket group "
                        "(socket_group)");
  }
  return "";
}

absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes) {
  const bool from_stdin = path == "-";
  const std::string name = from_stdin ? "standard input" : path;
  errno = 0;
  const int fd = from_stdin ? ::dup(STDIN_FILENO) : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot read ", name, ": ", std::strerror(errno)));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  const auto too_large = [&] {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", name, ": larger than ",
                                                   max_bytes >> 20,
                                                   " MiB, the most overlapctl reads from a file"));
  };
  struct stat st {};
  if (::fstat(fd, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat("cannot read ", name, ": it is a directory"));
    }
    if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > max_bytes) return too_large();
  }
  // Whatever it is (a pipe, a FIFO, /dev/zero, a file still growing), never
  // more than one byte past the limit is read.
  std::string text;
  std::vector<char> buffer(64 * 1024);
  while (true) {
    const size_t want = std::min(buffer.size(), max_bytes + 1 - text.size());
    const ssize_t n = ::read(fd, buffer.data(), want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (errno == EISDIR) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot read ", name, ": it is a directory"));
      }
      return absl::DataLossError(absl::StrCat("error reading ", name, ": ", std::strerror(errno)));
    }
    if (n == 0) return text;
    text.append(buffer.data(), static_cast<size_t>(n));
    if (text.size() > max_bytes) return too_large();
  }
}

absl::StatusOr<std::string> ReadGraphFile(const std::string& file) {
  return ReadBoundedFile(file, kMaxInputFileBytes);
}

std::string ToJson(const google::protobuf::Message& message) {
  return ProtoToJson(message).dump(2) + "\n";
}

int WriteTextFile(const std::string& path, const std::string& text, std::ostream& err) {
  errno = 0;
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (file) file << text;
  file.close();
  if (!file) {
    err << "overlapctl: cannot write " << path << (errno != 0 ? ": " : "")
        << (errno != 0 ? std::strerror(errno) : "") << "\n";
    return kExitUsage;
  }
  return kExitOk;
}

int UsageError(const absl::Status& status, std::ostream& err) {
  err << "overlapctl: " << status.message() << "\n";
  return kExitUsage;
}

int ReportCallError(const absl::Status& status, const std::string& address, std::ostream& err) {
  if (IsUnreachable(status)) {
    absl::string_view path = address;
    const bool unix_socket = absl::ConsumePrefix(&path, "unix:") || absl::StartsWith(path, "/");
    if (unix_socket) {
      if (std::string why = UnixSocketProblem(std::string(path)); !why.empty()) {
        err << "overlapctl: cannot reach overlapd at " << address << ": " << why << "\n";
        return kExitUnreachable;
      }
    }
    err << "overlapctl: cannot reach overlapd at " << address << ": " << status.message() << "\n";
    // Something answered on a TCP port but the connection did not come up: the
    // usual cause is TLS on one side only, or a certificate the other refused.
    const bool tcp = !absl::StartsWith(address, "unix:") && !absl::StartsWith(address, "/");
    if (tcp && !absl::StrContains(status.message(), "Connection refused")) {
      err << "overlapctl: if overlapd uses TLS, pass --tls-ca (and --tls-cert/--tls-key when it "
             "requires client certificates)\n";
    }
    return kExitUnreachable;
  }
  err << "overlapctl: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
      << "\n";
  return kExitRefused;
}

bool ParseShapeDims(absl::string_view text, int64_t* m, int64_t* k, int64_t* n) {
  std::vector<absl::string_view> dims = absl::StrSplit(text, 'x');
  return dims.size() == 3 && absl::SimpleAtoi(dims[0], m) && absl::SimpleAtoi(dims[1], k) &&
         absl::SimpleAtoi(dims[2], n);
}

namespace {

template <typename T>
absl::StatusOr<std::string> WithKey(const std::string& graph, const char* key, const T& value) {
  absl::StatusOr<YAML::Node> doc = yaml_util::LoadDocument(graph, "graph");
  if (!doc.ok()) return doc.status();
  if (!doc->IsMap()) return absl::InvalidArgumentError("graph: must be a mapping");
  (*doc)[key] = value;
  YAML::Emitter out;
  out << *doc;
  return std::string(out.c_str()) + "\n";
}

}  // namespace

absl::StatusOr<std::string> WithFuseOff(const std::string& graph) {
  return WithKey(graph, "fuse", false);
}

absl::StatusOr<std::string> WithScheduler(const std::string& graph, const std::string& scheduler) {
  return WithKey(graph, "scheduler", scheduler);
}

}  // namespace overlap::client
