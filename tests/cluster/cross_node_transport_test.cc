// Which cross-node transport a job spanning daemons gets: the one the engine
// can carry, by what it reports, never by its name.
#include "server/cluster/cross_node_transport.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/engine/forwarding_engine.h"
#include "tests/host_engine_util.h"

namespace overlap::cluster {
namespace {

// A host engine that has the parts a test wants, under any name. Its
// cross-process part is only asked whether it is there.
class ReportingEngine final : public engine::ForwardingEngine,
                              public engine::CrossProcessCollectives {
 public:
  ReportingEngine(engine::Engine& inner, std::string name, bool host_work, bool cross_process)
      : ForwardingEngine(inner),
        name_(std::move(name)),
        host_work_(host_work),
        cross_process_(cross_process) {}
  std::string Name() const override { return name_; }
  engine::HostWorkQueue* HostWork() const override {
    return host_work_ ? inner().HostWork() : nullptr;
  }
  engine::CrossProcessCollectives* CrossProcess() const override {
    return cross_process_ ? self_ : nullptr;
  }
  absl::StatusOr<std::string> NewCommunicatorId() override {
    return absl::UnimplementedError("not asked");
  }
  absl::Status CrossProcessCollective(engine::CollectiveOp, const std::string&, int,
                                      const std::vector<int>&,
                                      const engine::CollectiveArgs&) override {
    return absl::UnimplementedError("not asked");
  }

 private:
  const std::string name_;
  const bool host_work_;
  const bool cross_process_;
  engine::CrossProcessCollectives* const self_ = this;
};

TEST(CrossNodeTransportTest, TheEngineSaysWhichByWhatItCanDoNotByItsName) {
  std::unique_ptr<engine::Engine> host = CheckedHostEngine(2);
  const TransportKind* own = TransportFor(*host);
  ASSERT_NE(own, nullptr);
  EXPECT_EQ(own->name, "gloo");
  EXPECT_TRUE(own->note.empty());

  // Named otherwise, with host memory: still Gloo.
  EXPECT_EQ(TransportFor(ReportingEngine(*host, "cuda", true, false))->name, "gloo");
  // Communicators across processes come first, whatever the name.
  const TransportKind* nccl = TransportFor(ReportingEngine(*host, "host", true, true));
  ASSERT_NE(nccl, nullptr);
  EXPECT_EQ(nccl->name, "nccl");
  EXPECT_FALSE(nccl->note.empty());  // not yet verified on two GPUs: it says so
  EXPECT_EQ(TransportFor(ReportingEngine(*host, "cuda", false, true))->name, "nccl");
  // Neither (CUDA with ranks_per_gpu above 1): none.
  EXPECT_EQ(TransportFor(ReportingEngine(*host, "cuda", false, false)), nullptr);
}

TEST(CrossNodeTransportTest, AGroupIsNamedTheSameOnEveryNode) {
  EXPECT_EQ(CrossNodeGroupKey("node-a:1/job-000003", 2, "comm0", {0, 2, 4}),
            "node-a:1/job-000003/ch2/comm0/0,2,4");
}

}  // namespace
}  // namespace overlap::cluster
