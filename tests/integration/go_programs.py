"""Builds and runs the Go client programs of tests/clients/go.

They are built offline in GOPATH mode against the Go libraries Debian packages under
/usr/share/gocode (Sarama 1.22, kafka-go 0.2.1), which `scripts/dev-setup` installs; no
module proxy is involved. Each program prints JSON lines, which `run` returns decoded.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

GO_DIR = Path(__file__).resolve().parents[1] / "clients" / "go"
GOCODE = Path("/usr/share/gocode")
LIBRARIES = {
    "Sarama (golang-github-shopify-sarama-dev)": "github.com/Shopify/sarama",
    "kafka-go (golang-github-segmentio-kafka-go-dev)": "github.com/segmentio/kafka-go",
}


def missing_toolchain() -> str | None:
    """Why the Go programs cannot be built here, or None when they can."""
    if shutil.which("go") is None:
        return "the Go toolchain is not installed (apt-get install golang-go, or run scripts/dev-setup)"
    for name, package in LIBRARIES.items():
        if not (GOCODE / "src" / package).is_dir():
            return f"{name} is not installed under {GOCODE} (run scripts/dev-setup)"
    return None


def build(out_dir: Path) -> dict[str, Path]:
    """Builds every program into out_dir (with its own build cache there); name -> binary."""
    env = dict(os.environ, GO111MODULE="off", GOPATH=str(GOCODE), GOCACHE=str(out_dir / "cache"),
               GOFLAGS="", GOPROXY="off")
    binaries = out_dir / "bin"
    binaries.mkdir(parents=True)
    result = subprocess.run(["go", "build", "-o", f"{binaries}/", "./..."], cwd=GO_DIR, env=env,
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"go build failed:\n{result.stderr}")
    return {path.name: path for path in binaries.iterdir()}


@contextmanager
def built():
    """Every program built into a temporary directory, removed afterwards (name -> binary); skips
    the test when the toolchain or the libraries are missing."""
    reason = missing_toolchain()
    if reason:
        pytest.skip(reason)
    out_dir = Path(tempfile.mkdtemp(prefix="kraftwerk-go-"))
    try:
        yield build(out_dir)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def run(binary: Path, *args: str, timeout: float = 90) -> list[dict]:
    """Runs one program to completion and returns its JSON lines; fails with its stderr."""
    result = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL)
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    if result.returncode != 0:
        raise AssertionError(f"{binary.name} {' '.join(args)} exited with {result.returncode}\n"
                             f"stdout: {lines}\nstderr: {result.stderr}")
    return lines
