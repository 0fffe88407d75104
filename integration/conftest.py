"""Shared settings for the end-to-end tests: where the daemon is and which models to use.

run.sh starts the daemon and sets LLAMAY_URL; pointing LLAMAY_URL at a running daemon works too.
"""

import os
import pathlib
import re
import signal
import socket
import subprocess
import time

import pytest
import requests

BASE = os.environ.get("LLAMAY_URL", "http://127.0.0.1:11435")
MODEL = os.environ.get("LLAMAY_MODEL", "smollm2:135m")
OTHER_MODEL = os.environ.get("LLAMAY_OTHER_MODEL", "gemma3:270m")
REPO = pathlib.Path(__file__).resolve().parent.parent
BIN = os.environ.get("LLAMAY_BIN", str(REPO / "target" / "release" / "llamay"))


def installed_models():
    return {m["name"] for m in requests.get(f"{BASE}/api/tags", timeout=10).json()["models"]}


def loaded_models():
    return [m["name"] for m in requests.get(f"{BASE}/api/ps", timeout=10).json()["models"]]


def stats_for(name):
    for model in requests.get(f"{BASE}/v1/stats", timeout=10).json()["models"]:
        if model["name"] == name:
            return model
    return None


@pytest.fixture
def other_model():
    if OTHER_MODEL not in installed_models():
        pytest.skip(f"{OTHER_MODEL} is not installed (scripts/setup installs it)")
    return OTHER_MODEL


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def store_file_of(model):
    """The shared store's GGUF file for `model`, from `llamay show` (the blob its digest names)."""
    shown = subprocess.run([BIN, "show", model], capture_output=True, text=True, timeout=60, check=True).stdout
    digest = re.search(r"digest\s+sha256:([0-9a-f]{64})", shown).group(1)
    home = pathlib.Path(os.environ.get("LLAMAY_HOME", pathlib.Path.home() / ".llamay"))
    return home / "blobs" / f"sha256-{digest}"


def wait_for_health(process, base, log_path, timeout=120):
    """Waits until the daemon `process` answers `base`/health; kills it and raises, with its
    log, when it exits first or does not answer within `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llamay exited during start-up:\n{log_path.read_text()}")
        try:
            if requests.get(f"{base}/health", timeout=1).ok:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.3)
    process.kill()
    raise RuntimeError(f"llamay did not answer /health:\n{log_path.read_text()}")


class OwnDaemon:
    """`llamay serve` over its own store (a temporary LLAMAY_HOME, so what it stores is written
    there and the shared store is never held), serving the test model's file by path, with
    `extra` serve flags."""

    def __init__(self, home, model_file, *extra):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = pathlib.Path(home) / f"daemon-{self.port}.log"
        self.log = open(self.log_path, "w")
        env = {**os.environ, "LLAMAY_HOME": str(home), "RUST_LOG": "warn"}
        env.pop("LLAMAY_CONFIG", None)
        self.process = subprocess.Popen(
            [BIN, "serve", "-m", str(model_file), "-addr", f"127.0.0.1:{self.port}", "-parallel", "2",
             "-c", "1024", "-t", "1", *extra],
            stdout=self.log, stderr=subprocess.STDOUT, env=env,
        )
        wait_for_health(self.process, self.base, self.log_path)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            assert self.process.wait(timeout=60) == 0, self.log_path.read_text()
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.log.close()
