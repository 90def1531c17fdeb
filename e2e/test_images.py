"""``make images`` builds every image of images/, and the broker image serves a journal.

Runs where any container engine is (docker with its daemon, podman, buildah; skipped,
saying so, where none is): ``make images`` as a user runs it, which on a machine that
reaches no registry assembles its Python and Rust bases itself (images/build.py). Then:

* every images/*/Dockerfile gave ``gazette-<name>:<tag>``, labelled with the hash of its
  inputs; no image carries the build's CA bundle (``SSL_CERT_FILE``) in its config,
  and each runs as a numeric non-root user;
* a second ``make images`` reuses every image and says so, in seconds;
* the broker image, run as the chart runs it (``--read-only``, its non-root user, on
  the host's network as the e2e fixtures run brokers) against an etcd on loopback that
  the test starts, becomes ready and serves a journal: the gazctl image (also
  read-only) applies it, appends to it and reads the line back through the broker.

The build is the slow part (minutes cold: the Rust data plane compiles twice, and the
Spark image brings a JRE, and again for broker and consumer after any change of the
data plane): the module is an e2e tier (``make e2e-images``), outside ``make test``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import pathlib
import re
import secrets
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from gazette.keyspace import testing as etcd_testing

REPO = pathlib.Path(__file__).resolve().parent.parent
# A cold build (both bases, the data plane twice, the JRE) took 44 minutes on two
# cores shared with other builds; warm, the whole module takes under a minute.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(4200)]
WARM_LIMIT = 60.0


def _build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("images_build", REPO / "images" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _build_module()


def _make_images() -> tuple[str, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        ["make", "-s", "-C", str(REPO), "images"],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout, time.monotonic() - t0


@pytest.fixture(scope="module")
def engine() -> str:
    try:
        return str(build.detect_engine("auto"))
    except build.BuildError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def made(engine: str) -> dict[str, Any]:
    """``make images``'s output and its manifest (built.json)."""
    out, took = _make_images()
    print(f"\n$ make images  ({took:.1f}s)\n{out}")
    manifest = json.loads((build.cache_dir() / "built.json").read_text())
    assert manifest["engine"] == engine
    return {"out": out, "manifest": manifest}


def _cli(engine: str) -> str:
    return "podman" if engine == "buildah" else engine


def _inspect(engine: str, ref: str) -> dict[str, Any]:
    proc = subprocess.run(
        [_cli(engine), "image", "inspect", ref],
        env=build.engine_env(engine),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (image,) = json.loads(proc.stdout)
    return dict(image)


def test_make_images_builds_every_image(engine: str, made: dict[str, Any]) -> None:
    names = sorted(p.parent.name for p in (REPO / "images").glob("*/Dockerfile"))
    images = made["manifest"]["images"]
    assert sorted(images) == names
    for name in names:
        ref = images[name]["ref"]
        assert ref.endswith(f"gazette-{name}:0.1.0"), ref
        # Each is printed with its time, built or reused.
        assert re.search(rf"{re.escape(ref)} (built|reused.*) in \d+\.\ds", made["out"]), made[
            "out"
        ]
        image = _inspect(engine, ref)
        assert (
            image["Id"]
            .removeprefix("sha256:")
            .startswith(images[name]["id"].removeprefix("sha256:"))
        )
        config = image["Config"]
        assert config["Labels"][build.LABEL] == images[name]["inputs"]
        assert not [e for e in config.get("Env") or [] if e.startswith("SSL_CERT_FILE=")], config[
            "Env"
        ]
        user = config.get("User", "").split(":")[0]
        assert user.isdigit() and int(user) != 0, (name, user)
    # The archives the cache keeps hold what the engine holds (a second machine state).
    for name in names:
        assert pathlib.Path(images[name]["archive"]).is_file()


def test_second_make_images_reuses_them(made: dict[str, Any]) -> None:
    out, took = _make_images()
    print(f"\n$ make images  (again: {took:.1f}s)\n{out}")
    for name, image in made["manifest"]["images"].items():
        assert re.search(rf"{re.escape(image['ref'])} reused", out), (name, out)
    assert "building" not in out
    assert took < WARM_LIMIT, f"a warm make images took {took:.1f}s"


@contextlib.contextmanager
def _container(engine: str, name: str, argv: list[str]) -> Iterator[str]:
    """``<engine> run -d --name NAME ...argv``, removed on exit (only this one)."""
    env = build.engine_env(engine)
    cli = _cli(engine)
    subprocess.run(
        [cli, "run", "-d", "--name", name, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    try:
        yield name
    finally:
        subprocess.run(
            [cli, "rm", "-f", "-t", "5", name],
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )


def _logs(engine: str, name: str) -> str:
    proc = subprocess.run(
        [_cli(engine), "logs", name],
        env=build.engine_env(engine),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return (proc.stdout + proc.stderr)[-4000:]


def _read_only(engine: str) -> list[str]:
    # podman mounts tmpfs on /tmp, /var/tmp and /run of a read-only container itself.
    return ["--read-only"] if engine != "docker" else ["--read-only", "--tmpfs", "/tmp"]


def test_broker_image_serves_append_and_read(
    engine: str, made: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    images = made["manifest"]["images"]
    run_id = secrets.token_hex(4)
    grpc_port, http_port = etcd_testing.free_ports(2)
    with etcd_testing.EtcdServer(work_dir=tmp_path / "etcd") as etcd:
        broker_env = {
            "BROKER_ID": f"broker-{run_id}",
            "BROKER_ZONE": "zone-a",
            "BROKER_HOST": "127.0.0.1",
            "BROKER_PORT": str(grpc_port),
            "BROKER_HTTP_PORT": str(http_port),
            "BROKER_SPOOL_DIR": "/tmp/spool",
            "ETCD_ADDRESS": etcd.endpoint,
            "ETCD_PREFIX": f"/images-{run_id}",
        }
        argv = ["--network", "host", *_read_only(engine)]
        argv += [a for k, v in broker_env.items() for a in ("-e", f"{k}={v}")]
        t0 = time.monotonic()
        with _container(
            engine, f"gazette-test-broker-{run_id}", [*argv, images["broker"]["ref"]]
        ) as broker:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(OSError):
                    url = f"http://127.0.0.1:{http_port}/debug/ready"
                    with urllib.request.urlopen(url, timeout=2) as resp:
                        if resp.status == 200:
                            break
                assert time.monotonic() < deadline, (
                    f"broker not ready in 60s:\n{_logs(engine, broker)}"
                )
                time.sleep(0.2)
            print(f"\nbroker container ready in {time.monotonic() - t0:.1f}s")

            journal = f"images/{run_id}/roundtrip"
            (tmp_path / "specs").mkdir()
            (tmp_path / "specs" / "journal.yaml").write_text(
                f"name: {journal}\nreplication: 1\nlabels:\n"
                "- name: content-type\n  value: application/octet-stream\n"
                "fragment:\n  length: 1048576\n  compression_codec: NONE\n  refresh_interval: 30s\n"
            )
            (tmp_path / "specs").chmod(0o755)
            (tmp_path / "specs" / "journal.yaml").chmod(0o644)

            def gazctl(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
                cli = [
                    _cli(engine), "run", "--rm", "-i", "--network", "host", *_read_only(engine),
                    "-v", f"{tmp_path / 'specs'}:/specs:ro",
                    "-e", f"BROKER_ADDRESS=http://127.0.0.1:{grpc_port}",
                    images["gazctl"]["ref"], "journals", *args,
                ]  # fmt: skip
                return subprocess.run(
                    cli, env=build.engine_env(engine), input=input, capture_output=True, text=True, timeout=120,
                    check=False,
                )  # fmt: skip

            applied = gazctl("apply", "--specs", "/specs/journal.yaml")
            assert applied.returncode == 0, applied.stderr + _logs(engine, broker)
            line = f"through the broker image {run_id}\n"
            deadline = time.monotonic() + 60
            while True:  # A new journal takes appends once it has a primary.
                appended = gazctl("append", "-l", f"name={journal}", input=line)
                if appended.returncode == 0:
                    break
                assert time.monotonic() < deadline, appended.stderr + _logs(engine, broker)
                time.sleep(1)
            read = gazctl("read", "-l", f"name={journal}")
            assert read.returncode == 0, read.stderr
            assert read.stdout == line
