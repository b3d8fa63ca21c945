"""Peak memory of a Binder-like session: JupyterLab plus one kernel running a notebook.

    python scripts/binder_memory.py notebooks/*.ipynb [--markdown]

A JupyterLab server is started (its state kept under .tmp/binder-memory), then each notebook
is executed, one at a time as a Binder user runs them, by a fresh kernel (nbclient, the
kernel the notebook names). While a notebook runs, the resident memory (RSS) of the server's
and the kernel's process trees is sampled every 20 ms; their sum at its highest is the
"sampled peak". As a bound that no short spike between two samples can beat, each process's
own high-water mark (VmHWM) is summed too ("sum of peaks"): the processes need not peak at
the same moment, so the true peak lies between the two figures. Binder's limit is 2 GB
(2 * 1024**3 bytes); the script exits 1 if the sum of peaks of any notebook reaches it.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import threading
import time

import nbformat
import psutil
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIMIT = 2 * 1024**3
MiB = 1024**2


def _tree(pid: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _hwm(p: psutil.Process) -> int:
    try:
        for line in pathlib.Path(f"/proc/{p.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Sampler(threading.Thread):
    def __init__(self, pids):
        super().__init__(daemon=True)
        self.pids, self.peak, self.hwm, self.stop = pids, 0, {}, threading.Event()

    def run(self):
        while not self.stop.is_set():
            total = 0
            for pid in self.pids():
                for p in _tree(pid):
                    try:
                        total += p.memory_info().rss
                        self.hwm[p.pid] = max(self.hwm.get(p.pid, 0), _hwm(p))
                    except psutil.NoSuchProcess:
                        pass
            self.peak = max(self.peak, total)
            time.sleep(0.02)


def start_lab(state: pathlib.Path) -> subprocess.Popen:
    env = dict(os.environ)
    for var, sub in (
        ("JUPYTER_CONFIG_DIR", "config"),
        ("JUPYTER_DATA_DIR", "data"),
        ("JUPYTER_RUNTIME_DIR", "runtime"),
        ("IPYTHONDIR", "ipython"),
    ):
        env[var] = str(state / sub)
        (state / sub).mkdir(parents=True, exist_ok=True)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}",
           "--ip=127.0.0.1", "--allow-root", "--IdentityProvider.token=", "--ServerApp.password=",
           f"--ServerApp.root_dir={state}"]  # fmt: skip
    lab = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import urllib.request

    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=1)
            break
        except OSError:
            time.sleep(0.25)
    return lab


def measure(path: pathlib.Path, lab: subprocess.Popen) -> dict:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=900, resources={"metadata": {"path": str(path.parent)}})
    kernel_pid = []

    def pids():
        return [lab.pid, *kernel_pid]

    sampler = Sampler(pids)
    start = time.perf_counter()
    with client.setup_kernel():
        kernel_pid.append(client.km.provisioner.process.pid)
        sampler.start()
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
    sampler.stop.set()
    sampler.join()
    return {
        "notebook": path.name,
        "sampled": sampler.peak,
        "bound": sum(sampler.hwm.values()),
        "seconds": time.perf_counter() - start,
    }


def main(argv):
    markdown = "--markdown" in argv
    notebooks = [pathlib.Path(a) for a in argv if not a.startswith("--")]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    state = ROOT / ".tmp" / "binder-memory"
    lab = start_lab(state)
    rows = []
    try:
        idle = sum(p.memory_info().rss for p in _tree(lab.pid))
        print(f"JupyterLab server alone: {idle / MiB:.0f} MiB", flush=True)
        for nb in notebooks:
            row = measure(nb, lab)
            rows.append(row)
            print(f"{row['notebook']}: sampled peak {row['sampled'] / MiB:.0f} MiB, "
                  f"sum of peaks {row['bound'] / MiB:.0f} MiB, {row['seconds']:.0f} s",
                  flush=True)  # fmt: skip
    finally:
        lab.terminate()
        lab.wait(30)
    if markdown:
        print("\n| notebook | sampled peak (MiB) | sum of peaks (MiB) | run time (s) |")
        print("|---|---|---|---|")
        for r in rows:
            print(f"| `{r['notebook']}` | {r['sampled'] / MiB:.0f} | {r['bound'] / MiB:.0f} "
                  f"| {r['seconds']:.0f} |")  # fmt: skip
    over = [r["notebook"] for r in rows if r["bound"] >= LIMIT]
    if over:
        print("over Binder's 2 GB:", over)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
