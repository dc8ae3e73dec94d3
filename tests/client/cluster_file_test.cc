// The cluster file of `overlapctl node|top|check --cluster-file`: each node's
// address and TLS, relative paths taken from the file's directory, errors that
// name the node and the field, and how --nodes and the --tls-* flags join it.
#include "client/views/cluster_file.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::client {
namespace {

using ::testing::HasSubstr;

constexpr char kPath[] = "/etc/cluster/view.yaml";

TEST(ClusterFileTest, EachNodeHasItsAddressAndItsOwnTls) {
  absl::StatusOr<std::vector<ClusterNode>> nodes = ParseClusterFile(
      "- address: gpu-a:7443\n"
      "  tls_ca: ca.pem\n"
      "  tls_cert: /certs/client.pem\n"
      "  tls_key: ../keys/client.key\n"
      "  server_name: gpu-a.example\n"
      "- address: unix:/run/overlapd/overlapd.sock\n",
      kPath);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 2u);
  const ClusterNode& tls = (*nodes)[0];
  EXPECT_EQ(tls.address, "gpu-a:7443");
  EXPECT_EQ(tls.tls.ca_file, "/etc/cluster/ca.pem");
  EXPECT_EQ(tls.tls.cert_file, "/certs/client.pem");
  EXPECT_EQ(tls.tls.key_file, "/etc/cluster/../keys/client.key");
  EXPECT_EQ(tls.tls.server_name, "gpu-a.example");
  EXPECT_TRUE(tls.own_tls);
  EXPECT_EQ((*nodes)[1].address, "unix:/run/overlapd/overlapd.sock");
  EXPECT_FALSE((*nodes)[1].own_tls);
  EXPECT_FALSE((*nodes)[1].tls.enabled());
}

TEST(ClusterFileTest, JsonReadsAsYamlDoes) {
  absl::StatusOr<std::vector<ClusterNode>> nodes = ParseClusterFile(
      R"([{"address": "10.0.0.1:7443", "tls_ca": "/ca.pem"}, {"address": "/tmp/o.sock"}])", kPath);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].tls.ca_file, "/ca.pem");
  EXPECT_EQ((*nodes)[1].address, "/tmp/o.sock");
}

TEST(ClusterFileTest, ErrorsNameTheFileTheNodeAndTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"- address: a:1\n- address: b:1\n  tls_cafile: ca.pem\n",
       "/etc/cluster/view.yaml: nodes[1].tls_cafile: unknown key (known: address, tls_ca, "
       "tls_cert, tls_key, server_name)"},
      {"- address: a:1\n- tls_ca: ca.pem\n", "view.yaml: nodes[1].address: missing"},
      {"- address: a:1\n  tls_ca: [x, y]\n", "view.yaml: nodes[0].tls_ca: "},
      {"- address: \"\"\n", "view.yaml: nodes[0].address: empty"},
      {"- gpu-a:7443\n", "view.yaml: nodes[0]: a node is a mapping with an address"},
      {"- address: unix:/s.sock\n  tls_ca: ca.pem\n",
       "view.yaml: nodes[0].address: a unix socket takes no TLS"},
      {"nodes: [a]\n",
       "view.yaml: a cluster file is a list of nodes, each with an address (got a "
       "mapping)"},
      {"[]\n", "view.yaml: a cluster file is a list of nodes"},
      {"- address: [\n", "view.yaml: malformed YAML/JSON at line "},  // its line and column
  };
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    absl::StatusOr<std::vector<ClusterNode>> nodes = ParseClusterFile(text, kPath);
    ASSERT_FALSE(nodes.ok());
    EXPECT_EQ(nodes.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(nodes.status().message()), HasSubstr(message));
  }
}

TEST(ClusterFileTest, TheTlsFlagsGoToTcpNodesThatNameNoTlsOfTheirOwn) {
  ClientTls flags;
  flags.ca_file = "/flags/ca.pem";
  std::vector<ClusterNode> file = {{"gpu-a:7443", {"/own/ca.pem", "", "", "gpu-a"}, true},
                                   {"gpu-b:7443", {}, false}};
  const std::vector<ClusterNode> nodes =
      ClusterViewNodes(file, {"unix:/run/o.sock", "gpu-c:7443"}, flags);
  ASSERT_EQ(nodes.size(), 4u);
  EXPECT_EQ(nodes[0].tls.ca_file, "/own/ca.pem");
  EXPECT_EQ(nodes[1].tls.ca_file, "/flags/ca.pem");
  EXPECT_EQ(nodes[2].address, "unix:/run/o.sock");
  EXPECT_FALSE(nodes[2].tls.enabled());  // a unix socket takes no TLS
  EXPECT_EQ(nodes[3].address, "gpu-c:7443");
  EXPECT_EQ(nodes[3].tls.ca_file, "/flags/ca.pem");
}

}  // namespace
}  // namespace overlap::client
