// Propagation helpers for absl::Status / absl::StatusOr across module boundaries.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define OVERLAP_CONCAT_INNER(a, b) a##b
#define OVERLAP_CONCAT(a, b) OVERLAP_CONCAT_INNER(a, b)

// Returns from the current function when `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status overlap_status_ = (expr);         \
    if (!overlap_status_.ok()) return overlap_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` assigns the value or returns the error.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL(OVERLAP_CONCAT(overlap_statusor_, __LINE__), lhs, rexpr)
#define ASSIGN_OR_RETURN_IMPL(var, lhs, rexpr) \
  auto var = (rexpr);                          \
  if (!var.ok()) return var.status();          \
  lhs = std::move(var).value()
