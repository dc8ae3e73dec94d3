"""Builds the overlapd package, generating its gRPC stubs from the repository's
proto/ (or OVERLAPD_PROTO_DIR) into overlapd/_gen with grpcio-tools, and
copying in the TransformerEngine mapping's table that overlapctl is built from
(client/export/te_ub_cfgs.json). Nothing generated or copied is checked in."""
import os
import pathlib
import re
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
PROTO_DIR = pathlib.Path(os.environ.get("OVERLAPD_PROTO_DIR", HERE.parent.parent / "proto"))
PROTO = "overlap/v1/overlap.proto"
TE_TABLE = HERE.parent / "export" / "te_ub_cfgs.json"


def generate(out_root: pathlib.Path) -> None:
    from grpc_tools import protoc  # build-time only
    import grpc_tools

    source = PROTO_DIR / PROTO
    if not source.is_file():
        raise SystemExit(
            "overlapd: %s not found; build from the overlapd repository (client/python) or set "
            "OVERLAPD_PROTO_DIR to its proto/ folder" % source)
    gen = out_root / "overlapd" / "_gen"
    gen.mkdir(parents=True, exist_ok=True)
    well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    rc = protoc.main(["grpc_tools.protoc", "-I%s" % PROTO_DIR, "-I%s" % well_known,
                      "--python_out=%s" % gen, "--grpc_python_out=%s" % gen, str(source)])
    if rc != 0:
        raise SystemExit("overlapd: protoc failed on %s (%d)" % (source, rc))
    # The generated modules import each other as top-level `overlap.v1`: make
    # that package-relative, so that nothing named `overlap` is put on sys.path.
    for path in (gen / "overlap" / "v1").glob("*_pb2*.py"):
        text = path.read_text()
        path.write_text(re.sub(r"^from overlap\.v1 import", "from overlapd._gen.overlap.v1 import",
                               text, flags=re.M))
    for folder in (gen, gen / "overlap", gen / "overlap" / "v1"):
        (folder / "__init__.py").touch()


def copy_te_table(out_root: pathlib.Path) -> None:
    if not TE_TABLE.is_file():
        raise SystemExit("overlapd: %s not found; build from the overlapd repository "
                         "(client/python)" % TE_TABLE)
    shutil.copyfile(TE_TABLE, out_root / "overlapd" / TE_TABLE.name)


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        generate(pathlib.Path(self.build_lib))
        copy_te_table(pathlib.Path(self.build_lib))


setup(cmdclass={"build_py": BuildWithStubs})
