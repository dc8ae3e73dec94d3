// The one shape of the CUDA libraries' error macros (CUDA_RETURN_IF_ERROR and
// CUBLAS_RETURN_IF_ERROR in cuda_check.h, CU_RETURN_IF_ERROR in driver_api.h):
// evaluate a call once and, unless it returned `success`, return from the
// calling function the Status that `to_status(result, text, __FILE__,
// __LINE__)` makes of it. `text` is the call as written (the callers
// stringify it, before any macro in it expands).
#pragma once

#define OVERLAP_RETURN_IF_FAILED(type, expr, text, success, to_status) \
  do {                                                                 \
    const type overlap_result_ = (expr);                               \
    if (overlap_result_ != (success)) {                                \
      return to_status(overlap_result_, text, __FILE__, __LINE__);     \
    }                                                                  \
  } while (0)
