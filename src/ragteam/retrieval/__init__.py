"""Retrieval: one batched interface (`base.Retriever`), four implementations, an index format and a service.

    bm25.BM25Retriever        tantivy BM25, English stemming + stop words, memory-mapped segments
    dense.DenseRetriever      all-MiniLM-L6-v2 embeddings (memory-mapped .npy), exact or faiss HNSW search
    hybrid.HybridRetriever    convex fusion of normalized BM25 and dense scores (weights chosen on PopQA)
    remote.RemoteRetriever    client of Search-R1's POST /retrieve (ragteam.serve.retriever serves any retriever)

`index.build_index` / `index.open_index` write and open index folders; `factory.open_retriever` opens any
of them from a `config.RetrieverConfig`; `evaluate` measures recall of supporting paragraphs.
"""
