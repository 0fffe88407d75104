"""Embeddings and rerank through the clients people use, unchanged but for the base URL: the
official openai client's embeddings.create, the ollama client's embed, LangChain's
OpenAIEmbeddings, and curl for /rerank. The model is all-MiniLM-L6-v2 (scripts/setup imports
it); the daemon loads it on demand, as it would any model a request names."""

import json
import math
import subprocess

import ollama
import openai
import pytest
import requests
from langchain_openai import OpenAIEmbeddings

from conftest import BASE, MODEL, installed_models

ENCODER = "all-minilm:l6-v2"
SENTENCES = ["The cat sat on the mat.", "A kitten rested on the rug.", "Stock markets fell sharply today."]


@pytest.fixture(scope="module", autouse=True)
def encoder():
    if ENCODER not in installed_models():
        pytest.skip(f"{ENCODER} is not installed (scripts/setup imports it)")


def norm(vector):
    return math.sqrt(sum(x * x for x in vector))


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / (norm(a) * norm(b))


def check_semantics(vectors):
    assert [len(v) for v in vectors] == [384, 384, 384]
    assert all(abs(norm(v) - 1.0) < 1e-4 for v in vectors)
    # The two sentences about a resting cat are closer to each other than to the markets.
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2]) + 0.2


def test_openai_client_embeddings_create():
    client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused")
    response = client.embeddings.create(model=ENCODER, input=SENTENCES)
    check_semantics([item.embedding for item in response.data])
    assert response.model == ENCODER
    assert response.usage.prompt_tokens == response.usage.total_tokens > 0
    # The client asks for base64 unless told otherwise; both decode to the same vector.
    floats = client.embeddings.create(model=ENCODER, input=SENTENCES[0], encoding_format="float")
    assert cosine(floats.data[0].embedding, response.data[0].embedding) > 0.99999
    short = client.embeddings.create(model=ENCODER, input=SENTENCES[0], dimensions=128)
    assert len(short.data[0].embedding) == 128
    assert abs(norm(short.data[0].embedding) - 1.0) < 1e-4


def test_openai_client_errors():
    client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused")
    with pytest.raises(openai.BadRequestError, match="is a chat model"):
        client.embeddings.create(model=MODEL, input="hello")
    with pytest.raises(openai.BadRequestError, match="input 1 is empty"):
        client.embeddings.create(model=ENCODER, input=["fine", ""])
    with pytest.raises(openai.APIStatusError) as too_many:
        client.embeddings.create(model=ENCODER, input=["x"] * 2049)
    assert too_many.value.status_code == 413
    with pytest.raises(openai.BadRequestError, match="is an embedding model"):
        client.chat.completions.create(model=ENCODER, messages=[{"role": "user", "content": "hi"}])


def test_ollama_client_embed():
    client = ollama.Client(host=BASE)
    response = client.embed(model=ENCODER, input=SENTENCES, keep_alive="2m")
    check_semantics(response.embeddings)
    assert response.prompt_eval_count > 0
    assert response.total_duration >= response.load_duration
    with pytest.raises(ollama.ResponseError) as refused:
        client.embed(model=ENCODER, input=["short", "word " * 700], truncate=False)
    assert refused.value.status_code == 400
    assert "input 1" in refused.value.error
    legacy = client.embeddings(model=ENCODER, prompt=SENTENCES[0])
    assert cosine(legacy.embedding, response.embeddings[0]) > 0.99999


def test_langchain_openai_embeddings():
    # check_embedding_ctx_length=False: LangChain would otherwise send tiktoken ids, which are
    # OpenAI's vocabulary, not this model's.
    embeddings = OpenAIEmbeddings(
        model=ENCODER, base_url=f"{BASE}/v1", api_key="unused", check_embedding_ctx_length=False
    )
    documents = embeddings.embed_documents(SENTENCES)
    check_semantics(documents)
    query = embeddings.embed_query(SENTENCES[0])
    assert cosine(query, documents[0]) > 0.99999


def test_curl_rerank_sorts_by_relevance():
    body = {
        "model": ENCODER,
        "query": "How do I reset my email password?",
        "documents": [
            "Tomatoes grow best in full sun.",
            {"text": "To reset a forgotten email password, open the sign-in page and choose Forgot password."},
            "The Great Wall of China is very long.",
        ],
        "top_n": 2,
        "return_documents": True,
    }
    out = subprocess.run(
        ["curl", "-sS", "-H", "Content-Type: application/json", "-d", json.dumps(body), f"{BASE}/rerank"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    answer = json.loads(out)
    results = answer["results"]
    assert len(results) == 2
    assert results[0]["index"] == 1
    assert results[0]["relevance_score"] >= results[1]["relevance_score"]
    assert results[0]["document"]["text"].startswith("To reset")
    assert answer["usage"]["prompt_tokens"] > 0
    bad = requests.post(f"{BASE}/v1/rerank", json={**body, "documents": ["a", 7]}, timeout=60)
    assert bad.status_code == 400
    assert "documents[1]" in bad.json()["error"]["message"]
