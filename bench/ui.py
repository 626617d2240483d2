"""Time the server page from navigation start to graph layout done, in Debian's Chromium.

Two servers: the real 8-GPU 12-NIC H200 fixture and a synthetic 72-GPU NVL72-style server.
Runs its own `runserver` on a throwaway SQLite database; prints the median of several loads."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.live import CHROMIUM, CHROMIUM_FLAGS, runserver, sqlite_env  # noqa: E402

PORT = int(os.environ.get("BENCH_UI_PORT", "8791"))
RUNS = int(os.environ.get("BENCH_UI_RUNS", "5"))


def nvl72_topo_text(gpus: int = 72, per_tray: int = 4) -> str:
    """`nvidia-smi topo -m` as an NVL72 rack would print it: NV18 all-to-all through the
    NVSwitch trays, one NIC and one NUMA node per 4-GPU compute tray."""
    nics = gpus // per_tray
    ids = [f"GPU{i}" for i in range(gpus)] + [f"NIC{i}" for i in range(nics)]
    tray = {f"GPU{i}": i // per_tray for i in range(gpus)} | {f"NIC{i}": i for i in range(nics)}

    def cell(a: str, b: str) -> str:
        if a == b:
            return " X "
        if a.startswith("GPU") and b.startswith("GPU"):
            return "NV18"
        if tray[a] == tray[b]:
            return "PIX" if a.startswith("NIC") or b.startswith("NIC") else "NODE"
        return "SYS"

    lines = ["\t" + "\t".join(ids) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for a in ids:
        row = [cell(a, b) for b in ids]
        if a.startswith("GPU"):
            t = tray[a]
            row += [f"{t * 36}-{t * 36 + 35}", str(t), "N/A"]
        lines.append(a + "\t" + "\t".join(row))
    lines += [
        "",
        "Legend:",
        "",
        "  X    = Self",
        "  NV#  = Connection traversing a bonded set of # NVLinks",
        "",
        "NIC Legend:",
        "",
    ]
    lines += [f"  NIC{i}: mlx5_{i}" for i in range(nics)]
    return "\n".join(lines) + "\n"


def main() -> None:
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="topoweb-bench-ui-"))
    env = sqlite_env(work / "bench.sqlite3")
    py = sys.executable
    manage = [py, str(ROOT / "manage.py")]
    nvl72 = work / "nvl72.txt"
    nvl72.write_text(nvl72_topo_text())
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], env=env, check=True)
    fixture = ROOT / "tests" / "fixtures" / "topo_01_h200-8gpu-12nic-numaid.txt"
    subprocess.run(
        [*manage, "import_topo", str(fixture), "--host", "bench-h200"], env=env, check=True
    )
    subprocess.run(
        [*manage, "import_topo", str(nvl72), "--host", "bench-nvl72"], env=env, check=True
    )
    with runserver(PORT, env, probe="/static/ui/css/app.css") as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        for host, label in (
            ("bench-h200", "8 GPUs + 12 NICs (H200)"),
            ("bench-nvl72", "72 GPUs + 18 NICs (NVL72-style)"),
        ):
            times: list[float] = []
            layouts: list[float] = []
            facts = None
            for _ in range(RUNS + 1):  # the first load warms caches and is not counted
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(f"{base}/servers/{host}/")
                page.wait_for_selector("body[data-graph-ready]", state="attached", timeout=60_000)
                times.append(page.evaluate("window.topowebLayoutDone"))
                layouts.append(page.evaluate("window.topowebLayoutMs"))
                facts = page.evaluate(
                    "[window.topowebCy.nodes().length, window.topowebCy.edges().length]"
                )
                page.close()
            counted = times[1:]
            median = statistics.median(counted)
            print(
                f"server page, {label}: navigation to layout done median {median:.0f} ms, "
                f"max {max(counted):.0f} ms over {len(counted)} loads "
                f"({facts[0]} nodes, {facts[1]} edges; of which layout and drawing "
                f"{statistics.median(layouts[1:]):.0f} ms)"
            )
        browser.close()


if __name__ == "__main__":
    main()
