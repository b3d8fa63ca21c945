"""The sampler waterfalls in docs/ (768 px wide), from the demo model.

Run from the repository root::

    .venv/bin/python scripts/sampler_waterfalls.py

docs/samplers_waterfall_dry.png: DRY on a looping text (lesson 07's ``LOOP``);
docs/samplers_waterfall_xtc.png: XTC firing on a creative prompt (lesson 07's ``STORY``);
docs/samplers_waterfall.png: both on the looping text, as lesson 07 draws it.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import genlab  # noqa: E402
from genlab.plots import waterfall  # noqa: E402

LOOP = "I went to the shop. Then I went home. Then I went to the shop. Then I went home. Then I"
STORY = "Write the first line of a fairy tale about a lighthouse."
SAMPLE = dict(max_new_tokens=4, do_sample=True, seed=0, top_k=20, trace=True)
WIDTH_PX = 768


def save(result, path: str) -> None:
    fig = waterfall(result.trace, step=0)
    fig.savefig(path, dpi=WIDTH_PX / fig.get_size_inches()[0])
    print(path, result.trace.stages())


def main() -> None:
    lm = genlab.load("demo")
    xtc = dict(xtc_probability=1.0, xtc_threshold=0.1)  # probability 1: it fires
    save(lm.generate(LOOP, dry_multiplier=0.8, **SAMPLE), "docs/samplers_waterfall_dry.png")
    save(lm.generate(STORY, chat=True, **xtc, **SAMPLE), "docs/samplers_waterfall_xtc.png")
    save(lm.generate(LOOP, dry_multiplier=0.8, **xtc, **SAMPLE), "docs/samplers_waterfall.png")


if __name__ == "__main__":
    main()
