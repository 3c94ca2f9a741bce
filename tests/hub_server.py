"""A local stand-in for the Hugging Face Hub's file-resolve endpoint, for download tests without network.

It answers ``HEAD``/``GET /datasets/{repo}/resolve/{revision}/{filename}`` the way the Hub answers for an LFS
file: ``X-Repo-Commit``, ``ETag``, ``X-Linked-Etag`` (the sha256), ``X-Linked-Size``, ``Content-Length`` and
byte ``Range`` requests (206 + ``Content-Range``), and 404 with ``X-Error-Code: EntryNotFound`` for a missing
file. Faults per file: drop the connection after N bytes of the first GET, serve other bytes than advertised,
or advertise another size. Every request is recorded. The same server is a plain HTTP mirror at
``/mirror/{filename}``.

    with HubServer({"SafetyBallCircle-v0-80-886.hdf5": data}) as hub:
        os.environ["HF_ENDPOINT"] = hub.url
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from rllib_caps.envs.compat.dsrl import HF_REPO_ID

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_RESOLVE = re.compile(r"^/datasets/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<name>[^?]+)$")


@dataclass
class Fault:
    """What goes wrong with one file: ``cut_after`` bytes then a dropped connection (first GET only),
    ``corrupt`` (other bytes of the same size), ``advertised_size`` (a wrong ``X-Linked-Size``), ``hold`` (its GETs
    wait until the event is set: a download in progress)."""

    cut_after: int | None = None
    corrupt: bool = False
    advertised_size: int | None = None
    hold: threading.Event | None = None


class HubServer:
    """A threaded HTTP server on 127.0.0.1 (an ephemeral port) serving ``files`` as DSRL's Hub repo."""

    def __init__(self, files: dict[str, bytes], faults: dict[str, Fault] | None = None,
                 repo_id: str = HF_REPO_ID) -> None:
        self.files, self.faults, self.repo_id = files, faults or {}, repo_id
        self.requests: list[tuple[str, str, str | None]] = []  # (method, file name, Range header)
        self._cut_done: set[str] = set()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _name(self) -> str | None:
                match = _RESOLVE.match(self.path)
                if match and match["repo"] == hub.repo_id:
                    return match["name"]
                return self.path.removeprefix("/mirror/") if self.path.startswith("/mirror/") else None

            def _serve(self, body: bool) -> None:
                name = self._name()
                hub.requests.append((self.command, name or self.path, self.headers.get("Range")))
                if name not in hub.files:
                    self.send_response(404)
                    for key, value in (("X-Error-Code", "EntryNotFound"), ("X-Repo-Commit", COMMIT),
                                       ("Content-Length", "0")):
                        self.send_header(key, value)
                    self.end_headers()
                    return
                data, fault = hub.files[name], hub.faults.get(name, Fault())
                served = bytes(b ^ 0xFF for b in data) if fault.corrupt else data
                start = 0
                range_header = self.headers.get("Range")
                if range_header and (m := re.fullmatch(r"bytes=(\d+)-", range_header)):
                    start = int(m[1])
                self.send_response(206 if start else 200)
                headers = {
                    "X-Repo-Commit": COMMIT,
                    "ETag": f'"{hashlib.sha1(data).hexdigest()}"',
                    "X-Linked-Etag": f'"{hashlib.sha256(data).hexdigest()}"',
                    "X-Linked-Size": str(fault.advertised_size or len(data)),
                    "Accept-Ranges": "bytes",
                    "Content-Length": str(len(served) - start),
                    "Content-Type": "application/octet-stream",
                }
                if start:
                    headers["Content-Range"] = f"bytes {start}-{len(served) - 1}/{len(served)}"
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                if not body:
                    return
                if fault.hold is not None:
                    fault.hold.wait()
                payload = served[start:]
                if fault.cut_after is not None and name not in hub._cut_done:
                    hub._cut_done.add(name)
                    self.wfile.write(payload[: fault.cut_after])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(payload)

        return Handler

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()
