"""Benchmark: where `ragteam.allocator`'s setting costs decode time, and what would win it back.

One thread decodes 16 HotpotQA prompts of ~800 tokens, 64 greedy tokens each, with SmolLM2-135M (prefix cache
off), once per arm, each arm in a fresh process (glibc reads its thresholds at start). It prints each arm's
time, peak resident size and a hash of the texts, and each time as a ratio to the `default` arm:

- `default`: glibc's own malloc behaviour (`RAGTEAM_MALLOC=default`);
- `returned`: the setting every `ragteam` command applies (mmap and trim thresholds at 1 MB);
- `mmap-8mb`, `mmap-32mb`: the same with a larger mmap threshold (`MALLOC_MMAP_THRESHOLD_`);
- `returned+gqa`: SDPA's native grouped-query attention instead of transformers' `repeat_kv` copies
  (`TRANSFORMERS_SDPA_FORCE_GQA=1`);
- `returned+grow`: the KV cache kept in buffers with spare columns that double when full, instead of a new
  tensor per layer and step (a prototype patched onto transformers' `DynamicLayer.update` here only).

    .venv/bin/python bench/decode_alloc.py            # ~10 minutes
    .venv/bin/python bench/decode_alloc.py default returned
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "hotpotqa-dev-500.jsonl"
MB = 1 << 20
ARMS: dict[str, dict[str, str]] = {
    "default": {"RAGTEAM_MALLOC": "default"},
    "returned": {},
    "mmap-8mb": {"MALLOC_MMAP_THRESHOLD_": str(8 * MB), "MALLOC_TRIM_THRESHOLD_": str(MB)},
    "mmap-32mb": {"MALLOC_MMAP_THRESHOLD_": str(32 * MB), "MALLOC_TRIM_THRESHOLD_": str(MB)},
    "returned+gqa": {"TRANSFORMERS_SDPA_FORCE_GQA": "1"},
    "returned+grow": {"BENCH_GROW_KV": "1"},
}


def grow_kv() -> None:
    """Patch DynamicLayer.update: write new columns into a buffer with spare room, reallocating (2x) only when
    it is full or the rows changed (a reorder or a new batch hands the layer other tensors)."""
    from transformers.cache_utils import DynamicLayer

    def update(self, k, v, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(k, v)
        n = self.keys.shape[-2] if self.keys.numel() else 0
        need = n + k.shape[-2]
        buf = getattr(self, "_kbuf", None)
        if (
            buf is None
            or need > buf.shape[-2]
            or buf.shape[0] != k.shape[0]
            or self.keys.data_ptr() != buf.data_ptr()
        ):
            cap = max(need, 2 * n, 64)
            kb, vb = (
                k.new_empty(*k.shape[:-2], cap, k.shape[-1]),
                v.new_empty(*v.shape[:-2], cap, v.shape[-1]),
            )
            if n:
                kb[..., :n, :], vb[..., :n, :] = self.keys, self.values
            self._kbuf, self._vbuf = kb, vb
        self._kbuf[..., n:need, :], self._vbuf[..., n:need, :] = k, v
        self.keys, self.values = self._kbuf[..., :need, :], self._vbuf[..., :need, :]
        return self.keys, self.values

    DynamicLayer.update = update


def child() -> None:
    """One arm, in this process: the allocator as a ragteam command sets it, then the decode."""
    from ragteam.allocator import return_freed_memory

    return_freed_memory()  # a no-op under RAGTEAM_MALLOC=default or MALLOC_* of the arm's own
    import torch

    if os.environ.get("BENCH_GROW_KV"):
        grow_kv()
    torch.set_num_threads(1)
    from ragteam.llm.base import ChatRequest, Sampling
    from ragteam.llm.local import LocalChatModel

    rows = [json.loads(line) for line in DATA.read_text().splitlines()[:16]]
    model = LocalChatModel("smollm2", max_batch_size=32, prefix_cache_mb=0)
    requests = [
        ChatRequest(
            [
                {
                    "role": "user",
                    "content": json.dumps([p["paragraph_text"] for p in r["contexts"]])[:3000]
                    + "\n\nQuestion: "
                    + r["question_text"],
                }
            ],
            Sampling(temperature=0.0, max_tokens=64, seed=i),
        )
        for i, r in enumerate(rows)
    ]
    t0 = time.perf_counter()
    results = model.chat(requests)
    texts = [r[0].text if isinstance(r, list) else f"error: {r}" for r in results]
    seconds = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    digest = hashlib.sha1("\n".join(texts).encode()).hexdigest()[:10]
    print(json.dumps({"seconds": seconds, "peak_mb": peak_mb, "texts": digest}))


def main() -> None:
    arms = sys.argv[1:] or list(ARMS)
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"unknown arm(s) {unknown}; arms: {', '.join(ARMS)}")
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "RAGTEAM_MALLOC"}
    results = {}
    for arm in arms:
        done = subprocess.run(
            [sys.executable, __file__, "--child"], env={**base, **ARMS[arm]}, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise SystemExit(f"{arm}: exited {done.returncode}\n{done.stderr[-3000:]}")
        results[arm] = json.loads(done.stdout.strip().splitlines()[-1])
        r = results[arm]
        print(
            f"{arm:14s} {r['seconds']:6.1f} s  peak {r['peak_mb'] / 1024:5.2f} GB  texts {r['texts']}",
            flush=True,
        )
    if "default" in results:
        ref = results["default"]["seconds"]
        print("time / default: " + ", ".join(f"{a} {r['seconds'] / ref:.2f}x" for a, r in results.items()))


if __name__ == "__main__":
    child() if sys.argv[1:] == ["--child"] else main()
