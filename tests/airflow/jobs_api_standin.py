"""A loopback stand-in for the Databricks Jobs API 2.2: the endpoints that
`DatabricksRunNowOperator` calls (jobs/list, jobs/run-now, jobs/runs/get,
jobs/runs/get-output), on 127.0.0.1.

It stands in for a remote service that cannot exist here, not for our code. Each run
passes through PENDING and RUNNING before it terminates, with the bundle's two tasks
(migrate, then relay); `relay_fails` makes the relay task, and so the run, fail the way
a spark_python_task with a non-zero exit does.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOKEN = "standin-token"  # not a secret: the stand-in only checks that one is sent


@dataclass
class JobsApi:
    job_name: str
    job_id: int = 4242
    relay_fails: bool = False
    # The poll of a run that first sees it TERMINATED: PENDING at the first, RUNNING
    # between. The operator's own polls before it defers (3) come earlier, so the wait
    # falls to the trigger.
    terminated_at_poll: int = 6
    requests: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    polls: dict[int, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append((method, path, body))
            if (method, path) == ("GET", "/api/2.2/jobs/list"):
                jobs = [{"job_id": self.job_id, "settings": {"name": self.job_name}}]
                return 200, {"jobs": [j for j in jobs if body.get("name") in (None, self.job_name)]}
            if (method, path) == ("POST", "/api/2.2/jobs/run-now"):
                # The provider sends the id as text, as the Jobs API accepts it.
                if str(body.get("job_id")) != str(self.job_id):
                    return 400, {"error_code": "INVALID_PARAMETER_VALUE", "message": "no such job"}
                run_id = 1000 + len(self.polls)
                self.polls[run_id] = 0
                return 200, {"run_id": run_id, "number_in_job": run_id}
            if (method, path) == ("GET", "/api/2.2/jobs/runs/get"):
                run_id = int(body["run_id"])
                if run_id not in self.polls:
                    return 404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no such run"}
                self.polls[run_id] += 1
                return 200, self._run(run_id, self._lifecycle(self.polls[run_id]))
            if (method, path) == ("GET", "/api/2.2/jobs/runs/get-output"):
                return 200, {"error": "relay exited with code 4 (UNREACHABLE)",
                             "metadata": {"run_id": int(body["run_id"])}}
            return 404, {"error_code": "ENDPOINT_NOT_FOUND", "message": path}

    def _lifecycle(self, poll: int) -> str:
        if poll >= self.terminated_at_poll:
            return "TERMINATED"
        return "PENDING" if poll == 1 else "RUNNING"

    def _run(self, run_id: int, lifecycle: str) -> dict[str, Any]:
        done = lifecycle == "TERMINATED"
        relay_result = "FAILED" if self.relay_fails else "SUCCESS"
        state: dict[str, Any] = {"life_cycle_state": lifecycle, "state_message": ""}
        if done:
            state["result_state"] = relay_result
        tasks = []
        for offset, (key, result) in enumerate([("migrate", "SUCCESS"), ("relay", relay_result)]):
            task_state: dict[str, Any] = {"life_cycle_state": lifecycle}
            if done:
                task_state["result_state"] = result
            tasks.append({"task_key": key, "run_id": run_id * 10 + offset, "attempt_number": 0,
                          "state": task_state})
        return {"job_id": self.job_id, "run_id": run_id, "state": state, "tasks": tasks,
                "run_page_url": f"http://127.0.0.1/jobs/{self.job_id}/runs/{run_id}"}

    def run_nows(self) -> list[dict[str, Any]]:
        return [b for m, p, b in self.requests if p == "/api/2.2/jobs/run-now"]


def serve(api: JobsApi) -> ThreadingHTTPServer:
    """Serves `api` on 127.0.0.1 on a free port, in a daemon thread; shut it down after."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, method: str) -> None:
            url = urlsplit(self.path)
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                status, payload = 401, {"error_code": "UNAUTHENTICATED", "message": "no token"}
            else:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else {}
                body.update({k: v[-1] for k, v in parse_qs(url.query).items()})
                status, payload = api.handle(method, url.path, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self._answer("POST")

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the test asserts on `api.requests`

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
