"""The /retrieve server on loopback: Search-R1 shapes, micro-batching, validation, the remote client, the CLI."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest
import uvicorn

from ragteam.retrieval.bm25 import BM25Retriever
from ragteam.retrieval.remote import RemoteRetriever, RetrievalServiceError, parse_response
from ragteam.serve.listen import bind_socket
from ragteam.serve.retriever import Limits, make_app
from ragteam.serve.testing import ServerProcess


@contextmanager
def running(app):
    """Serve `app` with uvicorn in a thread on 127.0.0.1, an ephemeral port; yield its base URL."""
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="error", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture(scope="module")
def bm25(hotpot_small_index):
    return BM25Retriever(hotpot_small_index.path, hotpot_small_index.docs)


@pytest.fixture(scope="module")
def url(bm25):
    limits = Limits(max_queries=8, max_query_chars=200, max_topk=20, max_body_bytes=4096)
    with running(make_app(bm25, limits)) as base:
        yield base


QUERIES = ["Corliss Archer Kiss and Tell actress", "Shirley Temple diplomat", "Scott Derrickson director"]


def test_search_r1_response_shapes(url, bm25):
    with httpx.Client(timeout=10) as c:
        scored = c.post(url + "/retrieve", json={"queries": QUERIES, "topk": 3, "return_scores": True}).json()
        plain = c.post(url + "/retrieve", json={"queries": QUERIES[:1], "topk": 2}).json()
        default_k = c.post(url + "/retrieve", json={"queries": QUERIES[:1], "topk": None}).json()
    local = bm25.search(QUERIES, 3)
    assert len(scored["result"]) == 3
    for row, hits in zip(scored["result"], local):
        assert [item["document"]["id"] for item in row] == [h.doc.id for h in hits]
        assert [item["score"] for item in row] == pytest.approx([h.score for h in hits])
        first = row[0]["document"]
        assert first["contents"] == f"{first['title']}\n{first['text']}"
    assert set(plain["result"][0][0]) >= {"id", "contents"} and len(plain["result"][0]) == 2
    assert len(default_k["result"][0]) == 3  # Search-R1's default topk


def test_remote_client_matches_local_search(url, bm25):
    remote = RemoteRetriever(url, timeout=10)
    got = remote.search(QUERIES, 4)
    want = bm25.search(QUERIES, 4)
    assert [[h.doc for h in row] for row in got] == [[h.doc for h in row] for row in want]
    assert [[h.score for h in row] for row in got] == [pytest.approx([h.score for h in row]) for row in want]
    # More queries than the server takes per request: the client splits them.
    many = RemoteRetriever(url, max_queries=8).search(QUERIES * 7, 2)
    assert len(many) == 21 and [h.doc.id for h in many[20]] == [h.doc.id for h in want[2][:2]]
    assert remote.health()["status"] == "ok"


BAD = [
    (b'{"queries": ["a", ', 400, None),
    (b"\xff\xfe not utf8", 400, None),
    (b"[1, 2]", 422, None),
    (b'{"topk": 3}', 422, "queries"),
    (b'{"queries": "just a string"}', 422, "queries"),
    (b'{"queries": []}', 422, "queries"),
    (b'{"queries": ["ok", 5]}', 422, "queries[1]"),
    (json.dumps({"queries": ["q"] * 9}).encode(), 422, "queries"),
    (json.dumps({"queries": ["x" * 201]}).encode(), 422, "queries[0]"),
    (b'{"queries": ["q"], "topk": -1}', 422, "topk"),
    (b'{"queries": ["q"], "topk": 0}', 422, "topk"),
    (b'{"queries": ["q"], "topk": 100000000000}', 422, "topk"),
    (b'{"queries": ["q"], "topk": "5"}', 422, "topk"),
    (b'{"queries": ["q"], "topk": true}', 422, "topk"),
    (b'{"queries": ["q"], "topk": 2.5}', 422, "topk"),
    (b'{"queries": ["q"], "return_scores": "yes"}', 422, "return_scores"),
    (json.dumps({"queries": ["q" * 100] * 50}).encode(), 413, None),
]


def test_bad_requests_get_4xx_json_and_the_server_keeps_serving(url):
    with httpx.Client(timeout=10) as c:
        for body, status, field in BAD:
            r = c.post(url + "/retrieve", content=body, headers={"content-type": "application/json"})
            assert r.status_code == status, (body[:60], r.text)
            payload = r.json()
            assert payload["error"]
            assert payload.get("field") == field
        assert c.get(url + "/health").json()["status"] == "ok"
        ok = c.post(url + "/retrieve", json={"queries": ["Shirley Temple"], "topk": 1})
        assert ok.status_code == 200 and len(ok.json()["result"][0]) == 1


def test_remote_client_errors_name_the_url(url):
    with pytest.raises(RetrievalServiceError, match=r"127\.0\.0\.1.*HTTP 422.*topk"):
        RemoteRetriever(url).search(["q"], 50)
    # Nothing listens on this port: retried, then an error naming the URL.
    sock = bind_socket("127.0.0.1", 0)
    dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    t0 = time.monotonic()
    with pytest.raises(RetrievalServiceError, match=rf"{dead}/retrieve: cannot connect.*after 3 attempts"):
        RemoteRetriever(dead, retries=2, backoff=0.05, timeout=2).search(["q"], 1)
    assert time.monotonic() - t0 >= 0.15  # 0.05 + 0.1 of backoff
    with pytest.raises(RetrievalServiceError, match="asked 2 queries, got 1"):
        parse_response({"result": [[]]}, 2, dead)
    with pytest.raises(ValueError, match="http://"):
        RemoteRetriever("localhost:8000")


def test_remote_client_reads_search_r1_plain_and_flashrag_documents():
    payload = {
        "result": [
            [{"id": "7", "contents": '"Ann ""Bo"" Lee"\nAnn Lee was born.'}],
            [{"document": {"id": 3, "title": "T", "text": "x"}, "score": 2}],
        ]
    }
    hits = parse_response(payload, 2, "http://h/retrieve")
    assert (hits[0][0].doc.id, hits[0][0].doc.title, hits[0][0].doc.text) == (
        "7",
        'Ann "Bo" Lee',
        "Ann Lee was born.",
    )
    assert hits[0][0].score == 0.0 and hits[1][0].score == 2.0 and hits[1][0].doc.id == "3"


class _Slow:
    """Wraps a real retriever; each batched search takes 50 ms more and fails on the query 'boom'."""

    name = "slow-bm25"

    def __init__(self, inner):
        self.inner, self.batches = inner, []

    def search(self, queries, k):
        self.batches.append(len(queries))
        time.sleep(0.05)
        if "boom" in queries:
            raise RuntimeError("index exploded")
        return self.inner.search(queries, k)


def test_concurrent_requests_are_batched_into_one_search(bm25):
    slow = _Slow(bm25)
    with running(make_app(slow, batch_window_ms=5)) as base:

        def ask(i):
            with httpx.Client(timeout=20) as c:
                r = c.post(base + "/retrieve", json={"queries": [QUERIES[i % 3]], "topk": 1 + i % 3})
                return i, r.status_code, r.json()

        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(ask, range(32)))
        assert all(status == 200 for _, status, _ in results)
        for i, _, body in results:
            assert [d["id"] for d in body["result"][0]] == [
                h.doc.id for h in bm25.search([QUERIES[i % 3]], 1 + i % 3)[0]
            ]
        # 32 requests answered by fewer, larger searches (no wall-clock bound: that is the benchmark's job)
        assert sum(slow.batches) == 32 and len(slow.batches) < 32 and max(slow.batches) > 1
        with httpx.Client(timeout=20) as c:
            failed = c.post(base + "/retrieve", json={"queries": ["boom"]})
            assert failed.status_code == 500 and "index exploded" in failed.json()["error"]
            health = c.get(base + "/health").json()
            assert health["errors"] == 1 and health["max_batch_requests"] > 1
            assert c.post(base + "/retrieve", json={"queries": ["Shirley Temple"]}).status_code == 200


def test_cli_server_under_concurrent_clients_and_bad_input(hotpot_small_index):
    """A fast version of bench/serve_load.py --servers retriever: `ragteam serve retriever` as a subprocess."""
    with ServerProcess(["retriever", "--index", str(hotpot_small_index.path), "--kind", "bm25"]) as srv:
        base = srv.url

        def client(i):
            errors = 0
            with httpx.Client(timeout=10) as c:
                for j in range(10):
                    r = c.post(
                        base + "/retrieve",
                        json={"queries": [QUERIES[(i + j) % 3]], "topk": 3, "return_scores": True},
                    )
                    errors += r.status_code != 200 or len(r.json()["result"][0]) != 3
            return errors

        with ThreadPoolExecutor(8) as pool:
            assert sum(pool.map(client, range(8))) == 0
        with httpx.Client(timeout=10) as c:
            assert c.post(base + "/retrieve", content=b"{nope").status_code == 400
            assert c.post(base + "/retrieve", json={"queries": ["q"], "topk": -3}).status_code == 422
            assert c.post(base + "/retrieve", content=b"x" * 3_000_000).status_code == 413
            assert c.get(base + "/health").json()["requests"] >= 80
        assert srv.proc.poll() is None
