"""Over HTTP a model is a store name and nothing else: path-like, absolute, `..`, URL-encoded,
`~` and NUL-carrying names get a 400 on every route that takes a model, in that API's shape,
naming the store-name rule and revealing nothing about the file system."""

import urllib.parse

import requests

from conftest import BASE

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
