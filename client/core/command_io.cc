#include "client/core/command_io.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/core/daemon_client.h"
#include "client/core/proto_json.h"
#include "common/yaml_util.h"

namespace overlap::client {

absl::StatusOr<std::string> ReadGraphFile(const std::string& file) {
  std::ostringstream text;
  if (file == "-") {
    text << std::cin.rdbuf();
    return text.str();
  }
  if (std::filesystem::is_directory(file)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", file, ": it is a directory"));
  }
  errno = 0;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", file, errno != 0 ? ": " : "",
                                            errno != 0 ? std::strerror(errno) : ""));
  }
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", file));
  return text.str();
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

int ReportCallError(const absl::Status& status, const std::string& address, std::ostream& err) {
  if (IsUnreachable(status)) {
    absl::string_view path = address;
    const bool unix_socket = absl::ConsumePrefix(&path, "unix:") || absl::StartsWith(path, "/");
    struct stat st {};
    if (unix_socket && ::stat(std::string(path).c_str(), &st) != 0) {
      err << "overlapctl: cannot reach overlapd at " << address << ": no socket at " << path
          << ": is overlapd running? (systemctl status overlapd; or --addr / OVERLAPD_ADDR "
             "for another one)\n";
      return kExitUnreachable;
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
