"""Everything that serves HTTP: the three servers and what they share.

llm.py          `serve llm`: an OpenAI-compatible chat server over a ChatModel (llm_request.py reads a
                request's fields, llm_logprobs.py writes OpenAI's log-probs)
retriever.py    `serve retriever`: Search-R1's POST /retrieve over any Retriever
team.py         `serve team`: a whole team (a workflow run by the engine) as an OpenAI model
batcher.py      the one request batcher the three servers run (gather, run, retry one by one on failure)
guard.py        hostile clients: API key, body size and time limits, huge numbers, disconnects
openai_api.py   OpenAI's error body and the FastAPI app both OpenAI-shaped servers start from
listen.py       `serve`: bind, announce the URL, run uvicorn with a request-head deadline and a connection cap
testing.py      BackgroundServer (an app in a thread) and ServerProcess (`ragteam serve ...` as a subprocess)
"""
