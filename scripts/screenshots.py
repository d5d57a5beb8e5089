"""Regenerate the README's report screenshots: the first screen (1400x900) of each report.

    .venv/bin/python scripts/screenshots.py            # writes docs/screenshots/{optimize,whatif,study,calibration}.png

Runs the README's commands (`optimize`, `whatif`, `optimize --storage` + `study report`, `calibrate report`)
into a temporary folder, opens each page in Debian's headless Chromium (autopar.reports.screenshot, via
Playwright; never downloads a browser) and keeps the part a reader sees before scrolling. Each PNG must
stay under MAX_BYTES so the repository does not grow with every refresh.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screenshots"
WIDTH, HEIGHT = 1400, 900  # the first screen of a laptop browser window
MAX_BYTES = 300_000

# name -> the autopar commands that write `{name}.html` (the last one writes the page); they run in a
# scratch folder, so the study's storage shows as the README's `runs.journal`
COMMANDS: dict[str, list[list[str]]] = {
    "optimize": [["optimize", "--budget", "300", "--out", "optimize.html"]],
    "whatif": [
        [
            "whatif",
            "--model",
            "llama-3-70b",
            "--tokens",
            "1T",
            "--seq-len",
            "4096",
            "--global-batch",
            "1024",
            "--option",
            "H100-SXM:512",
            "--option",
            "H200:256",
            "--option",
            "B200:128",
            "--deadline",
            "30d",
            "--goodput",
            "0.9",
            "--out",
            "whatif.html",
        ]
    ],
    "study": [
        [
            "optimize",
            "--sampler",
            "nsga2",
            "--budget",
            "300",
            "--storage",
            "runs.journal",
            "--study-name",
            "llama70b",
        ],
        ["study", "report", "--storage", "runs.journal", "--out", "study.html"],
    ],
    "calibration": [["calibrate", "report", "--out", "calibration.html"]],
}


def run(args: list[str], folder: Path) -> None:
    """One autopar command (this interpreter's autopar) run in `folder`, output discarded; stops on failure."""
    cmd = [sys.executable, "-m", "autopar", *args]
    done = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")


def main() -> int:
    from autopar.reports.screenshot import screenshot_report

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, commands in COMMANDS.items():
            for args in commands:
                run(args, folder)
            png = OUT / f"{name}.png"
            check = screenshot_report(
                folder / f"{name}.html", png, width=WIDTH, height=HEIGHT, full_page=False
            )
            if check.console_errors or check.rendered_ids != check.plot_ids:
                raise SystemExit(
                    f"{name}: plots {check.rendered_ids} of {check.plot_ids}, {check.console_errors}"
                )
            size = png.stat().st_size
            print(f"{png.relative_to(ROOT)}: {size:,} bytes")
            if size > MAX_BYTES:
                raise SystemExit(f"{png.name} is {size:,} bytes, over {MAX_BYTES:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
