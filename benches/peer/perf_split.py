#!/usr/bin/env python3
"""Per-token time split of a running llamay daemon from a `perf` profile: which share of its CPU
time goes to llama_decode (ggml and llama.cpp), the logits copy, sampling, the constraint mask,
detokenizing, the channel to the HTTP side, and HTTP/JSON, plus the threadpool's barrier.

    perf record -g -p "$(pgrep -n llamay)" -o llamay.perf -- sleep 20   # while a load runs
    benches/peer/perf_split.py llamay.perf

Reads `perf report --no-children` (self time per symbol) and files every symbol under the first
bucket whose pattern it matches; what matches none is "other". Symbols are read with their shared
object, so a library without symbols still lands in its bucket (llama-server's OpenMP spin shows
as bare addresses in libgomp). Works on a llama-server profile too. Run by hand, not in CI.
"""

import re
import subprocess
import sys
from collections import defaultdict

# Order matters: the first matching bucket wins.
# Shared objects whose every sample belongs to one bucket, whatever the symbol reads.
LIBRARIES = [("barrier (threads waiting)", r"^libgomp")]
BUCKETS = [
    ("barrier (threads waiting)", r"ggml_barrier|ggml_graph_compute_thread_sync|ggml_graph_compute_poll|sched_yield|gomp_|GOMP_"),
    ("logits copy", r"ggml_backend_tensor_get|llama_context::output_reorder|get_logits"),
    ("llama_decode (ggml/llama.cpp)", r"^ggml|^llama|llama_|ggml_|quantize_|dequantize_|simd_gemm|tinyBLAS|llamafile_sgemm|^_ZN\d*llama|\[unknown\].*libllama"),
    ("sampling", r"llm::sampling|top_k_of|argmax|rand::|StdRng|ChaCha"),
    ("mask (constraint)", r"llamay::grammar|Matcher|TokenTrie|toktrie"),
    ("detokenize", r"llm::detok|Utf8Stream|StopStrings|Vocabulary::piece|sampler::SequenceSampler"),
    ("channel", r"tokio::sync|mpsc|futex|std::sync::mpmc|pthread_cond"),
    ("HTTP/JSON", r"actix|serde_json|http::|h1::|bytes::|api::|sse|hyper|Codec"),
    ("memory", r"malloc|free|memcpy|memmove|memset|realloc|__libc_calloc|_int_"),
    ("kernel", r"\[k\]|entry_SYSCALL|syscall|do_syscall|schedule|__x64_sys"),
]


def split(data):
    """(share per bucket, the hottest symbols) of one `perf record` file."""
    report = subprocess.run(
        ["perf", "report", "-i", data, "--no-children", "--stdio", "--sort", "dso,symbol", "--percent-limit", "0.01",
         "-g", "none"],
        capture_output=True, text=True, check=True).stdout
    shares = defaultdict(float)
    top = []
    for line in report.splitlines():
        match = re.match(r"\s*([\d.]+)%\s+(.*)$", line)
        if not match:
            continue
        percent, rest = float(match.group(1)), match.group(2).strip()
        library, _, symbol = rest.partition(" ")
        symbol = symbol.strip()
        bucket = next((name for name, pattern in LIBRARIES if re.search(pattern, library)), None)
        bucket = bucket or next((name for name, pattern in BUCKETS if re.search(pattern, symbol)), "other")
        shares[bucket] += percent
        if len(top) < 12:
            top.append((percent, library, symbol, bucket))
    return dict(shares), top


def main():
    shares, top = split(sys.argv[1] if len(sys.argv) > 1 else "perf.data")
    print(f"{'share':>7}  bucket")
    for name, share in sorted(shares.items(), key=lambda item: -item[1]):
        print(f"{share:6.1f}%  {name}")
    print("\nhottest symbols:")
    for percent, library, symbol, bucket in top:
        print(f"{percent:6.1f}%  {library[:20]:20} {symbol[:70]}  [{bucket}]")


if __name__ == "__main__":
    main()
