"""Model pulls, copies, deletes and creates against the running daemon, with the official ollama
client and with the llamay CLI as a client of the daemon.

The registry is the local one in tests/support/src/registry.rs (examples/test_registry.rs), serving
the store's own SmolLM2 GGUF, so the pulled model shares its blob with smollm2:135m: deleting
the pulled name must leave that blob alone. run.sh lets the daemon reach 127.0.0.1 over plain
http (-insecure-registry 127.0.0.1); a pulled model keeps the registry's host in its name.
"""

import json
import os
import pathlib
import subprocess
import time

import ollama
import pytest
import requests

from conftest import BASE, MODEL, REPO, installed_models, loaded_models

BIN = os.environ.get("LLAMAY_BIN", str(REPO / "target" / "release" / "llamay"))
REGISTRY_BIN = REPO / "target" / "release" / "examples" / "test_registry"


def pulled(host):
    """The name a pull of the registry's smollm2-local gets: the host stays in it."""
    return f"{host}/library/smollm2-local:latest"


def start_registry(slow_micros=0, pad=0):
    if not REGISTRY_BIN.exists():
        subprocess.run(["cargo", "build", "--release", "--example", "test_registry"], cwd=REPO, check=True)
    env = dict(os.environ, LLAMAY_TEST_REGISTRY_SLOW_MICROS=str(slow_micros),
               LLAMAY_TEST_REGISTRY_PAD=str(pad))
    process = subprocess.Popen([str(REGISTRY_BIN)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, env=env)
    line = process.stdout.readline().strip()
    assert line.startswith("registry http://"), line
    return process, line.split("http://", 1)[1]


@pytest.fixture(scope="module")
def registry():
    process, host = start_registry()
    yield host
    process.stdin.close()
    process.wait(timeout=10)


@pytest.fixture
def slow_registry():
    # A padded copy of the GGUF: a blob the store does not have yet.
    process, host = start_registry(slow_micros=20_000, pad=4096)
    yield host
    process.stdin.close()
    process.wait(timeout=10)


@pytest.fixture
def client():
    return ollama.Client(host=BASE)


def cleanup(*names):
    for name in names:
        requests.delete(f"{BASE}/api/delete", json={"model": name}, timeout=30)


def cli(*args, check=True):
    env = dict(os.environ, LLAMAY_ADDR=BASE.split("://", 1)[1])
    done = subprocess.run([BIN, *args], env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert done.returncode == 0, f"llamay {' '.join(args)}: {done.stderr}"
    return done


def test_official_client_pull_copy_delete(registry, client):
    pulled_name = pulled(registry)
    cleanup(pulled_name, "smollm2-copy:latest")
    try:
        progress = list(client.pull(f"{registry}/library/smollm2-local:latest", insecure=True, stream=True))
        statuses = [p.status for p in progress]
        assert statuses[0] == "pulling manifest"
        assert statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
        layers = [p for p in progress if p.digest]
        assert layers and all(p.status == f"pulling {p.digest[7:19]}" for p in layers)
        biggest = max(layers, key=lambda p: p.total)
        assert biggest.total > 50_000_000
        assert max(p.completed or 0 for p in layers if p.digest == biggest.digest) == biggest.total
        assert pulled_name in installed_models()
        assert "smollm2-local:latest" not in installed_models(), "another registry's model keeps its host"
        # The small layers: default options, system prompt, Ollama template (shown), license.
        shown = requests.post(f"{BASE}/api/show", json={"model": pulled_name}, timeout=30).json()
        assert shown["system"] == "You are a helpful assistant."
        assert "{{ .Prompt }}" in shown["template"]
        assert "temperature" in shown["parameters"] and '"<|im_end|>"' in shown["parameters"]
        assert shown["license"] == "Apache License 2.0"
        assert client.show(f"{registry}/library/smollm2-local").details.family == "llama"

        assert client.copy(pulled_name, "smollm2-copy").status == "success"
        assert "smollm2-copy:latest" in installed_models()
        assert client.delete("smollm2-copy").status == "success"
        assert client.delete(f"{registry}/Library/SmolLM2-Local").status == "success"
        assert pulled_name not in installed_models() and "smollm2-copy:latest" not in installed_models()
        with pytest.raises(ollama.ResponseError) as missing:
            client.delete(pulled_name)
        assert missing.value.status_code == 404
        # The blob is smollm2:135m's too: it stays, and that model still loads from it.
        assert client.show(MODEL).details.family == "llama"
        assert requests.post(f"{BASE}/api/generate", json={"model": MODEL}, timeout=120).status_code == 200
    finally:
        cleanup(pulled_name, "smollm2-copy:latest")


def test_pull_errors_and_the_single_object_answer(registry, client):
    pulled_name = pulled(registry)
    with pytest.raises(ollama.ResponseError) as missing:
        list(client.pull(f"{registry}/library/smollm2-local:no-such-tag", insecure=True, stream=True))
    assert "no-such-tag" in str(missing.value)
    answer = requests.post(f"{BASE}/api/pull", json={"model": "bad name!", "stream": False}, timeout=30)
    assert answer.status_code == 400 and "bad name" in answer.json()["error"]
    try:
        answer = requests.post(f"{BASE}/api/pull", timeout=300, json={
            "model": f"{registry}/library/smollm2-local:latest", "insecure": True, "stream": False})
        assert answer.status_code == 200 and answer.json() == {"status": "success"}
    finally:
        cleanup(pulled_name)


def test_create_from_a_model_with_parameters_and_system(client):
    cleanup("terse:latest")
    try:
        steps = list(client.create(model="terse", from_=MODEL, system="Answer in one word.",
                                   parameters={"temperature": 0.1, "stop": ["\n"]}, stream=True))
        assert steps[-1].status == "success"
        assert "terse:latest" in installed_models()
        answer = requests.post(f"{BASE}/api/create", timeout=30,
                               json={"model": "x", "from": "no-such-model", "stream": False})
        assert answer.status_code == 404, answer.text
        answer = requests.post(f"{BASE}/api/create", timeout=30,
                               json={"model": "x", "from": MODEL, "quantize": "q4_K_M", "stream": False})
        assert answer.status_code == 404 and "quantize" in answer.json()["error"]
    finally:
        cleanup("terse:latest")


def test_cli_is_a_client_of_the_daemon(registry, tmp_path):
    pulled_name = pulled(registry)
    cleanup(pulled_name, "cli-copy:latest")
    try:
        done = cli("pull", f"{registry}/library/smollm2-local:latest")
        assert "success" in done.stderr or done.returncode == 0
        assert pulled_name in cli("list").stdout
        cli("cp", pulled_name, "cli-copy")
        assert "cli-copy:latest" in installed_models()
        cli("rm", "cli-copy")
        assert "cli-copy:latest" not in cli("list").stdout
        modelfile = tmp_path / "Modelfile"
        modelfile.write_text(f"FROM {MODEL}\nPARAMETER temperature 0.3\nSYSTEM \"\"\"Be brief.\"\"\"\n")
        cli("create", "cli-made", "-f", str(modelfile))
        assert "cli-made:latest" in installed_models()
        cli("rm", "cli-made")
    finally:
        cleanup(pulled_name, "cli-copy:latest", "cli-made:latest")


def test_cli_ps_and_stop_against_the_daemon():
    # An empty generate loads the model, as in Ollama.
    assert requests.post(f"{BASE}/api/generate", json={"model": MODEL}, timeout=120).status_code == 200
    assert MODEL in cli("ps").stdout
    cli("stop", MODEL)
    for _ in range(50):  # the unload finishes in the background; bounded wait
        if MODEL not in loaded_models():
            break
        time.sleep(0.1)
    assert MODEL not in loaded_models()
    assert "not running" in cli("stop", MODEL, check=False).stderr


def home_dir():
    return pathlib.Path(os.environ.get("LLAMAY_HOME") or pathlib.Path.home() / ".llamay")


def pulled_bytes_on_disk():
    """Bytes recorded as done by partial downloads in the daemon's store."""
    home = home_dir()
    total = 0
    for state in (home / "tmp" / "pulls").glob("*.state"):
        try:
            total += sum(json.loads(state.read_text())["done"])
        except (OSError, ValueError, KeyError):
            pass
    return total


def test_a_client_that_disconnects_cancels_the_pull_and_the_next_pull_resumes(slow_registry):
    name = pulled_name = pulled(slow_registry)
    cleanup(name)
    try:
        with requests.post(f"{BASE}/api/pull", json={"model": name, "insecure": True}, stream=True,
                           timeout=60) as answer:
            for line in answer.iter_lines():
                step = json.loads(line)
                if step.get("total", 0) > 50_000_000 and step.get("completed", 0) > 10_000_000:
                    break
        # The pull stops within a few progress ticks and its state is saved (bounded wait).
        time.sleep(3)
        stopped_at = pulled_bytes_on_disk()
        time.sleep(1.5)
        assert pulled_bytes_on_disk() == stopped_at
        assert 10_000_000 <= stopped_at < 90_000_000
        assert pulled_name not in installed_models()
        steps = [json.loads(line) for line in requests.post(
            f"{BASE}/api/pull", json={"model": name, "insecure": True}, timeout=300).iter_lines()]
        assert steps[-1] == {"status": "success"}
        model_steps = [s for s in steps if s.get("total", 0) > 50_000_000]
        # The resumed pull starts from what was on disk, not from zero.
        assert model_steps[1]["completed"] >= stopped_at
        assert pulled_name in installed_models()
        blobs = home_dir() / "blobs"
        before = set(os.listdir(blobs))
        cleanup(pulled_name)
        # Its blob was used by no other model: deleting the model deleted it.
        assert len(set(os.listdir(blobs))) == len(before) - 1
    finally:
        cleanup(pulled_name)


def test_only_the_operator_allows_plain_http_and_a_pull_replaces_nothing(registry):
    port = registry.split(":")[1]
    # The operator allowed 127.0.0.1; the same registry called localhost is another host, and a
    # request's "insecure": true does not change that.
    refused = requests.post(f"{BASE}/api/pull", timeout=30, json={
        "model": f"http://localhost:{port}/files/smollm2-local.gguf", "insecure": True, "stream": False})
    assert refused.status_code == 400 and "insecure_registries" in refused.json()["error"], refused.text
    unreached = requests.post(f"{BASE}/api/pull", timeout=120, json={
        "model": f"localhost:{port}/library/smollm2-local", "insecure": True, "stream": False})
    assert unreached.status_code == 500, unreached.text
    message = unreached.json()["error"]
    assert "unreachable" in message and "insecure_registries" in message, message
    assert not [m for m in installed_models() if m.startswith("localhost")]
    # A GGUF URL named like an installed model from elsewhere is refused, and that model stays.
    cleanup("smollm2-local:latest")
    copied = requests.post(f"{BASE}/api/copy", json={"source": MODEL, "destination": "smollm2-local"}, timeout=30)
    assert copied.status_code == 200
    try:
        taken = requests.post(f"{BASE}/api/pull", timeout=60, json={
            "model": f"http://{registry}/files/smollm2-local.gguf", "stream": False})
        assert taken.status_code == 409, taken.text
        assert "llamay rm smollm2-local:latest" in taken.json()["error"]
        assert "smollm2-local:latest" in installed_models()
    finally:
        cleanup("smollm2-local:latest")


# Last: a crash of the daemon while answering would fail every test after it.
def test_a_model_pulled_while_serving_answers_at_once(registry, client):
    pulled_name = pulled(registry)
    cleanup(pulled_name)
    try:
        for _ in client.pull(pulled_name, stream=True):
            pass
        answer = client.chat(model=pulled_name, messages=[{"role": "user", "content": "hi"}],
                             options={"num_predict": 8, "temperature": 0})
        assert answer.message.content
    finally:
        cleanup(pulled_name)
