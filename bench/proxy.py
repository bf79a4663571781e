"""The documented nginx block (docs/deployment.md) in front of a server: what tests/test_identity.py checks with
`nginx -t` and requests through it, and what bench/governance.py's attack table runs behind (`--proxy nginx`),
as production runs it.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def nginx_block() -> str:
    text = (ROOT / "docs" / "deployment.md").read_text()
    (block,) = re.findall(r"```nginx\n(.*?)```", text, re.S)
    return block


def nginx_config(folder: Path, upstream_port: int, listen_port: int, worker_connections: int = 256) -> Path:
    """An nginx.conf of the documented block, its upstream and listening ports these, its files in `folder`."""
    block = nginx_block().replace("server 127.0.0.1:8000;", f"server 127.0.0.1:{upstream_port};")
    block = block.replace("listen 80;", f"listen 127.0.0.1:{listen_port};")
    temp = "".join(f"{name}_temp_path {folder}/{name};\n" for name in
                   ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    config = folder / "nginx.conf"
    config.write_text(f"pid {folder}/nginx.pid;\nerror_log {folder}/error.log;\ndaemon off;\n"
                      f"worker_rlimit_nofile {2 * worker_connections + 64};\n"
                      f"events {{ worker_connections {worker_connections}; }}\n"
                      f"http {{\naccess_log off;\n{temp}{block}\n}}\n")
    return config


def nginx_binary() -> str | None:
    found = shutil.which("nginx") or (Path("/usr/sbin/nginx").exists() and "/usr/sbin/nginx")
    return str(found) if found else None


@contextlib.contextmanager
def nginx_in_front(upstream_port: int, listen_port: int, worker_connections: int = 256) -> Iterator[str]:
    """nginx with the documented block, forwarding to `upstream_port`, for as long as the block runs: its base URL."""
    binary = nginx_binary()
    if binary is None:
        raise RuntimeError("nginx is not installed (apt-get install nginx)")
    folder = Path(tempfile.mkdtemp(prefix="pith-nginx-"))
    folder.chmod(0o755)  # nginx's workers run as another user
    config = nginx_config(folder, upstream_port, listen_port, worker_connections)
    proxy = subprocess.Popen([binary, "-c", str(config), "-p", str(folder), "-e", str(folder / "e.log")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{listen_port}"
    try:
        for _ in range(100):
            try:
                httpx.get(base + "/healthz", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        yield base
    finally:
        proxy.terminate()
        proxy.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
