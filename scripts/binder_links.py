"""Print the Binder links of this clone, built from its GitHub remote (`origin` by default).

    python scripts/binder_links.py [REMOTE]

With no GitHub remote there is nothing to link yet: push the repository to GitHub, then run
this again (or write the links by hand from docs/binder.md).
"""

from __future__ import annotations

import re
import subprocess
import sys

PAGES = {
    "the lessons in JupyterLab": "lab/tree/notebooks/01_quickstart.ipynb",
    # genlab's Voila template (binder/start puts it on JUPYTER_PATH): no CDN requests
    "the app (Voila)": "voila/render/notebooks/00_app.ipynb%3Fvoila-template%3Dgenlab",
}


def github_path(url: str) -> str | None:
    """``owner/repo`` of a GitHub remote URL (https or ssh), else None.

    >>> github_path("git@github.com:someone/genlab.git")
    'someone/genlab'
    >>> github_path("https://github.com/someone/genlab") is None, github_path("/srv/genlab")
    (False, None)
    """
    m = re.match(r"(?:https?://|ssh://)?(?:git@)?github\.com[:/]([^/]+)/([^/]+?)(?:\.git)?/?$", url)
    return f"{m.group(1)}/{m.group(2)}" if m else None


def main(remote: str = "origin") -> int:
    try:
        url = subprocess.run(
            ["git", "remote", "get-url", remote], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        print(f"This clone has no git remote {remote!r}, so there is no Binder link to build.")
        print("Push it to GitHub (git remote add origin https://github.com/OWNER/REPO), then")
        print("run this again.")
        return 1
    path = github_path(url)
    if path is None:
        print(f"The remote {remote!r} ({url}) is not on GitHub; Binder's gh/ links need GitHub.")
        return 1
    for what, page in PAGES.items():
        print(f"{what}: https://mybinder.org/v2/gh/{path}/HEAD?urlpath={page}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
