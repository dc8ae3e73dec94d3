"""One Python rank of a session, for the tests: opens SOCKET as RANK of
session NAME for the graph in GRAPH_FILE, fills fc1's X and the W of every op
from the example's seeds (examples/tp2_mlp_session.py inputs_for), starts,
and runs fc1 then fc2 STEPS times, printing "step N" after each (flushed, so
that a test can kill it mid-steps). Then it prints one JSON line: its
session id and every tensor it filled or read back. A SessionError prints
"error CODE: message" and exits 3.

    python session_rank.py SOCKET NAME GRAPH_FILE RANK STEPS SEED
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

from overlapd import session as ses  # noqa: E402
from overlapd.errors import SessionError  # noqa: E402
from tp2_mlp_session import FILLED, SAVED, inputs_for  # noqa: E402


def main() -> int:
    socket_path, name, graph_file, rank, steps, seed = sys.argv[1:7]
    with open(graph_file) as f:
        graph = f.read()
    try:
        with ses.Session.open(socket_path, name, graph, rank=int(rank), timeout=60) as s:
            fill = {n.key: inputs_for(int(rank), int(seed), n) for n in s.needs
                    if n.key in FILLED}
            buffers = ses.register_host_buffers(s, fill)
            s.start()
            for step in range(1, int(steps) + 1):
                s.wait(s.post("fc1"), timeout=60)
                s.wait(s.post("fc2"), timeout=60)
                print("step %d" % step, flush=True)
            saved = {"session_id": s.session_id}
            for need in s.needs:
                if need.key in SAVED:
                    saved["%s.%s" % need.key] = {
                        "rows": need.rows, "cols": need.cols,
                        "values": list(buffers[need.key].read_floats(need.rows * need.cols))}
            print(json.dumps(saved), flush=True)
    except SessionError as e:
        print("error %s: %s" % (e.code.name, e.message), flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
