"""A stand-in for the Hugging Face hub's file API, stdlib only, so it runs on loopback in unit tests and as a
container in the Docker tier (huggingface_hub and transformers honour HF_ENDPOINT). It serves local folders as
model repos, with the routes `snapshot_download` / `hf_hub_download` call:

  GET       /api/models/<repo>[/revision/<rev>]      repo info: sha, siblings
  GET       /api/models/<repo>/tree/<rev>[/<path>]    file listing (recursive)
  HEAD|GET  /<repo>/resolve/<rev>/<file>              X-Repo-Commit, ETag, Content-Length; the bytes
  GET       /_stats                                   {"downloads": {"<repo>/<file>": n}} (what the tests count)

An unknown repo answers 404 with X-Error-Code RepositoryNotFound, as the hub does.

    python hub_standin.py --port 8080 --repo hermes-test/tiny=/opt/model [--exclude .hermes-embedded]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


class Repo:
    def __init__(self, folder: Path, exclude: tuple[str, ...] = ()):
        self.folder = folder
        self.files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                            if p.is_file() and p.name not in exclude)
        digest = hashlib.sha1()
        self.oids = {}
        for name in self.files:
            oid = hashlib.sha1((folder / name).read_bytes()).hexdigest()
            self.oids[name] = oid
            digest.update(f"{name}:{oid}\n".encode())
        self.sha = digest.hexdigest()  # 40 hex digits, like a git commit


class Hub:
    def __init__(self, repos: dict[str, Repo]):
        self.repos = repos
        self.downloads: dict[str, int] = {}
        self.lock = threading.Lock()


def handler_for(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # one short line per request on stderr
            print(f"hub-standin: {self.command} {self.path} -> {args[1] if len(args) > 1 else ''}", flush=True)

        def _send(self, status: int, body: bytes, ctype: str = "application/json", headers: dict | None = None,
                  head: bool = False) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _json(self, status: int, payload, headers: dict | None = None) -> None:
            self._send(status, json.dumps(payload).encode(), headers=headers)

        def _missing(self, what: str, code: str = "RepositoryNotFound", head: bool = False) -> None:
            self._send(404, json.dumps({"error": what}).encode(), headers={"X-Error-Code": code,
                                                                          "X-Error-Message": what}, head=head)

        def _repo(self, parts: list[str]) -> tuple[str, Repo | None]:
            repo_id = "/".join(parts[:2])
            return repo_id, hub.repos.get(repo_id)

        def do_GET(self) -> None:
            self._route(head=False)

        def do_HEAD(self) -> None:
            self._route(head=True)

        def _route(self, head: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            parts = [p for p in path.split("/") if p]
            if parts == ["_stats"]:
                with hub.lock:
                    return self._json(200, {"downloads": dict(hub.downloads)})
            if parts[:2] == ["api", "models"] and len(parts) >= 4:
                repo_id, repo = self._repo(parts[2:])
                if repo is None:
                    return self._missing(f"Repository {repo_id} not found")
                rest = parts[4:]
                if not rest or rest[0] == "revision":
                    return self._json(200, {"id": repo_id, "modelId": repo_id, "sha": repo.sha, "private": False,
                                            "disabled": False, "gated": False, "downloads": 0, "likes": 0,
                                            "tags": [], "siblings": [{"rfilename": f} for f in repo.files]})
                if rest[0] == "tree":
                    prefix = "/".join(rest[2:])
                    entries = [{"type": "file", "path": f, "size": (repo.folder / f).stat().st_size,
                                "oid": repo.oids[f]} for f in repo.files if f.startswith(prefix)]
                    return self._json(200, entries)
            if len(parts) >= 5 and parts[2] == "resolve":
                repo_id, repo = self._repo(parts)
                if repo is None:
                    return self._missing(f"Repository {repo_id} not found", head=head)
                name = "/".join(parts[4:])
                if name not in repo.oids:
                    return self._missing(f"{name} not in {repo_id}", "EntryNotFound", head=head)
                body = (repo.folder / name).read_bytes()
                if not head:
                    with hub.lock:
                        key = f"{repo_id}/{name}"
                        hub.downloads[key] = hub.downloads.get(key, 0) + 1
                return self._send(200, body, "application/octet-stream", head=head,
                                  headers={"X-Repo-Commit": repo.sha, "ETag": f'"{repo.oids[name]}"'})
            return self._missing(f"no route {path}", "NotFound", head=head)

    return Handler


def serve(repos: dict[str, Repo], host: str = "127.0.0.1", port: int = 0) -> tuple[ThreadingHTTPServer, Hub]:
    hub = Hub(repos)
    server = ThreadingHTTPServer((host, port), handler_for(hub))
    return server, hub


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--repo", action="append", default=[], help="<org/name>=<folder>")
    parser.add_argument("--exclude", action="append", default=[], help="file names not to serve")
    args = parser.parse_args()
    repos = {}
    for spec in args.repo:
        repo_id, folder = spec.split("=", 1)
        repos[repo_id] = Repo(Path(folder), tuple(args.exclude))
        print(f"hub-standin: {repo_id} = {folder} ({len(repos[repo_id].files)} files)", flush=True)
    server, _ = serve(repos, args.host, args.port)
    print(f"hub-standin: serving on {args.host}:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
