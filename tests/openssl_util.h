// Throwaway certificates for TLS tests, made with the openssl command line in
// a test's directory: a CA, and leaves it signs.
#pragma once

#include <cstdlib>
#include <string>

namespace overlap::testing {

// `command` run by /bin/sh in `dir`, its output dropped; whether it succeeded.
inline bool RunInDir(const std::string& dir, const std::string& command) {
  const std::string full = "cd '" + dir + "' && { " + command + "; } >/dev/null 2>&1";
  return std::system(full.c_str()) == 0;
}

// NAME.key and NAME.pem: a self-signed CA (P-256) whose subject is /CN=NAME.
inline bool MakeTestCa(const std::string& dir, const std::string& name) {
  return RunInDir(dir,
                  "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                  "-keyout " +
                      name + ".key -out " + name + ".pem -days 3650 -subj /CN=" + name);
}

// NAME.key and NAME.pem signed by CA (CA.pem, CA.key), with subject `subject`
// and the extensions in the file `ext`.
inline bool MakeTestLeaf(const std::string& dir, const std::string& name, const std::string& ca,
                         const std::string& ext, const std::string& subject) {
  return RunInDir(dir,
                  "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " +
                      name + ".key -out " + name + ".csr -subj " + subject) &&
         RunInDir(dir, "openssl x509 -req -in " + name + ".csr -CA " + ca + ".pem -CAkey " + ca +
                           ".key -CAcreateserial -days 3650 -extfile " + ext + " -out " + name +
                           ".pem");
}

}  // namespace overlap::testing
