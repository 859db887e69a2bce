"""Build the real OpenAI-compatible servers the `real_server` tests run, once per machine.

- llama.cpp's `llama-server`, from the llama.cpp sources vendored in the pinned llama-cpp-python sdist
  (checked against its sha256), configured with `-DGGML_NATIVE=OFF` so the binary runs on any x86-64 CPU;
- LiteLLM's proxy in a virtual environment of its own: `litellm[proxy]` pins gunicorn and openai versions
  Concord's locked environment cannot take.

Both go to `${XDG_CACHE_HOME:-~/.cache}/concord/`, outside the repository, so every checkout on the machine
shares them. A second run finds them and prints nothing. bin/test runs this with the interpreter uv was
installed into (it has pip and uv); the test fixtures only read the paths (`llama_server_dir`,
`litellm_command`). Standard library only.

    python3 tests/real_servers/build.py
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

LLAMA_CPP_PYTHON = "0.3.36"
LLAMA_CPP_PYTHON_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
# The newest LiteLLM whose `proxy` extra resolves: 1.110's needs a `litellm-proxy` package not published.
LITELLM = "1.108.7"
CMAKE_OPTIONS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
]
BUILD_TOOLS = {"cmake": "cmake", "g++": "g++", "make": "make"}  # command -> Debian package


class BuildError(Exception):
    """Why a server could not be built: printed as is, and bin/test stops."""


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "concord"


def llama_server_dir() -> Path:
    """Where `llama-server` and the shared libraries it loads (LD_LIBRARY_PATH) are."""
    return cache_root() / "llama-server" / LLAMA_CPP_PYTHON


def litellm_command() -> Path:
    return cache_root() / "litellm" / LITELLM / "venv" / "bin" / "litellm"


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """One build at a time on the machine: two test commands started together wait for each other."""
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def run(command: list[str], *, what: str, log: Path, cwd: Path | None = None) -> None:
    """Run a build step with its output in `log`; a failure names the step, the log and its last lines."""
    with open(log, "ab") as out:
        result = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise BuildError(f"{what} failed (exit {result.returncode}); the last lines of {log}:\n{tail}")


def ensure_build_tools() -> None:
    missing = [package for command, package in BUILD_TOOLS.items() if shutil.which(command) is None]
    if not missing:
        return
    print(f"Installing {', '.join(missing)} for the llama-server build ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        if subprocess.run(command, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            raise BuildError(f"could not install {', '.join(missing)} ({' '.join(command)} failed)")


def ensure_llama_server() -> Path:
    target = llama_server_dir()
    if (target / "llama-server").exists():
        return target
    with locked("llama-server"):
        if (target / "llama-server").exists():
            return target
        print(
            "Building llama-server once (about 7 minutes on 2 idle cores, longer on a busy machine)"
            f" into {target} ...",
            flush=True,
        )
        started = time.monotonic()
        ensure_build_tools()
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as work:
            built = build_llama_server(Path(work))
            staging = Path(work) / "out"
            staging.mkdir()
            for path in built.iterdir():
                if path.name == "llama-server" or ".so" in path.name:
                    shutil.copy2(path, staging / path.name, follow_symlinks=True)
            staging.rename(target)  # complete or absent: an interrupted build leaves nothing to trust
        print(f"llama-server built in {time.monotonic() - started:.0f} s", flush=True)
    return target


def build_llama_server(work: Path) -> Path:
    """Download and check the sdist, configure and build the `llama-server` target; returns its bin dir."""
    log = work / "build.log"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"llama-cpp-python=={LLAMA_CPP_PYTHON}",
            "-d",
            str(work),
        ],
        what=f"downloading the llama-cpp-python {LLAMA_CPP_PYTHON} sdist",
        log=log,
    )
    sdist = work / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != LLAMA_CPP_PYTHON_SHA256:
        raise BuildError(f"{sdist.name} has sha256 {digest}, not the pinned {LLAMA_CPP_PYTHON_SHA256}")
    with tarfile.open(sdist) as archive:
        archive.extractall(work, filter="data")
    source = work / f"llama_cpp_python-{LLAMA_CPP_PYTHON}" / "vendor" / "llama.cpp"
    build = work / "build"
    run(["cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS], what="cmake configure", log=log)
    jobs = os.environ.get("CONCORD_BUILD_JOBS", "2")
    run(
        ["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs],
        what="building llama-server",
        log=log,
    )
    return build / "bin"


def ensure_litellm() -> Path:
    command = litellm_command()
    done = command.parents[2] / "installed"  # written last: a half-done install is made again
    if done.exists():
        return command
    with locked("litellm"):
        if done.exists():
            return command
        print(f"Installing LiteLLM's proxy {LITELLM} once into its own environment ...", flush=True)
        home = command.parents[2]
        venv, log = home / "venv", home / "install.log"
        shutil.rmtree(
            venv, ignore_errors=True
        )  # a virtual environment's scripts name its path: made in place
        home.mkdir(parents=True, exist_ok=True)
        uv = [sys.executable, "-m", "uv"]
        run([*uv, "venv", "--quiet", "--python", sys.executable, str(venv)], what="uv venv", log=log)
        run(
            [
                *uv,
                "pip",
                "install",
                "--quiet",
                "--python",
                str(venv / "bin" / "python"),
                f"litellm[proxy]=={LITELLM}",
            ],
            what=f"installing litellm[proxy]=={LITELLM}",
            log=log,
        )
        done.write_text(f"litellm[proxy]=={LITELLM}\n")
    return command


def main() -> int:
    try:
        ensure_llama_server()
        ensure_litellm()
    except BuildError as error:
        print(f"Could not build the real servers for the real_server tests: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
