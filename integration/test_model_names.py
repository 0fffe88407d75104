"""Over HTTP a model is a store name and nothing else: path-like, absolute, `..`, URL-encoded,
`~` and NUL-carrying names get a 400 on every route that takes a model, in that API's shape,
naming the store-name rule and revealing nothing about the file system. And one name is one
model: the spellings Ollama's clients mix are loaded once, listed once and deleted by any of
them, and deleting a loaded model loads and evicts nothing."""

import json
import re
import urllib.parse

import requests

from conftest import BASE, MODEL, loaded_models

PATH_LIKE = [
    "../../etc/passwd",
    "/etc/passwd",
    "/proc/self/environ",
    "..",
    "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "~/.llamay/blobs",
    "~",
    "smollm2\u0000:135m",
    "C:\\Windows\\win.ini",
    "./model.gguf",
]

LEAKS = ["does not exist", "GGUF", "root", "No such file", "not a file", "ermission"]


def bodies(model):
    messages = [{"role": "user", "content": "hi"}]
    return [
        ("/v1/chat/completions", {"model": model, "messages": messages}),
        ("/v1/chat/completions", {"model": model, "messages": messages, "stream": True}),
        ("/v1/messages", {"model": model, "max_tokens": 8, "messages": messages}),
        ("/api/chat", {"model": model, "messages": messages}),
        ("/api/generate", {"model": model, "prompt": "hi"}),
        ("/api/generate", {"model": model}),
        ("/api/show", {"model": model}),
    ]


def message_of(path, body):
    if path.startswith("/api/"):
        return body["error"]
    if path.startswith("/v1/messages"):
        assert body["type"] == "error"
        return body["error"]["message"]
    assert body["error"]["code"] == "invalid_model_name"
    return body["error"]["message"]


def check(response, path):
    assert response.status_code == 400, (path, response.text)
    message = message_of(path, response.json())
    assert "NAME or NAME:TAG" in message, message
    for leak in LEAKS:
        assert leak not in message, (leak, message)


def test_path_like_names_in_bodies_are_refused_on_every_route():
    for name in PATH_LIKE:
        for path, body in bodies(name):
            check(requests.post(f"{BASE}{path}", json=body, timeout=30), path)


def test_path_like_names_in_the_url_are_refused():
    for name in PATH_LIKE + ["..%2F..%2Fetc%2Fpasswd"]:
        # Dots encoded too, or the client itself would resolve a bare ".." segment.
        quoted = urllib.parse.quote(name, safe="").replace(".", "%2E")
        check(requests.get(f"{BASE}/v1/models/{quoted}", timeout=30), "/v1/models")


COPY = "names-test"


def counter(name, reason=None):
    text = requests.get(f"{BASE}/metrics", timeout=10).text
    labels = '{reason="%s"}' % reason if reason else ""
    found = re.search(r"^%s%s (\S+)$" % (re.escape(name), re.escape(labels)), text, re.M)
    return float(found.group(1)) if found else 0.0


def generate(model, **extra):
    body = {"model": model, "prompt": "hi", "stream": False, "options": {"num_predict": 1}}
    body.update(extra)
    return requests.post(f"{BASE}/api/generate", json=body, timeout=120)


def fresh_copy():
    requests.delete(f"{BASE}/api/delete", json={"model": COPY}, timeout=30)
    answer = requests.post(f"{BASE}/api/copy", json={"source": MODEL, "destination": COPY}, timeout=30)
    assert answer.status_code == 200, answer.text


def test_every_spelling_is_one_loaded_model_and_delete_takes_any_of_them():
    fresh_copy()
    try:
        loads = counter("llamay_model_loads_total")
        for spelling in [COPY, f"{COPY}:latest", COPY.upper(), f"{COPY.title()}:LATEST", f"library/{COPY}"]:
            answer = generate(spelling)
            assert answer.status_code == 200, (spelling, answer.text)
        assert counter("llamay_model_loads_total") == loads + 1, "loaded once for five spellings"
        assert loaded_models().count(f"{COPY}:latest") == 1, loaded_models()
        assert f"{COPY}:latest" in {m["name"] for m in requests.get(f"{BASE}/api/tags", timeout=10).json()["models"]}

        loads, evictions = counter("llamay_model_loads_total"), counter("llamay_model_evictions_total")
        deleted = requests.delete(f"{BASE}/api/delete", json={"model": f"{COPY.upper()}:Latest"}, timeout=30)
        assert deleted.status_code == 200, deleted.text
        assert f"{COPY}:latest" not in loaded_models()
        assert counter("llamay_model_unloads_total", "deleted") >= 1
        for spelling in [COPY, f"{COPY}:latest"]:
            gone = generate(spelling)
            assert gone.status_code == 404, gone.text
        assert counter("llamay_model_loads_total") == loads, "deleting loads nothing"
        assert counter("llamay_model_evictions_total") == evictions, "deleting evicts nothing"
    finally:
        requests.delete(f"{BASE}/api/delete", json={"model": COPY}, timeout=30)
    # The blob is the store's smollm2 too: that model still answers.
    assert generate(MODEL).status_code == 200


def test_deleting_a_model_while_it_answers_lets_the_answer_finish():
    fresh_copy()
    try:
        assert generate(COPY).status_code == 200
        loads = counter("llamay_model_loads_total")
        body = {"model": COPY, "prompt": "Count from one to fifty.", "stream": True,
                "options": {"num_predict": 48, "temperature": 0}}
        lines = []
        with requests.post(f"{BASE}/api/generate", json=body, stream=True, timeout=120) as answer:
            stream = answer.iter_lines()
            lines.append(json.loads(next(stream)))
            deleted = requests.delete(f"{BASE}/api/delete", json={"model": COPY}, timeout=30)
            assert deleted.status_code == 200, deleted.text
            assert f"{COPY}:latest" not in loaded_models(), "not listed once deleted"
            assert generate(COPY).status_code == 404, "new requests are refused at once"
            lines.extend(json.loads(line) for line in stream)
        assert lines[-1]["done"] is True and lines[-1].get("done_reason") in ("length", "stop"), lines[-1]
        assert "error" not in lines[-1]
        assert counter("llamay_model_loads_total") == loads, "deleting loads nothing"
    finally:
        requests.delete(f"{BASE}/api/delete", json={"model": COPY}, timeout=30)


def test_a_context_answers_to_any_spelling_of_its_model():
    made = requests.post(f"{BASE}/v1/contexts", json={
        "model": MODEL.upper(), "messages": [{"role": "user", "content": "Remember: the word is bread."}]}, timeout=120)
    assert made.status_code == 201, made.text
    context = made.json()
    try:
        assert context["model"] == MODEL
        for spelling in [MODEL, MODEL.upper()]:
            answer = requests.post(f"{BASE}/v1/chat/completions", timeout=120, json={
                "model": spelling, "messages": [{"role": "user", "content": "The word?"}], "max_tokens": 4,
                "llamay_context": context["id"]})
            assert answer.status_code == 200, (spelling, answer.text)
    finally:
        requests.delete(f"{BASE}/v1/contexts/{context['id']}", timeout=10)
