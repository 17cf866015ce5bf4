"""Regenerates the gRPC stubs in src/hookd_client/_proto from ../../proto (grpcio-tools).

    python generate.py          # rewrite them
    python generate.py --check  # exit 1 if the committed ones differ (CI)

The generated modules import each other as `hookd.v1.*`; that import is made relative so the
package does not claim a top-level `hookd` module.
"""

import importlib.resources
import pathlib
import sys
import tempfile

from grpc_tools import protoc

HERE = pathlib.Path(__file__).resolve().parent
PROTO = HERE.parent.parent / "proto"
OUT = HERE / "src" / "hookd_client" / "_proto"
FILES = ["hookd_pb2.py", "hookd_pb2.pyi", "hookd_pb2_grpc.py"]


def generate(into: pathlib.Path) -> None:
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO}",
        # The well-known types (google/protobuf/struct.proto) that grpcio-tools ships.
        f"-I{importlib.resources.files('grpc_tools') / '_proto'}",
        f"--python_out={into}",
        f"--pyi_out={into}",
        f"--grpc_python_out={into}",
        str(PROTO / "hookd" / "v1" / "hookd.proto"),
    ]
    if protoc.main(args) != 0:
        sys.exit("protoc failed")
    grpc = into / "hookd" / "v1" / "hookd_pb2_grpc.py"
    text = grpc.read_text()
    grpc.write_text(text.replace("from hookd.v1 import hookd_pb2", "from . import hookd_pb2"))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        generate(pathlib.Path(tmp))
        made = pathlib.Path(tmp) / "hookd" / "v1"
        if "--check" in sys.argv:
            stale = [f for f in FILES if (made / f).read_text() != (OUT / f).read_text()]
            if stale:
                sys.exit(f"stale generated stubs (run python generate.py): {stale}")
            print("generated stubs are up to date")
            return
        OUT.mkdir(parents=True, exist_ok=True)
        for f in FILES:
            (OUT / f).write_text((made / f).read_text())
        (OUT / "__init__.py").write_text('"""Generated from proto/hookd/v1/hookd.proto by generate.py; do not edit."""\n')


if __name__ == "__main__":
    main()
