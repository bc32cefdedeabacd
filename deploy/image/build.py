"""Builds the real Dockerfile without a Docker engine: a Debian bookworm base (whose python3 is 3.11,
as the default `python:3.11-slim`) bootstrapped by mmdebstrap, then `podman build` on it with
chroot isolation and the host's network (no network namespace or cgroups needed).

    python3 deploy/image/build.py            # prints a JSON summary; `make image` runs this

Both steps are cached, keyed by their inputs: the base tarball under the cache directory
(RAGMON_IMAGE_CACHE, default ~/.cache/rag-monitor-image) and in podman's storage, the image under a
tag made of the Dockerfile's, the build context's and the base's digests. A second run with the
same inputs builds nothing. The summary (image, size, layers, timings) and an SBOM of the image's
Python packages are written beside the cache (build/image/ in the checkout, see `--out`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("RAGMON_IMAGE_CACHE", Path.home() / ".cache" / "rag-monitor-image"))
OUT = ROOT / "build" / "image"

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# python-is-python3: the Dockerfile calls `python`, as the python:3.11 images provide it.
PACKAGES = ("python3", "python3-venv", "python-is-python3")
# Documentation, manual pages and translations are not needed in a container (copyright files kept).
DPKG_OPTS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
)
BASE_REPO = "localhost/rag-monitor-base"
IMAGE_REPO = "localhost/rag-monitor"
# The build context as .dockerignore lets it through.
# The SBOM generator (PyPI's cyclonedx-bom, the CycloneDX project's own).
SBOM_TOOL = "cyclonedx-bom>=7,<8"
CONTEXT_FILES = ("Dockerfile", ".dockerignore", "pyproject.toml", "setup.py", "README.md")


def log(message: str) -> None:
    print(f"[image] {message}", file=sys.stderr, flush=True)


def run(*args: str, capture: bool = False) -> str:
    log(" ".join(args))
    done = subprocess.run(args, check=True, text=True, stdout=subprocess.PIPE if capture else sys.stderr)
    return done.stdout if capture else ""


def image_exists(ref: str) -> bool:
    return subprocess.run(["podman", "image", "exists", ref], check=False).returncode == 0


def digest(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()[:16]


def base_key() -> str:
    return digest(
        [SUITE.encode(), MIRROR.encode(), *(p.encode() for p in PACKAGES), *(o.encode() for o in DPKG_OPTS)]
    )


def context_key(base: str) -> str:
    """The Dockerfile, the files it copies (as .dockerignore filters them) and the base."""
    files = [ROOT / name for name in CONTEXT_FILES]
    files += sorted(
        p
        for p in (ROOT / "monitor").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".so")
    )
    parts = [base.encode()]
    for path in files:
        parts += [str(path.relative_to(ROOT)).encode(), path.read_bytes()]
    return digest(parts)


def bootstrap_base(cache: Path) -> str:
    """The bootstrapped base in podman's storage: imported from the cached tarball, which mmdebstrap
    makes only when it is missing."""
    key = base_key()
    ref = f"{BASE_REPO}:{SUITE}-{key}"
    if image_exists(ref):
        log(f"base {ref}: cached in podman's storage")
        return ref
    tarball = cache / f"base-{SUITE}-{key}.tar"
    if not tarball.exists():
        cache.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_suffix(".tar.partial")
        run(
            "mmdebstrap",
            "--variant=minbase",
            "--include=" + ",".join(PACKAGES),
            *(f"--dpkgopt={o}" for o in DPKG_OPTS),
            "--format=tar",
            SUITE,
            str(partial),
            MIRROR,
        )
        partial.rename(tarball)
    run("podman", "import", "--quiet", str(tarball), ref, capture=True)
    return ref


def pip_settings(flag: str = "--build-arg") -> list[str]:
    """The host's pip index and CA bundle for the builder stage (build arguments, not image env): a
    machine behind a mirror or a TLS-inspecting proxy builds as it installs."""
    args: list[str] = []
    if index := os.environ.get("PIP_INDEX_URL"):
        args += [flag, f"PIP_INDEX_URL={index}"]
    bundle = os.environ.get("PIP_CERT") or ssl.get_default_verify_paths().cafile
    if bundle and Path(bundle).is_file():
        args += ["--volume", f"{Path(bundle).resolve()}:/run/pip-ca.pem:ro", flag, "PIP_CERT=/run/pip-ca.pem"]
    return args


def build_image(base: str, tag: str | None = None) -> str:
    key = context_key(base)
    ref = tag or f"{IMAGE_REPO}:{key}"
    if image_exists(ref):
        log(f"image {ref}: cached")
        return ref
    # --format docker: the OCI image format has no HEALTHCHECK, which would be dropped silently.
    run(
        "podman",
        "build",
        "--isolation=chroot",
        "--network=host",
        "--format=docker",
        "--layers",
        "--build-arg",
        f"PYTHON_IMAGE={base}",
        *pip_settings(),
        "--tag",
        ref,
        "--file",
        str(ROOT / "Dockerfile"),
        str(ROOT),
    )
    return ref


def sbom(ref: str, image_id: str, cache: Path) -> tuple[Path, Path]:
    """A CycloneDX SBOM of the image's Python packages, by cyclonedx-py (cyclonedx-bom) run inside a
    throwaway container of the image against its own /opt/venv, so it reads what is installed there;
    and the Debian packages of the base (dpkg-query). The tool lives in that container's /tmp and
    never in the image. Cached by image id."""
    key = image_id[:16]
    cdx, debs = cache / f"sbom-{key}.cdx.json", cache / f"debs-{key}.txt"
    if cdx.exists() and debs.exists():
        log(f"SBOM of {ref}: cached")
        return cdx, debs
    cache.mkdir(parents=True, exist_ok=True)
    container = run("buildah", "from", "--quiet", "--pull=never", ref, capture=True).strip()
    try:
        base = ["buildah", "run", "--isolation=chroot", "--network=host", "--user=0:0"]
        script = (
            f"python -m venv /tmp/sbom && /tmp/sbom/bin/pip install -q --no-cache-dir '{SBOM_TOOL}'"
            " && /tmp/sbom/bin/cyclonedx-py environment --output-reproducible --of JSON -o - /opt/venv"
        )
        out = run(*base, *pip_settings("--env"), container, "--", "sh", "-c", script, capture=True)
        json.loads(out)  # a document, not an error message
        cdx.write_text(out)
        fmt = "${Package}\t${Version}\t${Architecture}\n"
        debs.write_text(run(*base, container, "--", "dpkg-query", "-W", "-f", fmt, capture=True))
    finally:
        subprocess.run(["buildah", "rm", container], check=False, capture_output=True)
    return cdx, debs


def inspect(ref: str) -> dict[str, Any]:
    value: list[dict[str, Any]] = json.loads(run("podman", "image", "inspect", ref, capture=True))
    return value[0]


def summary(ref: str, base: str, seconds: dict[str, float]) -> dict[str, Any]:
    info = inspect(ref)
    base_info = inspect(base)
    history = json.loads(run("podman", "history", "--format", "json", ref, capture=True))
    return {
        "image": ref,
        "id": info["Id"],
        "base": base,
        "size_bytes": info["Size"],
        "base_size_bytes": base_info["Size"],
        "layers": len(info["RootFS"]["Layers"]),
        "history": [
            {"size": h.get("size", 0), "created_by": (h.get("CreatedBy") or h.get("createdBy") or "")[:160]}
            for h in history
        ],
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=CACHE, help="where the base tarball is kept")
    parser.add_argument("--out", type=Path, default=OUT, help="where summary.json goes")
    parser.add_argument("--tag", help="tag the image so (default: localhost/rag-monitor:<inputs digest>)")
    args = parser.parse_args(argv)
    for tool in ("podman", "mmdebstrap"):
        if not shutil.which(tool):
            parser.error(f"{tool} is not installed (`make debs` installs it)")
    seconds: dict[str, float] = {}
    started = time.monotonic()
    base = bootstrap_base(args.cache)
    seconds["base"] = round(time.monotonic() - started, 1)
    started = time.monotonic()
    ref = build_image(base, args.tag)
    seconds["build"] = round(time.monotonic() - started, 1)
    result = summary(ref, base, seconds)
    started = time.monotonic()
    cdx, debs = sbom(ref, result["id"], args.cache)
    seconds["sbom"] = round(time.monotonic() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cdx, args.out / "sbom.cdx.json")
    shutil.copyfile(debs, args.out / "debian-packages.txt")
    components = json.loads(cdx.read_text()).get("components", [])
    result["sbom"] = {
        "cyclonedx": str(args.out / "sbom.cdx.json"),
        "python_packages": len(components),
        "debian_packages_list": str(args.out / "debian-packages.txt"),
        "debian_packages": len(debs.read_text().splitlines()),
    }
    mb = 1_000_000
    log(
        f"{ref}: {result['size_bytes'] / mb:.0f} MB uncompressed in {result['layers']} layers"
        f" (base {result['base_size_bytes'] / mb:.0f} MB); {result['sbom']['python_packages']} Python"
        f" and {result['sbom']['debian_packages']} Debian packages; seconds {seconds}"
    )
    for layer in result["history"]:
        if layer["size"]:
            log(f"  {layer['size'] / mb:8.1f} MB  {layer['created_by'][:100]}")
    (args.out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
