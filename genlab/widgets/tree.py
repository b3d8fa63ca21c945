"""BranchTree: every run a user explored, drawn as one tree of tokens.

The runs of a :class:`~genlab.widgets.debugger.StepDebugger` (forks, forced tokens,
alternatives clicked) share their prompt; each run is a path of generated tokens. The tree
merges the paths where they agree: a node is a token after a given prefix, with the
probability it had when it was taken, whether it was forced, and the runs that pass
through it. :meth:`BranchTree.table` gives it as a DataFrame; the view lists the nodes
(indented once per branch point, not per step, so that a long run stays readable at
768 px) and **Continue from here** makes a fork of a run through the chosen node,
rewound to it, the active run: the original runs stay. Rewinding replays no model work
(the runs keep their history; forks share the LM's forward-result cache).

(Not run as a test: it shows a widget panel, drawn by a Jupyter front end
(tests/test_widgets_tree.py and make browser run the panels).)

>>> dbg = StepDebugger(genlab.load("demo"), "The capital of France is")  # doctest: +SKIP
>>> dbg.step(3); dbg.branch(" Lyon"); dbg.tree.table()                 # doctest: +SKIP
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets
import pandas as pd

from ..text.tokens import show_token
from .base import Panel, button, controls_row
from .render import TABLE_CSS, frame_html, message, prob_colour, prob_text

#: columns of :meth:`BranchTree.table`
TREE_COLUMNS = ["node", "parent", "step", "token", "token_id", "prob", "forced", "runs", "depth"]


def _run_steps(run, which: str) -> list[tuple[int, float, bool]]:
    """(token id, probability, forced) of each generated token of row 0 of ``run`` (named
    ``which`` in the error), from its trace."""
    if getattr(run, "tracer", None) is None:
        raise ValueError(
            f"BranchTree draws each run's recorded trace, and {which} "
            f"({type(run).__name__}) has none: start the runs with trace=True, e.g. "
            "run = lm.start(prompt, trace=True) (its forks keep the trace)"
        )
    steps = run.tracer.trace.steps()
    if steps.empty:
        return []
    return [
        (int(t), float(p), bool(f))
        for t, p, f in zip(steps.token_id, steps.prob, steps.forced, strict=True)
    ]


def build_tree(runs: list, tokenizer) -> pd.DataFrame:
    """One row per node of the tree of ``runs`` (see :data:`TREE_COLUMNS`): ``node`` 0 is
    the prompt; ``parent`` the node before; ``step`` the token's step; ``runs`` the
    indices of the runs through it ("0, 2"); ``depth`` the branch points above it (the
    indentation of the view)."""
    nodes: dict[tuple[int, ...], dict[str, Any]] = {
        (): {"node": 0, "parent": -1, "step": -1, "token": "(prompt)", "token_id": -1,
             "prob": 1.0, "forced": False, "runs": [], "children": []}
    }  # fmt: skip
    for index, run in enumerate(runs):
        prefix: tuple[int, ...] = ()
        nodes[()]["runs"].append(index)
        for step, (tid, p, forced) in enumerate(_run_steps(run, f"run {index}")):
            key = (*prefix, tid)
            if key not in nodes:
                nodes[key] = {
                    "node": len(nodes),
                    "parent": nodes[prefix]["node"],
                    "step": step,
                    "token": show_token(tokenizer.decode([tid])),
                    "token_id": tid,
                    "prob": p,
                    "forced": forced,
                    "runs": [],
                    "children": [],
                }
                nodes[prefix]["children"].append(key)
            nodes[key]["runs"].append(index)
            prefix = key
    # depth: +1 below every node with more than one child (a branch point)
    rows, order = [], [()]
    depth = {(): 0}
    while order:
        key = order.pop()
        node = nodes[key]
        kids = node["children"]
        for child in reversed(kids):
            depth[child] = depth[key] + (1 if len(kids) > 1 else 0)
            order.append(child)
        rows.append({**node, "runs": ", ".join(map(str, node["runs"])), "depth": depth[key]})
    frame = pd.DataFrame(rows)[TREE_COLUMNS]
    return frame.reset_index(drop=True)


def tree_html(table: pd.DataFrame, active: int | None = None) -> str:
    """The tree as static HTML: one line per node in depth-first order, indented once per
    branch point, each token coloured by its probability with the details on hover
    (step, probability, forced, runs); ``active``: the node outlined (where the active
    run is)."""
    lines = []
    siblings = table.groupby("parent").node.count().to_dict()
    for row in table.itertuples(index=False):
        fork = row.node != 0 and siblings.get(row.parent, 0) > 1  # a branch starts here
        tip = (
            "the prompt"
            if row.node == 0
            else f"step {row.step}: {row.token} p={prob_text(row.prob)}"
            + (" (forced)" if row.forced else "")
            + f"\nruns {row.runs}"
        )
        colour = "#eee" if row.node == 0 else prob_colour(row.prob)
        outline = "outline:2px solid #1a73e8;" if row.node == active else ""
        border = "border:2px dashed #333;" if row.forced else ""
        p = "" if row.node == 0 else f" {prob_text(row.prob)}"
        mark = "\u21b3 " if fork else ("\u2502 " if row.node else "")  # ↳ a branch, │ on
        gap = "margin-top:6px;" if fork else ""
        lines.append(
            f'<div class="genlab-tree-node" style="margin-left:{1.2 * row.depth:.1f}em;{gap}'
            f'white-space:nowrap" title="{html.escape(tip)}">'
            f'<span style="color:#888">{mark}{row.step + 1 if row.node else ""}'
            f'</span> <span style="background:{colour};{outline}{border}padding:0 3px;'
            f'border-radius:3px;font-family:monospace">{html.escape(str(row.token))}</span>'
            f'<span style="color:#555;font-size:smaller">{p}</span></div>'
        )
    return (
        '<div class="genlab-tree" style="max-height:480px;max-width:100%;overflow:auto;'
        f'font-size:13px;line-height:1.5">{"".join(lines)}</div>'
    )


class BranchTree(Panel):
    """The tree of ``runs`` (see the module docstring): a list of nodes to choose from,
    **Continue from here**, and the static view.

    runs: a callable giving the runs now (e.g. ``lambda: debugger.runs``), or a list;
    tokenizer: decodes the tokens; on_continue: called with ``(run index, steps)`` when
    a node is chosen (the StepDebugger forks that run, rewound to ``steps`` tokens);
    active: a callable giving the active run (its last node is outlined).

    For code and tests: ``table()``, ``refresh()``, ``choose(node)``, ``static_html()``,
    ``save_html(path)``.

    (Not run as a test: it shows a widget panel, drawn by a Jupyter front end.)

    >>> from genlab.widgets import BranchTree, StepDebugger
    >>> dbg = StepDebugger(genlab.load("demo"), "The capital of France is")  # doctest: +SKIP
    >>> dbg.step(3); dbg.branch(" Lyon")                                   # doctest: +SKIP
    >>> BranchTree(dbg.runs, dbg.lm.tokenizer).table()                     # doctest: +SKIP
    """

    def __init__(
        self,
        runs: Callable[[], list] | list,
        tokenizer,
        *,
        on_continue: Callable[[int, int], None] | None = None,
        active: Callable[[], Any] | None = None,
    ) -> None:
        #: a view over a callable follows it: Refresh, the static view and save_html read
        #: the runs again (a standalone tree said "0 tokens over 1 run(s)" for ever)
        self.live = callable(runs)
        self._runs = runs if callable(runs) else (lambda: list(runs))
        self.tokenizer = tokenizer
        self.on_continue = on_continue
        self._active = active
        self._table = build_tree([], tokenizer)
        self.picker = widgets.Select(
            options=[], rows=12, layout=widgets.Layout(width="100%", max_width="720px")
        )
        self.picker.add_class("genlab-tree-picker")
        self.continue_button = button(
            "Continue from here", tooltip="a fork of a run through this node, rewound to it"
        )
        self.continue_button.on_click(lambda _: self.guard(self._continue_chosen))
        if on_continue is None:  # a tree that only shows: no button that cannot work
            self.continue_button.layout.display = "none"
        self.refresh_button = button("Refresh", tooltip="read the runs again")
        self.refresh_button.on_click(lambda _: self.guard(self.refresh))
        if not self.live:
            self.refresh_button.layout.display = "none"
        self.status = widgets.HTML()
        self.view = widgets.HTML()
        super().__init__(
            [
                controls_row(self.continue_button, self.refresh_button, self.status),
                self.picker,
                self.view,
            ]
        )
        self.add_class("genlab-branch-tree")
        self.refresh()

    def table(self) -> pd.DataFrame:
        """The tree as a DataFrame, one row per node (see :data:`TREE_COLUMNS`)."""
        return self._table.copy()

    def active_node(self) -> int | None:
        """The node where the active run is now (None without one)."""
        run = self._active() if self._active is not None else None
        if run is None:
            return None
        path = [t for t, _, _ in _run_steps(run, "the active run")]
        table, node = self._table, 0
        for tid in path:
            kids = table[(table.parent == node) & (table.token_id == tid)]
            if kids.empty:
                return None
            node = int(kids.node.iloc[0])
        return node

    def refresh(self) -> None:
        """Rebuild the tree from the runs now."""
        self._table = build_tree(self._runs(), self.tokenizer)
        active = self.active_node()
        forks = self._table.groupby("parent").node.count().to_dict()
        options = []
        for row in self._table.itertuples(index=False):
            label = (
                "(prompt)"
                if row.node == 0
                else f"{'  ' * row.depth}{'↳ ' if forks.get(row.parent, 0) > 1 else ''}"
                f"{row.step + 1}. {row.token}  p={prob_text(row.prob)}"
                + ("  forced" if row.forced else "")
                + ("  ◀ here" if row.node == active else "")
            )
            options.append((label, int(row.node)))
        self.picker.options = options
        if active is not None:
            self.picker.value = active
        self.view.value = TABLE_CSS + tree_html(self._table, active)
        n = len(self._table) - 1
        how = []
        if self.on_continue is not None:
            how.append("choose a node and Continue from here")
        if self.live:
            how.append("Refresh reads the runs again")
        tail = "; " + "; ".join(how) if how else ""
        self.status.value = message(f"{n} tokens over {len(self._runs())} run(s){tail}")

    def choose(self, node: int) -> None:
        """Continue from ``node``: ``on_continue(run index, steps)`` for the first run
        through it (``steps``: the node's step + 1 tokens kept)."""
        rows = self._table[self._table.node == node]
        if rows.empty:
            raise ValueError(f"node must be one of 0-{len(self._table) - 1}, got {node!r}")
        row = rows.iloc[0]
        run_index = int(str(row.runs).split(",")[0])
        if self.on_continue is None:
            raise ValueError(
                "this tree only shows the runs and has nothing to continue: give it "
                "on_continue= (as the StepDebugger's Branches tab does) to fork from a node"
            )
        self.on_continue(run_index, int(row.step) + 1)

    def _continue_chosen(self) -> None:
        if self.picker.value is None:
            raise ValueError("choose a node in the list first")
        self.choose(int(self.picker.value))

    def static_html(self) -> str:
        """The tree as plain HTML (hover details kept); a tree over a callable reads its
        runs first, so that a saved view shows them as they are now."""
        if self.live:
            self.refresh()
        return (
            f'<div class="genlab-static"><b>genlab branch tree</b>{self.status.value}'
            f"{self.view.value}<details><summary>as a table</summary>"
            f"{frame_html(self._table)}</details></div>"
        )
