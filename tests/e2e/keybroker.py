"""A stand-in key broker for the end-to-end suite.

It serves the Confidential Data Hub's resource API on loopback,
`GET /cdh/resource/<repository>/<type>/<tag>`, answering the resource's raw bytes
(application/octet-stream, as the CDH's REST server does) only to a request whose
`sluice-evidence` header is the expected token: 403 otherwise, 404 for a resource it does not
hold. A test adds and removes resources (`remove`: crypto-shred at the broker) and changes the
token it expects (`expect_evidence`: the tenant's policy now accepts the pod).

The real CDH attests to the Trustee KBS itself and the caller sends nothing; this machine has
no TEE, so a token stands in for the evidence. The agent sends it from
`[tenant.encryption] evidence_file`. `crates/agent/tests/broker` is the same broker for the
agent's Rust tests.

    broker = KeyBroker(evidence="attested").start()
    broker.put("default/sluice/alice", os.urandom(32))
    key_url = broker.url("default/sluice/alice")
"""

from __future__ import annotations

import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PREFIX = "/cdh/resource/"
EVIDENCE_HEADER = "sluice-evidence"


class KeyBroker:
    def __init__(self, evidence: str):
        self._lock = threading.Lock()
        self._resources: dict[str, bytes] = {}
        self._evidence = evidence
        self.answered: Counter[int] = Counter()  # requests answered, by status
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "KeyBroker":
        broker = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                status, body = broker._answer(self.path, self.headers.get(EVIDENCE_HEADER))
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # quiet: the key never goes to a log anyway
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "KeyBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "the broker is not started"
        return self._server.server_address[1]

    def url(self, path: str) -> str:
        """The resource's URL (`repository/type/tag`), for `key_url`."""
        return f"http://127.0.0.1:{self.port}{PREFIX}{path}"

    def put(self, path: str, resource: bytes) -> None:
        with self._lock:
            self._resources[path] = bytes(resource)

    def remove(self, path: str) -> None:
        """From now on the broker answers 404 for the resource (crypto-shred)."""
        with self._lock:
            self._resources.pop(path, None)

    def expect_evidence(self, evidence: str) -> None:
        with self._lock:
            self._evidence = evidence

    def _answer(self, target: str, evidence: str | None) -> tuple[int, bytes]:
        with self._lock:
            if not target.startswith(PREFIX):
                answer = (404, b"not a resource request")
            elif evidence is None or evidence.strip() != self._evidence:
                answer = (403, b"the evidence does not satisfy the policy")
            else:
                path = target[len(PREFIX):]
                resource = self._resources.get(path)
                answer = (200, resource) if resource is not None else (
                    404, f"no resource {path}".encode())
            self.answered[answer[0]] += 1
            return answer
