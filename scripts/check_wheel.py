"""Check what the built sdist and wheel contain (run by `make wheel`).

    python scripts/check_wheel.py dist

The wheel must hold every module of the genlab package as it is in the source tree, its
metadata (the runtime dependencies, no transformers among them unless behind an extra), and
nothing else: no tests, notebooks, benchmarks or scripts. The sdist must hold the sources and
the README. Prints the size of both.
"""

from __future__ import annotations

import pathlib
import sys
import tarfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def fail(msg: str) -> None:
    print("wheel check FAILED:", msg)
    sys.exit(1)


def main(dist: str) -> None:
    dist_dir = pathlib.Path(dist)
    wheels = sorted(dist_dir.glob("genlab-*.whl"))
    sdists = sorted(dist_dir.glob("genlab-*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        fail(f"expected one wheel and one sdist in {dist_dir}, found {wheels + sdists}")
    wheel, sdist = wheels[0], sdists[0]

    names = zipfile.ZipFile(wheel).namelist()
    source = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "genlab").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    missing = sorted(source - set(names))
    if missing:
        fail(f"package files missing from the wheel: {missing}")
    dist_info = [n for n in names if ".dist-info/" in n]
    extra = sorted(set(names) - source - set(dist_info))
    if extra:
        fail(f"files in the wheel that are not package files: {extra}")
    if any(n.startswith(("tests/", "notebooks/", "benchmarks/", "scripts/")) for n in names):
        fail("tests, notebooks, benchmarks or scripts are in the wheel")
    meta_name = next(n for n in dist_info if n.endswith("/METADATA"))
    meta = zipfile.ZipFile(wheel).read(meta_name).decode()
    requires = [
        line.split(":", 1)[1].strip()
        for line in meta.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    runtime = [r for r in requires if "extra ==" not in r]
    if any(r.lower().startswith("transformers") for r in runtime):
        fail(f"transformers is a runtime dependency: {runtime}")
    for needed in ("torch", "tokenizers", "ipywidgets", "matplotlib", "pandas"):
        if not any(r.lower().startswith(needed) for r in runtime):
            fail(f"runtime dependency {needed} missing from the metadata: {runtime}")

    sdist_names = tarfile.open(sdist).getnames()
    top = sdist_names[0].split("/")[0]
    for needed in ("README.md", "pyproject.toml", "genlab/__init__.py", "genlab/run/engine.py"):
        if f"{top}/{needed}" not in sdist_names:
            fail(f"{needed} missing from the sdist")

    n_py = sum(n.endswith(".py") for n in names)
    print(
        f"wheel {wheel.name}: {wheel.stat().st_size / 1024:.0f} KiB, {len(names)} files "
        f"({n_py} modules of genlab, {len(dist_info)} metadata files); "
        f"runtime deps: {', '.join(runtime)}"
    )
    print(f"sdist {sdist.name}: {sdist.stat().st_size / 1024:.0f} KiB, {len(sdist_names)} entries")
    print("wheel check ok: every package file, nothing else")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "dist")
