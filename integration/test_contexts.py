"""Contexts (issue 11) through the real daemon: /v1/contexts with curl-like requests, and
llamay_context on every chat route through the official clients (openai's extra_body,
anthropic's extra_body, ollama's raw request), prefix reuse counted in usage and /v1/stats."""

import pathlib
import tempfile

import anthropic
import openai
import pytest
import requests

from conftest import BASE, MODEL, OwnDaemon, store_file_of

client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0)
claude = anthropic.Anthropic(base_url=BASE, api_key="unused", max_retries=0)

FEW_SHOT = [
    {"role": "system", "content": "You translate English words into French. Answer with the French word only."},
    {"role": "user", "content": "cat"},
    {"role": "assistant", "content": "chat"},
    {"role": "user", "content": "dog"},
    {"role": "assistant", "content": "chien"},
]


def create(**body):
    body.setdefault("model", MODEL)
    return requests.post(f"{BASE}/v1/contexts", json=body, timeout=120)


def reuse_totals():
    return requests.get(f"{BASE}/v1/stats", timeout=10).json()["prefix_reuse"]


def test_a_context_forks_into_eight_that_answer_without_prefilling_it_again():
    made = create(messages=FEW_SHOT)
    assert made.status_code == 201, made.text
    context = made.json()
    assert context["id"].startswith("ctx_") and context["object"] == "context"
    assert context["tokens"] > 30 and context["parent"] is None and context["model"] == MODEL
    forked = requests.post(f"{BASE}/v1/contexts/{context['id']}/fork?n=8", timeout=10)
    assert forked.status_code == 201, forked.text
    children = forked.json()["contexts"]
    assert len(children) == 8
    assert all(c["parent"] == context["id"] and c["tokens"] == context["tokens"] for c in children)
    before = reuse_totals()
    words = ["house", "water", "bread", "apple", "tree", "book", "sun", "car"]
    answers = []
    for child, word in zip(children, words):
        response = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": word}],
            max_tokens=8,
            temperature=0,
            extra_body={"llamay_context": child["id"]},
        )
        answers.append(response.choices[0].message.content)
        cached = response.usage.prompt_tokens_details.cached_tokens
        assert cached >= context["tokens"] - 4, (cached, context["tokens"])
        assert cached < response.usage.prompt_tokens
    assert all(a.strip() for a in answers)
    after = reuse_totals()
    assert after["hits"] - before["hits"] >= 8
    assert after["tokens_saved"] - before["tokens_saved"] >= 8 * (context["tokens"] - 4)
    stats = requests.get(f"{BASE}/v1/stats", timeout=10).json()["contexts"]
    assert stats["total"] >= 9


def test_reading_a_context_leaves_it_as_it_was_and_a_commit_appends_the_turn():
    context = create(messages=FEW_SHOT).json()
    read = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "bird"}], max_tokens=6, temperature=0,
        extra_body={"llamay_context": context["id"]},
    )
    assert read.choices[0].message.content.strip()
    assert requests.get(f"{BASE}/v1/contexts/{context['id']}", timeout=10).json()["tokens"] == context["tokens"]
    committed = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "bird"}], max_tokens=6, temperature=0,
        extra_body={"llamay_context": context["id"], "llamay_context_commit": True},
    )
    grown = requests.get(f"{BASE}/v1/contexts/{context['id']}", timeout=10).json()["tokens"]
    assert grown > context["tokens"]
    # The next turn sends only itself; the committed one is part of the prompt now.
    next_turn = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "fish"}], max_tokens=6, temperature=0,
        extra_body={"llamay_context": context["id"], "llamay_context_commit": True},
    )
    assert next_turn.usage.prompt_tokens > committed.usage.prompt_tokens
    assert next_turn.usage.prompt_tokens_details.cached_tokens >= context["tokens"] - 4


def test_deleting_a_parent_leaves_its_children_working():
    parent = create(prompt="Three facts about the Moon:\n1.").json()
    child = requests.post(f"{BASE}/v1/contexts/{parent['id']}/fork?n=1", timeout=10).json()["contexts"][0]
    assert requests.delete(f"{BASE}/v1/contexts/{parent['id']}", timeout=10).status_code == 200
    assert requests.get(f"{BASE}/v1/contexts/{parent['id']}", timeout=10).status_code == 404
    answer = requests.post(
        f"{BASE}/api/generate",
        json={"model": MODEL, "prompt": " The Moon", "raw": True, "stream": False, "llamay_context": child["id"],
              "options": {"temperature": 0, "num_predict": 8}},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["response"]


def test_anthropic_and_ollama_chat_continue_a_context():
    context = create(messages=FEW_SHOT).json()
    message = claude.messages.create(
        model=MODEL, max_tokens=6, messages=[{"role": "user", "content": "milk"}],
        extra_body={"llamay_context": context["id"]},
    )
    assert message.content[0].text.strip()
    assert message.usage.cache_read_input_tokens >= context["tokens"] - 4
    ollama = requests.post(
        f"{BASE}/api/chat",
        json={"model": MODEL, "stream": False, "messages": [{"role": "user", "content": "cheese"}],
              "llamay_context": context["id"], "options": {"temperature": 0, "num_predict": 6}},
        timeout=120,
    )
    assert ollama.status_code == 200, ollama.text
    assert ollama.json()["message"]["content"].strip()


def test_streaming_from_a_context():
    context = create(messages=FEW_SHOT).json()
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "night"}], max_tokens=6, temperature=0, stream=True,
        extra_body={"llamay_context": context["id"]},
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text.strip()


@pytest.mark.parametrize(
    "body, status, needle",
    [
        ({"messages": FEW_SHOT, "prompt": "x"}, 400, "not both"),
        ({}, 400, "messages"),
        ({"messages": []}, 400, "empty"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, 400, "role"),
        ({"prompt": "x", "keep_alive": "soon"}, 400, "keep_alive"),
        ({"model": "no-such-model:1b", "prompt": "x"}, 404, "no-such-model"),
    ],
)
def test_bad_context_bodies_are_refused(body, status, needle):
    response = create(**body)
    assert response.status_code == status, response.text
    assert needle in response.json()["error"]["message"]


def test_unknown_ids_fork_counts_and_foreign_models_are_refused():
    assert requests.get(f"{BASE}/v1/contexts/ctx_0000", timeout=10).status_code == 404
    assert requests.delete(f"{BASE}/v1/contexts/ctx_0000", timeout=10).status_code == 404
    context = create(prompt="Once upon a time").json()
    for n in ["0", "65", "many"]:
        response = requests.post(f"{BASE}/v1/contexts/{context['id']}/fork?n={n}", timeout=10)
        assert response.status_code == 400, (n, response.text)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
            extra_body={"llamay_context": "ctx_0000"},
        )
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="another:model", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
            extra_body={"llamay_context": context["id"]},
        )
    assert MODEL in str(refused.value)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
            extra_body={"llamay_context_commit": True},
        )
    listed = requests.get(f"{BASE}/v1/contexts", timeout=10).json()
    assert any(c["id"] == context["id"] for c in listed["data"])


def test_ollama_generate_returns_its_context_and_continues_from_one():
    def generate(**extra):
        body = {"model": MODEL, "stream": False, "options": {"temperature": 0, "num_predict": 8}, **extra}
        return requests.post(f"{BASE}/api/generate", json=body, timeout=120)

    first = generate(prompt="My name is Ada. Remember it.")
    assert first.status_code == 200, first.text
    context = first.json()["context"]
    assert len(context) > first.json()["eval_count"]
    second = generate(prompt="What is my name?", context=context)
    assert second.status_code == 200, second.text
    # The earlier prompt and answer are part of this prompt now.
    assert second.json()["prompt_eval_count"] > len(context)
    assert second.json()["context"][: len(context)] == context
    for bad in ([-1], [10**9]):
        refused = generate(prompt="x", context=bad)
        assert refused.status_code == 400, refused.text
        assert "context" in refused.json()["error"]


def test_a_snapshot_outlives_a_restart_and_answers_the_same():
    """The acceptance: snapshot -> stop the daemon -> start it -> POST /v1/contexts
    {"snapshot": ...} -> a greedy request gives the same text as before the restart."""
    with tempfile.TemporaryDirectory() as home:
        link = pathlib.Path(home) / "snapmodel.gguf"
        link.symlink_to(store_file_of(MODEL))
        name = "snapmodel"

        def ask(base, context):
            own = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
            response = own.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "bread"}], max_tokens=12, temperature=0,
                extra_body={"llamay_context": context},
            )
            return response.choices[0].message.content

        first = OwnDaemon(home, link)
        try:
            made = requests.post(f"{first.base}/v1/contexts", json={"model": name, "messages": FEW_SHOT}, timeout=120)
            assert made.status_code == 201, made.text
            context = made.json()
            before = ask(first.base, context["id"])
            taken = requests.post(f"{first.base}/v1/contexts/{context['id']}/snapshot", timeout=120)
            assert taken.status_code == 201, taken.text
            snapshot = taken.json()
            assert snapshot["snapshot"].startswith("snap_") and snapshot["tokens"] == context["tokens"]
            # The model as listings name it: the tag a client left out is there.
            assert snapshot["model"] == f"{name}:latest" and context["model"] == f"{name}:latest"
            assert snapshot["bytes"] > 0 and snapshot["context"] == context["id"]
        finally:
            first.stop()

        second = OwnDaemon(home, link)
        try:
            listed = requests.get(f"{second.base}/v1/snapshots", timeout=10).json()["data"]
            assert [s["snapshot"] for s in listed] == [snapshot["snapshot"]]
            restored = requests.post(f"{second.base}/v1/contexts", json={"snapshot": snapshot["snapshot"]}, timeout=120)
            assert restored.status_code == 201, restored.text
            assert restored.json()["tokens"] == context["tokens"]
            assert ask(second.base, restored.json()["id"]) == before
            # The daemon id in context ids is the store's, the same after the restart.
            assert restored.json()["id"].split("_")[1] == context["id"].split("_")[1]
            gone = requests.delete(f"{second.base}/v1/snapshots/{snapshot['snapshot']}", timeout=10)
            assert gone.status_code == 200
            again = requests.post(f"{second.base}/v1/contexts", json={"snapshot": snapshot["snapshot"]}, timeout=10)
            assert again.status_code == 404
        finally:
            second.stop()
