"""The participant web app (spec autocog §6.8): FastAPI + SQLite + plain HTML/JS. fastapi/uvicorn are imported
lazily inside :mod:`.app` (extra ``serve``)."""
