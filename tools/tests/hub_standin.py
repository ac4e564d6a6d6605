#!/usr/bin/env python3
"""A loopback stand-in for the Hugging Face Hub, following the Hub's HTTP protocol for what a
model download uses, so ridge's real Hub client (and `huggingface_hub`, unchanged) can be tested
without the network.

Protocol served (as the Hub serves it):
  GET  /api/models/{repo}/revision/{rev}        -> {"id", "sha", "siblings": [{"rfilename"}]}
  GET  /api/models/{repo}/tree/{rev}?recursive=  -> [{"type", "oid", "size", "path", "lfs"?}],
                                                   paginated with Link: <...>; rel="next"
  HEAD/GET /{repo}/resolve/{rev}/{path}          -> small files: 200 with the bytes, ETag = git
                                                   oid; LFS files: 302 to /cdn/{sha256} on another host name, with
                                                   X-Linked-Etag, X-Linked-Size, X-Repo-Commit
  GET  /cdn/{sha256}                             -> the bytes; honours Range (206)
  401 (no token) / 403 (wrong token) for gated repositories, 404 with X-Error-Code otherwise.

Test controls (not part of the Hub): the config's "cut_after" makes the first "cut_times" CDN
GETs of a file stop after that many bytes (a dropped connection); "corrupt" repos serve one
flipped byte; GET /_log returns every request seen; POST /_reset clears it.

Usage: hub_standin.py CONFIG.json  -> prints "READY <port>" once listening.
CONFIG: {"repos": {"owner/name": {"commit": "<40 hex>", "files": {"path/in/repo": "/abs/file"},
          "gated": false, "corrupt": false}}, "token": "secret", "page_size": 2,
          "cut_after": 0, "cut_times": 0}
"""
import hashlib
import json
import os
import re
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_MIN = 1 << 16  # files at least this large (and every .gguf) are LFS files


def describe(path):
    h256 = hashlib.sha256()
    size = os.path.getsize(path)
    h1 = hashlib.sha1(b"blob %d\0" % size)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h256.update(chunk)
            h1.update(chunk)
    return {"size": size, "sha256": h256.hexdigest(), "oid": h1.hexdigest()}


class Hub:
    def __init__(self, cfg):
        self.cfg = cfg
        self.token = cfg.get("token", "secret")
        self.page_size = int(cfg.get("page_size", 1000))
        self.cut_after = int(cfg.get("cut_after", 0))
        self.cut_left = {}
        self.log = []
        self.lock = threading.Lock()
        self.repos = {}
        self.blobs = {}  # sha256 -> (source path, repo)
        for name, r in cfg["repos"].items():
            files = {}
            for rel, src in sorted(r["files"].items()):
                d = describe(src)
                d["src"] = src
                d["lfs"] = rel.endswith(".gguf") or d["size"] >= LFS_MIN
                files[rel] = d
                if d["lfs"]:
                    self.blobs[d["sha256"]] = (src, name)
                    self.cut_left[d["sha256"]] = int(cfg.get("cut_times", 0))
            self.repos[name] = {**r, "files": files}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: Hub = None

    def log_message(self, *a):
        pass

    def record(self):
        with self.hub.lock:
            self.hub.log.append({
                "method": self.command,
                "path": urllib.parse.urlsplit(self.path).path,
                "range": self.headers.get("Range"),
                "auth": self.headers.get("Authorization") is not None,
            })

    def reply(self, code, body=b"", headers=None, ctype="application/json"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, code, msg, kind):
        self.reply(code, {"error": msg}, {"X-Error-Code": kind, "X-Error-Message": msg})

    def authorised(self, repo):
        r = self.hub.repos[repo]
        if not r.get("gated"):
            return True
        auth = self.headers.get("Authorization")
        if auth is None:
            self.error(401, f"Access to model {repo} is restricted. You must have access to it "
                       "and be authenticated to access it. Please log in.", "GatedRepo")
            return False
        if auth != f"Bearer {self.hub.token}":
            self.error(403, f"Access to model {repo} is restricted and you are not in the "
                       "authorized list.", "GatedRepo")
            return False
        return True

    def find_repo(self, parts):
        """(repo, rest) for a path whose first two pieces name a repository."""
        if len(parts) < 2:
            return None, parts
        repo = "/".join(parts[:2])
        if repo not in self.hub.repos:
            return None, parts
        return repo, parts[2:]

    def commit_of(self, repo, rev):
        c = self.hub.repos[repo]["commit"]
        return c if rev in ("main", c) else None

    def do_HEAD(self):
        self.do_GET()

    def do_POST(self):
        self.record()
        if self.path == "/_reset":
            with self.hub.lock:
                self.hub.log.clear()
            return self.reply(200, {"ok": True})
        self.error(404, "not found", "EntryNotFound")

    def do_GET(self):
        self.record()
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        if url.path == "/_log":
            with self.hub.lock:
                return self.reply(200, list(self.hub.log))
        if parts[0] == "cdn" and len(parts) == 2:
            return self.cdn(parts[1])
        if parts[:2] == ["api", "models"]:
            repo, rest = self.find_repo(parts[2:])
            if repo is None:
                return self.error(401, "Repository not found", "RepoNotFound")
            if not self.authorised(repo):
                return
            if len(rest) >= 2 and rest[0] in ("revision", "tree"):
                commit = self.commit_of(repo, rest[1])
                if commit is None:
                    return self.error(404, f"Invalid rev id: {rest[1]}", "RevisionNotFound")
                if rest[0] == "revision":
                    files = self.hub.repos[repo]["files"]
                    return self.reply(200, {"id": repo, "sha": commit,
                                            "siblings": [{"rfilename": f} for f in files]})
                return self.tree(repo, "/".join(rest[2:]), url.query)
            return self.error(404, "not found", "EntryNotFound")
        repo, rest = self.find_repo(parts)
        if repo is None:
            return self.error(401, "Repository not found", "RepoNotFound")
        if not self.authorised(repo):
            return
        if len(rest) >= 3 and rest[0] == "resolve":
            commit = self.commit_of(repo, rest[1])
            if commit is None:
                return self.error(404, f"Invalid rev id: {rest[1]}", "RevisionNotFound")
            f = self.hub.repos[repo]["files"].get("/".join(rest[2:]))
            if f is None:
                return self.error(404, "Entry not found", "EntryNotFound")
            if f["lfs"]:
                return self.reply(302, b"", {
                    "Location": f"{self.cdn_base()}/cdn/{f['sha256']}",
                    "X-Repo-Commit": commit,
                    "X-Linked-Etag": f'"{f["sha256"]}"',
                    "X-Linked-Size": str(f["size"]),
                    "ETag": f'"{f["oid"]}"',
                })
            with open(f["src"], "rb") as fh:
                data = fh.read()
            return self.reply(200, data, {"X-Repo-Commit": commit, "ETag": f'"{f["oid"]}"'},
                              "application/octet-stream")
        self.error(404, "not found", "EntryNotFound")

    def cdn_base(self):
        """The CDN as another host, as the Hub's is: `localhost` for a client that came by
        `127.0.0.1` and the other way round (clients keep their token off other hosts)."""
        host = self.headers.get("Host", "127.0.0.1")
        name, _, port = host.rpartition(":")
        other = "localhost" if name == "127.0.0.1" else "127.0.0.1"
        return f"http://{other}:{port}"

    def tree(self, repo, sub, query):
        q = urllib.parse.parse_qs(query)
        recursive = q.get("recursive", ["false"])[0].lower() in ("1", "true")
        entries, dirs = [], set()
        for rel, f in self.hub.repos[repo]["files"].items():
            if sub and not rel.startswith(sub + "/"):
                continue
            inner = rel[len(sub) + 1:] if sub else rel
            pieces = inner.split("/")
            for i in range(1, len(pieces)):
                d = "/".join(([sub] if sub else []) + pieces[:i])
                if recursive or i == 1:
                    dirs.add(d)
            if not recursive and len(pieces) > 1:
                continue
            e = {"type": "file", "oid": f["oid"], "size": f["size"], "path": rel}
            if f["lfs"]:
                e["lfs"] = {"oid": f["sha256"], "size": f["size"], "pointerSize": 134}
            entries.append(e)
        entries += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d}
                    for d in sorted(dirs)]
        start = int(q.get("cursor", ["0"])[0])
        page = entries[start:start + self.hub.page_size]
        headers = {}
        if start + self.hub.page_size < len(entries):
            nq = dict((k, v[0]) for k, v in q.items())
            nq["cursor"] = str(start + self.hub.page_size)
            host = self.headers.get("Host")
            path = urllib.parse.urlsplit(self.path).path
            headers["Link"] = f'<http://{host}{path}?{urllib.parse.urlencode(nq)}>; rel="next"'
        self.reply(200, page, headers)

    def cdn(self, sha):
        if sha not in self.hub.blobs:
            return self.error(404, "no such object", "EntryNotFound")
        src, repo = self.hub.blobs[sha]
        size = os.path.getsize(src)
        start, end = 0, size - 1
        rng = self.headers.get("Range")
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng or "")
        if m:
            start = int(m.group(1))
            if m.group(2):
                end = min(int(m.group(2)), size - 1)
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        n = end - start + 1
        self.send_response(206 if m else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(n))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{sha}"')
        if m:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        cut = None
        with self.hub.lock:
            if self.hub.cut_after and self.hub.cut_left.get(sha, 0) > 0:
                self.hub.cut_left[sha] -= 1
                cut = self.hub.cut_after
        corrupt = self.hub.repos[repo].get("corrupt")
        sent = 0
        with open(src, "rb") as fh:
            fh.seek(start)
            while sent < n:
                chunk = fh.read(min(1 << 20, n - sent))
                if not chunk:
                    break
                if corrupt and sent == 0 and start == 0:
                    chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
                if cut is not None and sent + len(chunk) > cut:
                    self.wfile.write(chunk[:cut - sent])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(chunk)
                sent += len(chunk)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that hangs up mid-transfer (or a connection the test cut) is not an error.
        if not isinstance(sys.exc_info()[1], (ConnectionError, OSError)):
            super().handle_error(request, client_address)


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    Handler.hub = Hub(cfg)
    srv = Server(("127.0.0.1", int(cfg.get("port", 0))), Handler)
    print(f"READY {srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
