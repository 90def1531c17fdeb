"""Images of the e2e node: the pause sandbox and the stand-ins, and their way into containerd.

No registry is reached from here, so every image a pod of the node runs is built on this
machine with the engine ``make images`` uses (podman; images/build.py) and imported
into the node's containerd:

* ``pause``: containerd's sandbox image, ``standins/pause.c`` compiled statically;
* ``etcd``: the chart's bundled etcd (quay.io/coreos/etcd upstream) replaced by the etcd
  3.6 server ``e2e/apiserver/build.sh`` already built from Go modules, alone in an image;
* ``s3``: the chart's trial S3 server (MinIO upstream) replaced by moto's
  (``standins/s3``), on the Python base ``make images`` assembled.

Each is tagged with a hash of its inputs, so it is built once. Images go into
containerd as ``podman save`` archives through ``ctr images import``; containerd's root
(its content and snapshots) is kept in the tool cache, with a record of what was
imported, so a later run imports only what changed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import tarfile
import tempfile
from types import ModuleType

from apiserver import kubeapi

__all__ = [
    "build_module",
    "containerd_root",
    "import_into_containerd",
    "made_images",
    "stale_images",
    "standins",
]

HERE = pathlib.Path(__file__).resolve().parent
STANDINS = HERE / "standins"


def build_module() -> ModuleType:
    """images/build.py, the one place that knows the engine and its settings."""
    spec = importlib.util.spec_from_file_location(
        "images_build", kubeapi.REPO / "images" / "build.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = build_module()


def cache() -> pathlib.Path:
    return pathlib.Path(build.cache_dir()) / "node"


def containerd_root() -> pathlib.Path:
    return cache() / "containerd"


def made_images() -> dict[str, dict[str, str]]:
    """``make images``'s manifest (built.json): name -> ref, id, inputs, archive."""
    path = pathlib.Path(build.cache_dir()) / "built.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `make images` first")
    return dict(json.loads(path.read_text())["images"])


def stale_images(names: list[str]) -> list[str]:
    """Those of ``names`` whose image in built.json was built from other inputs than this
    checkout's (``make images`` would rebuild them): the tier runs them all the same."""
    manifest = json.loads((pathlib.Path(build.cache_dir()) / "built.json").read_text())
    engine = _engine()
    stale = []
    for name in names:
        declared = build.declared_args((build.IMAGES / name / "Dockerfile").read_text())
        args = {k: v for k, v in manifest["bases"].items() if k in declared}
        ids = {k: engine.image_id(v) or "" for k, v in args.items()}  # type: ignore[attr-defined]
        if (
            build.inputs_hash(name, args, ids, manifest["engine"])
            != manifest["images"][name]["inputs"]
        ):
            stale.append(name)
    return stale


def _engine() -> object:
    return build.Engine(build.detect_engine("auto"), pathlib.Path(build.cache_dir()))


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def _one_file_image(
    engine: object, ref: str, files: dict[str, pathlib.Path], changes: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tar_path = pathlib.Path(tmp) / "root.tar"
        with tarfile.open(tar_path, "w") as tar:
            for folder in ("tmp", "var", "var/lib"):
                info = tarfile.TarInfo(folder)
                info.type = tarfile.DIRTYPE
                info.mode = 0o1777 if folder == "tmp" else 0o755
                tar.addfile(info)
            for name, src in files.items():
                tar.add(src, arcname=name)
        engine.import_tar(tar_path, ref, changes)  # type: ignore[attr-defined]


def standins() -> dict[str, str]:
    """Build (once) the pause, etcd and S3 images; name -> ref in the engine's store."""
    engine = _engine()
    refs = {}
    with tempfile.TemporaryDirectory() as tmp:
        pause_src = (STANDINS / "pause.c").read_bytes()
        ref = f"localhost/gazette-e2e-pause:{_digest(pause_src)}"
        if engine.image_id(ref) is None:  # type: ignore[attr-defined]
            binary = pathlib.Path(tmp) / "pause"
            subprocess.run(
                ["gcc", "-static", "-O2", "-o", str(binary), str(STANDINS / "pause.c")],
                check=True,
                timeout=120,
            )
            _one_file_image(
                engine, ref, {"pause": binary}, ['ENTRYPOINT ["/pause"]', "USER 65535:65535"]
            )
        refs["pause"] = ref

        etcd = kubeapi.bin_dir() / "etcd"
        ref = f"localhost/gazette-e2e-etcd:v{kubeapi.etcd_version()}"
        if engine.image_id(ref) is None:  # type: ignore[attr-defined]
            _one_file_image(
                engine,
                ref,
                {"usr/local/bin/etcd": etcd},
                ['ENTRYPOINT ["/usr/local/bin/etcd"]', "USER 65532:65532"],
            )
        refs["etcd"] = ref

        context = pathlib.Path(tmp) / "s3"
        shutil.copytree(STANDINS / "s3", context)
        shutil.copy(kubeapi.REPO / "constraints.txt", context / "constraints.txt")
        base = json.loads((pathlib.Path(build.cache_dir()) / "built.json").read_text())["bases"][
            "PYTHON_IMAGE"
        ]
        inputs = _digest(
            *((context / n).read_bytes() for n in ("Dockerfile", "s3.py", "constraints.txt")),
            (engine.image_id(base) or "").encode(),  # type: ignore[attr-defined]
        )
        ref = f"localhost/gazette-e2e-s3:{inputs}"
        if engine.image_id(ref) is None:  # type: ignore[attr-defined]
            argv = [
                "build", "--pull=never", "--network", "host", "-t", ref,
                "--build-arg", f"PYTHON_IMAGE={base}",
            ]  # fmt: skip
            ca = os.environ.get("SSL_CERT_FILE")
            if ca and os.path.isfile(ca):
                argv += ["-v", f"{ca}:{build.CA_IN_BUILD}:ro",
                         "--build-arg", f"PIP_CERT={build.CA_IN_BUILD}"]  # fmt: skip
            engine.run(*argv, str(context), timeout=900)  # type: ignore[attr-defined]
        refs["s3"] = ref
    return refs


def _ctr(sock: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ctr", "--address", sock, "--namespace", "k8s.io", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )


def import_into_containerd(sock: str, refs: dict[str, str], record: pathlib.Path) -> int:
    """Put every ref (in the engine's store) into containerd; returns how many were imported.

    An image whose engine id is the one imported last time, and which containerd still
    lists, is left as it is.
    """
    engine = _engine()
    done = json.loads(record.read_text()) if record.exists() else {}
    have = set(_ctr(sock, "images", "ls", "-q").stdout.split())
    archives = cache() / "archives"
    archives.mkdir(parents=True, exist_ok=True)
    count = 0
    for ref in refs.values():
        image_id = engine.image_id(ref)  # type: ignore[attr-defined]
        if image_id is None:
            raise RuntimeError(f"{ref} is not in the engine's store: run `make images`")
        if done.get(ref) == image_id and ref in have:
            continue
        archive = archives / f"{image_id[:16]}.tar"
        if not archive.exists():
            engine.save(ref, archive)  # type: ignore[attr-defined]
        _ctr(sock, "images", "import", str(archive))
        done[ref] = image_id
        record.write_text(json.dumps(done, indent=1))
        count += 1
    return count
