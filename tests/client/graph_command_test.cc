// overlapctl graph's model resolution and its listings, without a daemon.
#include "client/jobs/graph_command.h"

#include <string>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace overlap::client {
namespace {

using ::testing::HasSubstr;

using Dims = std::tuple<std::string, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;
Dims DimsOf(const ModelDims& m) {
  return {m.name, m.hidden, m.ffn, m.heads, m.kv_heads, m.head_dim, m.gated};
}

TEST(GraphCommandTest, APresetAsItIsOrChanged) {
  GraphCommandOptions options;
  options.model = "llama3-70b";
  absl::StatusOr<ModelDims> model = ResolveModel(options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(DimsOf(*model), (Dims{"llama3-70b", 8192, 28672, 64, 8, 128, true}));

  // A flag equal to the preset's changes nothing; another one makes it custom.
  options.dims.heads = 64;
  EXPECT_EQ(ResolveModel(options)->name, "llama3-70b");
  options.dims.ffn = 20480;
  options.mlp = "plain";
  model = ResolveModel(options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(DimsOf(*model), (Dims{"llama3-70b-custom", 8192, 20480, 64, 8, 128, false}));

  options.name = "mine";
  EXPECT_EQ(ResolveModel(options)->name, "mine");
}

TEST(GraphCommandTest, ACustomModelFromItsFlags) {
  GraphCommandOptions options;
  options.dims.hidden = 5120;
  options.dims.ffn = 13824;
  options.dims.heads = 40;
  absl::StatusOr<ModelDims> model = ResolveModel(options);
  ASSERT_TRUE(model.ok()) << model.status();
  // Gated unless told otherwise; kv heads and head size left to their defaults.
  EXPECT_EQ(DimsOf(*model), (Dims{"custom", 5120, 13824, 40, 0, 0, true}));
}

TEST(GraphCommandTest, WhatCannotBeResolvedIsNamed) {
  struct Case {
    GraphCommandOptions options;
    absl::StatusCode code;
    std::string error;
  };
  GraphCommandOptions missing;
  missing.dims.hidden = 4096;
  GraphCommandOptions both;
  both.model = "llama3-8b";
  both.config = "config.json";
  GraphCommandOptions mlp;
  mlp.model = "llama3-8b";
  mlp.mlp = "swiglu";
  GraphCommandOptions no_file;
  no_file.config = "/nonexistent/config.json";
  for (const Case& c : {
           Case{missing, absl::StatusCode::kInvalidArgument,
                "a custom model needs --hidden, --ffn and --heads"},
           Case{both, absl::StatusCode::kInvalidArgument, "give --model or --config, not both"},
           Case{mlp, absl::StatusCode::kInvalidArgument,
                "mlp: unknown \"swiglu\" (gated or plain)"},
           Case{no_file, absl::StatusCode::kNotFound, "cannot read /nonexistent/config.json"},
       }) {
    SCOPED_TRACE(c.error);
    absl::StatusOr<ModelDims> model = ResolveModel(c.options);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), c.code);
    EXPECT_THAT(model.status().message(), HasSubstr(c.error));
  }
}

TEST(GraphCommandTest, PresetsListAsATableAndAsJson) {
  const std::string table = FormatModelPresets(false);
  EXPECT_THAT(table, HasSubstr("MODEL        HIDDEN    FFN  HEADS  KV_HEADS  HEAD_DIM  MLP\n"));
  EXPECT_THAT(table, HasSubstr("\ngpt3-175b     12288  49152     96        96       128  plain\n"));
  const nlohmann::json models = nlohmann::json::parse(FormatModelPresets(true));
  ASSERT_EQ(models.size(), ModelPresets().size());
  EXPECT_EQ(models[1], nlohmann::json({{"name", "llama3-70b"},
                                       {"hidden", 8192},
                                       {"ffn", 28672},
                                       {"heads", 64},
                                       {"kv_heads", 8},
                                       {"head_dim", 128},
                                       {"mlp", "gated"}}));
}

}  // namespace
}  // namespace overlap::client
