"""Real template sources for tests: model folders, a Hugging Face cache laid out as huggingface_hub lays it out, GGUF
files written with gguf's own writer, and an HTTP server on loopback answering `/props` as llama-server does.

Shared by tests/test_sources.py and tests/test_cli.py; `check_doc_examples` by the tests that keep docs' examples true.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import gguf
import pytest


def write_folder(root: Path, files: Mapping[str, Any]) -> Path:
    """A model folder: str values are written as is, anything else as JSON."""
    for relative, content in files.items():
        file = root / relative
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return root


def cache_repo(cache: Path, repo_id: str, files: Mapping[str, str], *, commit: str, ref: str | None = "main") -> None:
    """Lay a repo snapshot out as huggingface_hub does (file_download.py `_hf_hub_download_to_cache_dir`):
    `models--org--name/blobs/<etag>`, `snapshots/<commit>/<path>` as a relative symlink to the blob,
    `refs/<ref>` holding the commit hash. A non-LFS file's etag is its git blob sha1."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    for relative, text in files.items():
        data = text.encode("utf-8")
        blob = repo / "blobs" / hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        pointer = repo / "snapshots" / commit / relative
        pointer.parent.mkdir(parents=True, exist_ok=True)
        pointer.symlink_to(os.path.relpath(blob, pointer.parent))
    if ref is not None:
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)


def write_gguf(path: Path, chat_template: str | list[dict[str, str]] | None) -> Path:
    """A tensor-less llama GGUF with a five-token vocabulary, bos id 1 and eos id 2."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(["<unk>", "<s>", "</s>", "a", "b"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@contextmanager
def serve_props(props: Mapping[str, Any]) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering GET /props with `props` (read at each request, so a test may fill it in
    later), as llama-server does; yields its root URL."""

    class Props(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path == "/props"
            body = json.dumps(props).encode() if found else b"{}"
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Props)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def check_doc_examples(doc: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run the ```python blocks of `doc` in one namespace: each line printed must be the `# ` comment under its print
    call, so the docs show real output."""
    blocks = re.findall(r"^```python\n(.*?)^```", doc.read_text("utf-8"), re.MULTILINE | re.DOTALL)
    assert blocks
    namespace: dict[str, object] = {"__name__": f"docs.{doc.stem}"}
    for block in blocks:
        exec(compile(block, str(doc), "exec"), namespace)
    lines = [line for block in blocks for line in block.splitlines()]
    expected = [lines[i + 1].removeprefix("# ") for i, line in enumerate(lines[:-1]) if line.startswith("print(")]
    assert capsys.readouterr().out.splitlines() == expected
