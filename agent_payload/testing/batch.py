"""The batch APIs of ``FakeProviderServer`` (OpenAI's Files + Batches, Anthropic's Message
Batches), enough for the real SDKs: a batch's lines are answered from the server's script when
it ends (docs/batch.md)."""

from __future__ import annotations

import datetime as _dt
import email.parser
import email.policy
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_payload.testing.script import API_PATHS, Api, Fault
from agent_payload.testing.wire import BUILDERS, error_body, new_id, resolve_reply

if TYPE_CHECKING:
    from agent_payload.testing.server import FakeProviderServer

__all__ = ["BatchFakes", "Route"]

_COUNTS = ("processing", "succeeded", "errored", "canceled", "expired")  # Anthropic's


@dataclass(slots=True)
class Route:
    """What the HTTP side must send: a status, a body and its content type, or a fault."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    fault: Fault | None = None
    after: Route | None = None  # with ``fault``: the answer it replaces (a delay sends it late)


@dataclass(slots=True)
class _Batch:
    """One batch: its number (from 1), its JSON, its request lines, Anthropic's results."""

    number: int
    data: dict[str, Any]
    lines: list[dict[str, Any]]
    results: list[dict[str, Any]] = field(default_factory=list)
    polls: int = 0


def _json(status: int, value: Any) -> Route:
    return Route(status, json.dumps(value).encode())


def _not_found(what: str) -> Route:
    return _json(404, {"error": {"message": f"FakeProviderServer: no {what}", "type": "not_found"}})


def _page(items: list[dict[str, Any]], after: str | None, params: dict[str, str]) -> dict[str, Any]:
    """One page of a newest-first list, cursor after the id ``after`` (both APIs' shape)."""
    start = 0
    if after:
        ids = [item["id"] for item in items]
        start = ids.index(after) + 1 if after in ids else len(ids)
    limit = int(params.get("limit", "20"))
    page = items[start : start + limit]
    return {
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": start + limit < len(items),
    }


def _iso(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).isoformat().replace("+00:00", "Z")


class BatchFakes:
    """The state of the fake batch APIs of one server (thread-safe)."""

    def __init__(self, server: FakeProviderServer) -> None:
        self._server = server
        self._lock = threading.Lock()
        self._files: dict[str, bytes] = {}
        self._result_files: set[str] = set()
        self._openai: dict[str, _Batch] = {}
        self._anthropic: dict[str, _Batch] = {}
        self._numbers = itertools.count(1)

    # -- routing --

    def route(
        self, method: str, path: str, query: str, headers: dict[str, str], raw: bytes
    ) -> Route | None:
        """The answer for a batch-API request, or None when the path is not a batch API."""
        parts = [p for p in path.split("/") if p]
        params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
        match (method, *parts):
            case ("POST", "v1", "files"):
                return self._faulted("upload", lambda: self._upload(headers, raw))
            case ("GET", "v1", "files", file_id, "content"):
                return self._faulted("results", lambda: self._file_content(file_id))
            case ("POST", "v1", "batches"):
                return self._faulted("create", lambda: self._openai_create(raw), after=True)
            case ("GET", "v1", "batches"):
                page = _page(self._listed(self._openai), params.get("after"), params)
                return _json(200, {"object": "list", **page})
            case ("GET", "v1", "batches", batch_id):
                return self._faulted("retrieve", lambda: self._retrieve(True, batch_id))
            case ("POST", "v1", "batches", batch_id, "cancel"):
                return self._openai_cancel(batch_id)
            case ("POST", "v1", "messages", "batches"):
                return self._faulted("create", lambda: self._anthropic_create(raw), after=True)
            case ("GET", "v1", "messages", "batches"):
                page = _page(self._listed(self._anthropic), params.get("after_id"), params)
                return _json(200, page)
            case ("GET", "v1", "messages", "batches", batch_id):
                return self._faulted("retrieve", lambda: self._retrieve(False, batch_id))
            case ("GET", "v1", "messages", "batches", batch_id, "results"):
                return self._faulted("results", lambda: self._anthropic_results(batch_id))
        return None

    def _faulted(
        self, operation: str, action: Callable[[], Route], *, after: bool = False
    ) -> Route:
        fault = self._next_fault(operation)
        if fault is None:
            return action()
        if after:  # the operation takes effect; the client does not hear of it
            return Route(fault=fault, after=action())
        return Route(fault=fault)

    def _next_fault(self, operation: str) -> Fault | None:
        with self._lock:
            queue = self._server.batch_faults.get(operation)
            if queue:
                return queue.pop(0)
        return None

    # -- OpenAI: files --

    def _upload(self, headers: dict[str, str], raw: bytes) -> Route:
        content_type = headers.get("content-type", "")
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + raw
        )
        data: bytes | None = None
        filename = "upload.jsonl"
        purpose = None
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            if name == "file":
                data = payload if isinstance(payload, bytes) else b""
                filename = str(part.get_filename() or filename)
            elif name == "purpose" and isinstance(payload, bytes):
                purpose = payload.decode()
        if data is None:
            return _json(400, {"error": {"message": "FakeProviderServer: no file part"}})
        file_id = new_id("file-")
        with self._lock:
            self._files[file_id] = data
        return _json(
            200,
            {
                "id": file_id,
                "object": "file",
                "bytes": len(data),
                "created_at": int(time.time()),
                "filename": filename,
                "purpose": purpose or "batch",
                "status": "processed",
            },
        )

    def _file_content(self, file_id: str) -> Route:
        with self._lock:
            data = self._files.get(file_id)
        if data is None:
            return _not_found(f"file {file_id}")
        if file_id in self._result_files:
            data = self._served(data.decode()).encode()
        return Route(200, data, "application/octet-stream")

    def _served(self, text: str) -> str:
        """A results file as served: each line through ``batch_result_line``."""
        mangle = self._server.batch_result_line
        return "".join(mangle(line) + "\n" for line in text.splitlines())

    # -- OpenAI: batches --

    def _openai_create(self, raw: bytes) -> Route:
        body = json.loads(raw or b"{}")
        file_id = body.get("input_file_id")
        with self._lock:
            data = self._files.get(file_id)
        if data is None:
            return _not_found(f"file {file_id}")
        lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
        now = int(time.time())
        return self._add(
            self._openai,
            {
                "id": new_id("batch_"),
                "object": "batch",
                "endpoint": body.get("endpoint"),
                "input_file_id": file_id,
                "completion_window": body.get("completion_window", "24h"),
                "status": "in_progress",
                "created_at": now,
                "in_progress_at": now,
                "expires_at": now + 86400,
                "metadata": body.get("metadata"),
                "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
                **dict.fromkeys(("output_file_id", "error_file_id")),
            },
            lines,
        )

    def _add(self, batches: dict[str, _Batch], data: dict[str, Any], lines: list[Any]) -> Route:
        """Create the batch ``data`` of these request lines."""
        batch = _Batch(next(self._numbers), data, lines)
        with self._lock:
            batches[data["id"]] = batch
        return _json(200, data)

    def _openai_cancel(self, batch_id: str) -> Route:
        with self._lock:
            batch = self._openai.get(batch_id)
        if batch is None:
            return _not_found(f"batch {batch_id}")
        if batch.data["status"] == "in_progress":
            self._finish_openai(batch, cancelled=True)
        return _json(200, batch.data)

    def _listed(self, batches: dict[str, _Batch]) -> list[dict[str, Any]]:
        with self._lock:
            return [b.data for b in sorted(batches.values(), key=lambda b: -b.number)]

    def _retrieve(self, openai: bool, batch_id: str) -> Route:
        """A batch as it stands; the retrieve that ends it (after ``batch_polls``) runs it."""
        with self._lock:
            batch = (self._openai if openai else self._anthropic).get(batch_id)
            if batch is None:
                return _not_found(f"{'batch' if openai else 'message batch'} {batch_id}")
            due = batch.data["status" if openai else "processing_status"] == "in_progress"
            if due:
                batch.polls += 1
                due = batch.polls > self._server.batch_polls
        if due:
            (self._finish_openai if openai else self._finish_anthropic)(batch)
        return _json(200, batch.data)

    def _finish_openai(self, batch: _Batch, *, cancelled: bool = False) -> None:
        failure = None if cancelled else self._server.batch_fail(batch.number)
        if failure is not None:
            with self._lock:
                batch.data.update(
                    status="failed",
                    failed_at=int(time.time()),
                    errors={
                        "object": "list",
                        "data": [{"code": "batch_failed", "message": failure, "line": None}],
                    },
                )
            return
        expired = not cancelled and bool(self._server.batch_expire(batch.number))
        api = API_PATHS.get(str(batch.data["endpoint"]), "chat.completions")
        out: list[str] = []
        err: list[str] = []
        for line in batch.lines:
            record: dict[str, Any] = {
                "id": new_id("batch_req_"),
                "custom_id": line.get("custom_id"),
                "response": None,
                "error": None,
            }
            status = None
            if expired or cancelled:
                code = "batch_expired" if expired else "batch_cancelled"
                record["error"] = {"code": code, "message": f"This request was not run: {code}"}
            else:
                status, body = self._answer_line(api, line.get("body"))
                request_id = new_id("req_")
                record["response"] = {"status_code": status, "request_id": request_id, "body": body}
            (out if status == 200 else err).append(json.dumps(record))
        ended = "cancelled" if cancelled else ("expired" if expired else "completed")
        with self._lock:
            batch.data.update(
                status=ended,
                output_file_id=self._store(out),
                error_file_id=self._store(err),
                request_counts={
                    "total": len(batch.lines),
                    "completed": len(out),
                    "failed": len(err),
                },
            )
            batch.data[f"{ended}_at"] = int(time.time())

    def _store(self, lines: list[str]) -> str | None:
        """A results file of these lines (None for none)."""
        if not lines:
            return None
        file_id = new_id("file-")
        self._files[file_id] = "".join(line + "\n" for line in lines).encode()
        self._result_files.add(file_id)
        return file_id

    # -- Anthropic: message batches --

    def _anthropic_create(self, raw: bytes) -> Route:
        body = json.loads(raw or b"{}")
        requests = list(body.get("requests") or [])
        now = time.time()
        return self._add(
            self._anthropic,
            {
                "id": new_id("msgbatch_"),
                "type": "message_batch",
                "processing_status": "in_progress",
                "request_counts": {**dict.fromkeys(_COUNTS, 0), "processing": len(requests)},
                "created_at": _iso(now),
                "expires_at": _iso(now + 86400),
                **dict.fromkeys(("ended_at", "archived_at", "cancel_initiated_at", "results_url")),
            },
            requests,
        )

    def _anthropic_results(self, batch_id: str) -> Route:
        with self._lock:
            batch = self._anthropic.get(batch_id)
        if batch is None or batch.data["processing_status"] != "ended":
            return _not_found(f"results of message batch {batch_id}")
        text = "".join(json.dumps(r) + "\n" for r in batch.results)
        return Route(200, self._served(text).encode(), "application/binary")

    def _finish_anthropic(self, batch: _Batch) -> None:
        expired = bool(self._server.batch_expire(batch.number))
        failure = self._server.batch_fail(batch.number)
        results: list[dict[str, Any]] = []
        counts = dict.fromkeys(_COUNTS, 0)
        for entry in batch.lines:
            result: dict[str, Any]
            if expired:
                result = {"type": "expired"}
            elif failure is not None:
                error = {"type": "error", "error": {"type": "api_error", "message": failure}}
                result = {"type": "errored", "error": error}
            else:
                status, body = self._answer_line("messages", entry.get("params"))
                kind, key = ("succeeded", "message") if status == 200 else ("errored", "error")
                result = {"type": kind, key: body}
            counts[result["type"]] += 1
            results.append({"custom_id": entry.get("custom_id"), "result": result})
        with self._lock:
            batch.results = results
            batch.data.update(
                processing_status="ended",
                request_counts=counts,
                ended_at=_iso(time.time()),
                results_url=f"{self._server.url}/v1/messages/batches/{batch.data['id']}/results",
            )

    # -- one line through the script --

    def _answer_line(self, api: Api, body: Any) -> tuple[int, Any]:
        server = self._server
        request = server._record(
            batch=True, api=api, method="POST", path="(batch line)", headers={}, body=body, raw=b""
        )
        item = server._next_item(request)
        if isinstance(item, Fault):
            code = item.status_code if item.kind == "status" else 500
            message = item.body or f"FakeProviderServer injected HTTP {code}"
            return code, error_body(api, code, message)
        return 200, BUILDERS[api](resolve_reply(item, request), request)
