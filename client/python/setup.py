"""Builds the overlapd package, generating its gRPC stubs (and their type
stubs) from the repository's proto/ (or OVERLAPD_PROTO_DIR) into overlapd/_gen
with grpcio-tools (overlap.proto; session.proto for overlapd.session), and
copying in the TransformerEngine mapping's table that overlapctl is built
from (client/export/te_ub_cfgs.json). Its version is the
daemon's release, read from the repository's CMakeLists.txt project(VERSION)
(or OVERLAPD_VERSION). Nothing generated or copied is checked in."""
import os
import pathlib
import re
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
PROTO_DIR = pathlib.Path(os.environ.get("OVERLAPD_PROTO_DIR", HERE.parent.parent / "proto"))
# overlap.proto: the Jobs and Node services; session.proto: the session socket's frames.
PROTOS = ("overlap/v1/overlap.proto", "overlap/v1/session.proto")
TE_TABLE = HERE.parent / "export" / "te_ub_cfgs.json"
CMAKE_LISTS = HERE.parent.parent / "CMakeLists.txt"


def release() -> str:
    """project(overlapd VERSION x.y.z ...) of the top-level CMakeLists.txt."""
    if os.environ.get("OVERLAPD_VERSION"):
        return os.environ["OVERLAPD_VERSION"]
    if not CMAKE_LISTS.is_file():
        raise SystemExit("overlapd: %s not found; build from the overlapd repository "
                         "(client/python) or set OVERLAPD_VERSION" % CMAKE_LISTS)
    found = re.search(r"^\s*project\s*\(\s*overlapd\s+VERSION\s+([0-9][0-9A-Za-z.+-]*)",
                      CMAKE_LISTS.read_text(), flags=re.M | re.I)
    if found is None:
        raise SystemExit("overlapd: no project(overlapd VERSION ...) in %s" % CMAKE_LISTS)
    return found.group(1)


def generate(out_root: pathlib.Path) -> None:
    from grpc_tools import protoc  # build-time only
    import grpc_tools

    sources = [PROTO_DIR / proto for proto in PROTOS]
    for source in sources:
        if not source.is_file():
            raise SystemExit(
                "overlapd: %s not found; build from the overlapd repository (client/python) or "
                "set OVERLAPD_PROTO_DIR to its proto/ folder" % source)
    gen = out_root / "overlapd" / "_gen"
    gen.mkdir(parents=True, exist_ok=True)
    well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    for source in sources:
        rc = protoc.main(["grpc_tools.protoc", "-I%s" % PROTO_DIR, "-I%s" % well_known,
                          "--python_out=%s" % gen, "--pyi_out=%s" % gen,
                          "--grpc_python_out=%s" % gen, str(source)])
        if rc != 0:
            raise SystemExit("overlapd: protoc failed on %s (%d)" % (source, rc))
    # The generated modules import each other as top-level `overlap.v1`: make
    # that package-relative, so that nothing named `overlap` is put on sys.path.
    for path in [*(gen / "overlap" / "v1").glob("*_pb2*.py"),
                 *(gen / "overlap" / "v1").glob("*_pb2*.pyi")]:
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
        # setuptools keeps build/lib between builds: start from none, so that a
        # module removed from the source is not installed from an old build.
        shutil.rmtree(pathlib.Path(self.build_lib) / "overlapd", ignore_errors=True)
        super().run()
        generate(pathlib.Path(self.build_lib))
        copy_te_table(pathlib.Path(self.build_lib))


setup(version=release(), cmdclass={"build_py": BuildWithStubs})
