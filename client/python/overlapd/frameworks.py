"""overlapd's choices as TransformerEngine's userbuffers config, in Python:
the ub_cfgs that `transformer_engine.pytorch.initialize_ub(..., ub_cfgs=...)`
takes (Megatron-LM's --tp-comm-overlap-cfg is the same dict). It follows the
mapping of `overlapctl export --format te` (docs/EXPORT.md); the client's
tests check that both give the same dict for the same job."""
from typing import Any, Dict, Iterable, List, Optional

_GATHERS = {"qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad"}
_SCATTERS = {"proj_fprop", "fc2_fprop", "qkv_dgrad", "fc1_dgrad"}


def te_layer(op_id: str) -> Optional[str]:
    """TE's layer for an op of an overlapd layer graph, or None."""
    for layer in ("qkv", "proj", "fc1", "fc2"):
        if op_id == layer:
            return layer + "_fprop"
        if op_id == layer + "_dgrad":
            return op_id
    return None


def _parse(schedule: str):
    """("ring", 2, "p2p") from "ring/2/p2p"; chunks 1 where the name has none."""
    parts = schedule.split("+")[0].split("/")
    chunks = 1
    if len(parts) > 1 and parts[1].isdigit():
        chunks = int(parts.pop(1))
    transport = parts[1] if len(parts) > 1 else "none"
    return parts[0], chunks, transport


def choices_from_job(job: Dict[str, Any]) -> List[Dict[str, str]]:
    """Each op's type and the schedule it ran, from a job as Client.get returns it."""
    return [{"op": op["id"], "type": op["type"], "schedule": op["schedule"]}
            for op in job["result"]["ops"] if op["type"] != "gemm"]


def te_entry(op_id: str, op_type: str, schedule: str) -> Optional[Dict[str, Any]]:
    """The ub_cfgs entry for one op, or None where TE runs it without userbuffers
    overlap (serial) or has no counterpart (gemm_ar, other names)."""
    layer = te_layer(op_id)
    if layer is None or op_type == "gemm_ar":
        return None
    mode, chunks, transport = _parse(schedule)
    scatters = layer in _SCATTERS
    if mode == "serial":
        return None
    if mode == "ring":
        return {"method": "ring_exchange", "use_ce": transport == "p2p"}
    if mode == "chunked":
        if scatters:
            return {"method": "pipeline", "num_splits": chunks}
        return {"method": "ring_exchange", "use_ce": transport == "p2p"}
    if mode == "bulk":
        if scatters:
            return {"method": "pipeline", "num_splits": 2}
        return {"method": "ring_exchange", "use_ce": transport == "p2p"}
    return None


def te_ub_cfgs(choices: Iterable[Dict[str, str]]) -> Dict[str, Dict[str, Any]]:
    """{TE layer: its config} for the choices (choices_from_job's form)."""
    cfgs = {}
    for c in choices:
        entry = te_entry(c["op"], c["type"], c["schedule"])
        if entry is not None:
            cfgs[te_layer(c["op"])] = entry
    return cfgs
