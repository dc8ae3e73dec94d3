"""overlapd's choices as TransformerEngine's userbuffers config, in Python:
the ub_cfgs that `transformer_engine.pytorch.initialize_ub(..., ub_cfgs=...)`
takes (Megatron-LM's --tp-comm-overlap-cfg is the same dict). The mapping is
not written here: it is the table `overlapctl export --format te` is built
from (client/export/te_ub_cfgs.json, copied into this package when it is
built; docs/EXPORT.md). Megatron-LM's YAML and torchtitan's TOML, with each
entry's margins, come from Client.export, which runs `overlapctl export`."""
import json
import pathlib
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from overlapd.model import Job


def _load_table() -> Dict[str, Any]:
    path = pathlib.Path(__file__).resolve().parent / "te_ub_cfgs.json"
    if not path.is_file():
        raise ImportError("overlapd: %s is missing (reinstall the package from the overlapd "
                          "repository's client/python)" % path)
    table: Dict[str, Any] = json.loads(path.read_text())
    return table


_TABLE = _load_table()


def te_layer(op_id: str) -> Optional[str]:
    """TE's layer for an op of an overlapd layer graph, or None (ops TE has no
    entry for, such as the weight gradients, included)."""
    row = _TABLE["layers"].get(op_id)
    if row is None or row["collective"] == "none":
        return None
    name: str = row["te"]
    return name


def _parse(schedule: str) -> Tuple[str, int, str]:
    """("ring", 2, "p2p") from "ring/2/p2p"; chunks 1 where the name has none."""
    parts = schedule.split("+")[0].split("/")
    chunks = 1
    if len(parts) > 1 and parts[1].isdigit():
        chunks = int(parts.pop(1))
    transport = parts[1] if len(parts) > 1 else "none"
    return parts[0], chunks, transport


def choices_from_job(job: Union[Job, Mapping[str, Any]]) -> List[Dict[str, str]]:
    """Each op's type and the schedule it ran, from a job as Client.get returns
    it (or its JSON form)."""
    if isinstance(job, Job):
        ops = job.result.ops if job.result is not None else []
        return [{"op": op.id, "type": op.type, "schedule": op.schedule}
                for op in ops if op.type != "gemm"]
    return [{"op": op["id"], "type": op["type"], "schedule": op["schedule"]}
            for op in job["result"]["ops"] if op["type"] != "gemm"]


def te_entry(op_id: str, op_type: str, schedule: str) -> Optional[Dict[str, Any]]:
    """The ub_cfgs entry for one op, or None where TE runs it without userbuffers
    overlap (serial) or has no counterpart (gemm_ar, other names)."""
    layer = te_layer(op_id)
    if layer is None or op_type == "gemm_ar":
        return None
    mode, chunks, transport = _parse(schedule)
    by_collective = _TABLE["methods"].get(mode)
    if by_collective is None:  # serial, or a mode TE has no form of
        return None
    method = by_collective[_TABLE["layers"][op_id]["collective"]]
    entry: Dict[str, Any] = {"method": method["method"]}
    if entry["method"] == "pipeline":
        splits = method["num_splits"]
        entry["num_splits"] = chunks if splits == "chunks" else splits
    if entry["method"] == "ring_exchange":
        entry["use_ce"] = transport == _TABLE["use_ce_transport"]
    return entry


def te_ub_cfgs(choices: Iterable[Dict[str, str]]) -> Dict[str, Dict[str, Any]]:
    """{TE layer: its config} for the choices (choices_from_job's form)."""
    cfgs: Dict[str, Dict[str, Any]] = {}
    for c in choices:
        entry = te_entry(c["op"], c["type"], c["schedule"])
        layer = te_layer(c["op"])
        if entry is not None and layer is not None:
            cfgs[layer] = entry
    return cfgs
