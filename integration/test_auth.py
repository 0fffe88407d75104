"""A daemon started with -api-key: the official openai, anthropic and ollama clients work with
the key and get 401 without it; /health stays open. The same daemon is started with -m PATH (a
link to the store's file for the test model), so it also shows a file served under the name the
banner prints, while requests still cannot name files.

This file starts its own daemon (LLAMAY_BIN, as run.sh builds it) on a free loopback port and
stops it with SIGTERM at the end.
"""

import pathlib
import re
import subprocess
import tempfile

import anthropic
import ollama
import openai
import pytest
import requests

from conftest import BIN, MODEL, free_port, store_file_of, wait_for_health

KEY = "llamay-test-key-0123456789"
START_TIMEOUT = 120


@pytest.fixture(scope="module")
def daemon():
    workdir = tempfile.TemporaryDirectory()
    link = pathlib.Path(workdir.name) / "Test-Model.Q8_0.gguf"
    link.symlink_to(store_file_of(MODEL))
    port = free_port()
    log_path = pathlib.Path(workdir.name) / "daemon.log"
    log = open(log_path, "w")
    process = subprocess.Popen(
        [BIN, "serve", "-m", str(link), "-addr", f"127.0.0.1:{port}", "-api-key", KEY,
         "-parallel", "2", "-c", "1024", "-max-loaded", "1"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    wait_for_health(process, base, log_path, START_TIMEOUT)
    yield {"base": base, "log": log_path}
    process.terminate()
    try:
        assert process.wait(timeout=30) == 0, log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
        workdir.cleanup()


FILE_MODEL = "test-model.q8_0:latest"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_health_is_open_and_every_other_route_is_closed(daemon):
    base = daemon["base"]
    assert requests.get(f"{base}/health", timeout=10).status_code == 200
    for method, path in [("GET", "/"), ("GET", "/v1/models"), ("GET", f"/v1/models/{MODEL}"), ("GET", "/v1/stats"),
                         ("GET", "/api/tags"), ("GET", "/api/ps"), ("GET", "/api/version"),
                         ("POST", "/api/show"), ("POST", "/api/chat"), ("POST", "/api/generate"),
                         ("POST", "/v1/chat/completions"), ("POST", "/v1/messages")]:
        response = requests.request(method, f"{base}{path}", json={"model": MODEL}, timeout=10)
        assert response.status_code == 401, (path, response.text)
        assert KEY not in response.text


def test_a_file_path_is_still_refused_over_http(daemon):
    headers = {"Authorization": f"Bearer {KEY}"}
    path = str(store_file_of(MODEL))
    response = requests.post(f"{daemon['base']}/api/generate", headers=headers,
                             json={"model": path, "prompt": "hi", "stream": False}, timeout=30)
    assert response.status_code == 400, response.text
    assert "NAME or NAME:TAG" in response.json()["error"]


def test_clients_without_the_key_get_401_and_with_it_read_the_models(daemon):
    base = daemon["base"]
    keyed = openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0)
    listed = [m.id for m in keyed.models.list()]
    assert MODEL in listed and FILE_MODEL in listed, listed
    assert keyed.models.retrieve(MODEL).id == MODEL
    assert keyed.models.retrieve(FILE_MODEL).id == FILE_MODEL
    wrong = openai.OpenAI(base_url=f"{base}/v1", api_key="not-the-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        wrong.models.list()
    assert refused.value.status_code == 401
    assert refused.value.body["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        wrong.chat.completions.create(model=FILE_MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)

    wrong = anthropic.Anthropic(base_url=base, api_key="not-the-key", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as refused:
        wrong.messages.create(model=FILE_MODEL, max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
    assert refused.value.status_code == 401
    assert refused.value.body["error"]["type"] == "authentication_error"

    keyed = ollama.Client(host=base, headers={"Authorization": f"Bearer {KEY}"})
    assert MODEL in [m.model for m in keyed.list().models]
    assert keyed.show(MODEL).details.family == "llama"
    assert keyed.show(FILE_MODEL).details.family == "llama"
    for client in (ollama.Client(host=base), ollama.Client(host=base, headers={"Authorization": "Bearer not-the-key"})):
        with pytest.raises(ollama.ResponseError) as refused:
            client.list()
        assert refused.value.status_code == 401
        assert "API key" in refused.value.error


def test_the_banner_names_the_file_model(daemon):
    log = ANSI.sub("", daemon["log"].read_text())
    assert re.search(rf'llamay serving .*model="?{re.escape(FILE_MODEL)}', log), log


# Generation: each client with the key gets an answer from the model.

def test_requests_use_the_file_model_by_its_name(daemon):
    response = requests.post(f"{daemon['base']}/api/generate", headers={"Authorization": f"Bearer {KEY}"},
                             json={"model": FILE_MODEL, "prompt": "hi", "stream": False,
                                   "options": {"num_predict": 2}}, timeout=120)
    assert response.status_code == 200, response.text
    assert response.json()["model"] == FILE_MODEL


def test_openai_client_works_with_the_key_and_gets_401_without(daemon):
    keyed = openai.OpenAI(base_url=f"{daemon['base']}/v1", api_key=KEY, max_retries=0)
    answer = keyed.chat.completions.create(model=FILE_MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert answer.choices[0].message.content is not None
    assert MODEL in [m.id for m in keyed.models.list()]
    wrong = openai.OpenAI(base_url=f"{daemon['base']}/v1", api_key="not-the-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        wrong.chat.completions.create(model=FILE_MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert refused.value.status_code == 401
    assert refused.value.body["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()


def test_anthropic_client_works_with_the_key_and_gets_401_without(daemon):
    keyed = anthropic.Anthropic(base_url=daemon["base"], api_key=KEY, max_retries=0)
    answer = keyed.messages.create(model=FILE_MODEL, max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
    assert answer.content[0].type == "text"
    bearer = anthropic.Anthropic(base_url=daemon["base"], auth_token=KEY, max_retries=0)
    assert bearer.messages.create(model=FILE_MODEL, max_tokens=2, messages=[{"role": "user", "content": "Hi"}]).id
    wrong = anthropic.Anthropic(base_url=daemon["base"], api_key="not-the-key", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as refused:
        wrong.messages.create(model=FILE_MODEL, max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
    assert refused.value.status_code == 401
    assert refused.value.body["error"]["type"] == "authentication_error"


def test_ollama_client_works_with_the_key_and_gets_401_without(daemon):
    keyed = ollama.Client(host=daemon["base"], headers={"Authorization": f"Bearer {KEY}"})
    answer = keyed.chat(model=FILE_MODEL, messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 4})
    assert answer.message.role == "assistant"
    assert MODEL in [m.model for m in keyed.list().models]
    for client in (ollama.Client(host=daemon["base"]),
                   ollama.Client(host=daemon["base"], headers={"Authorization": "Bearer not-the-key"})):
        with pytest.raises(ollama.ResponseError) as refused:
            client.chat(model=FILE_MODEL, messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 4})
        assert refused.value.status_code == 401
        assert "API key" in refused.value.error
