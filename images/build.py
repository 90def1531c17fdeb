"""Build every image of images/*/Dockerfile with whatever container engine is here.

    python3 images/build.py [--engine auto|docker|podman|buildah] [--base auto|pull|local]
                            [--tag 0.1.0] [NAME...]

``make images`` runs this (standard library only, no virtualenv needed). For each
image it prints the reference built and how long it took.

Engine: docker when its daemon answers, else podman, else buildah. Same Dockerfiles
for everyone: a user with Docker and a registry gets the official ``python`` and
``rust`` bases; where no base image can be pulled (no registry reachable, as on the
machine this was written on), the bases are assembled here instead:

* Python 3.11: Debian bookworm by ``mmdebstrap --variant=minbase`` with python3,
  python3-pip, python3-venv and ca-certificates, laid out like ``python:3.11-slim``
  (``python``, ``python3``, ``python3.11``, ``pip`` in /usr/local/bin; no PEP 668
  marker, since the images pip-install into their own venvs), imported as an image.
* Rust: the host's rustup toolchain (``rustc -vV``) in /usr/local/rustup and
  /usr/local/cargo, where the official rust image keeps it: the Dockerfiles copy
  exactly those two folders from their ``rust`` stage.

They are passed as the Dockerfiles' ``PYTHON_IMAGE`` and ``RUST_IMAGE`` build args.

Cache: each image is labelled ``dev.gazette.inputs=<hash>`` of its inputs (the
Dockerfile, its .dockerignore, every file of the context that ignore file lets
through, the build args with the bases' image IDs, the engine), and saved as an
archive under the tool cache (``e2e/cache-root.sh images``), outside any checkout.
A run whose inputs hash matches an image in the engine (or an archive, loaded back)
reuses it and says so. The bases are cached there too (the Debian root as a tarball).

Podman and buildah read ``containers.conf`` written to that cache (``CONTAINERS_CONF``):
``default_ulimits`` at or below this process's hard limits, since a container here
may not raise them (no CAP_SYS_RESOURCE), and runc when it is installed (crun 1.8
refuses hosts with hybrid cgroup hierarchies). ``engine_env()`` gives the same
environment to whoever runs the images (e2e/test_images.py).

Certificates: when ``SSL_CERT_FILE`` names a bundle here (a TLS-intercepting proxy's
CA), podman and buildah bind it read-only over the image's own
/etc/ssl/certs/ca-certificates.crt during RUN steps (pip, cargo, apt and urllib trust
that file) and pass ``SSL_CERT_FILE`` as a build arg, which only the build stages
declare (for uv, which reads no system store): nothing of it is committed to an image.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import pathlib
import re
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
IMAGES = REPO / "images"
LABEL = "dev.gazette.inputs"
OFFICIAL = {"PYTHON_IMAGE": "python:3.11-slim-bookworm", "RUST_IMAGE": "rust:1.95-slim-bookworm"}
# Where the build stages find the host's CA bundle: the image's own bundle path, so
# that the bind mount creates no file that could be committed.
CA_IN_BUILD = "/etc/ssl/certs/ca-certificates.crt"
# A pull that cannot reach a registry fails fast here, but a half-open network can hang.
PULL_TIMEOUT = 120.0

# The Debian root of the local Python base: mmdebstrap's arguments and the hook that
# lays it out like python:3.11-slim. Both are hashed into the base's key.
MMDEBSTRAP_ARGS = [
    "--variant=minbase",
    "--include=python3,python3-pip,python3-venv,ca-certificates",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
]
PYTHON_LAYOUT_HOOK = (
    'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED; '
    'for n in python3.11 python3 python; do ln -sf /usr/bin/python3.11 "$1/usr/local/bin/$n"; done; '
    'for n in pip pip3 pip3.11; do ln -sf /usr/bin/pip3 "$1/usr/local/bin/$n"; done'
)
PYTHON_BASE_CONFIG = [
    "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["python3"]',
]
# The toolchain in the image is named by its version, as in the official rust image.
RUST_BASE_CONFIG = [
    "ENV RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo",
    "ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
]


def cache_dir() -> pathlib.Path:
    out = subprocess.run(
        ["sh", str(REPO / "e2e" / "cache-root.sh"), "images"],
        check=True,
        capture_output=True,
        text=True,
    )
    return pathlib.Path(out.stdout.strip())


def log(msg: str) -> None:
    print(f"make images: {msg}", flush=True)


class BuildError(Exception):
    pass


# --- the engine --------------------------------------------------------------------


def detect_engine(wanted: str) -> str:
    if wanted != "auto":
        if not shutil.which(wanted):
            raise BuildError(f"{wanted} is not on PATH")
        return wanted
    if shutil.which("docker"):
        answered = subprocess.run(["docker", "info"], capture_output=True, timeout=30, check=False)
        if answered.returncode == 0:
            return "docker"
    for name in ("podman", "buildah"):
        if shutil.which(name):
            return name
    raise BuildError(
        "no container engine: install docker (with its daemon running), podman or buildah "
        "(Debian: apt-get install podman buildah runc mmdebstrap)"
    )


def containers_conf(cache: pathlib.Path) -> pathlib.Path:
    """The containers.conf podman and buildah run with (see the module docstring)."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    # podman and buildah lower their own RLIMIT_NPROC to 32768 before starting a
    # container, so a larger value fails (EPERM) where it cannot be raised back.
    limits = [
        f"nofile={min(nofile, 1 << 20)}:{min(nofile, 1 << 20)}"
        if nofile != resource.RLIM_INFINITY
        else "nofile=1048576:1048576",
        f"nproc={min(nproc, 32768)}:{min(nproc, 32768)}"
        if nproc != resource.RLIM_INFINITY
        else "nproc=32768:32768",
    ]
    text = "# Written by images/build.py: the engine settings `make images` and the tests use.\n"
    text += "[containers]\ndefault_ulimits = [" + ", ".join(f'"{x}"' for x in limits) + "]\n"
    if shutil.which("runc"):
        text += '[engine]\nruntime = "runc"\n'
    path = cache / "containers.conf"
    cache.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def engine_env(engine: str, cache: pathlib.Path | None = None) -> dict[str, str]:
    """The environment to run ``engine`` with, for the builds and for the tests."""
    env = dict(os.environ)
    if engine in ("podman", "buildah"):
        env["CONTAINERS_CONF"] = str(containers_conf(cache or cache_dir()))
    return env


class Engine:
    def __init__(self, name: str, cache: pathlib.Path) -> None:
        self.name = name
        self.env = engine_env(name, cache)
        # buildah handles images with podman's verbs where podman is here (the same
        # storage), and with its own otherwise.
        self.cli = "podman" if name == "buildah" and shutil.which("podman") else name

    def run(
        self,
        *args: str,
        check: bool = True,
        timeout: float | None = None,
        quiet: bool = True,
        tool: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        argv = [tool or self.cli, *args]
        proc = subprocess.run(
            argv, env=self.env, text=True, capture_output=quiet, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            detail = (proc.stderr or "")[-4000:] if quiet else ""
            raise BuildError(f"{' '.join(argv[:4])} ... failed ({proc.returncode}) {detail}")
        return proc

    def image_id(self, ref: str) -> str | None:
        if self.cli == "buildah":
            proc = self.run(
                "inspect", "--type", "image", "--format", "{{.FromImageID}}", ref, check=False
            )
        else:
            proc = self.run("image", "inspect", "--format", "{{.Id}}", ref, check=False)
        return proc.stdout.strip() or None if proc.returncode == 0 else None

    def label(self, ref: str, key: str) -> str | None:
        if self.cli == "buildah":
            fmt = "{{json .OCIv1.Config.Labels}}"
            proc = self.run("inspect", "--type", "image", "--format", fmt, ref, check=False)
        else:
            proc = self.run(
                "image", "inspect", "--format", "{{json .Config.Labels}}", ref, check=False
            )
        if proc.returncode != 0:
            return None
        labels = json.loads(proc.stdout.strip() or "null") or {}
        return labels.get(key)

    def pull(self, ref: str) -> bool:
        qualified = ref if "/" in ref else f"docker.io/library/{ref}"
        try:
            proc = self.run("pull", qualified, check=False, timeout=PULL_TIMEOUT)
        except subprocess.TimeoutExpired:
            return False
        if proc.returncode != 0:
            return False
        if qualified != ref:
            self.run("tag", qualified, ref, check=False)
        return True

    def import_tar(self, tar: pathlib.Path, ref: str, changes: list[str]) -> None:
        if self.name == "docker":
            args = [a for c in changes for a in ("--change", c)]
            self.run("import", *args, str(tar), ref)
            return
        if self.cli == "podman":
            args = [a for c in changes for a in ("--change", c)]
            self.run("import", *args, str(tar), ref)
            return
        # buildah alone: a container from scratch, the root added, committed.
        ctr = self.run("from", "scratch", tool="buildah").stdout.strip()
        try:
            self.run("add", ctr, str(tar), "/", tool="buildah")
            for change in changes:
                verb, _, rest = change.partition(" ")
                if verb == "ENV":
                    for pair in rest.split():
                        self.run("config", "--env", pair, ctr, tool="buildah")
                elif verb == "CMD":
                    self.run("config", "--cmd", rest, ctr, tool="buildah")
            self.run("commit", ctr, ref, tool="buildah")
        finally:
            self.run("rm", ctr, check=False, tool="buildah")

    def save(self, ref: str, dest: pathlib.Path) -> None:
        tmp = dest.with_suffix(".partial")
        tmp.unlink(missing_ok=True)
        if self.cli == "buildah":
            self.run("push", ref, f"docker-archive:{tmp}:{ref}")
        else:
            self.run("save", "-o", str(tmp), ref)
        tmp.rename(dest)

    def load(self, archive: pathlib.Path) -> None:
        if self.cli == "buildah":
            raise BuildError("buildah alone cannot load an archive")
        self.run("load", "-i", str(archive))


# --- base images -------------------------------------------------------------------


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        b = p.encode() if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "big"))
        h.update(b)
    return h.hexdigest()


def python_base(engine: Engine, cache: pathlib.Path) -> str:
    """A Python 3.11 image from Debian packages, imported once and kept in the cache."""
    key = _digest(
        "python-base/1", "bookworm", *MMDEBSTRAP_ARGS, PYTHON_LAYOUT_HOOK, *PYTHON_BASE_CONFIG
    )[:16]
    ref = f"localhost/gazette-python-base:3.11-bookworm-{key}"
    if engine.image_id(ref):
        log(f"base {ref} reused (Debian bookworm, Python 3.11)")
        return ref
    t0 = time.monotonic()
    tar = cache / "base" / f"python-{key}.tar"
    if not tar.exists():
        if not shutil.which("mmdebstrap"):
            raise BuildError(
                "no base image can be pulled and mmdebstrap is missing (Debian: apt-get install mmdebstrap)"
            )
        tar.parent.mkdir(parents=True, exist_ok=True)
        partial = tar.with_suffix(".partial.tar")
        log(f"assembling a Python 3.11 base from Debian packages (mmdebstrap) into {tar}")
        argv = [
            "mmdebstrap",
            "--quiet",
            *MMDEBSTRAP_ARGS,
            f"--customize-hook={PYTHON_LAYOUT_HOOK}",
            "bookworm",
            str(partial),
        ]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BuildError(f"mmdebstrap failed ({proc.returncode}): {proc.stderr[-4000:]}")
        partial.rename(tar)
    engine.import_tar(tar, ref, PYTHON_BASE_CONFIG)
    log(f"base {ref} ready in {time.monotonic() - t0:.1f}s (Debian bookworm, Python 3.11)")
    return ref


def rust_base(engine: Engine, cache: pathlib.Path) -> str:
    """An image holding the host's Rust toolchain where the official rust image has it."""
    rustc = shutil.which("rustc") or os.path.expanduser("~/.cargo/bin/rustc")
    rustup = shutil.which("rustup") or os.path.expanduser("~/.cargo/bin/rustup")
    if not (os.access(rustc, os.X_OK) and os.access(rustup, os.X_OK)):
        raise BuildError(
            "no rust image can be pulled and no rustup toolchain is here (https://rustup.rs)"
        )
    verbose = subprocess.run([rustc, "-vV"], capture_output=True, text=True, check=True).stdout
    version = re.search(r"^release: (\S+)$", verbose, re.M)
    host = re.search(r"^host: (\S+)$", verbose, re.M)
    sysroot = subprocess.run(
        [rustc, "--print", "sysroot"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not (version and host):
        raise BuildError(f"cannot read rustc -vV: {verbose}")
    key = _digest("rust-base/1", verbose, *RUST_BASE_CONFIG)[:16]
    ref = f"localhost/gazette-rust-base:{version[1]}-{key}"
    if engine.image_id(ref):
        log(f"base {ref} reused (the host's rustc {version[1]})")
        return ref
    t0 = time.monotonic()
    toolchain = f"{version[1]}-{host[1]}"
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        tar_path = pathlib.Path(tmp) / "rust.tar"
        with tarfile.open(tar_path, "w") as tar:
            _add_dir(tar, "usr/local")
            _add_dir(tar, "usr/local/cargo")
            _add_dir(tar, "usr/local/cargo/bin")
            info = tar.gettarinfo(rustup, "usr/local/cargo/bin/rustup")
            with open(rustup, "rb") as f:
                tar.addfile(info, f)
            for proxy in ("cargo", "rustc", "rustdoc"):
                link = tarfile.TarInfo(f"usr/local/cargo/bin/{proxy}")
                link.type, link.linkname, link.mode = tarfile.SYMTYPE, "rustup", 0o777
                tar.addfile(link)
            _add_dir(tar, "usr/local/rustup")
            settings = (
                f'version = "12"\ndefault_toolchain = "{toolchain}"\nprofile = "minimal"\n'.encode()
            )
            entry = tarfile.TarInfo("usr/local/rustup/settings.toml")
            entry.size, entry.mode = len(settings), 0o644
            tar.addfile(entry, io.BytesIO(settings))
            _add_dir(tar, "usr/local/rustup/toolchains")
            # The toolchain without its documentation (most of its size).
            tar.add(
                sysroot,
                arcname=f"usr/local/rustup/toolchains/{toolchain}",
                filter=lambda ti: None if "/share/doc" in ti.name else ti,
            )
        engine.import_tar(tar_path, ref, RUST_BASE_CONFIG)
    log(f"base {ref} ready in {time.monotonic() - t0:.1f}s (the host's rustc {version[1]})")
    return ref


def _add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    tar.addfile(info)


def resolve_base(arg: str, engine: Engine, cache: pathlib.Path, mode: str) -> str:
    """The image a Dockerfile's ``arg`` (PYTHON_IMAGE, RUST_IMAGE) is built from."""
    official = OFFICIAL[arg]
    assemble = python_base if arg == "PYTHON_IMAGE" else rust_base
    if mode == "local":
        return assemble(engine, cache)
    if engine.image_id(official):
        return official
    # Remember a failed pull for a day, so that a warm run on a machine without a
    # registry does not wait on the network again.
    marker = cache / "base" / f"no-pull-{official.replace(':', '_').replace('/', '_')}"
    if mode == "auto" and marker.exists() and time.time() - marker.stat().st_mtime < 86400:
        return assemble(engine, cache)
    t0 = time.monotonic()
    if engine.pull(official):
        log(f"base {official} pulled in {time.monotonic() - t0:.1f}s")
        return official
    if mode == "pull":
        raise BuildError(f"cannot pull {official}")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    log(f"{official} cannot be pulled here: assembling a stand-in")
    return assemble(engine, cache)


# --- the images --------------------------------------------------------------------


def _ignore_patterns(path: pathlib.Path) -> list[tuple[bool, re.Pattern[str]]]:
    """A .dockerignore's patterns, in order, as (negated, regex)."""
    out = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pat = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        regex = ""
        i = 0
        while i < len(pat):
            if pat.startswith("**/", i):
                regex += "(?:.*/)?"
                i += 3
            elif pat.startswith("**", i):
                regex += ".*"
                i += 2
            else:
                c = pat[i]
                regex += "[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c)
                i += 1
        out.append((negated, re.compile(regex + r"\Z")))
    return out


def context_files(ignore: pathlib.Path) -> list[str]:
    """The files of the build context (the repository) that the ignore file admits.

    As Docker reads it: the last pattern matching a path, or any folder above it, decides.
    """
    patterns = _ignore_patterns(ignore)
    admitted = []
    for dirpath, dirnames, filenames in os.walk(REPO):
        rel_dir = os.path.relpath(dirpath, REPO)
        dirnames[:] = [d for d in dirnames if d not in (".git", ".venv")]
        for name in filenames:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            parts = rel.split("/")
            prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
            excluded = False
            for negated, regex in patterns:
                if any(regex.match(p) for p in prefixes):
                    excluded = not negated
            if not excluded:
                admitted.append(rel)
    return sorted(admitted)


def declared_args(dockerfile: str) -> set[str]:
    return set(re.findall(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)", dockerfile, re.M))


def inputs_hash(
    name: str, build_args: dict[str, str], base_ids: dict[str, str], engine: str
) -> str:
    dockerfile = IMAGES / name / "Dockerfile"
    ignore = IMAGES / name / "Dockerfile.dockerignore"
    h = hashlib.sha256()
    h.update(_digest("image/1", engine, dockerfile.read_bytes(), ignore.read_bytes()).encode())
    for key in sorted(build_args):
        h.update(_digest("arg", key, build_args[key], base_ids.get(key, "")).encode())
    for rel in context_files(ignore):
        path = REPO / rel
        executable = "x" if os.access(path, os.X_OK) else "-"
        h.update(_digest("file", rel, executable, path.read_bytes()).encode())
    return h.hexdigest()


def build_image(
    name: str, tag: str, engine: Engine, cache: pathlib.Path, bases: dict[str, str], ca: str | None
) -> dict[str, str]:
    dockerfile = IMAGES / name / "Dockerfile"
    text = dockerfile.read_text()
    declared = declared_args(text)
    build_args = {k: v for k, v in bases.items() if k in declared}
    mounts: list[str] = []
    if ca and engine.name != "docker" and "SSL_CERT_FILE" in declared:
        build_args["SSL_CERT_FILE"] = CA_IN_BUILD
    if ca and engine.name != "docker":
        mounts = ["-v", f"{ca}:{CA_IN_BUILD}:ro"]
    base_ids = {k: engine.image_id(v) or "" for k, v in build_args.items() if k in bases}
    # The CA bundle's path is not an input (it changes nothing the image holds).
    hashed_args = {k: v for k, v in build_args.items() if k != "SSL_CERT_FILE"}
    digest = inputs_hash(name, hashed_args, base_ids, engine.name)
    ref = f"gazette-{name}:{tag}" if engine.name == "docker" else f"localhost/gazette-{name}:{tag}"
    archive = cache / f"gazette-{name}-{digest[:16]}.tar"
    t0 = time.monotonic()
    if engine.label(ref, LABEL) == digest:
        how = "reused (inputs unchanged)"
    elif archive.exists():
        engine.load(archive)
        if engine.label(ref, LABEL) != digest:
            raise BuildError(f"{archive} does not hold {ref} with inputs {digest[:16]}")
        how = f"reused from {archive.name} (inputs unchanged)"
    else:
        log(f"building {ref} (inputs {digest[:16]}; output in {cache / 'logs' / (name + '.log')})")
        argv = [
            "build" if engine.name != "buildah" else "bud",
            "-f", str(dockerfile),
            "-t", ref,
            "--label", f"{LABEL}={digest}",
        ]  # fmt: skip
        for key, value in build_args.items():
            argv += ["--build-arg", f"{key}={value}"]
        if engine.name != "docker":
            # Bases are local or pulled above: never reach for a registry here.
            # --force-rm: a failed step leaves no working container behind.
            argv += ["--pull=never", "--network", "host", "--layers", "--force-rm",
                     "--ignorefile", str(IMAGES / name / "Dockerfile.dockerignore"), *mounts]  # fmt: skip
        argv.append(str(REPO))
        (cache / "logs").mkdir(parents=True, exist_ok=True)
        with open(cache / "logs" / f"{name}.log", "w") as out:
            proc = subprocess.run(
                [engine.name, *argv],
                env=engine.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if proc.returncode != 0:
            tail = (cache / "logs" / f"{name}.log").read_text(errors="replace")[-3000:]
            raise BuildError(f"building {ref} failed ({proc.returncode}):\n{tail}")
        for old in cache.glob(f"gazette-{name}-*.tar"):
            old.unlink()
        engine.save(ref, archive)
        how = "built"
    image_id = engine.image_id(ref) or ""
    log(f"{ref} {how} in {time.monotonic() - t0:.1f}s (id {image_id[:12]}, inputs {digest[:16]})")
    return {"ref": ref, "id": image_id, "inputs": digest, "archive": str(archive)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="images/<name>/Dockerfile (default: all)")
    parser.add_argument("--engine", default=os.environ.get("IMAGES_ENGINE", "auto"),
                        choices=["auto", "docker", "podman", "buildah"])  # fmt: skip
    parser.add_argument("--base", default=os.environ.get("IMAGES_BASE", "auto"), choices=["auto", "pull", "local"],
                        help="auto: the official bases when present or pullable, else assembled here")  # fmt: skip
    parser.add_argument("--tag", default="0.1.0")
    parser.add_argument(
        "--dry-run", action="store_true", help="print each build's command line, run nothing"
    )
    parser.add_argument(
        "--which-engine", action="store_true", help="print the engine it would use (exit 1: none)"
    )
    args = parser.parse_args(argv)
    if args.which_engine:
        try:
            print(detect_engine(args.engine))
        except BuildError as e:
            print(e, file=sys.stderr)
            return 1
        return 0
    names = args.names or sorted(p.parent.name for p in IMAGES.glob("*/Dockerfile"))
    if args.dry_run:
        # The engine named (docker when auto), touching no engine and no base.
        name = "docker" if args.engine == "auto" else args.engine
        for n in names:
            ref = (
                f"gazette-{n}:{args.tag}"
                if name == "docker"
                else f"localhost/gazette-{n}:{args.tag}"
            )
            print(
                f"{name} {'bud' if name == 'buildah' else 'build'} -f images/{n}/Dockerfile -t {ref} {REPO}"
            )
        return 0
    t_all = time.monotonic()
    try:
        cache = cache_dir()
        cache.mkdir(parents=True, exist_ok=True)
        engine = Engine(detect_engine(args.engine), cache)
        log(f"engine {engine.name}; cache {cache}")
        wanted = set().union(
            *(declared_args((IMAGES / n / "Dockerfile").read_text()) for n in names)
        )
        bases = {
            arg: resolve_base(arg, engine, cache, args.base)
            for arg in sorted(OFFICIAL)
            if arg in wanted
        }
        ca = os.environ.get("SSL_CERT_FILE")
        ca = ca if ca and os.path.isfile(ca) else None
        built = {n: build_image(n, args.tag, engine, cache, bases, ca) for n in names}
    except BuildError as e:
        log(f"FAILED: {e}")
        return 1
    manifest = {"engine": engine.name, "bases": bases, "images": built}
    (cache / "built.json").write_text(json.dumps(manifest, indent=2) + "\n")
    log(f"{len(built)} images in {time.monotonic() - t_all:.1f}s; listed in {cache / 'built.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
