// The overlap pass: the rewrite a compiler makes of a layer written as a
// framework's trace writes it, plain collectives beside GEMMs, into the
// overlapped ops that pipeline one with the other:
//
//   all_gather -> gemm (column-parallel) reading its output  =>  ag_gemm
//   gemm (row-parallel) -> reduce_scatter reading its partial =>  gemm_rs
//   gemm (row-parallel) -> all_reduce reading its partial     =>  gemm_ar
//
// A pair is fused only where the dataflow allows it: the collective feeds only
// that GEMM (or the GEMM only that collective), with no activation between
// them, over the same group, with shapes that agree, and an all_reduce whose
// algorithm is not pinned. The fused op keeps the GEMM's id, its place in the
// file and its W; it reads what the pair read, with the data the pair held
// (OpSpec::a_seed_id, w_seed_id), so that both graphs compute the same
// outputs. Every op that named the collective names the fused op instead.
#pragma once

#include <vector>

#include "common/graph.h"

namespace overlap {

// `spec` with its fusable pairs fused and spec.fusions saying, pair by pair,
// what was fused and what was left alone and why. With spec.fuse false it
// fuses nothing and says so of each pair. Pure; a validated graph gives a
// valid one.
JobSpec FuseCollectives(JobSpec spec);

// The inverse, for `overlapctl graph --unfused`: every ag_gemm, gemm_rs and
// gemm_ar written as its collective and its GEMM, wired (`x_gather` then `x`;
// `x` then `x_rs` or `x_ar`), every op that read or waited on `x` reading or
// waiting on the pair's last op. `origin`, when given, gets for each op of
// the result the index of the op it came from.
JobSpec UnfuseCollectives(const JobSpec& spec, std::vector<size_t>* origin = nullptr);

}  // namespace overlap
