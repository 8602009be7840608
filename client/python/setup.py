"""Build hook of pipeline-client: generates the gRPC stubs from the repository's proto/.

The stubs are never committed. Before egg_info and build_py (and sdist, so that an sdist carries them and
installs without the repository), grpcio-tools' protoc compiles every proto/pp/v1/*.proto into
src/pipeline_client/_pb/ (gitignored). protoc writes absolute imports (`from pp.v1 import
job_pb2`); they are rewritten to relative ones (`from . import job_pb2`), so the stubs live only
inside this package and never need a top-level `pp` package on sys.path (nor clash with one).

The proto folder: $PIPELINE_CLIENT_PROTO_DIR, else ../../proto from this file (client/python in the
repository). With neither, already generated stubs are kept (an sdist's).
Everything else is declared in pyproject.toml.
"""

import os
import re
import shutil
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.egg_info import egg_info
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "src", "pipeline_client", "_pb")
PACKAGE = os.path.join("pp", "v1")
IMPORT = re.compile(r"^(\s*)from pp\.v1 import ", re.M)


def proto_dir():
    env = os.environ.get("PIPELINE_CLIENT_PROTO_DIR")
    return env if env else os.path.normpath(os.path.join(HERE, "..", "..", "proto"))


_generated = False


def generate():
    """Compiles proto_dir()/pp/v1/*.proto into OUT with relative imports (once per build)."""
    global _generated
    if _generated:
        return
    source = proto_dir()
    protos = os.path.join(source, PACKAGE)
    if not os.path.isdir(protos):
        if os.path.isfile(os.path.join(OUT, "coordinator_pb2.py")):
            return  # an sdist: the stubs came with it
        raise SystemExit(
            f"pipeline-client: no {protos}; set PIPELINE_CLIENT_PROTO_DIR to the repository's proto/"
        )
    from grpc_tools import protoc  # a build requirement (pyproject.toml)

    files = sorted(os.path.join(PACKAGE, f) for f in os.listdir(protos) if f.endswith(".proto"))
    with tempfile.TemporaryDirectory(prefix="pipeline-client-") as tmp:
        args = ["protoc", f"-I{source}", f"--python_out={tmp}", f"--pyi_out={tmp}",
                f"--grpc_python_out={tmp}"] + files
        code = protoc.main(args)
        if code != 0:
            raise SystemExit(f"pipeline-client: protoc failed on {source} (exit {code})")
        generated = os.path.join(tmp, PACKAGE)
        shutil.rmtree(OUT, ignore_errors=True)
        os.makedirs(OUT)
        for name in sorted(os.listdir(generated)):
            with open(os.path.join(generated, name), encoding="utf-8") as f:
                text = IMPORT.sub(r"\1from . import ", f.read())
            with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
                f.write(text)
    with open(os.path.join(OUT, "__init__.py"), "w", encoding="utf-8") as f:
        f.write(f'"""Stubs generated from {len(files)} files of proto/pp/v1 at build time."""\n')
    _generated = True


# egg_info (the package's metadata, first in every build) already needs the _pb package folder.
class EggInfo(egg_info):
    def run(self):
        generate()
        super().run()


class BuildPy(build_py):
    def run(self):
        generate()
        super().run()


class Sdist(sdist):
    def run(self):
        generate()
        super().run()


setup(cmdclass={"egg_info": EggInfo, "build_py": BuildPy, "sdist": Sdist})
