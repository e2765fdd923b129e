"""The participant web app [R]: FastAPI + SQLite + plain HTML/JS. fastapi/uvicorn are imported
lazily inside :mod:`.app` (extra ``serve``)."""
