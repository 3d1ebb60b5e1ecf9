"""A FastAPI app that enqueues a job per request and answers with the job's result.

The app holds one connection for its whole life (opened in its lifespan, shared by
every request: it is a pool of pipelined sockets) and one QueueEvents, so a request
waits for its job's ``completed`` event instead of polling. Jobs are processed by a
worker process of their own; this module's ``resize`` is that worker's function::

    trioqueue serve &                                              # the broker
    trioqueue worker fastapi_app:resize --queue thumbnails &       # from examples/
    uvicorn fastapi_app:app                                        # the app (asyncio)
    curl -X POST localhost:8000/thumbnails -H 'content-type: application/json' \\
         -d '{"url": "https://example.com/cat.png", "width": 200}'

``TRIOQUEUE_HOST`` / ``TRIOQUEUE_PORT`` / ``TRIOQUEUE_TOKEN`` say where the broker is.
"""

# No ``from __future__ import annotations`` here: FastAPI and pydantic read these
# annotations at run time, from the module's namespace.
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, Field

from trioqueue.client import (
    Job,
    JobFailed,
    Queue,
    QueueEvents,
    ValidationError,
    WaitTimeout,
    open_connection,
)

QUEUE = "thumbnails"


class ThumbnailRequest(BaseModel):
    url: str
    width: int = Field(gt=0, le=4000)


class ThumbnailResult(BaseModel):
    job_id: str
    result: dict[str, Any]


async def resize(job: Job) -> dict[str, Any]:
    """The worker's side (``trioqueue worker fastapi_app:resize --queue thumbnails``);
    a real one would fetch and scale the image."""
    width = int(job.data["width"])
    return {"url": job.data["url"], "width": width, "height": width * 3 // 4}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with open_connection(os.environ.get("TRIOQUEUE_HOST", "127.0.0.1"),
                               int(os.environ.get("TRIOQUEUE_PORT", "6789")),
                               token=os.environ.get("TRIOQUEUE_TOKEN")) as conn:
        async with QueueEvents(QUEUE, conn) as events:
            app.state.queue = Queue(QUEUE, conn)
            app.state.events = events
            yield


app = FastAPI(title="thumbnails", lifespan=lifespan)


@app.post("/thumbnails")
async def make_thumbnail(body: ThumbnailRequest, request: Request) -> ThumbnailResult:
    queue: Queue = request.app.state.queue
    events: QueueEvents = request.app.state.events
    try:
        job = await queue.add("resize", body.model_dump(), attempts=2, backoff=100)
    except ValidationError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
    try:
        result = await job.wait_until_finished(events, ttl=10)
    except JobFailed as exc:
        raise HTTPException(status_code=502, detail=f"job {job.id} failed: {exc.error}"
                            ) from None
    except WaitTimeout:
        # Still queued or running: the client can ask again with the id.
        raise HTTPException(status_code=504, detail=f"job {job.id} is not done yet"
                            ) from None
    return ThumbnailResult(job_id=job.id, result=result)


@app.get("/thumbnails/{job_id}")
async def get_thumbnail(job_id: str, request: Request) -> dict[str, Any]:
    queue: Queue = request.app.state.queue
    state = await queue.get_job_state(job_id)
    if state == "unknown":
        raise HTTPException(status_code=404, detail=f"no job {job_id}")
    out: dict[str, Any] = {"job_id": job_id, "state": state}
    if state == "completed":
        out["result"] = await queue.get_result(job_id)
    return out
